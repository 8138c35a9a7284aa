"""The StarPO / StarPO-S training loop, top to bottom.

    python -m ragen_envs.starpo ragen/Sokoban-v0 --preset starpo-s --steps 200 --out runs/sokoban
    ragen train ragen/Sokoban-v0 --preset starpo-s --model PATH --steps 200 --out runs/sokoban

One iteration (``StarPOTrainer.train_step``):

1. (every ``eval_every`` steps) evaluate on ``EVAL_SEEDS`` at temperature 0.5; (every
   ``probe_every``) the Echo Trap probe.
2. Rollout: P initial states x N rollouts at temperature 1, token-in/token-out; (with
   ``collapse_detection`` on, every ``compute_freq`` steps) RAGEN-2's collapse metrics on them.
3. Filter: keep the groups with the largest in-group return std (StarPO-S).
4. Score the kept batch: old log-probs (with one optimiser step per batch: the update's
   own, detached, instead of a separate pass), reference log-probs (KL to the initial policy;
   skipped with ``track_kl`` off and no KL loss), values.
5. Advantages: GAE (whitened) / bi-level GAE / GRPO; (``gradient_analysis_mode``, every
   ``gradient_analysis_every`` steps) the gradient report by reward-variance bucket.
6. Update: clipped policy loss + entropy bonus (+ KL), critic loss; grad clipping.
7. Log metrics and warnings; checkpoint.

Everything is seeded: on a CPU the same config gives the same metrics, and ``--resume``
continues a stopped run exactly as if it had never stopped.

Several processes (``torchrun --nproc_per_node=K -m ragen_envs.starpo ...``, see
``docs/scale.md``): each rank plays its block of the P groups and its block of the eval
seeds; the played trajectories are all-gathered, so the filter, the metrics, the Echo Trap
monitor and the advantages (whitening included) see the global batch on every rank; each
rank scores and back-propagates its strided share of every mini-batch, with the loss divided
by the mini-batch's global token count, and the gradients are summed across ranks before
clipping and the optimiser step (``sharding``: by the trainer, by DistributedDataParallel,
or by FSDP2 with parameters, gradients and optimiser state split across ranks; see
``starpo/sharding.py``). Only rank 0 writes logs, metrics and checkpoints (under fsdp every
rank writes its checkpoint shards).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..protocol import parse_answer
from ..protocol.context import context_messages
from . import collapse as CM
from . import distributed as D
from . import scale
from . import sharding as S
from . import checkpoint as C
from .checkpoint import checkpoint_dir, load_trainer_state, prune_checkpoints, save_checkpoint
from .config import RESUMABLE, StarPOConfig, resume_conflicts
from . import rollout_filter as RF
from .core import (
    FilterResult,
    compute_advantages,
    explained_variance,
    group_std,
    kl_estimate,
    length_weighted_advantages,
    loss_weights,
    masked_mean,
    policy_loss,
    score_dtype,
    uncertainty_filter,
    value_loss,
)
from .diagnostics import EchoTrapMonitor, MetricsLogger, plot_metrics, think_diversity
from .probes import cond_entropy, cross_score, distinct_prompts, mi_proxy
from .policy import (
    ChatFormat,
    count_parameters,
    load_critic,
    load_policy,
    load_tokenizer,
    pad_right,
    sample_replies,
    sequence_logprobs,
)
from .rollout import Trajectory, collect_rollouts, turn_rows
from .sampler import CachedResponder

__all__ = ["StarPOTrainer", "evaluate_policy", "rollout_metrics", "PROBE_SEED_START"]

CONFIG_FILE = "config.json"  # the run's experiment: written at the start, read by --resume
PROBE_SEED_START = 1_000_000  # the probe's fixed initial states (disjoint from train and eval seeds)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def _stream_seed(*parts: int) -> int:
    """A 63-bit seed for a private generator, from integers (no Python hash)."""
    import numpy as np

    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, dtype=np.uint64)[0] >> 1)


def reply_prefix(config: StarPOConfig) -> str:
    if not config.force_prefix:
        return ""
    return "<think>" if config.think else "<answer>"


def rollout_metrics(trajs: list[Trajectory], prefix: str = "rollout/") -> dict[str, float]:
    """Per-batch numbers: returns, success, reply length, format errors, reasoning checks,
    template repetition of the first turn's think texts. ``well_formed_episodes`` is the share
    of episodes whose every reply was well formed, ``well_formed_success`` the success rate
    among those episodes (0 when there are none): the monitor's "success among well-formed
    replies", a rate in [0, 1] also for multi-turn episodes."""
    if not trajs:
        return {}
    turns = [tu for t in trajs for tu in t.episode.turns]
    rets = [t.episode_return for t in trajs]
    mean = sum(rets) / len(rets)
    std = math.sqrt(sum((r - mean) ** 2 for r in rets) / len(rets))
    reply_tokens = sum(t.num_reply_tokens for t in trajs)
    thinks = [t.episode.turns[0].info.get("think", "") for t in trajs if t.episode.turns]
    div = think_diversity(thinks)
    reasoning = [tu.info.get("reasoning", {}) for tu in turns]
    well = [t for t in trajs if t.episode.turns and all(tu.info.get("format_ok", False) for tu in t.episode.turns)]
    return {
        f"{prefix}return_mean": mean,
        f"{prefix}return_std": std,
        f"{prefix}return_max": max(rets),
        f"{prefix}success": sum(t.success for t in trajs) / len(trajs),
        f"{prefix}turns": len(turns) / len(trajs),
        f"{prefix}response_length": reply_tokens / max(len(turns), 1),
        f"{prefix}format_error": sum(not tu.info.get("format_ok", False) for tu in turns) / max(len(turns), 1),
        f"{prefix}well_formed_episodes": len(well) / len(trajs),
        f"{prefix}well_formed_success": sum(t.success for t in well) / len(well) if well else 0.0,
        f"{prefix}truncated_replies": sum(t.truncated_replies for t in trajs) / max(len(turns), 1),
        f"{prefix}reasoning_score": sum(r.get("score", 0.0) for r in reasoning) / max(len(turns), 1),
        f"{prefix}actions_agree": sum(bool(r.get("actions_agree")) for r in reasoning) / max(len(turns), 1),
        f"{prefix}claims_true": sum(r.get("claims_true", 0) for r in reasoning) / max(sum(r.get("claims", 0) for r in reasoning), 1),
        f"{prefix}distinct_think": div["distinct_texts"],
        f"{prefix}think_distinct_ngrams": div["distinct_ngrams"],
    }


def evaluate_policy(model, fmt: ChatFormat, pad_id: int, env_id: str, *, episodes: int, temperature: float,
                    seed: int, max_new_tokens: int, env_kwargs: dict | None = None,
                    generation_batch_size: int | None = None, start: int = 0, context_window_mode: str = "full",
                    max_context_window: int = -1) -> list[Trajectory]:
    """Play ``ragen_envs.EVAL_SEEDS[start : start + episodes]`` once each at ``temperature``
    (with the context mode the policy trains under, as the reference's validation)."""
    import ragen_envs

    if start < 0 or start + episodes > len(ragen_envs.EVAL_SEEDS):
        raise ValueError(f"EVAL_SEEDS[{start}:{start + episodes}] is outside the {len(ragen_envs.EVAL_SEEDS)} eval seeds")
    gen = torch.Generator().manual_seed(seed)
    responder = CachedResponder(model, fmt, pad_id, max_new_tokens, temperature, gen, batch_size=generation_batch_size)
    return collect_rollouts(env_id, ragen_envs.EVAL_SEEDS[start], episodes, 1, responder, fmt, env_kwargs=env_kwargs,
                            context_window_mode=context_window_mode, max_context_window=max_context_window)


