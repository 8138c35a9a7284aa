"""One dataclass for a StarPO / StarPO-S run, with the paper's defaults and named presets.

Defaults are the reference trainer's StarPO-S (``config/base.yaml`` + verl defaults, see
``docs/training.md``): 8 groups x 16 rollouts, GAE with gamma = lambda = 1, top-25 % groups
by return std, Clip-Higher 0.2 / 0.28 with dual clip 3, entropy bonus 0.001, no KL in the
loss (tracked only), actor / critic lr 1e-6 / 1e-5, 200 steps. Presets override a few
fields; anything else is a keyword of :func:`make_config`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .tiny import TINY_MODEL

__all__ = ["StarPOConfig", "PRESETS", "make_config", "RESUMABLE", "resume_conflicts"]


@dataclass
class StarPOConfig:
    # --- what to train
    env_id: str = "ragen/Sokoban-v0"
    """the environment id (any ragen/* id)"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """constructor kwargs of the environment (e.g. {"think": False})"""
    model: str | None = None
    """path of a Hugging Face causal LM with a chat template; None builds the tiny local model"""
    tiny_model: dict[str, Any] = field(default_factory=lambda: dict(TINY_MODEL))
    """kwargs of ragen_envs.models.build_tiny_model when model is None (the tiny model of tiny.build_tiny_policy)"""
    out_dir: str = "runs/starpo"
    """metrics.jsonl, checkpoints/, plots go here"""
    seed: int = 0
    """seeds sampling, the critic head, shuffling; runs with the same seed repeat on CPU"""
    device: str = "cpu"
    dtype: str = "float32"
    """float32 | bfloat16 | float16 | float64 (float64: numerical checks, e.g. that K processes make the one-process update)"""

    # --- rollouts
    steps: int = 200
    """rollout-update iterations"""
    num_groups: int = 8
    """P: initial states per iteration"""
    group_size: int = 16
    """N: rollouts per initial state"""
    shared_noise: bool = True
    """a group shares its environment noise (common random numbers): its return std is the policy's"""
    train_seed_start: int = 10_000
    """layout seed of group 0 at step 0; step k uses train_seed_start + k * num_groups + g"""
    max_new_tokens: int = 100
    """cap on tokens per reply (the reference: 400 tokens)"""
    temperature: float = 1.0
    """rollout sampling temperature; old log-probs and the update score softmax(logits / temperature) too"""
    top_p: float = 1.0
    """must be 1 in training: the update would not know the truncated sampling distribution"""
    force_prefix: bool = True
    """start every reply with "<think>" (or "<answer>" with think off) in the prompt, as the reference"""
    generation_batch_size: int | None = None
    """rows per generation call (None: all live trajectories at once)"""
    context_window_mode: str = "full"
    """what each turn's prompt holds (RAGEN-2's names): full (the whole episode so far) | limited_multi_turn
    (the last max_context_window turns, as a conversation) | single_turn (one user message: a summary of the
    last max_context_window - 1 turns and the current state). The windowed modes train each turn as its own
    sample (only its reply, the episode's return on its last token); docs/training.md"""
    max_context_window: int = -1
    """k for the windowed modes, the current turn included (-1: no limit; 1: the current state only)"""

    # --- rewards and advantages
    reward_placement: str = "trajectory"
    """trajectory: the return on the last reply token (reference); turn: each turn's reward on its last token"""
    reasoning_reward_coef: float = 0.0
    """coef x info["reasoning"]["score"] added to each turn's reward (off: the paper is outcome-only)"""
    advantage: str = "gae"
    """gae | bilevel_gae | grpo"""
    gamma: float = 1.0
    lam: float = 1.0
    gamma_high: float = 0.95
    """turn-level discount of bi-level GAE"""
    grpo_eps: float = 1e-6
    norm_adv_by_std_in_grpo: bool = True
    """advantage=grpo: false is Dr. GRPO, A = R - group mean without the division by the group's std (RAGEN-2's name)"""
    grpo_advantage_length_weight: bool = False
    """advantage=grpo: divide each trajectory's advantages by its reply tokens / the batch's mean (RAGEN-2's name)"""

    # --- StarPO-S filter
    filter_mode: str = "top_p"
    """top_p (keep the keep_ratio groups with the largest return std) | top_k (the filter_top_k largest) | min_p (std >= filter_min_p x the batch's largest) | snr (top keep_ratio by std / (|mean| + std)) | nonzero (DAPO) | none"""
    keep_ratio: float = 0.25
    filter_top_k: int = 4
    """filter_mode=top_k: how many groups to keep"""
    filter_min_p: float = 0.5
    """filter_mode=min_p: keep groups whose return std is at least this fraction of the largest"""
    explore_groups: int = 0
    """also keep up to this many all-fail groups (exploration quota)"""

    # --- RAGEN-2's rollout filter (the reference's names; rollout_filter.py, docs/training.md)
    rollout_filter_strategy: str | None = None
    """None: the StarPO-S filter above (filter_mode). top_p | top_k | top_k_abs | min_p: RAGEN-2's filter
    instead (then filter_mode, keep_ratio, filter_top_k, filter_min_p and explore_groups must keep their defaults)"""
    rollout_filter_value: float = 1.0
    """top_p: the score mass to keep (>= 1: every group) | top_k: the fraction of groups | top_k_abs: the
    count (int(value)) | min_p: the fraction of the best score"""
    rollout_filter_metric: str = "reward_variance"
    """the per-group score: reward_variance (the return's sample std) | reward (mean return) | reward_sum |
    entropy (mean of the rollouts' mean token entropy) | entropy_variance (its std) | length (mean reply tokens)"""
    rollout_filter_type: str = "largest"
    """largest: keep the high scores | smallest: the low ones"""
    rollout_filter_include_zero: bool = True
    """false: groups whose score is 0 (|score| <= 1e-10) are never kept"""
    rollout_filter_top_p_prob_mode: str = "linear"
    """top_p: linear (best first until their sum reaches value x the total - eps) | softmax (cumulative softmax mass)"""
    rollout_filter_selection_eps: float = 0.01
    """the eps of the linear top_p threshold"""
    rollout_filter_empty_stop_steps: int = 5
    """stop the run after this many consecutive steps whose filter kept no group (0: never)"""
    filter_loss_scaling: str = "none"
    """none | linear | sqrt: multiply the advantages by r or sqrt(r), r = kept groups / num_groups (either filter)"""

    # --- losses and optimisation
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    log_ratio_clamp: float = 20.0
    entropy_coef: float = 0.001
    kl_coef: float = 0.0
    """KL(pi || pi_init) loss coefficient (0: tracked only)"""
    kl_kind: str = "k1"
    track_kl: bool = True
    """with kl_coef 0: still log KL(pi || pi_init) (actor/kl_ref_*): one no-grad forward of the initial
    policy per update, and its copy in memory; false skips both (kl_coef > 0 always computes it)"""
    value_clip: float | None = 0.5
    actor_lr: float = 1e-6
    critic_lr: float = 1e-5
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    mini_batch_size: int = 32
    """trajectories per optimiser step"""
    micro_batch_size: int = 4
    """trajectories per forward/backward (gradient accumulation; aggregation by loss_agg over the mini-batch)"""
    loss_agg: str = "token-mean"
    """token-mean (every token of the mini-batch weighs the same; verl's default) | seq-mean-token-mean
    (each trajectory's token-mean, averaged: every trajectory weighs the same, the reference's setting) |
    seq-mean-token-sum (each trajectory's token sum, averaged: Dr. GRPO's). RAGEN-2 calls it loss_agg_mode"""
    updates_per_rollout: int = 1
    """Online-k: passes over each rollout batch (k = 1: fresh rollouts every update)"""
    critic_warmup: int = 0
    """steps that update only the critic"""
    gradient_checkpointing: bool = False
    """recompute decoder layers in the backward pass (less activation memory, ~30 % more update time)"""
    lora_rank: int = 0
    """> 0: train LoRA adapters of this rank (peft) on actor and critic instead of all weights"""
    lora_alpha: float = 32.0
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"])
    """module names that get adapters"""
    sharding: str = "none"
    """under torchrun: none (plain replicas, gradients summed by the trainer) | ddp
    (DistributedDataParallel) | fsdp (FSDP2: parameters, gradients and optimiser state split
    across ranks); the same plain model on one process"""
    fsdp_mixed_precision: bool = False
    """sharding=fsdp: bf16 parameters for compute, fp32 gradient reduction (weights stay in dtype)"""

    # --- evaluation, probes, diagnostics, checkpoints
    eval_every: int = 10
    eval_episodes: int = 256
    """how many of ragen_envs.EVAL_SEEDS"""
    eval_temperature: float = 0.5
    eval_before_train: bool = True
    probe_every: int = 10
    """Echo Trap probe: every K steps sample probe_samples first replies on probe_states fixed states"""
    probe_states: int = 8
    probe_samples: int = 8
    collapse_detection: dict[str, Any] = field(default_factory=dict)
    """RAGEN-2's collapse metrics on the training rollouts (the reference's collapse_detection group;
    starpo/collapse.py, docs/monitor.md): keys compute_freq (5: on the first step, then every 5th),
    micro_batch_size (128 sequences per cross-scoring forward), first_turn_enabled (false),
    multi_turn_enabled (false), num_samples (64, or "all": the (prompt, reasoning) pairs scored),
    std_eps (1e-3), ema_decay (0.9); the missing ones get these defaults. Off unless an *_enabled is true"""
    gradient_analysis_mode: bool = False
    """RAGEN-2's gradient report: every gradient_analysis_every steps (from the first), before the update, the
    gradient norm of each loss component (task, entropy, KL) on each reward-variance bucket of the kept
    groups, without an optimiser step (grad_norm/<bucket>/...; under torchrun, any sharding, the numbers of one
    process on the same kept batch: each rank back-propagates its share of every mini-batch, gradients summed)"""
    gradient_analysis_every: int = 50
    gradient_analysis_num_buckets: int = 6
    """quantile buckets of the kept groups by in-group return std (fewer when fewer groups are kept)"""
    gradient_analysis_bucket_mode: str = "quantile"
    """quantile (equal numbers of groups, bucket_1 the lowest std) | fixed_rv (std in [0,1), [1,2), ..., [5,inf))"""
    echo_action: str = "warn"
    """warn | stop | rollback (to the best checkpoint) when the Echo Trap signature appears"""
    std_collapse_ratio: float = 0.1
    """warn when the in-group return std falls below this fraction of its early level"""
    grad_spike_factor: float = 5.0
    """warn when the actor grad norm exceeds this multiple of its running median"""
    diversity_drop_ratio: float = 0.5
    """Echo Trap: probe think diversity below this fraction of the first probe, return flat"""
    monitor: dict[str, Any] = field(default_factory=dict)
    """more EchoTrapMonitor keywords over its defaults, or ``"multiturn"`` for
    ``monitor.MULTITURN_MONITOR`` (the noise-aware rule for sparse multi-turn tasks; expanded
    into its keywords, so config.json records them). Keywords: success_ratio, success_window, mi_ratio,
    entropy_ratio, well_formed_ratio, success_k / valid_success_k / well_formed_k: standard errors of
    the noise-aware drop test,
    episodes: the episode count when rows lack rollout/episodes, alarm: the signals echo_action
    acts on; docs/monitor.md)"""
    save_every: int = 10
    keep_checkpoints: int = 2
    average_last: int = 0
    """also write out_dir/model_avg: the uniform weight average of the actors of the last K step
    checkpoints (every save_every steps, the final one included; needs keep_checkpoints >= K).
    0 = off. With a constant actor lr this smooths the step-to-step drift of the last iterate"""
    tensorboard: bool = False
    """write TensorBoard event files to out_dir/tensorboard (the tensorboard package is in the train extra)"""
    wandb: bool = False
    """also log every metrics row to Weights & Biases (needs the optional wandb package)"""
    wandb_project: str = "ragen-envs"
    plots: bool = True
    log_samples: int = 2
    """reply texts printed per step"""
    save_rollouts: bool = False
    """append every training rollout (token ids, loss mask, texts, rewards, the filter's verdict)
    to out_dir/rollouts.jsonl; `ragen export out_dir --out FILE.parquet` makes it a dataset"""

    def __post_init__(self) -> None:
        from .core import ADVANTAGE_ESTIMATORS, FILTER_MODES

        if self.advantage not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage must be one of {sorted(ADVANTAGE_ESTIMATORS)}, got {self.advantage!r}")
        if self.filter_mode not in FILTER_MODES:
            raise ValueError(f"filter_mode must be one of {FILTER_MODES}, got {self.filter_mode!r}")
        if self.reward_placement not in ("trajectory", "turn"):
            raise ValueError(f"reward_placement must be 'trajectory' or 'turn', got {self.reward_placement!r}")
        if self.advantage == "bilevel_gae" and self.reward_placement != "turn":
            raise ValueError("bilevel_gae needs per-turn rewards: set reward_placement='turn'")
        from ..protocol.context import check_context_window

        check_context_window(self.context_window_mode, self.max_context_window)
        if self.context_window_mode != "full" and self.reward_placement != "trajectory":
            raise ValueError(f"context_window_mode={self.context_window_mode} trains each turn as a sample with the "
                             f"episode's return (the reference): reward_placement must be 'trajectory'")
        if self.monitor == "multiturn":
            from .monitor import MULTITURN_MONITOR

            self.monitor = {k: list(v) if isinstance(v, tuple) else v for k, v in MULTITURN_MONITOR.items()}
        monitor_keys = {"success_ratio", "success_window", "valid_success_ratio", "mi_ratio", "entropy_ratio", "alarm", "window",
                        "success_k", "valid_success_k", "episodes", "well_formed_ratio", "well_formed_k"}
        if not isinstance(self.monitor, dict) or set(self.monitor) - monitor_keys:
            raise ValueError(f"monitor must be \"multiturn\" or a dict with keys from {sorted(monitor_keys)}, "
                             f"got {self.monitor!r}")
        for key in ("success_ratio", "valid_success_ratio", "mi_ratio", "entropy_ratio", "well_formed_ratio"):
            v = self.monitor.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf")):
                raise ValueError(f"monitor {key} must be a positive number or null, got {v!r}")
        for key in ("success_window", "window", "episodes"):
            v = self.monitor.get(key, 1)
            if key == "episodes" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"monitor {key} must be an integer >= 1, got {v!r}")
        for key in ("success_k", "valid_success_k", "well_formed_k"):  # standard errors of the noise-aware drop test
            v = self.monitor.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                raise ValueError(f"monitor {key} must be a number >= 0, got {v!r}")
        alarm = self.monitor.get("alarm", ())
        if isinstance(alarm, str) or not all(isinstance(a, str) for a in alarm):
            raise ValueError(f"monitor alarm must be a list of signal names, got {alarm!r}")
        from .diagnostics import MONITOR_SIGNALS  # a typo fails here, not when the trainer is built

        unknown = [a for a in alarm if a not in MONITOR_SIGNALS]
        if unknown:
            raise ValueError(f"monitor alarm: unknown signal {unknown[0]!r}; choose from {', '.join(MONITOR_SIGNALS)}")
        if self.echo_action not in ("warn", "stop", "rollback"):
            raise ValueError(f"echo_action must be warn, stop or rollback, got {self.echo_action!r}")
        if self.dtype not in ("float32", "bfloat16", "float16", "float64"):
            raise ValueError(f"dtype must be float32, bfloat16, float16 or float64, got {self.dtype!r}")
        if self.kl_kind not in ("k1", "k3"):
            raise ValueError(f"kl_kind must be 'k1' or 'k3', got {self.kl_kind!r}")
        for name in ("steps", "num_groups", "group_size", "max_new_tokens", "mini_batch_size", "micro_batch_size",
                     "updates_per_rollout", "eval_episodes", "probe_states", "probe_samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("eval_every", "probe_every", "save_every", "critic_warmup", "explore_groups", "train_seed_start",
                     "lora_rank", "average_last"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        for name in ("gradient_checkpointing", "shared_noise", "force_prefix", "eval_before_train", "tensorboard", "wandb",
                     "plots", "fsdp_mixed_precision", "track_kl"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.lora_alpha, bool) or not isinstance(self.lora_alpha, (int, float)) or self.lora_alpha <= 0:
            raise ValueError(f"lora_alpha must be a number > 0, got {self.lora_alpha!r}")
        if not isinstance(self.lora_targets, (list, tuple)) or not all(isinstance(t, str) and t for t in self.lora_targets):
            raise ValueError(f'lora_targets must be a list of module names, e.g. ["q_proj", "v_proj"], got {self.lora_targets!r}')
        if self.lora_rank:
            try:
                import peft  # noqa: F401
            except ImportError:
                raise ValueError("lora_rank > 0 needs peft, which is not installed: pip install 'ragen-envs[lora]'") from None
            if not self.lora_targets:
                raise ValueError("lora_targets must name at least one module (e.g. q_proj)")
        if self.wandb:
            try:
                import wandb  # noqa: F401
            except ImportError:
                raise ValueError("wandb=true needs the wandb package, which is not installed (pip install wandb; "
                                 "it is optional)") from None
        if self.sharding not in ("none", "ddp", "fsdp"):
            raise ValueError(f"sharding must be none, ddp or fsdp, got {self.sharding!r}")
        if self.fsdp_mixed_precision and self.sharding != "fsdp":
            raise ValueError("fsdp_mixed_precision needs sharding=fsdp")
        if self.average_last:
            if not self.save_every:
                raise ValueError("average_last averages the step checkpoints, so it needs save_every > 0")
            if self.keep_checkpoints < self.average_last:
                raise ValueError(f"average_last={self.average_last} needs keep_checkpoints >= {self.average_last} "
                                 f"(got {self.keep_checkpoints}): older checkpoints are deleted as the run goes")
            if self.sharding == "fsdp" or self.lora_rank:
                raise ValueError("average_last works on full-weight checkpoints: not with sharding=fsdp or lora_rank > 0")
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ValueError(f"keep_ratio must be in (0, 1], got {self.keep_ratio}")
        if not isinstance(self.filter_top_k, int) or isinstance(self.filter_top_k, bool) or self.filter_top_k < 1:
            raise ValueError(f"filter_top_k must be an integer >= 1, got {self.filter_top_k!r}")
        if not 0.0 < self.filter_min_p <= 1.0:
            raise ValueError(f"filter_min_p must be in (0, 1], got {self.filter_min_p}")
        self._check_rollout_filter()
        self._check_collapse()
        for name, default in (("norm_adv_by_std_in_grpo", True), ("grpo_advantage_length_weight", False)):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
            if getattr(self, name) != default and self.advantage != "grpo":
                raise ValueError(f"{name}={getattr(self, name)} applies to advantage=grpo, not {self.advantage}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for training rollouts, got {self.temperature}")
        if self.top_p != 1.0:
            raise ValueError(f"top_p must be 1 in training (got {self.top_p}): the update scores softmax(logits / "
                             f"temperature) and cannot correct for a truncated sampling distribution")
        from .core import LOSS_AGG_MODES

        if self.loss_agg not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg must be one of {LOSS_AGG_MODES}, got {self.loss_agg!r}")
        if self.advantage == "grpo" and self.group_size < 2:
            raise ValueError("advantage='grpo' needs group_size >= 2: with one rollout per group every "
                             "advantage is 0 and nothing is trained")
        import ragen_envs

        if self.eval_episodes > len(ragen_envs.EVAL_SEEDS):
            raise ValueError(f"eval_episodes must be <= {len(ragen_envs.EVAL_SEEDS)}, got {self.eval_episodes}")

    def _check_collapse(self) -> None:
        """collapse_detection (filled with its defaults, so config.json records them) and the
        gradient_analysis_* fields."""
        from .collapse import BUCKET_MODES, COLLAPSE_KEYS

        cd = self.collapse_detection
        if not isinstance(cd, dict) or set(cd) - COLLAPSE_KEYS:
            raise ValueError(f"collapse_detection must be a dict with keys from {sorted(COLLAPSE_KEYS)}, got {cd!r}")
        cd = self.collapse_detection = {"compute_freq": 5, "micro_batch_size": 128, "first_turn_enabled": False,
                                        "multi_turn_enabled": False, "num_samples": 64, "std_eps": 1e-3,
                                        "ema_decay": 0.9, **cd}
        for key in ("compute_freq", "micro_batch_size"):
            if isinstance(cd[key], bool) or not isinstance(cd[key], int) or cd[key] < 1:
                raise ValueError(f"collapse_detection {key} must be an integer >= 1, got {cd[key]!r}")
        for key in ("first_turn_enabled", "multi_turn_enabled"):
            if not isinstance(cd[key], bool):
                raise ValueError(f"collapse_detection {key} must be true or false, got {cd[key]!r}")
        n = cd["num_samples"]
        if n != "all" and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f'collapse_detection num_samples must be a positive integer or "all", got {n!r}')
        v = cd["std_eps"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
            raise ValueError(f"collapse_detection std_eps must be a number >= 0, got {v!r}")
        v = cd["ema_decay"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise ValueError(f"collapse_detection ema_decay must be in [0, 1], got {v!r}")
        if (cd["first_turn_enabled"] or cd["multi_turn_enabled"]) and not self.think:
            raise ValueError("collapse_detection scores the <think> reasoning: it needs think mode (env_kwargs think true)")
        if not isinstance(self.gradient_analysis_mode, bool):
            raise ValueError(f"gradient_analysis_mode must be true or false, got {self.gradient_analysis_mode!r}")
        for name in ("gradient_analysis_every", "gradient_analysis_num_buckets"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.gradient_analysis_bucket_mode not in BUCKET_MODES:
            raise ValueError(f"gradient_analysis_bucket_mode must be one of {', '.join(BUCKET_MODES)}, "
                             f"got {self.gradient_analysis_bucket_mode!r}")

    def _check_rollout_filter(self) -> None:
        """RAGEN-2's filter fields; with rollout_filter_strategy set, the StarPO-S filter's own
        fields must keep their defaults (one filter runs, and a changed field would be ignored)."""
        from .rollout_filter import FILTER_TYPES, LOSS_SCALINGS, METRICS, STRATEGIES, TOP_P_MODES

        for name, allowed in (("rollout_filter_metric", METRICS), ("rollout_filter_type", FILTER_TYPES),
                              ("rollout_filter_top_p_prob_mode", TOP_P_MODES), ("filter_loss_scaling", LOSS_SCALINGS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.rollout_filter_strategy is not None and self.rollout_filter_strategy not in STRATEGIES:
            raise ValueError(f"rollout_filter_strategy must be null or one of {', '.join(STRATEGIES)}, "
                             f"got {self.rollout_filter_strategy!r}")
        for name in ("rollout_filter_value", "rollout_filter_selection_eps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.rollout_filter_strategy is not None and not self.rollout_filter_value > 0:
            raise ValueError(f"rollout_filter_value must be > 0, got {self.rollout_filter_value!r}")
        if self.rollout_filter_strategy == "min_p" and self.rollout_filter_value > 1:
            raise ValueError(f"rollout_filter_value must be in (0, 1] for min_p, got {self.rollout_filter_value!r}")
        v = self.rollout_filter_empty_stop_steps
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"rollout_filter_empty_stop_steps must be an integer >= 0, got {v!r}")
        if not isinstance(self.rollout_filter_include_zero, bool):
            raise ValueError(f"rollout_filter_include_zero must be true or false, got {self.rollout_filter_include_zero!r}")
        if self.rollout_filter_strategy is not None:
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            for name in ("filter_mode", "keep_ratio", "filter_top_k", "filter_min_p", "explore_groups"):
                if getattr(self, name) != defaults[name]:
                    raise ValueError(f"{name}={getattr(self, name)!r} belongs to the StarPO-S filter, which "
                                     f"rollout_filter_strategy={self.rollout_filter_strategy} replaces: drop one of them")

    @property
    def uses_critic(self) -> bool:
        return self.advantage in ("gae", "bilevel_gae")

    @property
    def think(self) -> bool:
        return bool(self.env_kwargs.get("think", True))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StarPOConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}")
        return cls(**data)


# The reference's (RAGEN-2 / verl) names for fields that carry another name here, so a RAGEN
# user's settings carry over: ``--set loss_agg_mode=seq-mean-token-mean`` sets ``loss_agg``.
REFERENCE_NAMES: dict[str, str] = {"loss_agg_mode": "loss_agg"}


def rename_reference_fields(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every key of :data:`REFERENCE_NAMES` renamed to ours (order kept); a
    ValueError when both names are given."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        ours = REFERENCE_NAMES.get(key, key)
        if ours != key and ours in data:
            raise ValueError(f"{key} is the reference's name for {ours}: give one of them, not both")
        out[ours] = value
    return out


# Each preset: the fields it changes from the StarPO-S defaults (train_all.sh of the reference).
PRESETS: dict[str, dict[str, Any]] = {
    "starpo-s": {},
    "starpo": {"kl_coef": 0.001, "kl_kind": "k1", "clip_high": 0.2, "filter_mode": "none"},
    "grpo": {"advantage": "grpo"},
    "nothink": {"env_kwargs": {"think": False}},
    # RAGEN-2's "SNR-adaptive filtering" (its README's command, docs/guide_rollout_filtering.md's
    # recommended row): linear top-p 0.9 over the groups' return std, zero-std groups never kept
    "ragen2": {"rollout_filter_strategy": "top_p", "rollout_filter_value": 0.9, "rollout_filter_top_p_prob_mode": "linear",
               "rollout_filter_metric": "reward_variance", "rollout_filter_type": "largest",
               "rollout_filter_include_zero": False, "rollout_filter_selection_eps": 0.01,
               "rollout_filter_empty_stop_steps": 5, "filter_loss_scaling": "none"},
}


# The fields a resumed run may change (``ragen train --resume``; docs/training.md): how long
# it runs; where and in what pieces it computes (the same math: only float rounding can
# differ, as on another machine); how often it checkpoints; what it logs; its directory.
# Never what it trains or measures: the rollouts, the updates, the evaluations and the Echo
# Trap monitor's inputs read none of them.
RESUMABLE: tuple[str, ...] = ("steps", "device", "sharding", "micro_batch_size", "gradient_checkpointing",
                              "save_every", "keep_checkpoints", "log_samples", "plots", "tensorboard", "wandb",
                              "wandb_project", "save_rollouts", "out_dir", "collapse_detection",
                              "gradient_analysis_mode", "gradient_analysis_every", "gradient_analysis_num_buckets",
                              "gradient_analysis_bucket_mode")


def _plain(value: Any) -> Any:
    """A config value as JSON gives it back (tuples become lists), for comparisons."""
    import json

    return json.loads(json.dumps(value))


def resume_conflicts(saved: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(field, saved value, new value)`` for every field outside :data:`RESUMABLE` on which
    two configs of one run differ: a resumed run continues its saved experiment, so these
    must be equal. Fields only one side knows (a config written by another version) are
    not compared."""
    out = []
    for key in saved.keys() & new.keys():
        if key not in RESUMABLE and _plain(saved[key]) != _plain(new[key]):
            out.append((key, saved[key], new[key]))
    order = [f.name for f in dataclasses.fields(StarPOConfig)]
    return sorted(out, key=lambda c: order.index(c[0]) if c[0] in order else len(order))


def make_config(preset: str = "starpo-s", **overrides: Any) -> StarPOConfig:
    """The preset's config with ``overrides`` applied (``env_kwargs`` are merged)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    values = dict(PRESETS[preset])
    env_kwargs = dict(values.pop("env_kwargs", {}))
    env_kwargs.update(overrides.pop("env_kwargs", None) or {})
    values.update(overrides)
    values["env_kwargs"] = env_kwargs
    return StarPOConfig(**values)


@dataclass
class SFTConfig:
    """One ``ragen sft`` run (expert SFT, :func:`~.sft.run_sft`): what ``--config`` files and
    ``--print-config`` hold for ``ragen sft``. Defaults are :func:`~.sft.run_sft`'s; the CLI
    fills ``lr``, ``batch_size`` and ``warmup`` from the model's size profile
    (:mod:`~.profiles`) unless they are set."""

    env_id: str = "ragen/Sokoban-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    """a Hugging Face causal LM directory; None builds the tiny local model in out_dir/model_init"""
    tiny_model: dict[str, Any] = field(default_factory=lambda: dict(TINY_MODEL))
    out_dir: str = "runs/sft"
    episodes: int = 2000
    """expert episodes, on layout seeds seed_start.. (disjoint from EVAL_SEEDS by default)"""
    seed_start: int = 10_000
    steps: int = 1000
    """optimiser steps"""
    batch_size: int = 16
    """episodes per step"""
    lr: float = 1e-3
    """peak learning rate (linear warm-up, then lr_schedule's decay to 10 %)"""
    warmup: int = 50
    lr_schedule: str = "cosine"
    """cosine (decay over all steps after the warm-up) | wsd (constant, then a linear decay over the last 20 %)"""
    ema_decay: float = 0.0
    """> 0: save an exponential moving average of the weights (decay per step) instead of the last step's"""
    ema_from: int = 0
    """the optimiser step the moving average starts at (0: the first)"""
    stop_at_success: float | None = None
    """early stopping: end SFT at the first held-out check whose success is >= this (None: run all steps)"""
    validate_from: int = 1000
    """with stop_at_success: the first check, after this optimiser step"""
    validate_every: int = 100
    """with stop_at_success: steps between checks"""
    validation_seed_start: int = 30_000
    """with stop_at_success: the first held-out layout seed (must miss the expert data's seeds and EVAL_SEEDS)"""
    validation_episodes: int = 512
    """with stop_at_success: held-out layouts per check, one episode each at temperature 0.5"""
    actions_per_turn: int = 2
    """expert actions per reply"""
    think_style: str = "grounded"
    """grounded | plan"""
    context_coef: float = 0.0
    """weight of an auxiliary LM loss on the env's side of the conversation (system prompt,
    observations): a model trained from scratch learns the grid and the moves' effects from it
    (the tiny profile uses 0.5; a pretrained model needs none)"""
    max_new_tokens: int | None = None
    """reply cap saved in the model's protocol settings (None: twice the longest expert reply)"""
    seed: int = 0
    device: str = "cpu"
    data: str | None = None
    """a trajectory dataset (.parquet / .jsonl, from `ragen export`) to train on instead of expert episodes"""
    successful_only: bool = False
    """with data: only the successful episodes"""
    min_return: float | None = None
    """with data: only the episodes whose return is at least this"""
    token_ids: bool = False
    """with data: train on the file's token_ids / loss_mask as they are (the same tokenizer), not on
    its messages tokenized with the model's chat template"""
    format: str = "protocol"
    """protocol: replies as the protocol's assistant messages | tools: replies as act tool calls, the
    transcript TRL's GRPOTrainer(environment_factory=...) renders"""
    heldout_episodes: int = 64
    """after saving: success on this many held-out layouts (from validation_seed_start, past the training
    seeds and EVAL_SEEDS), one episode each at temperature 0.5, printed at the end (0: skip it)"""

    def __post_init__(self) -> None:
        if self.min_return is not None and (isinstance(self.min_return, bool)
                                            or not isinstance(self.min_return, (int, float))):
            raise ValueError(f"min_return must be a number or null, got {self.min_return!r}")
        if self.format not in ("protocol", "tools"):
            raise ValueError(f"format must be one of protocol, tools, got {self.format!r}")
        if self.format == "tools" and self.token_ids:
            raise ValueError("token_ids are the protocol format's ids: drop --token-ids to train the tools format")
        if (not isinstance(self.heldout_episodes, int) or isinstance(self.heldout_episodes, bool)
                or self.heldout_episodes < 0):
            raise ValueError(f"heldout_episodes must be an integer >= 0, got {self.heldout_episodes!r}")
        if self.token_ids and not self.data:
            raise ValueError("token_ids needs data (a dataset file with token_ids and loss_mask)")
        for name in ("episodes", "steps", "batch_size", "actions_per_turn"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_new_tokens is not None and (not isinstance(self.max_new_tokens, int)
                                                or isinstance(self.max_new_tokens, bool) or self.max_new_tokens < 1):
            raise ValueError(f"max_new_tokens must be an integer >= 1 or null, got {self.max_new_tokens!r}")
        for name in ("seed_start", "warmup"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0:
            raise ValueError(f"lr must be a number > 0, got {self.lr!r}")
        if self.think_style not in ("grounded", "plan"):
            raise ValueError(f"think_style must be one of grounded, plan, got {self.think_style!r}")
        if isinstance(self.context_coef, bool) or not isinstance(self.context_coef, (int, float)) \
                or not 0 <= self.context_coef < float("inf"):
            raise ValueError(f"context_coef must be a finite number >= 0, got {self.context_coef!r}")
        if isinstance(self.ema_decay, bool) or not isinstance(self.ema_decay, (int, float)) \
                or not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must be a number in [0, 1), got {self.ema_decay!r}")
        if not isinstance(self.ema_from, int) or isinstance(self.ema_from, bool) or self.ema_from < 0:
            raise ValueError(f"ema_from must be an integer >= 0, got {self.ema_from!r}")
        from .sft import LR_SCHEDULES, check_early_stop, check_validation_seeds

        check_early_stop(self.stop_at_success, self.validate_every, self.validate_from, self.validation_seed_start,
                         self.validation_episodes)
        if self.stop_at_success is not None:  # before a run directory is claimed
            check_validation_seeds(self.validation_seed_start, self.validation_episodes,
                                   None if self.data else (self.seed_start, self.episodes))

        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