class _NoMetrics:
    """The metrics sink of ranks other than 0 (only rank 0 writes)."""

    path = None

    def log(self, row: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def _rank_device(device: str, ctx: D.DistContext) -> str:
    """``cuda`` becomes ``cuda:LOCAL_RANK`` under torchrun; anything else is kept."""
    if ctx.enabled and device == "cuda":
        return f"cuda:{ctx.local_rank}"
    return device


def _check_env(env_id: str, env_kwargs: dict, seed: int, context_window_mode: str = "full") -> None:
    """Build and reset the env once: a kwarg it refuses (TypeError / ValueError) fails the
    run at its start, before models are loaded and files written, not in the first rollout;
    so does an env whose observations a windowed ``context_window_mode`` cannot cut."""
    from ..eval.harness import check_windowable

    check_windowable(env_id, env_kwargs, seed, context_window_mode)


def _gather(local: list[Trajectory]) -> list[Trajectory]:
    """Every rank's trajectories, in rank order (= global group order: ranks hold
    contiguous blocks); the local list itself on one process."""
    return [t for part in D.all_gather_objects(local) for t in part]


class StarPOTrainer:
    """Builds the models, optimisers and logs of one run; :meth:`train` runs it."""

    # one optimiser step per rollout batch: take the old log-probs from the update's own
    # forward (detached) instead of a separate no-grad pass (False: that pass, for comparisons)
    fresh_old_logprobs = True
    # micro-batches of rows of similar length (sorted, longest first) instead of the rows in
    # batch order: less padding in every scoring and update forward; the losses are weighted
    # by the mini-batch's own token / trajectory counts, so only float summation order changes
    # (False: batch order, for comparisons)
    bucket_micro_batches = True

    def __init__(self, config: StarPOConfig, resume: bool = False, log: Callable[[str], None] = print) -> None:
        self.cfg = cfg = config
        self.dist = D.init_distributed(cfg.device)
        self.rank, self.world = self.dist.rank, self.dist.world_size
        world = self.world
        if world > cfg.num_groups or (cfg.eval_every and world > cfg.eval_episodes):
            raise ValueError(f"{world} processes need num_groups >= {world} and eval_episodes >= {world} "
                             f"(got {cfg.num_groups} and {cfg.eval_episodes}): every rank plays at least one group")
        self.device = _rank_device(cfg.device, self.dist)
        self.log = D.RankZeroLog(log)
        self.out = Path(cfg.out_dir)
        if resume:  # before anything is built or written: a resumed run is the saved experiment
            self._check_resumed_config(self._saved_config(), f"{self.out / CONFIG_FILE}")
        _check_env(cfg.env_id, cfg.env_kwargs, cfg.train_seed_start, cfg.context_window_mode)
        self.out.mkdir(parents=True, exist_ok=True)
        self.dtype = _DTYPES[cfg.dtype]
        self.score_dtype = score_dtype(self.dtype)
        self.model_path = self._initial_model_path()
        self.tokenizer = load_tokenizer(self.model_path)
        self.fmt = ChatFormat(self.tokenizer, reply_prefix(cfg))
        self.pad_id = self.tokenizer.pad_token_id

        ckpt = self._find_checkpoint() if resume else None
        state = load_trainer_state(ckpt) if ckpt is not None else None
        if state is not None:
            self._check_resumed_config(state.get("config"), f"checkpoint {ckpt}")
        if ckpt is not None and cfg.sharding == "fsdp" and not C.is_sharded(ckpt):
            raise ValueError(f"{ckpt} was written with sharding={state['config'].get('sharding', 'none')} "
                             "(full weights): resume it with that sharding (an fsdp run writes and reads sharded checkpoints)")
        self.actor = self._load_actor(ckpt)
        # KL to the initial policy is tracked unless track_kl is off (and kl_coef 0); under LoRA
        # the initial policy is the actor with its adapters disabled (no second copy of the weights)
        self.uses_ref = bool(cfg.kl_coef) or cfg.track_kl
        self.ref = None if cfg.lora_rank or not self.uses_ref else load_policy(self.model_path, self.device, self.dtype)
        if self.ref is not None:
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.critic = self._load_critic(ckpt) if cfg.uses_critic else None
        self._shard_models()
        self._make_optimizers()
        # rank 0 keeps the seed of a one-process run; other ranks sample their own streams
        self.gen = torch.Generator().manual_seed(cfg.seed if self.rank == 0 else _stream_seed(cfg.seed, 3, self.rank))
        self.step = 0
        self.best_eval = -math.inf
        self.stopped_reason: str | None = None
        self.empty_filter_steps = 0  # consecutive steps RAGEN-2's filter kept nothing (rollout_filter_empty_stop_steps)
        self.last_eval: list[Trajectory] | None = None
        self.monitor = EchoTrapMonitor(cfg.std_collapse_ratio, cfg.grad_spike_factor, cfg.diversity_drop_ratio, **cfg.monitor)
        self.collapse_ema: dict[str, float] = {}  # the collapse metrics' EMA of the marginals' std, per sample kind
        if ckpt is not None:
            if C.is_sharded(ckpt):
                self._load_sharded(ckpt)
            self._load_state(state)
            del state  # (the optimiser states: loaded, not needed twice in memory)
            self.log(f"resumed from {ckpt} at step {self.step}")
        if self.dist.is_main:
            self.metrics = MetricsLogger(self.out, cfg.tensorboard, resume_step=self.step if resume else None,
                                         wandb_project=cfg.wandb_project if cfg.wandb else None, run_config=cfg.to_dict())
            self._write_config()
        else:
            self.metrics = _NoMetrics()
        if world > 1:
            self.log(f"torch.distributed: {world} processes ({self.dist.backend}); rank 0 writes logs and checkpoints")

    # ------------------------------------------------------------------ setup helpers
    def _saved_config(self) -> dict[str, Any] | None:
        """The run's ``config.json`` (None when there is none yet: a run stopped before it was
        written starts afresh)."""
        path = self.out / CONFIG_FILE
        if not path.is_file():
            return None
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"--resume: cannot read {path} ({' '.join(str(exc).split())})") from None
        if not isinstance(saved, dict):
            raise ValueError(f"--resume: {path} is not a ragen train config (a JSON {type(saved).__name__})")
        return saved

    def _check_resumed_config(self, saved: dict[str, Any] | None, where: str) -> None:
        """``resume``: refuse a config that differs from the run's saved one outside
        :data:`~.config.RESUMABLE` (a resumed run that silently changed its experiment —
        another model, other group sizes — is not the run it claims to continue)."""
        if not saved:
            return
        conflicts = resume_conflicts(saved, self.cfg.to_dict())
        if conflicts:
            key, old, new = conflicts[0]
            more = f" (and {len(conflicts) - 1} more fields)" if len(conflicts) > 1 else ""
            raise ValueError(f"--resume: {key}={new!r} contradicts the run's {key}={old!r} ({where}){more}; a resumed "
                             f"run continues its saved experiment (only {', '.join(RESUMABLE)} may change)")

    def _write_config(self) -> None:
        """``DIR/config.json`` <- the config, atomically: a kill mid-write must not leave a
        truncated file, since ``--resume`` reads the run's experiment from it."""
        tmp = self.out / f".{CONFIG_FILE}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.write_text(json.dumps(self.cfg.to_dict(), indent=2))
        tmp.replace(self.out / CONFIG_FILE)

    def _find_checkpoint(self) -> Path | None:
        """``--resume``: the newest intact checkpoint (an interrupted rewrite is put back
        first; each damaged checkpoint skipped is one warning line)."""
        if self.dist.is_main:
            for line in C.recover_checkpoints(self.out):
                self.log(f"--resume: {line}")
        # rank 0 verifies (it hashes every file: once, not once per rank) and tells the others
        found = C.resume_checkpoint(self.out, warn=self.log) if self.dist.is_main else None
        found = D.broadcast_object(str(found) if found is not None else None)
        ckpt = Path(found) if found is not None else None
        if ckpt is None:
            self.log(f"--resume: no intact checkpoint under {self.out / 'checkpoints'}; starting from step 0")
        return ckpt

    def _initial_model_path(self) -> Path:
        if self.cfg.model:
            path = Path(self.cfg.model)
            if not path.exists():
                raise FileNotFoundError(f"model path {path} does not exist (a local save_pretrained directory is expected)")
            return path
        path = self.out / "model_init"
        if self.dist.is_main and not (path / "config.json").exists():
            from .tiny import build_tiny_policy

            build_tiny_policy(path, self.cfg.env_id, self.cfg.env_kwargs, seed=self.cfg.seed, **self.cfg.tiny_model)
        D.barrier()  # the other ranks load what rank 0 built
        return path

    def _load_actor(self, ckpt: Path | None):
        """The actor from the initial model or a checkpoint; with ``lora_rank`` the frozen
        initial model plus (new or saved) LoRA adapters; with ``gradient_checkpointing``
        checkpointed decoder layers. Always returned in eval mode."""
        cfg = self.cfg
        ckpt = None if ckpt is None or C.is_sharded(ckpt) else ckpt  # (sharded: weights loaded after sharding)
        if not cfg.lora_rank:
            actor = load_policy(ckpt / "actor" if ckpt else self.model_path, self.device, self.dtype)
        else:
            actor = load_policy(self.model_path, self.device, self.dtype)
        if cfg.gradient_checkpointing:
            scale.enable_gradient_checkpointing(actor)
        if cfg.lora_rank:
            actor = (scale.load_lora(actor, ckpt / "actor") if ckpt else
                     scale.apply_lora(actor, cfg.lora_rank, cfg.lora_alpha, target_modules=cfg.lora_targets,
                                      seed=_stream_seed(cfg.seed, 4)))
        return actor.eval()

    def _load_critic(self, ckpt: Path | None):
        cfg = self.cfg
        ckpt = None if ckpt is None or C.is_sharded(ckpt) else ckpt
        if not cfg.lora_rank:
            critic = load_critic(ckpt / "critic" if ckpt else self.model_path, self.device, self.dtype, seed=cfg.seed)
        else:
            critic = load_critic(self.model_path, self.device, self.dtype, seed=cfg.seed)
        if cfg.gradient_checkpointing:
            scale.enable_gradient_checkpointing(critic)
        if cfg.lora_rank:
            critic = (scale.load_lora(critic, ckpt / "critic") if ckpt else
                      scale.apply_lora(critic, cfg.lora_rank, cfg.lora_alpha, target_modules=cfg.lora_targets,
                                       task_type="TOKEN_CLS", modules_to_save=[scale.value_head_name(critic)],
                                       seed=_stream_seed(cfg.seed, 5)))
        return critic.eval()

    def _shard_models(self) -> None:
        """Wrap the models for ``cfg.sharding`` (``sharding.py``): ``self.*_train`` run the
        training forwards (DDP / FSDP / plain), ``self.*_score`` the no-grad scoring ones;
        under FSDP (several processes) the actor's sampler copy is made before sharding."""
        cfg, world = self.cfg, self.world
        self.collective = cfg.sharding in ("ddp", "fsdp") and world > 1  # every rank runs the same micro-batches
        fsdp = cfg.sharding == "fsdp" and world > 1
        self.sampler_copy = (S.SamplerCopy(self.actor, torch.bfloat16 if cfg.fsdp_mixed_precision else None)
                             if fsdp else None)

        def wrap(model, mode):
            if model is None:
                return None, None
            wrapped = S.wrap(model, mode, world, self.device, cfg.fsdp_mixed_precision)
            return wrapped, (wrapped if fsdp else getattr(wrapped, "module", wrapped))

        self.actor_train, self.actor_score = wrap(self.actor, cfg.sharding)
        self.critic_train, self.critic_score = wrap(self.critic, cfg.sharding)
        # the frozen reference has no gradients to synchronise: sharded under fsdp, plain otherwise
        self.ref_score = wrap(self.ref, "fsdp" if fsdp else "none")[1]

    def _sampling_model(self):
        """The model that generates (rollouts, evaluation, probe): the actor itself, or
        under FSDP its full copy, refreshed once if the weights changed since the last
        phase (a collective: every rank calls this at the same point)."""
        if self.sampler_copy is None:
            return self.actor
        self.sampler_copy.refresh(self.actor)
        return self.sampler_copy.model

    def _make_optimizers(self) -> None:
        cfg = self.cfg
        betas = (0.9, 0.999)
        self.actor_opt = torch.optim.AdamW(scale.trainable_parameters(self.actor), lr=cfg.actor_lr, betas=betas,
                                           weight_decay=cfg.weight_decay)
        self.critic_opt = (torch.optim.AdamW(scale.trainable_parameters(self.critic), lr=cfg.critic_lr, betas=betas,
                                             weight_decay=cfg.weight_decay)
                           if self.critic is not None else None)

    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "seed_cursor": self.cfg.train_seed_start + self.step * self.cfg.num_groups,
            "generator": self.gen.get_state(),
            # (sharding=fsdp: the optimisers are in the checkpoint's dcp/ directory)
            "actor_opt": None if self.cfg.sharding == "fsdp" else self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict() if self.critic_opt and self.cfg.sharding != "fsdp" else None,
            "monitor": self.monitor.state(),
            "best_eval": self.best_eval,
            "empty_filter_steps": self.empty_filter_steps,
            "collapse_ema": dict(self.collapse_ema),
            "config": self.cfg.to_dict(),
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        gens = state.get("rank_generators")
        if self.rank == 0:
            self.gen.set_state(state["generator"])
        elif gens is not None and len(gens) == self.world:
            self.gen.set_state(gens[self.rank])
        else:  # saved by another number of processes: a fresh stream for this rank
            self.gen.manual_seed(_stream_seed(self.cfg.seed, 3, self.rank, self.step))
        if state.get("actor_opt") is not None:
            self.actor_opt.load_state_dict(state["actor_opt"])
        if self.critic_opt is not None and state.get("critic_opt") is not None:
            self.critic_opt.load_state_dict(state["critic_opt"])
        self.monitor.load_state(state["monitor"])
        self.best_eval = float(state["best_eval"])
        # RAGEN-2's empty-filter streak goes on across a resume (checkpoints from before it have none)
        self.empty_filter_steps = int(state.get("empty_filter_steps", 0))
        self.collapse_ema = dict(state.get("collapse_ema", {}))

    def save(self, name: str | None = None, update_latest: bool = True) -> Path:
        """Write a checkpoint atomically (rank 0; every rank must call this: the ranks'
        sampling RNG states are gathered into it so that ``--resume`` with as many processes
        is exact). A failed write (disk full) raises :class:`~.checkpoint.CheckpointError`
        on every rank; the previous checkpoints are kept."""
        name = name or f"step_{self.step:06d}"
        gens = D.all_gather_objects(self.gen.get_state())
        path = checkpoint_dir(self.out, name)
        error = None
        if self.cfg.sharding == "fsdp":
            error = self._save_sharded(path, gens, update_latest)
        elif self.dist.is_main:
            state = self._state()
            if self.world > 1:
                state["rank_generators"] = gens
            try:
                save_checkpoint(self.out, name, actor=self.actor, tokenizer=self.tokenizer, critic=self.critic,
                                state=state, update_latest=update_latest, settings=self.protocol_settings())
            except C.CheckpointError as exc:
                error = str(exc)
        if self.dist.is_main and error is None and name.startswith("step_"):
            prune_checkpoints(self.out, self.cfg.keep_checkpoints)
        error = D.broadcast_object(error)
        if error:
            raise C.CheckpointError(error)
        return path

    def protocol_settings(self):
        """How this model talks to the env (saved beside every actor it writes, read by hf:)."""
        from ..lm.settings import ProtocolSettings

        cfg = self.cfg
        return ProtocolSettings(env_id=cfg.env_id, env_kwargs={**cfg.env_kwargs, "think": cfg.think},
                                reply_prefix=reply_prefix(cfg), max_new_tokens=cfg.max_new_tokens,
                                eot_token=self.fmt.eot_token, temperature=cfg.eval_temperature, history="tokens",
                                written_by="ragen train", context_window_mode=cfg.context_window_mode,
                                max_context_window=cfg.max_context_window)

    def _sharded_models(self) -> dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]:
        out = {"actor": (self.actor, self.actor_opt)}
        if self.critic is not None:
            out["critic"] = (self.critic, self.critic_opt)
        return out

    def _save_sharded(self, final: Path, gens: list, update_latest: bool) -> str | None:
        """sharding=fsdp: every rank writes its shards of actor, critic and optimisers with
        ``torch.distributed.checkpoint`` into ``NAME.tmp/dcp``; rank 0 adds the trainer state
        and the tokenizer and publishes the directory (atomic, fsynced). Returns the error
        (the same on every rank) or None. An optimiser that has not stepped yet is not
        saved (reading its state would initialise it with a step of zeros)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        tmp = final.with_name(final.name + ".tmp")
        error = None
        if self.dist.is_main:
            try:
                C.staging_dir(final)
            except OSError as exc:
                error = f"could not write checkpoint {final}: {exc}"
        error = D.broadcast_object(error)
        if error is None:
            state: dict[str, Any] = {}
            for key, (model, opt) in self._sharded_models().items():
                state[key] = get_model_state_dict(model)
                if opt.state:
                    state[f"{key}_opt"] = get_optimizer_state_dict(model, opt)
            try:
                dcp.save(state, checkpoint_id=str(tmp / C.DCP_DIR), no_dist=not self.dist.enabled)
            except Exception as exc:  # DCP raises on every rank when one rank's write fails
                error = f"could not write checkpoint {final}: {' '.join(str(exc).split())[:300]}"
        if self.dist.is_main and error is None:
            trainer_state = self._state()
            trainer_state["sharded_optimizers"] = sorted(k for k in state if k.endswith("_opt"))
            if self.world > 1:
                trainer_state["rank_generators"] = gens
            try:
                from ..lm.settings import save_settings

                self.tokenizer.save_pretrained(tmp / "tokenizer")
                save_settings(tmp / "tokenizer", self.protocol_settings())
                torch.save(trainer_state, tmp / C.STATE_FILE)
                C.publish(tmp, final)
                if update_latest:
                    C.write_pointer(final.parent, final.name)
            except OSError as exc:
                error = f"could not write checkpoint {final}: {' '.join(str(exc).split())}"
        if self.dist.is_main and error is not None:
            C.discard(tmp)
        return D.broadcast_object(error)

    def _load_sharded(self, ckpt: Path) -> None:
        """Load a sharded checkpoint (written by any number of ranks) into the current models
        and optimisers, whatever their sharding: DCP reshards."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                             set_model_state_dict, set_optimizer_state_dict)

        saved = set(load_trainer_state(ckpt).get("sharded_optimizers", []))
        state: dict[str, Any] = {}
        for key, (model, opt) in self._sharded_models().items():
            state[key] = get_model_state_dict(model)
            if f"{key}_opt" in saved:
                state[f"{key}_opt"] = get_optimizer_state_dict(model, opt)
        dcp.load(state, checkpoint_id=str(ckpt / C.DCP_DIR), no_dist=not self.dist.enabled)
        for key, (model, opt) in self._sharded_models().items():
            set_model_state_dict(model, state[key])
            if f"{key}_opt" in state:
                set_optimizer_state_dict(model, opt, state[f"{key}_opt"])
        if self.sampler_copy is not None:
            self.sampler_copy.mark_stale()

    def _rollback_to_best(self) -> bool:
        best = checkpoint_dir(self.out, "best")
        if C.verify_checkpoint(best) is not None:
            return False
        step = self.step
        if C.is_sharded(best):  # load the best weights and optimiser states in place
            self._make_optimizers()
            self._load_sharded(best)
            self.step = step
            return True
        self.actor = self._load_actor(best)
        if self.critic is not None:
            self.critic = self._load_critic(best)
        self._shard_models()
        self._make_optimizers()
        state = load_trainer_state(best)
        self.actor_opt.load_state_dict(state["actor_opt"])
        if self.critic_opt is not None and state.get("critic_opt") is not None:
            self.critic_opt.load_state_dict(state["critic_opt"])
        self.step = step  # keep moving forward through the seeds
        return True

    # ------------------------------------------------------------------ evaluation and probe
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """``eval_episodes`` of EVAL_SEEDS at ``eval_temperature`` (each rank plays a block;
        the metrics are over all of them, on every rank)."""
        cfg = self.cfg
        t0 = time.monotonic()
        block = D.shard_groups(cfg.eval_episodes)
        seed = _stream_seed(cfg.seed, 1, self.step) if self.rank == 0 else _stream_seed(cfg.seed, 1, self.step, self.rank)
        local = evaluate_policy(self._sampling_model(), self.fmt, self.pad_id, cfg.env_id, episodes=len(block),
                                temperature=cfg.eval_temperature, seed=seed, max_new_tokens=cfg.max_new_tokens,
                                env_kwargs=cfg.env_kwargs, generation_batch_size=cfg.generation_batch_size,
                                start=block[0], context_window_mode=cfg.context_window_mode,
                                max_context_window=cfg.max_context_window)
        trajs = _gather(local)
        self.last_eval = trajs
        m = rollout_metrics(trajs, prefix="eval/")
        m["time/eval"] = time.monotonic() - t0
        return m

    def _write_eval_run(self, model_dir: Path) -> None:
        """The closing evaluation as a ``ragen eval`` run directory: DIR/eval/{episodes.jsonl,
        summary.json, report.html}."""
        from ..eval import write_results

        cfg = self.cfg
        extra = {"env_kwargs": {**cfg.env_kwargs, "think": cfg.think}, "think": cfg.think,
                 "temperature": cfg.eval_temperature, "max_tokens": cfg.max_new_tokens, "step": self.step,
                 "source": "ragen train (closing evaluation)"}
        if cfg.context_window_mode != "full":  # as `ragen eval --context-window-mode` records it (its report names it)
            extra["context_window"] = {"mode": cfg.context_window_mode, "max_context_window": cfg.max_context_window}
        for t in self.last_eval:  # the sequences as sampled, for `ragen export DIR/eval`
            t.episode.meta["token_ids"], t.episode.meta["loss_mask"] = list(t.token_ids), list(t.loss_mask)
        write_results(self.out / "eval", [t.episode for t in self.last_eval], agent=f"hf:{model_dir}", extra=extra)
        self.log(f"closing evaluation written as a ragen eval run: {self.out / 'eval'}")

    def probe(self) -> dict[str, float]:
        """Sample ``probe_samples`` first replies on ``probe_states`` fixed initial states at
        the training temperature; think-text diversity and entropy (rank 0 samples, every
        rank gets the numbers)."""
        model = self._sampling_model()
        return D.broadcast_object(self._probe(model) if self.dist.is_main else None)

    @torch.no_grad()
    def _probe(self, model) -> dict[str, float]:
        import gymnasium as gym

        cfg = self.cfg
        env = gym.make(cfg.env_id, **cfg.env_kwargs)
        base = env.unwrapped
        prompts = []
        for s in range(cfg.probe_states):
            obs, info = env.reset(seed=PROBE_SEED_START + s)
            # the first turn's prompt as the policy reads it (single_turn heads it "(Turn 1):")
            first = context_messages([obs], [], 0, cfg.context_window_mode, cfg.max_context_window)[-1]["content"]
            prompts += [self.fmt.first(info["system_prompt"], first)] * cfg.probe_samples
        env.close()
        gen = torch.Generator().manual_seed(_stream_seed(cfg.seed, 2, self.step))
        replies = sample_replies(model, prompts, eot_id=self.fmt.eot_id, pad_id=self.pad_id,
                                 max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, generator=gen, top_p=cfg.top_p)
        thinks = []
        for ids, stopped in replies:
            body = ids[:-1] if stopped else ids
            text = self.fmt.prefix + self.tokenizer.decode(body, skip_special_tokens=False)
            thinks.append(parse_answer(text, base.action_names(), base.think, base.budget.max_actions_per_turn).think or text)
        # every reply scored under every distinct probe prompt in one batched forward (probes.py)
        t_mi = time.monotonic()
        uniq, own, weights = distinct_prompts(prompts)
        reply_ids = [r for r, _ in replies]
        L, E = cross_score(model, uniq, reply_ids, self.pad_id, temperature=cfg.temperature,
                           batch_size=max(cfg.micro_batch_size * 4, 1))
        mi = mi_proxy(L, own, weights)
        lengths = [len(r) for r in reply_ids]
        own_lp = [L[i][o] for i, o in enumerate(own)]
        h = cond_entropy(own_lp, lengths)
        ent_sum = sum(E[i][o] for i, o in enumerate(own))
        n_tok = sum(lengths)
        div = think_diversity(thinks)
        return {"probe/distinct_texts": div["distinct_texts"], "probe/distinct_ngrams": div["distinct_ngrams"],
                "probe/pairwise_similarity": div["pairwise_similarity"], "probe/entropy": ent_sum / max(n_tok, 1),
                "probe/mi": mi["mi"], "probe/mi_max": mi["mi_max"], "probe/retrieval": mi["retrieval"],
                "probe/h_z_given_x": h["per_reply"], "probe/h_z_given_x_token": h["per_token"],
                "probe/distinct_prompts": len(uniq), "time/probe_score": time.monotonic() - t_mi}

    def collapse_metrics(self, trajs: list[Trajectory]) -> dict[str, float]:
        """RAGEN-2's collapse metrics (``collapse_detection``) on this step's rollouts, before
        the filter as the reference (rank 0 scores, every rank gets the numbers)."""
        model = self._sampling_model()  # (a collective under FSDP: every rank calls it)
        return D.broadcast_object(self._collapse_metrics(model, trajs) if self.dist.is_main else None)

    @torch.no_grad()
    def _collapse_metrics(self, model, trajs: list[Trajectory]) -> dict[str, float]:
        """For every turn of every rollout: X = the token ids before its reply (the whole
        conversation so far, up to and including ``<think>``), Z = the tokens of its reasoning
        text (:func:`~.collapse.reasoning_text`, tokenized again as the reference does);
        turns with an empty Z are not valid. ``multi_turn_enabled``: a trajectory-uniform
        sample of valid (X, Z) pairs, one column per pair (``collapse_trajectory_sample/*``,
        ``collapse/valid_thinking_rate``); ``first_turn_enabled``: the valid first turns, one
        column per group (``collapse_first_turn_sample/*``, ``collapse/first_turn_num_*``).
        The draws come from a RandomState seeded by (seed, step)."""
        import numpy as np

        cfg, cc = self.cfg, self.cfg.collapse_detection
        rng = np.random.RandomState(_stream_seed(cfg.seed, 6, self.step) % 2**32)
        think = [] if self.fmt.prefix.endswith("<think>") else self.fmt.encode("<think>")
        special = list(getattr(self.tokenizer, "all_special_tokens", []))
        num_samples = None if cc["num_samples"] == "all" else cc["num_samples"]
        turns: list[list[tuple[list[int], list[int]]]] = []
        for t in trajs:
            spans = t.reply_token_spans()
            replies = t.episode.turns
            turns.append([(list(t.token_ids[:a]) + think, self.fmt.encode(CM.reasoning_text(tu.response, special)))
                          for (a, _), tu in zip(spans, replies)])
        out: dict[str, float] = {}
        if cc["multi_turn_enabled"]:
            t0 = time.monotonic()
            valid = [[(x, z) for x, z in tt if z] for tt in turns]
            total = sum(len(tt) for tt in turns)
            if total:
                out["collapse/valid_thinking_rate"] = sum(len(v) for v in valid) / total
            pairs = CM.trajectory_uniform_pairs([len(v) for v in valid], num_samples, rng)
            out.update(self._collapse_pairs(model, "collapse_trajectory_sample", [valid[m][k][0] for m, k in pairs],
                                            [valid[m][k][1] for m, k in pairs], list(range(len(pairs)))))
            out["time/collapse_multi_turn"] = time.monotonic() - t0
        if cc["first_turn_enabled"]:
            t0 = time.monotonic()
            first = [tt[0] if tt else ([], []) for tt in turns]
            n_valid = sum(1 for _, z in first if z)
            out["collapse/first_turn_num_total"] = len(first)
            out["collapse/first_turn_num_valid"] = n_valid
            out["collapse/first_turn_valid_rate"] = n_valid / len(first) if first else 0.0
            rows = CM.first_turn_rows([len(z) for _, z in first], num_samples, rng)
            out.update(self._collapse_pairs(model, "collapse_first_turn_sample", [first[i][0] for i in rows],
                                            [first[i][1] for i in rows], [trajs[i].group for i in rows]))
            out["time/collapse_first_turn"] = time.monotonic() - t0
        return out

    def _collapse_pairs(self, model, label: str, prompts: list[list[int]], reasonings: list[list[int]],
                        groups: list[int]) -> dict[str, float]:
        """Cross-score the pairs (one column per group id) and compute their metrics under
        ``label/``; a sample with fewer than 2 columns gives nothing."""
        import numpy as np

        cc = self.cfg.collapse_detection
        if not prompts:
            return {}
        try:
            own, columns, _ = CM.prompt_columns(groups, prompts)
        except ValueError as exc:  # the reference logs it and goes on
            self.log(f"  collapse metrics ({label}) skipped: {exc}")
            return {}
        if len(columns) < 2:
            return {}
        L, _ = cross_score(model, columns, reasonings, self.pad_id, temperature=self.cfg.temperature,
                           batch_size=cc["micro_batch_size"], with_entropy=False)
        seq = np.asarray(L, dtype=np.float64)
        tok = seq / np.maximum(np.asarray([len(z) for z in reasonings], dtype=np.float64), 1.0)[:, None]
        m = CM.collapse_metrics(tok, seq, own, [tuple(c) for c in columns], self.collapse_ema, key=label,
                                std_eps=cc["std_eps"], ema_decay=cc["ema_decay"])
        return CM.prefix_metrics(m, label)

    # ------------------------------------------------------------------ one iteration
    def rollout(self, base_seed: int) -> list[Trajectory]:
        """This rank's block of the ``num_groups x group_size`` training rollouts (group g
        plays layout seed ``base_seed + g`` and keeps its global index g)."""
        cfg = self.cfg
        groups = D.shard_groups(cfg.num_groups)
        # the multi-turn KV-cache sampler: same tokens as ModelResponder for the same seed, faster
        responder = CachedResponder(self._sampling_model(), self.fmt, self.pad_id, cfg.max_new_tokens, cfg.temperature, self.gen,
                                    top_p=cfg.top_p, batch_size=cfg.generation_batch_size)
        with torch.no_grad():
            trajs = collect_rollouts(cfg.env_id, base_seed + groups[0], len(groups), cfg.group_size, responder, self.fmt,
                                     shared_noise=cfg.shared_noise, env_kwargs=cfg.env_kwargs,
                                     context_window_mode=cfg.context_window_mode,
                                     max_context_window=cfg.max_context_window)
        for t in trajs:
            t.group += groups[0]
            t.episode.meta["group"] = t.group
        return trajs

    def train_step(self) -> dict[str, Any]:
        cfg = self.cfg
        k = self.step
        row: dict[str, Any] = {"step": k}
        t_step = time.monotonic()
        if cfg.eval_every and k % cfg.eval_every == 0 and (k > 0 or cfg.eval_before_train):
            row.update(self.evaluate())
            self._maybe_save_best(row["eval/success"])
        if cfg.probe_every and k % cfg.probe_every == 0:
            t_probe = time.monotonic()
            row.update(self.probe())
            row["time/probe"] = time.monotonic() - t_probe

        # 2. rollouts (each rank its groups), then every rank sees all of them
        t0 = time.monotonic()
        base_seed = cfg.train_seed_start + k * cfg.num_groups
        trajs = _gather(self.rollout(base_seed))
        row["time/rollout"] = time.monotonic() - t0
        generated = sum(t.num_reply_tokens for t in trajs)
        row["perf/gen_tokens_per_s"] = generated / max(row["time/rollout"], 1e-9)
        row.update(rollout_metrics(trajs))
        row["rollout/seed_start"] = base_seed
        row["rollout/episodes"] = len(trajs)  # n of the success rates above (the monitor's standard errors)
        cc = cfg.collapse_detection
        if (cc["first_turn_enabled"] or cc["multi_turn_enabled"]) and CM.should_compute(k, cc["compute_freq"]):
            t_c = time.monotonic()
            row.update(self.collapse_metrics(trajs))
            row["time/collapse"] = time.monotonic() - t_c

        # 3. the StarPO-S filter on the returns (+ optional reasoning bonus)
        turn_rewards = [[r + cfg.reasoning_reward_coef * s for r, s in zip(t.turn_rewards, t.reasoning_scores)] for t in trajs]
        returns = torch.tensor([sum(r) for r in turn_rewards], dtype=torch.float64).view(cfg.num_groups, cfg.group_size)
        success = torch.tensor([t.success for t in trajs]).view(cfg.num_groups, cfg.group_size)
        if cfg.rollout_filter_strategy is None:
            filt = uncertainty_filter(returns, cfg.filter_mode, cfg.keep_ratio, cfg.explore_groups, success,
                                      top_k=cfg.filter_top_k, min_p=cfg.filter_min_p)
        else:  # RAGEN-2's filter (rollout_filter.py); it stops a run that keeps nothing for too long
            filt = self._ragen2_filter(trajs, returns)
            self.empty_filter_steps = RF.empty_streak(self.empty_filter_steps, len(filt.kept))
            row["rollout/empty_filter_steps"] = self.empty_filter_steps
            if 0 < cfg.rollout_filter_empty_stop_steps <= self.empty_filter_steps:
                self.stopped_reason = (f"the rollout filter kept no group for {self.empty_filter_steps} consecutive "
                                       f"steps (rollout_filter_empty_stop_steps={cfg.rollout_filter_empty_stop_steps})")
        row.update({f"rollout/{key}": v for key, v in filt.metrics.items()})
        kept_idx = [i for i, t in enumerate(trajs) if t.group in filt.kept]
        if cfg.save_rollouts and self.dist.is_main:
            self._save_rollouts(k, trajs, set(filt.kept))
        if cfg.log_samples:
            for t in trajs[: cfg.log_samples]:
                self.log(f"  sample seed {t.episode.seed}: {t.episode.turns[0].response[:160]!r} -> return {t.episode_return:+.2f}")

        # 4-6. score and update
        if len(kept_idx) >= 2:
            t1 = time.monotonic()
            kept, kept_rewards, episodes = [trajs[i] for i in kept_idx], [turn_rewards[i] for i in kept_idx], None
            if cfg.context_window_mode != "full":  # one sample per turn (the reference's windowed modes)
                kept, kept_rewards, episodes = turn_rows(kept, kept_rewards)
            analysis = None
            if cfg.gradient_analysis_mode and k % cfg.gradient_analysis_every == 0:
                analysis = ([r.group for r in kept], filt.group_std)
            row.update(self._update(kept, kept_rewards, len(filt.kept), episodes, analysis))
            row["time/update"] = time.monotonic() - t1
        else:
            row["skipped_update"] = True
        self.step += 1

        # 7. diagnostics (the same numbers on every rank, so every rank takes the same action)
        events = self.monitor.observe(row)
        row["events"] = events
        row["time/step"] = time.monotonic() - t_step
        for e in events:
            self.log(f"  WARNING step {k}: {e}")
        self.metrics.log(row)
        self.log(self._line(row))
        if any(self.monitor.is_alarm(e) for e in events) and cfg.echo_action != "warn":
            if cfg.echo_action == "stop":
                self.stopped_reason = f"echo trap at step {k}"
            elif self._rollback_to_best():
                self.log(f"  rolled back to the best checkpoint (eval success {self.best_eval:.3f})")
        if cfg.save_every and self.step % cfg.save_every == 0:
            self.save()
        return row

    def _write_average(self) -> None:
        """``out_dir/model_avg``: the weight average of the last ``average_last`` step checkpoints'
        actors (:func:`~.checkpoint.average_actors`); fewer when the run saved fewer (one log line)."""
        error = None
        if self.dist.is_main:
            chosen = C.step_checkpoints(self.out)[-self.cfg.average_last:]
            try:
                dest = C.average_actors([c / "actor" for c in chosen], self.out / "model_avg",
                                        settings=self.protocol_settings(), dtype=self.dtype)
                names = ", ".join(c.name.removeprefix("step_").lstrip("0") or "0" for c in chosen)
                short = f" (the run saved {len(chosen)} of the {self.cfg.average_last} asked)" \
                    if len(chosen) < self.cfg.average_last else ""
                self.log(f"model_avg: the average of the actors at steps {names}{short} -> {dest}")
            except (C.CheckpointError, ValueError) as exc:
                error = str(exc)
        error = D.broadcast_object(error)
        if error:
            raise C.CheckpointError(error)

    def _ragen2_filter(self, trajs: list[Trajectory], returns: torch.Tensor) -> FilterResult:
        """RAGEN-2's rollout filter on this step's groups (``rollout_filter_*`` fields): the
        per-group score of ``rollout_filter_metric``, then :func:`~.rollout_filter.select_groups`.
        The entropy metrics score every rollout with the current actor first (one no-grad pass).
        Metrics: the StarPO-S filter's keys (return std of all / kept groups, kept and zero-std
        fractions) plus the mean score of all and of the kept groups."""
        cfg = self.cfg
        G, N = cfg.num_groups, cfg.group_size
        metric = cfg.rollout_filter_metric
        inputs: dict[str, torch.Tensor] = {}
        if metric.startswith("reward"):
            inputs["rewards"] = returns
        elif metric == "length":
            inputs["lengths"] = torch.tensor([float(t.num_reply_tokens) for t in trajs]).view(G, N)
        else:
            inputs["entropies"] = self._mean_entropies(trajs).view(G, N)
        scores = RF.group_scores(metric, **inputs)
        kept = RF.select_groups(scores, cfg.rollout_filter_strategy, cfg.rollout_filter_value, cfg.rollout_filter_type,
                                cfg.rollout_filter_include_zero, cfg.rollout_filter_top_p_prob_mode,
                                cfg.rollout_filter_selection_eps)
        std = [float(v) for v in group_std(returns)]
        metrics = {
            "in_group_std": sum(std) / G,
            "in_group_std_kept": sum(std[g] for g in kept) / len(kept) if kept else float("nan"),
            "kept_fraction": len(kept) / G,
            "zero_std_fraction": sum(v <= 1e-6 for v in std) / G,
            "filter_score": float(scores.mean()),
            "filter_score_kept": float(scores[list(kept)].mean()) if kept else float("nan"),
        }
        return FilterResult(kept, tuple(std), metrics)

    def _mean_entropies(self, trajs: list[Trajectory]) -> torch.Tensor:
        """Each rollout's mean token entropy under the current actor at the rollout temperature
        (no grad; each rank its share, then exchanged), for the entropy filter metrics. In the
        windowed context modes over the per-turn samples (the prompts the model was given):
        an episode's mean over all its reply tokens."""
        episodes = None
        if self.cfg.context_window_mode != "full":
            trajs, _, episodes = turn_rows(trajs, [[0.0] * len(t.turn_ends) for t in trajs])
        batch = self._batch(trajs, [[0.0] * len(t.turn_ends) for t in trajs])
        B = batch["ids"].shape[0]
        share = D.shard_indices(B)
        ent = torch.zeros_like(batch["mask"])
        with torch.no_grad():
            for idx, real in self._micro_rows(share, B, batch["att"].sum(-1)):
                m = self._micro(batch, idx)
                h = self.actor_score(m["ids"], m["att"], m["mask"], temperature=self.cfg.temperature,
                                     with_entropy=True)[1]
                if real:
                    ent[torch.as_tensor(idx), : m["ids"].shape[1]] = h.cpu().to(ent.dtype)
        if self.world > 1:
            for idx, e in D.all_gather_objects((share, ent[share])):
                ent[torch.as_tensor(idx, dtype=torch.long)] = e
        if episodes is None:
            return RF.trajectory_mean_entropy(ent, batch["mask"])
        mask = batch["mask"].to(ent.dtype)
        idx = torch.as_tensor(episodes, dtype=torch.long)
        E = int(idx.max()) + 1
        num = torch.zeros(E, dtype=ent.dtype).index_add_(0, idx, (ent * mask).sum(-1))
        den = torch.zeros(E, dtype=ent.dtype).index_add_(0, idx, mask.sum(-1))
        return num / den.clamp(min=1)

    def _save_rollouts(self, step: int, trajs: list[Trajectory], kept: set[int]) -> None:
        """One ``rollouts.jsonl`` line per trajectory (:func:`ragen_envs.trajectories.rollout_record`),
        the step's lines in one append."""
        from ..eval.store import encode_record
        from ..trajectories import ROLLOUTS_FILE, rollout_record

        data = b"".join(encode_record(rollout_record(t, step, t.group in kept)) for t in trajs)
        with open(self.out / ROLLOUTS_FILE, "ab") as f:
            f.write(data)

    def _maybe_save_best(self, success: float) -> None:
        if success > self.best_eval:
            self.best_eval = success
            self.save("best", update_latest=False)

    def _batch(self, trajs: list[Trajectory], turn_rewards: list[list[float]]) -> dict[str, torch.Tensor]:
        ids = pad_right([t.token_ids for t in trajs], self.pad_id)
        att = pad_right([[1] * len(t.token_ids) for t in trajs], 0)
        mask = pad_right([t.loss_mask for t in trajs], 0, dtype=self.score_dtype)
        B, T = ids.shape
        ends = torch.zeros((B, T), dtype=torch.bool)
        rewards = torch.zeros((B, T), dtype=self.score_dtype)
        for b, (t, rs) in enumerate(zip(trajs, turn_rewards)):
            for e, r in zip(t.turn_ends, rs):
                ends[b, e] = True
                if self.cfg.reward_placement == "turn":
                    rewards[b, e] = r
            if self.cfg.reward_placement == "trajectory":
                rewards[b, t.turn_ends[-1]] = float(sum(rs))
        return {"ids": ids, "att": att, "mask": mask, "turn_ends": ends, "rewards": rewards}

    def _micro(self, batch: dict[str, torch.Tensor], idx: list[int]) -> dict[str, torch.Tensor]:
        sel = torch.as_tensor(idx, dtype=torch.long)
        L = int(batch["att"][sel].sum(-1).max())
        return {k: v[sel][:, :L] for k, v in batch.items()}

    def _ref_logprobs(self, m: dict[str, torch.Tensor]) -> torch.Tensor:
        """log π_init on a micro-batch: the reference copy, or the actor with its LoRA
        adapters disabled."""
        if self.ref is not None:
            return self.ref_score(m["ids"], m["att"], m["mask"], temperature=self.cfg.temperature)[0]
        return self.actor_score(m["ids"], m["att"], m["mask"], kind="ref_logprobs", temperature=self.cfg.temperature)[0]

    def _micro_rows(self, rows: list[int], total: int, lengths: torch.Tensor | None = None) -> list[tuple[list[int], bool]]:
        """This rank's micro-batches of ``rows`` (its strided share of ``total`` rows), as
        (row indices, real): under ddp / fsdp every rank runs as many micro-batches as the
        largest share needs, padding with zero-weighted copies of the batch's row 0 (FSDP's
        forwards and DDP's synchronising backward are collectives). With ``lengths`` (each
        row's token count) and :attr:`bucket_micro_batches`, the rows are taken longest first
        (ties in the given order), so each micro-batch pads to a length close to its own rows'."""
        mb = self.cfg.micro_batch_size
        if lengths is not None and self.bucket_micro_batches and len(rows) > mb:
            rows = sorted(rows, key=lambda r: -int(lengths[r]))
        chunks = [(rows[i : i + mb], True) for i in range(0, len(rows), mb)]
        if self.collective:
            chunks += [([0], False)] * (S.micro_batches_per_rank(total, self.world, mb) - len(chunks))
        return chunks

    def _score(self, batch: dict[str, torch.Tensor], need_old: bool = True) -> None:
        """Old log-probs, reference log-probs and values (no grad) of the kept batch: each
        rank scores its strided share, then the shares are exchanged. ``need_old`` False
        skips the old log-probs (left 0: the update fills them in, see ``_update``); the
        reference's only run when ``uses_ref``; the values only with a critic."""
        B = batch["ids"].shape[0]
        share = D.shard_indices(B)
        old_lp = torch.zeros_like(batch["mask"])
        ref_lp = torch.zeros_like(batch["mask"])
        values = torch.zeros_like(batch["mask"])
        with torch.no_grad():
            for idx, real in self._micro_rows(share, B, batch["att"].sum(-1)):
                m = self._micro(batch, idx)
                L = m["ids"].shape[1]
                sel = torch.as_tensor(idx)
                # the sampling distribution: softmax(logits / T) at the rollout temperature (as verl)
                lp = (self.actor_score(m["ids"], m["att"], m["mask"], temperature=self.cfg.temperature)[0]
                      .cpu().to(self.score_dtype) if need_old else None)
                rp = self._ref_logprobs(m).cpu().to(self.score_dtype) if self.uses_ref else None
                v = (self.critic_score(m["ids"], m["att"], m["mask"], kind="values").cpu().to(self.score_dtype)
                     if self.critic is not None else None)
                if not real:  # a padding micro-batch: computed for the collectives only
                    continue
                if lp is not None:
                    old_lp[sel, :L] = lp
                if rp is not None:
                    ref_lp[sel, :L] = rp
                if v is not None:
                    values[sel, :L] = v
        if self.world > 1:
            for idx, o, r, v in D.all_gather_objects((share, old_lp[share], ref_lp[share], values[share])):
                sel = torch.as_tensor(idx, dtype=torch.long)
                old_lp[sel], ref_lp[sel], values[sel] = o, r, v
        batch["old_lp"], batch["ref_lp"], batch["values"] = old_lp, ref_lp, values

    def _train_mode(self, on: bool) -> None:
        """Gradient checkpointing only acts in train mode (dropout is 0, checked when it is
        enabled, so train-mode log-probs equal eval-mode ones); sampling and scoring run in
        eval mode."""
        if self.cfg.gradient_checkpointing:
            for model in (self.actor, self.critic):
                if model is not None:
                    model.train(on)

    def _update(self, trajs: list[Trajectory], turn_rewards: list[list[float]], kept_groups: int,
                episodes: list[int] | None = None,
                analysis: tuple[list[int], Sequence[float]] | None = None) -> dict[str, float]:
        """One update on ``trajs`` (whole kept groups, in group order), or on per-turn rows
        with ``episodes`` (each row's episode index, :func:`turn_rows`): score, advantages,
        (``analysis`` = (each row's group, every group's return std): the gradient report
        first), then the minibatch epochs."""
        cfg = self.cfg
        batch = self._batch(trajs, turn_rewards)
        B = batch["ids"].shape[0]
        update_actor = self.step >= cfg.critic_warmup
        # one optimiser step on the whole batch (Online-1, one mini-batch): the policy that
        # scores the update is the one that sampled, so the old log-probs are the update's own,
        # detached (ratio exactly 1); the separate no-grad pass is skipped. (One process: under
        # torchrun each rank's forward covers its share only.)
        fresh = (self.fresh_old_logprobs and update_actor and cfg.updates_per_rollout == 1
                 and B <= cfg.mini_batch_size and self.world == 1)

        # 4. old log-probs, reference log-probs, values (no grad), on the whole kept batch
        self._score(batch, need_old=not fresh)
        old_lp, ref_lp, values = batch["old_lp"], batch["ref_lp"], batch["values"]

        # 5. advantages (every rank holds the whole kept batch: whitening uses its global moments)
        adv, rets = compute_advantages(cfg.advantage, token_rewards=batch["rewards"], values=values, mask=batch["mask"],
                                       turn_ends=batch["turn_ends"], group_size=cfg.group_size, gamma=cfg.gamma,
                                       lam=cfg.lam, gamma_high=cfg.gamma_high, eps=cfg.grpo_eps,
                                       norm_by_std=cfg.norm_adv_by_std_in_grpo,
                                       episodes=None if episodes is None else torch.as_tensor(episodes, dtype=torch.long))
        if cfg.grpo_advantage_length_weight:
            adv = length_weighted_advantages(adv, batch["mask"])
        # filter_loss_scaling (RAGEN-2): the advantages only, the critic's targets stay
        adv = adv * RF.filter_loss_scale(kept_groups, cfg.num_groups, cfg.filter_loss_scaling)
        batch["adv"], batch["returns"] = adv, rets
        mask = batch["mask"]
        out: dict[str, float] = {
            "actor/advantage_mean": float(masked_mean(adv, mask)),
            "update/trajectories": B if episodes is None else len(set(episodes)),
            "update/tokens": int(mask.sum()),
        }
        if episodes is not None:
            out["update/samples"] = B  # the per-turn samples of the windowed context modes
        if self.critic is not None:
            out["critic/explained_variance"] = explained_variance(values, rets, mask)
            out["critic/value_mean"] = float(masked_mean(values, mask))

        if analysis is not None:  # RAGEN-2's gradient report: before the update, no optimiser step
            t_ga = time.monotonic()
            out.update(self._gradient_report(batch, *analysis, fresh=fresh))
            out["time/gradient_analysis"] = time.monotonic() - t_ga

        # 6. minibatch epochs (Online-k: k passes over this rollout batch)
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1

        loss_scale = S.loss_scale(cfg.sharding, self.world)
        lengths = batch["att"].sum(-1)
        share_prefix = not cfg.gradient_checkpointing  # checkpointed layers drop the shared prefix's cache
        dev = torch.device(self.device)
        t0 = time.monotonic()
        self._train_mode(True)
        try:
            for epoch in range(cfg.updates_per_rollout):
                order = torch.randperm(B, generator=self.gen).tolist() if B > cfg.mini_batch_size else list(range(B))
                order = D.broadcast_object(order)  # rank 0's permutation (= the one-process run's)
                for start in range(0, B, cfg.mini_batch_size):
                    mini = order[start : start + cfg.mini_batch_size]
                    n_tok = float(mask[mini].sum())  # the global token count of the mini-batch
                    n_seq = float((mask[mini].sum(-1) > 0).sum())  # and its trajectories
                    mine = [mini[j] for j in D.shard_indices(len(mini))]
                    stats = {"pg_loss": 0.0, "entropy": 0.0, "kl_loss": 0.0, "pg_clipfrac_high": 0.0, "pg_clipfrac_low": 0.0,
                             "pg_clipfrac_dual": 0.0, "approx_kl_old": 0.0, "value_loss": 0.0, "vf_clipfrac": 0.0}
                    micros = self._micro_rows(mine, len(mini), lengths)
                    for i, (rows, real) in enumerate(micros):
                        m = self._micro(batch, rows)
                        # per-token weights of the mini-batch aggregate (loss_agg): Σ w·x is this
                        # micro-batch's part of it, so micro-batches and ranks add up
                        mm = loss_weights(m["mask"], cfg.loss_agg, n_tok, n_seq).to(dev)
                        # seq-mean-token-sum weights sum to the mean reply length, not 1: the logged
                        # fractions, entropy and KL are brought back to per-token values
                        per_token = n_seq / max(n_tok, 1.0) if cfg.loss_agg == "seq-mean-token-sum" else 1.0
                        # the wrappers average gradients over ranks: loss_scale makes that the sum;
                        # a padding micro-batch runs the collectives with zero weight
                        weight = loss_scale if real else 0.0
                        last = i == len(micros) - 1  # DDP / FSDP communicate gradients after the last
                        if update_actor:
                            with S.gradient_sync(self.actor_train, last):
                                # (entropy_coef 0: the entropy is a metric, computed off the graph)
                                logp, ent = self.actor_train(m["ids"], m["att"], m["mask"], with_entropy=True,
                                                             share_prefix=share_prefix, temperature=cfg.temperature,
                                                             entropy_grad=bool(cfg.entropy_coef))
                                if fresh:
                                    old = logp.detach()
                                    sel = torch.as_tensor(rows, dtype=torch.long)
                                    old_lp[sel, : old.shape[1]] = old.cpu().to(old_lp.dtype)
                                else:
                                    old = m["old_lp"].to(dev)
                                pg, pm = policy_loss(logp, old, m["adv"].to(dev), mm, cfg.clip_low,
                                                     cfg.clip_high, cfg.dual_clip, cfg.log_ratio_clamp, num_tokens=1.0)
                                ent_term = masked_mean(ent, mm, 1.0)
                                kl_term = (masked_mean(kl_estimate(logp, m["ref_lp"].to(dev), cfg.kl_kind), mm, 1.0)
                                           if self.uses_ref else torch.zeros(()))
                                loss = pg - cfg.entropy_coef * ent_term
                                if cfg.kl_coef:
                                    loss = loss + cfg.kl_coef * kl_term
                                (loss * weight).backward()
                            if real:
                                stats["pg_loss"] += float(pg.detach())
                                stats["entropy"] += float(ent_term.detach()) * per_token
                                stats["kl_loss"] += float(kl_term.detach()) * per_token
                                for key, v in pm.items():
                                    stats[key] += v * per_token
                        if self.critic is not None:
                            with S.gradient_sync(self.critic_train, last):
                                v = self.critic_train(m["ids"], m["att"], m["mask"], kind="values", share_prefix=share_prefix)
                                vl, vm = value_loss(v, m["values"].to(dev), m["returns"].to(dev), mm,
                                                    cfg.value_clip, num_tokens=1.0)
                                (vl * weight).backward()
                            if real:
                                stats["value_loss"] += float(vl.detach())
                                stats["vf_clipfrac"] += vm["vf_clipfrac"] * per_token
                    # each rank's loss is its part of the global token-mean: gradients and stats add up
                    stats = D.global_sum_dict(stats)
                    if update_actor:
                        if not self.collective:
                            D.all_reduce_gradients(self.actor)
                        gn = S.full_grad_norm(torch.nn.utils.clip_grad_norm_(scale.trainable_parameters(self.actor),
                                                                             cfg.grad_clip))
                        self.actor_opt.step()
                        self.actor_opt.zero_grad(set_to_none=True)
                        if self.sampler_copy is not None:
                            self.sampler_copy.mark_stale()
                        add("actor/grad_norm", gn)
                    if self.critic is not None:
                        if not self.collective:
                            D.all_reduce_gradients(self.critic)
                        gn = S.full_grad_norm(torch.nn.utils.clip_grad_norm_(scale.trainable_parameters(self.critic),
                                                                             cfg.grad_clip))
                        self.critic_opt.step()
                        self.critic_opt.zero_grad(set_to_none=True)
                        add("critic/grad_norm", gn)
                    prefixes = {"value_loss": "critic/", "vf_clipfrac": "critic/"}
                    for key, v in stats.items():
                        if key in prefixes and self.critic is None:
                            continue
                        if key not in prefixes and not update_actor:
                            continue
                        add(prefixes.get(key, "actor/") + key, v)
        finally:
            self._train_mode(False)
        out.update({key: sums[key] / counts[key] for key in sums})
        if not self.uses_ref:
            out.pop("actor/kl_loss", None)
        else:  # (fresh: old_lp was filled in by the update's own forwards)
            out["actor/kl_ref_k1"] = float(masked_mean(kl_estimate(old_lp, ref_lp, "k1"), mask))
            out["actor/kl_ref_k3"] = float(masked_mean(kl_estimate(old_lp, ref_lp, "k3"), mask))
        out["perf/update_tokens_per_s"] = float(mask.sum()) * cfg.updates_per_rollout / max(time.monotonic() - t0, 1e-9)
        out["update/kept_groups"] = kept_groups
        return out

    def _gradient_report(self, batch: dict[str, torch.Tensor], row_groups: list[int], group_std: Sequence[float],
                         fresh: bool) -> dict[str, Any]:
        """``grad_norm/<bucket>/*`` (:func:`~.collapse.bucket_report`) for ``all`` and each
        reward-variance bucket of the kept groups (:func:`~.collapse.variance_buckets`, groups
        in increasing id order as the reference)."""
        cfg = self.cfg
        kept = sorted(set(row_groups))
        buckets = CM.variance_buckets([group_std[g] for g in kept], cfg.gradient_analysis_num_buckets,
                                      cfg.gradient_analysis_bucket_mode)
        out: dict[str, Any] = {}
        for name, members in buckets.items():
            chosen = {kept[p] for p in members}
            rows = [i for i, g in enumerate(row_groups) if g in chosen]
            norms, losses = self._component_gradients(batch, rows, fresh)
            out.update(CM.bucket_report(name, len(rows), len(row_groups), [group_std[row_groups[i]] for i in rows],
                                        [group_std[kept[p]] for p in members], float(batch["mask"][rows].sum()),
                                        norms, losses))
        return out

    def _component_gradients(self, batch: dict[str, torch.Tensor], rows: list[int],
                             fresh: bool) -> tuple[dict[str, float], dict[str, float]]:
        """The gradient norm of each loss component on ``rows`` without an optimiser step, as
        the reference's grad_component_analysis: the rows cut into mini-batches in order; per
        mini-batch and component (task = the clipped policy loss; entropy = −entropy_coef x
        entropy, when entropy_coef != 0; kl = kl_coef x KL, when kl_coef != 0) a backward of
        that term alone and ‖∇‖₂ over the trainable weights (before clipping); each norm and
        loss averaged over the mini-batches. Losses: policy, entropy, kl, total.

        Several processes: every rank holds the whole kept batch, so the mini-batches are the
        one-process ones; as in ``_update`` each rank back-propagates its strided share of a
        mini-batch with the weights of the mini-batch's *global* token / trajectory counts,
        the gradients are summed across ranks (the trainer's all-reduce, or DDP / FSDP with
        ``loss_scale``) before the norm is taken, and the loss terms are summed across ranks:
        the numbers are the one-process ones to float rounding. A rank with no row of a
        mini-batch still takes part (no micro-batch under sharding=none, zero-weighted padding
        ones under ddp / fsdp), so every rank runs the same collectives."""
        cfg = self.cfg
        comps = ["task"] + (["entropy"] if cfg.entropy_coef else []) + (["kl"] if cfg.kl_coef else [])
        mask, lengths = batch["mask"], batch["att"].sum(-1)
        dev = torch.device(self.device)
        loss_scale = S.loss_scale(cfg.sharding, self.world)
        norms: dict[str, list[float]] = {c: [] for c in comps}
        losses: dict[str, list[float]] = {}
        self._train_mode(True)
        try:
            for start in range(0, len(rows), cfg.mini_batch_size):
                mini = rows[start : start + cfg.mini_batch_size]
                # the global counts of the mini-batch (every rank holds the whole batch)
                n_tok, n_seq = float(mask[mini].sum()), float((mask[mini].sum(-1) > 0).sum())
                mine = [mini[j] for j in D.shard_indices(len(mini))]  # (one process: all of mini)
                micros = self._micro_rows(mine, len(mini), lengths)
                for comp in comps:
                    self.actor_opt.zero_grad(set_to_none=True)
                    terms = {"policy": 0.0, "entropy": 0.0, "kl": 0.0}
                    for i, (idx, real) in enumerate(micros):
                        m = self._micro(batch, idx)
                        # (loss_scale: DDP / FSDP average over ranks, the global gradient is the sum)
                        weight = loss_scale if real else 0.0
                        with S.gradient_sync(self.actor_train, i == len(micros) - 1):
                            mm = loss_weights(m["mask"], cfg.loss_agg, n_tok, n_seq).to(dev)
                            logp, ent = self.actor_train(m["ids"], m["att"], m["mask"], with_entropy=True,
                                                         share_prefix=not cfg.gradient_checkpointing,
                                                         temperature=cfg.temperature, entropy_grad=comp == "entropy")
                            old = logp.detach() if fresh else m["old_lp"].to(dev)
                            pg, _ = policy_loss(logp, old, m["adv"].to(dev), mm, cfg.clip_low, cfg.clip_high,
                                                cfg.dual_clip, cfg.log_ratio_clamp, num_tokens=1.0)
                            ent_term = -cfg.entropy_coef * masked_mean(ent, mm, 1.0)
                            kl_term = (cfg.kl_coef * masked_mean(kl_estimate(logp, m["ref_lp"].to(dev), cfg.kl_kind),
                                                                 mm, 1.0)
                                       if cfg.kl_coef else torch.zeros(()))
                            term = {"task": pg, "entropy": ent_term, "kl": kl_term}[comp]
                            (term if weight == 1.0 else term * weight).backward()
                        if real:
                            terms["policy"] += float(pg.detach())
                            terms["entropy"] += float(ent_term.detach())
                            terms["kl"] += float(kl_term.detach())
                    if self.world > 1 and not self.collective:
                        D.all_reduce_gradients(self.actor)  # (a rank without rows adds zeros)
                    # the parameters taken after the backward, as in _update: under FSDP2 the root's
                    # parameters are its unsharded copies between a forward and the backward
                    params = scale.trainable_parameters(self.actor)
                    norms[comp].append(S.full_grad_norm(torch.nn.utils.clip_grad_norm_(params, math.inf)))
                    if comp == "task":
                        terms = D.global_sum_dict(terms)  # each rank's part of the mini-batch aggregate
                        shown = {"policy": terms["policy"]}
                        if cfg.entropy_coef:
                            shown["entropy"] = terms["entropy"]
                        if cfg.kl_coef:
                            shown["kl"] = terms["kl"]
                        shown["total"] = sum(shown.values())
                        for key, v in shown.items():
                            losses.setdefault(key, []).append(v)
        finally:
            self.actor_opt.zero_grad(set_to_none=True)
            self._train_mode(False)
        return ({c: sum(v) / len(v) for c, v in norms.items() if v},
                {c: sum(v) / len(v) for c, v in losses.items()})

    # ------------------------------------------------------------------ the loop
    def _line(self, row: dict[str, Any]) -> str:
        def f(key, fmt="{:.3f}"):
            v = row.get(key)
            return fmt.format(v) if isinstance(v, (int, float)) else "-"

        text = (f"step {row['step']:4d} | return {f('rollout/return_mean', '{:+.3f}')} (max {f('rollout/return_max', '{:+.2f}')}) "
                f"| success {f('rollout/success')} | std {f('rollout/in_group_std')} -> {f('rollout/in_group_std_kept')} "
                f"| ent {f('actor/entropy')} | len {f('rollout/response_length', '{:.1f}')} | kl {f('actor/kl_ref_k3', '{:.4f}')} "
                f"| gn {f('actor/grad_norm', '{:.2f}')} | {f('time/step', '{:.1f}')}s")
        if "eval/success" in row:
            text += f" | EVAL success {row['eval/success']:.3f} return {row['eval/return_mean']:+.3f}"
        return text

    def train(self) -> dict[str, Any]:
        """Run the remaining steps, then the final evaluation; returns the last eval metrics."""
        cfg = self.cfg
        filter_param = {"top_k": cfg.filter_top_k, "min_p": cfg.filter_min_p, "nonzero": "", "none": ""}.get(
            cfg.filter_mode, cfg.keep_ratio)
        described = f"{cfg.filter_mode} {filter_param}".rstrip()
        if cfg.rollout_filter_strategy is not None:
            mode = f" {cfg.rollout_filter_top_p_prob_mode}" if cfg.rollout_filter_strategy == "top_p" else ""
            described = (f"RAGEN-2 {cfg.rollout_filter_strategy}{mode} {cfg.rollout_filter_value:g} "
                         f"{cfg.rollout_filter_type} {cfg.rollout_filter_metric}")
        self.log(f"StarPO ({cfg.advantage}, filter {described}) on {cfg.env_id}: "
                 f"{count_parameters(self.actor) / 1e6:.2f} M parameters"
                 + (f" ({sum(p.numel() for p in scale.trainable_parameters(self.actor)) / 1e6:.3f} M LoRA)" if cfg.lora_rank else "")
                 + f", steps {self.step}..{cfg.steps}")
        while self.step < cfg.steps and self.stopped_reason is None:
            self.train_step()
        final: dict[str, Any] = {"step": self.step, "final": True}
        if cfg.eval_every:
            final.update(self.evaluate())
            self._maybe_save_best(final["eval/success"])
            self.metrics.log(final)
            self.log(f"final evaluation ({cfg.eval_episodes} EVAL_SEEDS, T={cfg.eval_temperature}): "
                     f"success {final['eval/success']:.3f}, return {final['eval/return_mean']:+.3f}")
        if self.stopped_reason:
            self.log(f"stopped early: {self.stopped_reason}")
        if cfg.save_every:
            self.save()
        if self.sampler_copy is not None and cfg.fsdp_mixed_precision:  # the saved model keeps the trained dtype
            self.sampler_copy.model.to(self.dtype)
            self.sampler_copy.mark_stale()
        final_model = self._sampling_model()  # full weights (under FSDP: the refreshed copy)
        if cfg.lora_rank:  # the final model is a plain one (adapters merged): loadable as hf:DIR/model
            final_model = final_model.merge_and_unload()
            if self.sampler_copy is None:
                self.actor = final_model
        if cfg.gradient_checkpointing:
            final_model.config.use_cache = True  # for users' generate(); training had turned it off
        model_dir = self.out / "model"
        error = None
        if self.dist.is_main:
            from ..lm.settings import save_settings

            try:
                C.save_model_dir(model_dir, final_model, self.tokenizer,
                                 extra=lambda tmp: save_settings(tmp, self.protocol_settings()))
            except C.CheckpointError as exc:
                error = str(exc)
        error = D.broadcast_object(error)
        if error:
            raise C.CheckpointError(error)
        if self.dist.is_main and cfg.eval_every and self.last_eval:
            self._write_eval_run(model_dir)
        if cfg.average_last:
            self._write_average()
        self.metrics.close()
        D.barrier()
        if cfg.plots and self.dist.is_main:
            try:
                png = plot_metrics(self.metrics.path, self.out / "curves.png", title=f"{cfg.env_id} {cfg.advantage}")
                self.log(f"curves: {png}")
            except ImportError as exc:
                self.log(f"(no plots: {exc})")
        return final
