"""What the labs share, so that no lab imports another (each ``labs/*.py`` is one command; see
labs/README.md). Each script puts this folder and the checkout on ``sys.path`` and imports
what it needs from here (the name differs from benchmarks/_bench_common.py's, so that a test
process can load both):

- the Echo Trap lab's runner and analysis (``echo_trap.py``; used by ``multiturn_trap.py``
  and ``monitor_corpus.py``): :data:`VARIANTS`, :data:`BANDIT_SETTINGS`, :func:`build_prior`,
  :func:`run_one` (one training run in this process), :func:`run_lab`, :func:`collapse_step`,
  :func:`compare`, :func:`plot_lab`;
- the multi-turn settings (``multiturn_trap.py``; ``monitor_corpus.py --task sokoban``):
  :data:`MT_SETTINGS`, :func:`mt_settings_for`, :func:`build_mt_prior`;
- the monitor corpora's runs (``monitor_corpus.py``; ``monitor_noise.py``):
  :func:`corpus_specs`, :func:`mt_specs`;
- the monitor's analysis (``monitor_corpus.py``, ``monitor_noise.py``, ``monitor_replay.py``;
  tested in tests/test_monitor.py on recorded traces): labels, thresholds chosen on the
  development runs, the report on the held-out runs, the figure (:func:`analyze`,
  :func:`score_runs`, :func:`choose_threshold`, :func:`probe_cost`).

The demo's ``--sft-set`` / ``--model-set`` / ``--rl-set`` overrides, shared with a benchmark,
are :func:`ragen_envs.starpo.demo.override_settings`.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from ragen_envs.starpo.diagnostics import MONITOR_SIGNALS, collapse_label, read_metrics, replay_monitor


# ============================================================================= the Echo Trap lab (echo_trap.py)
# name -> (preset, overrides)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "starpo-ppo": ("starpo", {}),
    "starpo-grpo": ("starpo", {"advantage": "grpo"}),
    "starpo-s-ppo": ("starpo-s", {}),
    "starpo-s-grpo": ("starpo-s", {"advantage": "grpo"}),
    # StarPO-S with RAGEN-2's filter (config.py PRESETS["ragen2"]: linear top_p 0.9 over the groups'
    # return variance, zero-variance groups dropped) in place of the top-25 % by std
    "starpo-s-ppo-ragen2": ("ragen2", {}),
    "starpo-s-grpo-ragen2": ("ragen2", {"advantage": "grpo"}),
}
KEEP_SWEEP = (0.25, 0.5, 0.75, 1.0)
RAGEN2_SWEEP = (0.25, 0.5, 0.9, 1.0)  # rollout_filter_value p of RAGEN-2's linear top_p (its keep "knob")

BANDIT_SETTINGS: dict[str, Any] = {
    "env_id": "ragen/Bandit-v0",
    "env_kwargs": {},
    "tiny_model": {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 128},
    "tokenizer": {"vocab_size": 512},
    "prior": {"episodes": 2000, "steps": 150, "batch_size": 32, "lr": 2e-3, "warmup": 20, "expert_prob": 0.0,
              "seed_start": 10_000},
    "rl": {"steps": 50, "num_groups": 8, "group_size": 8, "max_new_tokens": 32, "actor_lr": 2e-4, "critic_lr": 1e-3,
           "mini_batch_size": 32, "micro_batch_size": 32, "train_seed_start": 50_000, "eval_every": 10,
           "eval_episodes": 256, "probe_every": 5, "probe_states": 8, "probe_samples": 8, "save_every": 0,
           "log_samples": 0, "plots": False},
    "collapse": {"key": "rollout/success", "window": 5, "fraction": 0.5},
}
BANDIT_SMOKE: dict[str, Any] = {
    **BANDIT_SETTINGS,
    "tiny_model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "tokenizer": {"vocab_size": 400},
    "prior": {**BANDIT_SETTINGS["prior"], "episodes": 64, "steps": 4, "batch_size": 16},
    "rl": {**BANDIT_SETTINGS["rl"], "steps": 3, "num_groups": 2, "group_size": 4, "max_new_tokens": 24, "mini_batch_size": 8,
           "micro_batch_size": 8, "eval_every": 2, "eval_episodes": 8, "probe_every": 1, "probe_states": 2,
           "probe_samples": 2},
}

_OPENERS = ("Let me think.", "I look at the state.", "Two choices here.", "OK.", "I should be careful.", "Hmm.")
_MIDDLES = ("{a} looks good.", "{a} seems best.", "Maybe {a}.", "{a} could pay off.", "I trust {a}.",
            "{a} feels right.")
_CLOSERS = ("I go {acts}.", "So {acts}.", "Answer {acts}.", "")


def prior_reply_fn(expert_prob: float, seed: int):
    """``reply(env, ids) -> text`` for the prior's SFT data: the expert's next action with
    probability ``expert_prob`` (else a uniformly random action name), and a think text of
    three randomly chosen sentence templates (6 x 6 x 4 = 144 variants per action)."""
    import numpy as np

    from ragen_envs.agents import make_agent
    from ragen_envs.protocol import format_answer, parse_answer

    if not 0.0 <= expert_prob <= 1.0:
        raise ValueError(f"expert_prob must be in [0, 1], got {expert_prob}")
    rng = np.random.default_rng(seed)
    agents: dict[int, tuple[Any, Any]] = {}

    def reply(env, _ids) -> str:
        base = env.unwrapped
        names = list(base.action_names())
        if rng.random() < expert_prob:
            held = agents.get(id(env))
            if held is None or held[0] is not env:
                held = agents[id(env)] = (env, make_agent("expert", env=env))
            parsed = parse_answer(held[1].act([]), names, base.think, base.budget.max_actions_per_turn)
            actions = list(parsed.actions[:1]) or [names[0]]
        else:
            actions = [names[int(rng.integers(len(names)))]]
        acts = ", ".join(actions)
        parts = [_OPENERS[int(rng.integers(len(_OPENERS)))], _MIDDLES[int(rng.integers(len(_MIDDLES)))].format(a=actions[0]),
                 _CLOSERS[int(rng.integers(len(_CLOSERS)))].format(acts=acts)]
        return format_answer(actions, " ".join(p for p in parts if p), think=base.think)

    return reply


def build_prior(out: Path, settings: dict, log=print, reply_fn=None, what: str = "scripted episodes") -> Path:
    """The tiny model, SFT on the prior's scripted replies (``reply_fn``, by default
    :func:`prior_reply_fn` with the settings' expert share; ``what`` names them in the log);
    returns its model directory (reused when it exists)."""
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.tiny import build_tiny_policy
    from ragen_envs.starpo.rollout import ScriptedResponder, collect_rollouts
    from ragen_envs.starpo.sft import train_sft

    model_dir = out / "prior" / "model"
    if (model_dir / "config.json").exists():
        return model_dir
    env_id, env_kwargs, p = settings["env_id"], settings["env_kwargs"], settings["prior"]
    init = build_tiny_policy(out / "prior" / "model_init", env_id, env_kwargs, seed=0, **settings["tokenizer"],
                             **settings["tiny_model"])
    tok = load_tokenizer(init)
    policy = load_policy(init)
    think = bool(env_kwargs.get("think", True))
    fmt = ChatFormat(tok, "<think>" if think else "<answer>")
    responder = ScriptedResponder(fmt, reply_fn if reply_fn is not None else prior_reply_fn(p["expert_prob"], seed=0))
    data = collect_rollouts(env_id, p["seed_start"], p["episodes"], 1, responder, fmt, env_kwargs=env_kwargs)
    log(f"prior: {len(data)} {what}, success {sum(t.success for t in data) / len(data):.3f}; "
        f"SFT {p['steps']} steps of {p['batch_size']}")
    train_sft(policy, data, pad_id=tok.pad_token_id, steps=p["steps"], batch_size=p["batch_size"], lr=p["lr"],
              warmup=p["warmup"], seed=0)
    policy.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return model_dir


def run_specs(variants: Sequence[str], seeds: Sequence[int], keep_sweep: bool,
              sweep_advantage: str = "gae", ragen2_sweep: Sequence[float] = ()) -> list[dict[str, Any]]:
    """The runs to do: one dict per (variant, seed) with its name, preset and overrides; the
    keep-ratio sweep is StarPO-S with ``sweep_advantage`` (gae = PPO, or grpo); ``ragen2_sweep``
    the same with RAGEN-2's linear top_p filter at each p (``ragen2-p<100 p>``)."""
    specs = []
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
        preset, over = VARIANTS[v]
        specs += [{"variant": v, "seed": s, "preset": preset, "overrides": dict(over)} for s in seeds]
    if keep_sweep:
        for keep in KEEP_SWEEP:
            name = f"keep-{round(keep * 100)}"
            specs += [{"variant": name, "seed": s, "preset": "starpo-s",
                       "overrides": {"keep_ratio": keep, "advantage": sweep_advantage}} for s in seeds]
    for p in ragen2_sweep:
        specs += [{"variant": f"ragen2-p{round(p * 100)}", "seed": s, "preset": "ragen2",
                   "overrides": {"rollout_filter_value": p, "advantage": sweep_advantage}} for s in seeds]
    return specs


def run_one(args: tuple[dict, str, dict, str]) -> str:
    """Train one (variant, seed) in this process; writes ``result.json`` next to the metrics."""
    spec, prior, settings, out_dir = args
    import torch

    torch.set_num_threads(1)
    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.trainer import StarPOTrainer

    out = Path(out_dir)
    rl = {**settings["rl"], **spec["overrides"]}
    cfg = make_config(spec["preset"], env_id=settings["env_id"], env_kwargs=settings["env_kwargs"], model=prior,
                      out_dir=str(out), seed=spec["seed"], **rl)
    t0 = time.monotonic()
    c0 = time.process_time()
    trainer = StarPOTrainer(cfg, log=lambda _m: None)
    final = trainer.train()
    result = {"spec": spec, "final": {k: v for k, v in final.items() if isinstance(v, (int, float))},
              "final_success": [bool(t.success) for t in trainer.last_eval or []],
              "wall_s": time.monotonic() - t0, "cpu_s": time.process_time() - c0}
    (out / "result.json").write_text(json.dumps(result))
    return str(out)


def run_todo(todo: Sequence[tuple[dict, str, dict, str]], jobs: int, log=print) -> None:
    """Train every :func:`run_one` item of ``todo``: ``jobs`` at once in spawned processes
    (when more than one item), else one after another here; logs each finished run folder
    with the seconds since the start."""
    t0 = time.monotonic()
    if jobs > 1 and len(todo) > 1:
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            for done in pool.map(run_one, todo):
                log(f"  done {done} ({time.monotonic() - t0:.0f} s)")
    else:
        for item in todo:
            log(f"  done {run_one(item)} ({time.monotonic() - t0:.0f} s)")


def parse_kv(items: Sequence[str], what: str, parser) -> dict[str, Any]:
    """``KEY=VALUE`` command-line items as a dict, each value read as JSON when it parses
    (``7``, ``true``, ``"min_p"``) and kept as text otherwise; a missing ``=`` is
    ``parser.error`` (one line)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"{what} needs KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def config_key(spec: dict, settings: dict, prior: str) -> str:
    """The effective training config of a run (its output folder aside), as a string."""
    from ragen_envs.starpo.config import make_config

    try:
        cfg = make_config(spec["preset"], env_id=settings["env_id"], env_kwargs=settings["env_kwargs"], model=prior,
                          seed=spec["seed"], **{**settings["rl"], **spec["overrides"]}).to_dict()
    except TypeError as exc:  # an unknown keyword of StarPOConfig
        raise ValueError(f"bad setting: {exc}") from None
    cfg.pop("out_dir")
    return json.dumps(cfg, sort_keys=True)


# ----------------------------------------------------------------------------- analysis
def smooth(xs: Sequence[float], window: int) -> list[float]:
    """Trailing moving average: s_t = mean(x_{max(0, t-w+1)} .. x_t)."""
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= window:
            acc -= xs[i - window]
        out.append(acc / min(i + 1, window))
    return out


def collapse_step(steps: Sequence[int], values: Sequence[float], window: int = 5, fraction: float = 0.5) -> int | None:
    """The step where the curve collapsed for good, or None.

    s = trailing moving average of ``values`` over ``window`` steps, P = max s (first
    argmax t*). The collapse step is the first t > t* with s_t < fraction · P after which
    s stays below fraction · P to the end of the run; None when P <= 0 or s ends at or
    above fraction · P.
    """
    if len(steps) != len(values):
        raise ValueError("steps and values must have the same length")
    if not values:
        return None
    s = smooth(list(values), window)
    peak = max(s)
    if peak <= 0:
        return None
    t_star = s.index(peak)
    threshold = fraction * peak
    found = None
    for i in range(t_star + 1, len(s)):
        if s[i] < threshold:
            if found is None:
                found = i
        else:
            found = None
    return steps[found] if found is not None else None


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def first_events(rows: Sequence[dict]) -> dict[str, int | None]:
    """The first step of each monitor event kind (None when it never fired)."""
    out: dict[str, int | None] = {"reward_std_collapse": None, "grad_norm_spike": None, "echo_trap": None}
    for r in rows:
        for e in r.get("events", []):
            kind = e.split(":", 1)[0]
            if out.get(kind) is None:
                out[kind] = r["step"]
    return out


SENSITIVE_MONITOR = {"std_ratio": 0.5, "spike_factor": 2.0, "diversity_ratio": 0.8}


def replay_paper_monitor(rows: Sequence[dict], std_ratio: float, spike_factor: float, diversity_ratio: float) -> dict[str, int | None]:
    """The first step of each warning kind an :class:`EchoTrapMonitor` with these thresholds
    would have raised on a run's metrics (fed exactly as the trainer feeds it)."""
    from ragen_envs.starpo.diagnostics import EchoTrapMonitor

    # the paper's three signatures only (the success-trend signal of docs/monitor.md off)
    monitor = EchoTrapMonitor(std_ratio, spike_factor, diversity_ratio, success_ratio=None)
    replayed = []
    for r in rows:
        if "rollout/in_group_std" not in r:
            continue
        events = monitor.update(r["rollout/in_group_std"], r["rollout/return_mean"], r.get("actor/grad_norm"))
        if "probe/distinct_ngrams" in r:
            events += monitor.update_probe(r["probe/distinct_ngrams"], r["rollout/return_mean"])
        replayed.append({"step": r["step"], "events": events})
    return first_events(replayed)


def summarize_run(rows: Sequence[dict], result: dict, collapse: dict) -> dict[str, Any]:
    from ragen_envs.eval.metrics import wilson_interval

    train = [r for r in rows if "rollout/return_mean" in r]
    steps = [r["step"] for r in train]
    curve = [r.get(collapse["key"], 0.0) for r in train]
    events = first_events(train)
    warned = [s for s in events.values() if s is not None]
    col = collapse_step(steps, curve, collapse["window"], collapse["fraction"])
    first_warn = min(warned) if warned else None
    sensitive = replay_paper_monitor(train, **SENSITIVE_MONITOR)
    sensitive_warned = [x for x in sensitive.values() if x is not None]
    succ = result["final_success"]
    k, n = sum(succ), len(succ)
    return {
        "variant": result["spec"]["variant"], "seed": result["spec"]["seed"],
        "first_warning": first_warn, "events": events, "collapse_step": col,
        "warning_lead": (col - first_warn) if (col is not None and first_warn is not None) else None,
        "sensitive_events": sensitive, "sensitive_first_warning": min(sensitive_warned) if sensitive_warned else None,
        "in_group_std_first5": _mean([r["rollout/in_group_std"] for r in train[:5]]),
        "in_group_std_last5": _mean([r["rollout/in_group_std"] for r in train[-5:]]),
        "probe_diversity_first": next((r["probe/distinct_ngrams"] for r in train if "probe/distinct_ngrams" in r), None),
        "probe_diversity_last": next((r["probe/distinct_ngrams"] for r in reversed(train) if "probe/distinct_ngrams" in r), None),
        "grad_norm_max": max((r["actor/grad_norm"] for r in train if "actor/grad_norm" in r), default=None),
        "final_success": k / n if n else float("nan"), "final_ci": wilson_interval(k, n),
        "final_return": result["final"].get("eval/return_mean"),
        "peak_rollout_success": max(curve) if curve else None,
        "last_rollout_success": sum(curve[-5:]) / len(curve[-5:]) if curve else None,
        "final_response_length": result["final"].get("eval/response_length"),
        "kept_fraction_mean": _mean([r["rollout/kept_fraction"] for r in train if "rollout/kept_fraction" in r]),
        "steps_trained": len(train),
        "wall_s": result["wall_s"], "cpu_s": result["cpu_s"],
    }


def baseline_of(variant: str, variants: Sequence[str], sweep_advantage: str = "gae") -> str:
    """The variant a run is compared with: StarPO-S X (either filter) against vanilla StarPO X,
    a keep-ratio or RAGEN-2 sweep run against vanilla StarPO with the sweep's advantage, when
    present; else the first."""
    vanilla = {"gae": "starpo-ppo", "grpo": "starpo-grpo"}
    if variant.startswith("starpo-s-"):
        wanted = "starpo-" + variant[len("starpo-s-"):].removesuffix("-ragen2")
    elif variant.startswith(("keep-", "ragen2-p")):
        wanted = vanilla[sweep_advantage]
    else:
        wanted = variants[0]
    return wanted if wanted in variants else variants[0]


def compare(results: dict[str, list[dict]], base: str | dict[str, str]) -> dict[str, Any]:
    """Per variant: pooled success with a Wilson CI; against its baseline (``base``: one
    variant for all, or a variant -> baseline map), on the shared training seeds, the paired
    McNemar exact p-value and a seed-stratified bootstrap CI of the difference."""
    from ragen_envs.eval.metrics import wilson_interval
    from ragen_envs.starpo.stats import bootstrap_diff_ci, mcnemar_exact, paired_counts

    out: dict[str, Any] = {}
    by_seed = {v: {r["spec"]["seed"]: r["final_success"] for r in rs} for v, rs in results.items()}
    for v, seeds in by_seed.items():
        pooled = [x for s in sorted(seeds) for x in seeds[s]]
        k, n = sum(pooled), len(pooled)
        entry: dict[str, Any] = {"success": k / n if n else float("nan"), "ci": wilson_interval(k, n), "n": n,
                                 "per_seed": {s: sum(x) / len(x) for s, x in sorted(seeds.items()) if x}}
        b_name = base.get(v, "") if isinstance(base, dict) else base
        if v != b_name and b_name in by_seed:
            base_seeds = by_seed[b_name]
            shared = sorted(set(seeds) & set(base_seeds))
            a = [x for s in shared for x in base_seeds[s]]
            b = [x for s in shared for x in seeds[s]]
            if a and len(a) == len(b):
                counts = paired_counts(a, b)
                strata = [s for s in shared for _ in base_seeds[s]]
                entry["vs_base"] = {"base": b_name, "seeds": shared, **counts,
                                    "mcnemar_p": mcnemar_exact(counts["only_a"], counts["only_b"]),
                                    "diff": (sum(b) - sum(a)) / len(a),
                                    "diff_ci": bootstrap_diff_ci(a, b, strata=strata)}
        out[v] = entry
    return out


def plot_lab(rows_by_variant: dict[str, list[list[dict]]], summaries: list[dict], out_png: Path, title: str) -> Path:
    """Curves per variant: mean over seeds, band = min-max over seeds; a marker at each
    run's first monitor warning (triangle) and collapse step (cross)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("rollout success", "rollout/success"), ("rollout mean return", "rollout/return_mean"), ("eval success (256 EVAL_SEEDS)", "eval/success"),
              ("in-group return std", "rollout/in_group_std"), ("actor grad norm", "actor/grad_norm"),
              ("think diversity (probe distinct bigrams)", "probe/distinct_ngrams"), ("entropy", "actor/entropy"),
              ("response tokens", "rollout/response_length"), ("KL to initial (k3)", "actor/kl_ref_k3"))
    fig, axes = plt.subplots(3, 3, figsize=(15, 10))
    colors = {}
    for ax, (name, key) in zip(axes.flat, panels):
        for i, (variant, runs) in enumerate(rows_by_variant.items()):
            color = colors.setdefault(variant, f"C{i}")
            series = []
            for rows in runs:
                pts = {r["step"]: r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])}
                series.append(pts)
            steps = sorted(set.intersection(*(set(p) for p in series))) if series else []
            if not steps:
                continue
            mean = [sum(p[s] for p in series) / len(series) for s in steps]
            lo = [min(p[s] for p in series) for s in steps]
            hi = [max(p[s] for p in series) for s in steps]
            ax.plot(steps, mean, color=color, label=variant, marker="." if len(steps) < 15 else None)
            ax.fill_between(steps, lo, hi, color=color, alpha=0.15)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    ax0 = axes.flat[0]
    for s in summaries:
        color = colors.get(s["variant"], "k")
        if s["first_warning"] is not None:
            ax0.plot([s["first_warning"]], [1.02], marker="v", color=color, clip_on=False)
        if s["collapse_step"] is not None:
            ax0.plot([s["collapse_step"]], [-0.02], marker="x", color=color, clip_on=False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title + "   (bands: min-max over seeds; v first monitor warning, x collapse)", fontsize=10)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=64)
    plt.close(fig)
    return out_png


def run_lab(out: Path, settings: dict, variants: Sequence[str], seeds: Sequence[int], keep_sweep: bool = False,
            jobs: int = 1, sweep_advantage: str = "gae", prior: Path | None = None, log=print,
            ragen2_sweep: Sequence[float] = ()) -> dict[str, Any]:
    t0 = time.monotonic()
    specs = run_specs(variants, seeds, keep_sweep, sweep_advantage, ragen2_sweep)
    for spec in specs:  # refuse bad settings before any training
        config_key(spec, settings, "")
    out.mkdir(parents=True, exist_ok=True)
    if prior is None:
        prior = build_prior(out, settings, log=log)
    elif not (Path(prior) / "config.json").exists():
        raise ValueError(f"--prior {prior} is not a model directory (no config.json)")
    todo = []
    seen: dict[str, Path] = {}
    for spec in specs:
        run_dir = out / "runs" / spec["variant"] / f"seed{spec['seed']}"
        key = config_key(spec, settings, str(prior))
        if key in seen:  # the same training run under another name (e.g. keep-25 = starpo-s-*)
            spec["same_as"] = str(seen[key])
            continue
        seen[key] = run_dir
        if not (run_dir / "result.json").exists():
            todo.append((spec, str(prior), settings, str(run_dir)))
    log(f"{len(specs)} runs ({len(specs) - len(todo)} already done), {jobs} at once")
    run_todo(todo, jobs, log)

    results: dict[str, list[dict]] = {}
    rows_by_variant: dict[str, list[list[dict]]] = {}
    summaries = []
    for spec in specs:
        run_dir = Path(spec.get("same_as") or out / "runs" / spec["variant"] / f"seed{spec['seed']}")
        result = {**json.loads((run_dir / "result.json").read_text()), "spec": spec}
        rows = read_metrics(run_dir / "metrics.jsonl")
        results.setdefault(spec["variant"], []).append(result)
        rows_by_variant.setdefault(spec["variant"], []).append(rows)
        summaries.append(summarize_run(rows, result, settings["collapse"]))
    names = list(dict.fromkeys(s["variant"] for s in specs))
    base = {v: baseline_of(v, names, sweep_advantage) for v in names}
    report = {"settings": settings, "variants": list(dict.fromkeys(s["variant"] for s in specs)), "seeds": list(seeds),
              "runs": summaries, "final": compare(results, base), "wall_s": time.monotonic() - t0}
    (out / "echo_trap.json").write_text(json.dumps(report, indent=2))
    rl = settings["rl"]
    title = f"{settings['env_id']}: tiny model, P x N = {rl['num_groups']} x {rl['group_size']}, actor lr {rl['actor_lr']}"
    main_runs = {v: r for v, r in rows_by_variant.items() if v in VARIANTS}
    sweep_runs = {v: r for v, r in rows_by_variant.items() if v not in VARIANTS}
    if main_runs:
        plot_lab(main_runs, [s for s in summaries if s["variant"] in main_runs], out / "echo_trap.png", title)
    if sweep_runs:  # the keep-ratio sweep on its own figure (keep-25 repeats starpo-s-*)
        plot_lab(sweep_runs, [s for s in summaries if s["variant"] in sweep_runs], out / "echo_trap_keep.png",
             title + f", keep-ratio / RAGEN-2 p sweeps ({sweep_advantage})")
    for line in lab_report_lines(report):
        log(line)
    return report


def lab_report_lines(report: dict) -> list[str]:
    lines = [f"{'variant':<20} {'final success':>13} {'95 % CI':>13} {'kept':>5}  per seed  | warn/sensitive warn -> collapse per seed | vs baseline"]
    for v in report["variants"]:
        f = report["final"][v]
        runs = [r for r in report["runs"] if r["variant"] == v]
        wc = ", ".join(f"{r['first_warning']}/{r['sensitive_first_warning']}->{r['collapse_step']}" for r in runs)
        per = " ".join(f"{x:.2f}" for x in f["per_seed"].values())
        vs = ""
        if "vs_base" in f:
            b = f["vs_base"]
            vs = (f"vs {b['base']}: diff {b['diff']:+.3f} [{b['diff_ci'][0]:+.3f}, {b['diff_ci'][1]:+.3f}], only base {b['only_a']}, "
                  f"only this {b['only_b']}, McNemar p = {b['mcnemar_p']:.2g}")
        kept = _mean([r["kept_fraction_mean"] for r in runs if r.get("kept_fraction_mean") is not None])
        kept_s = f"{kept:5.2f}" if kept is not None else "    -"
        lines.append(f"{v:<20} {f['success']:>13.3f} {f['ci'][0]:>6.3f}-{f['ci'][1]:.3f} {kept_s}  {per} | {wc} | {vs}")
    return lines


# ============================================================================= the multi-turn settings (multiturn_trap.py)
_MT_TINY = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 128}
_MT_PRIOR = {"episodes": 2000, "steps": 150, "batch_size": 32, "lr": 2e-3, "warmup": 20, "seed_start": 10_000,
             "max_actions": 1}
_MT_RL = {"steps": 150, "num_groups": 8, "group_size": 4, "max_new_tokens": 12, "actor_lr": 2e-4, "critic_lr": 1e-3,
          "mini_batch_size": 32, "micro_batch_size": 32, "train_seed_start": 50_000, "eval_every": 10,
          "eval_episodes": 64, "probe_every": 0, "save_every": 0, "log_samples": 0, "plots": False}

# name -> the lab's settings dict (BANDIT_SETTINGS' keys; "prior" adds max_actions)
MT_SETTINGS: dict[str, dict[str, Any]] = {
    "frozenlake": {"env_id": "ragen/FrozenLake-v0", "env_kwargs": {"think": False, "max_turns": 4}, "tiny_model": _MT_TINY,
                   "tokenizer": {"vocab_size": 512}, "prior": {**_MT_PRIOR, "max_actions": 3}, "rl": dict(_MT_RL),
                   "collapse": {"key": "rollout/success", "window": 5, "fraction": 0.5}},
    "sokoban": {"env_id": "ragen/Sokoban-v0", "env_kwargs": {"think": False, "max_turns": 4}, "tiny_model": _MT_TINY,
                "tokenizer": {"vocab_size": 512}, "prior": {**_MT_PRIOR, "max_actions": 3},
                "rl": {**_MT_RL, "max_new_tokens": 16}, "collapse": {"key": "rollout/success", "window": 5, "fraction": 0.5}},
}
# Sokoban with a free no-op: no format penalty, so an empty answer (a turn without a move) pays 0 while
# every move costs 0.1 -- the Bandit's safe arm in multi-turn form (benchmarks/results/2026-12-03-monitor-multiturn-trap.md §13d)
MT_SETTINGS["sokoban-free-noop"] = {**MT_SETTINGS["sokoban"],
                                    "env_kwargs": {**MT_SETTINGS["sokoban"]["env_kwargs"], "format_penalty": 0.0}}
# the same with the paper's group size (N = 16; 8 x 16 = 128 trajectories a step, one mini-batch): StarPO-S's
# top-25 % filter then keeps 2 of the 8 groups, 32 trajectories (BENCHMARKS.md#multi-turn-trap)
MT_SETTINGS["sokoban-free-noop-n16"] = {**MT_SETTINGS["sokoban-free-noop"],
                                        "rl": {**MT_SETTINGS["sokoban-free-noop"]["rl"], "group_size": 16,
                                               "mini_batch_size": 128}}
MT_SMOKE_CHANGES: dict[str, Any] = {
    "tiny_model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "tokenizer": {"vocab_size": 400},
    "prior": {"episodes": 16, "steps": 2, "batch_size": 8},
    "rl": {"steps": 2, "num_groups": 2, "group_size": 2, "mini_batch_size": 4, "micro_batch_size": 4, "eval_every": 2,
           "eval_episodes": 6},
}


def random_reply_fn(max_actions: int, seed: int):
    """``reply(env, ids) -> text``: an answer-only reply naming k uniformly random actions,
    k uniform in 1 .. min(max_actions, the env's actions-per-turn cap), each action uniform
    over the env's action names; draws from one generator seeded with ``seed``."""
    import numpy as np

    from ragen_envs.protocol import format_answer

    if isinstance(max_actions, bool) or not isinstance(max_actions, int) or max_actions < 1:
        raise ValueError(f"max_actions must be an integer >= 1, got {max_actions!r}")
    rng = np.random.default_rng(seed)

    def reply(env, _ids) -> str:
        base = env.unwrapped
        names = list(base.action_names())
        cap = min(max_actions, int(base.budget.max_actions_per_turn))
        k = int(rng.integers(1, cap + 1))
        actions = [names[int(rng.integers(len(names)))] for _ in range(k)]
        return format_answer(actions, "", think=base.think)

    return reply


def build_mt_prior(out: Path, settings: dict, log=print) -> Path:
    """The tiny model SFT on :func:`random_reply_fn`'s scripted episodes (the lab's
    :func:`build_prior` with this reply function); returns its model directory
    (reused when it exists)."""
    n = settings["prior"]["max_actions"]
    return build_prior(out, settings, log=log, reply_fn=random_reply_fn(n, seed=0),
                       what=f"scripted episodes (1-{n} random actions a reply)")


def mt_settings_for(name: str, smoke: bool = False, rl: dict | None = None, env_kwargs: dict | None = None,
                    prior: dict | None = None) -> dict[str, Any]:
    """A deep copy of :data:`MT_SETTINGS` [name], with the smoke sizes and the given changes."""
    if name not in MT_SETTINGS:
        raise ValueError(f"unknown setting {name!r}; choose from {', '.join(MT_SETTINGS)}")
    s = json.loads(json.dumps(MT_SETTINGS[name]))
    if smoke:
        s["tiny_model"], s["tokenizer"] = dict(MT_SMOKE_CHANGES["tiny_model"]), dict(MT_SMOKE_CHANGES["tokenizer"])
        s["prior"].update(MT_SMOKE_CHANGES["prior"])
        s["rl"].update(MT_SMOKE_CHANGES["rl"])
    s["rl"].update(rl or {})
    s["env_kwargs"].update(env_kwargs or {})
    s["prior"].update(prior or {})
    return s


# ============================================================================= the monitor corpora's runs (monitor_corpus.py)
# name -> (preset, overrides, expected from §13: True = collapses)
CORPUS_CONFIGS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "vanilla-grpo": ("starpo", {"advantage": "grpo"}, True),
    "keep100-grpo": ("starpo-s", {"advantage": "grpo", "keep_ratio": 1.0}, True),
    "starpo-s-grpo": ("starpo-s", {"advantage": "grpo"}, False),
    "keep50-grpo": ("starpo-s", {"advantage": "grpo", "keep_ratio": 0.5}, False),
    "vanilla-ppo": ("starpo", {}, False),
    "starpo-s-ppo": ("starpo-s", {}, False),
}
# seeds per config and split: development runs to design on, held-out runs to report on.
# Seeds 0-2 of StarPO-S GRPO are the reused §13b runs (LAB_RUNS), so the new StarPO-S GRPO
# runs use other seeds (the same seed would replay the same training trajectory).
CORPUS_SEEDS: dict[str, dict[str, tuple[int, ...]]] = {
    "vanilla-grpo": {"dev": (0, 1), "heldout": (2, 3, 4, 5, 6, 7)},
    "keep100-grpo": {"dev": (), "heldout": (2, 3)},
    "starpo-s-grpo": {"dev": (), "heldout": (3, 4)},
    "keep50-grpo": {"dev": (11,), "heldout": (2, 3)},
    "vanilla-ppo": {"dev": (), "heldout": (2, 3)},
    "starpo-s-ppo": {"dev": (), "heldout": (2,)},
}
# trained after the above when the session's time allows (same split rules)
CORPUS_EXTRA_SEEDS: dict[str, tuple[int, ...]] = {"starpo-s-ppo": (3,), "keep50-grpo": (4,), "vanilla-grpo": (8,),
                                                  "starpo-s-grpo": (5,)}


# The multi-turn corpus (``--task sokoban``): the settings of multiturn_trap.py (MT_SETTINGS; BENCHMARKS
# §13d: tiny model, 4 turns, P x N = 8 x 4, 32 episodes a step). name -> (setting,
# preset, overrides, expected from §13d: True = collapses). sokoban-free-noop GRPO collapsed in
# 3 of 3 seeds there (vanilla and StarPO-S); the env's default format penalty (GRPO) and PPO did not.
MT_CONFIGS: dict[str, tuple[str, str, dict[str, Any], bool]] = {
    "noop-vanilla-grpo": ("sokoban-free-noop", "starpo", {"advantage": "grpo"}, True),
    "noop-starpo-s-grpo": ("sokoban-free-noop", "starpo-s", {"advantage": "grpo"}, True),
    "sokoban-vanilla-grpo": ("sokoban", "starpo", {"advantage": "grpo"}, False),
    "sokoban-starpo-s-grpo": ("sokoban", "starpo-s", {"advantage": "grpo"}, False),
    "noop-vanilla-ppo": ("sokoban-free-noop", "starpo", {}, False),
    "noop-starpo-s-ppo": ("sokoban-free-noop", "starpo-s", {}, False),
}
# split fixed before any run was trained (seed 0 of four configurations to design on)
MT_SEEDS: dict[str, dict[str, tuple[int, ...]]] = {
    "noop-vanilla-grpo": {"dev": (0,), "heldout": (1, 2, 3, 4, 5)},
    "noop-starpo-s-grpo": {"dev": (0,), "heldout": (1, 2, 3, 4)},
    "sokoban-vanilla-grpo": {"dev": (0,), "heldout": (1, 2, 3, 4)},
    "sokoban-starpo-s-grpo": {"dev": (), "heldout": (1, 2, 3)},
    "noop-vanilla-ppo": {"dev": (0,), "heldout": (1, 2, 3, 4)},
    "noop-starpo-s-ppo": {"dev": (), "heldout": (1, 2, 3, 4)},
}
# (2026-12-03, before any of them was trained: seeds 3 and 4 of both PPO configurations added to
# the held-out split, so that it holds >= 12 runs expected healthy next to >= 9 expected to
# collapse -- the sizes issue 21's bar is stated in.)


def mt_specs(configs=MT_CONFIGS, seeds=MT_SEEDS) -> list[dict]:
    """The multi-turn corpus's runs in :func:`corpus_specs`' order (dev first, then held-out
    collapsing and healthy interleaved); each spec names its multiturn_trap setting."""
    plain = {name: (preset, over, c) for name, (_s, preset, over, c) in configs.items()}
    specs = corpus_specs(plain, seeds)
    for spec in specs:
        spec["setting"] = configs[spec["variant"]][0]
    return specs


def _round_robin(specs: list[dict]) -> list[dict]:
    """The specs reordered to take one of each configuration in turn (seed order kept)."""
    by_cfg: dict[str, list[dict]] = {}
    for spec in specs:
        by_cfg.setdefault(spec["variant"], []).append(spec)
    out = []
    while any(by_cfg.values()):
        out += [q.pop(0) for q in by_cfg.values() if q]
    return out


def corpus_specs(configs=CORPUS_CONFIGS, seeds=CORPUS_SEEDS) -> list[dict]:
    """One spec per (config, seed): its split (dev / heldout), preset and overrides. The
    development runs come first (ready to design on sooner), then the held-out runs with
    collapsing and healthy configurations interleaved (a partial corpus stays balanced)."""
    dev, collapsing, healthy = [], [], []
    for name, (preset, over, expect_collapse) in configs.items():
        for split in ("dev", "heldout"):
            for s in seeds[name][split]:
                spec = {"variant": name, "seed": s, "split": split, "preset": preset, "overrides": dict(over)}
                (dev if split == "dev" else collapsing if expect_collapse else healthy).append(spec)
    collapsing, healthy = _round_robin(collapsing), _round_robin(healthy)
    mixed = []
    for i in range(max(len(collapsing), len(healthy))):
        mixed += collapsing[i : i + 1] + healthy[i : i + 1]
    extra = [{"variant": name, "seed": s, "split": "heldout", "preset": configs[name][0], "overrides": dict(configs[name][1])}
             for name, seeds_ in CORPUS_EXTRA_SEEDS.items() for s in seeds_] if seeds is CORPUS_SEEDS else []
    return dev + mixed + extra


# ============================================================================= the monitor's analysis (monitor_corpus.py, monitor_noise.py, monitor_replay.py)
# each signal's threshold keyword and the grid tried on the development runs
GRIDS: dict[str, tuple[str, tuple[float, ...]]] = {
    "success_drop": ("success_ratio", (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)),
    "valid_success_drop": ("valid_success_ratio", (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)),
    "reward_std_collapse": ("std_ratio", (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)),
    "grad_norm_spike": ("spike_factor", (1.25, 1.5, 2.0, 3.0, 5.0)),
    "echo_trap": ("diversity_ratio", (0.5, 0.7, 0.8, 0.9, 0.95)),
    "mi_drop": ("mi_ratio", (0.1, 0.25, 0.5, 0.75)),
    "entropy_drop": ("entropy_ratio", (0.5, 0.7, 0.8, 0.9, 0.95)),
}
# the metric each signal reads (a signal is only chosen on runs where it can be seen)
SIGNAL_INPUT = {"success_drop": "rollout/success", "valid_success_drop": "rollout/format_error", "reward_std_collapse": "rollout/in_group_std",
                "grad_norm_spike": "actor/grad_norm", "echo_trap": "probe/distinct_ngrams", "mi_drop": "probe/mi",
                "entropy_drop": "probe/entropy"}
ALL_OFF = {"std_ratio": None, "spike_factor": None, "diversity_ratio": None, "success_ratio": None, "valid_success_ratio": None,
           "mi_ratio": None, "entropy_ratio": None, "well_formed_ratio": None}
# the paper's signatures at the trainer's thresholds before the redesign (the baseline)
PAPER_SIGNALS = {**ALL_OFF, "std_ratio": 0.1, "spike_factor": 5.0, "diversity_ratio": 0.5,
                 "alarm": ("reward_std_collapse", "grad_norm_spike", "echo_trap")}
KEEP_KEYS = ("step", "final", "rollout/", "eval/", "probe/", "actor/grad_norm", "actor/entropy", "time/")


def signal_kwargs(signal: str, value: float) -> dict[str, Any]:
    """EchoTrapMonitor keywords with only ``signal`` on, at threshold ``value``."""
    key, _ = GRIDS[signal]
    return {**ALL_OFF, key: value, "alarm": (signal,)}


def label_run(rows: Sequence[dict]) -> dict[str, Any]:
    """The run's evaluation curve and its collapse label (:func:`collapse_label`)."""
    ev = [(r["step"], r["eval/success"]) for r in rows if isinstance(r.get("eval/success"), (int, float))]
    steps = [s for s, _ in ev]
    succ = [v for _, v in ev]
    col = collapse_label(steps, succ)
    return {"collapse_step": col, "collapsed": col is not None, "eval_steps": steps, "eval_success": succ,
            "eval_grid": (steps[1] - steps[0]) if len(steps) > 1 else None}


def score_runs(runs: Sequence[dict], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Replay a monitor on labelled runs (each ``{"rows", "label"}``).

    A collapsing run is *warned* when the first alarm step W comes before its collapse
    step C (W < C; lead = C - W); an alarm at or after C is late. A healthy run has a
    *false alarm* when any alarm fires. Returns the counts, the leads and per-run W.
    """
    return score_alarms(runs, [replay_monitor(run["rows"], **kwargs)["alarm"] for run in runs])


def score_alarms(runs: Sequence[dict], alarms: Sequence[int | None]) -> dict[str, Any]:
    """:func:`score_runs` from each run's first alarm step (None: no alarm), already known."""
    if len(alarms) != len(runs):
        raise ValueError(f"{len(runs)} runs but {len(alarms)} alarm steps")
    warned, leads, late, false_alarms, n_col, n_ok, per_run = 0, [], 0, 0, 0, 0, []
    for run, w in zip(runs, alarms):
        c = run["label"]["collapse_step"]
        per_run.append(w)
        if c is not None:
            n_col += 1
            if w is not None and w < c:
                warned += 1
                leads.append(c - w)
            elif w is not None:
                late += 1
        else:
            n_ok += 1
            false_alarms += w is not None
    return {"collapsing": n_col, "warned": warned, "late": late, "leads": leads,
            "median_lead": statistics.median(leads) if leads else None,
            "healthy": n_ok, "false_alarms": false_alarms, "first_alarm": per_run}


def choose_threshold(signal: str, runs: Sequence[dict], grid: Sequence[float] | None = None) -> dict[str, Any]:
    """The threshold of ``signal`` chosen on ``runs`` (the development set): among the grid
    values with no false alarm, the one that warns the most collapses, then with the
    largest median lead, then the least sensitive (first in grid order). None when every
    value false-alarms or none warns, or when no healthy run in ``runs`` records the
    signal's input (its false alarms could not be judged)."""
    key, default_grid = GRIDS[signal]
    healthy_seen = [r for r in runs if r["label"]["collapse_step"] is None
                    and any(SIGNAL_INPUT[signal] in row for row in r["rows"])]
    if not healthy_seen:  # no healthy run shows this signal: its false alarms cannot be judged
        return {"signal": signal, "key": key, "value": None, "why": "no healthy run with this signal"}
    best = best_by_rule(runs, grid if grid is not None else default_grid, lambda v: signal_kwargs(signal, v))
    if best is None:
        return {"signal": signal, "key": key, "value": None}
    return {"signal": signal, "key": key, "value": best[0], "dev": public_fields(best[1])}


def best_by_rule(runs: Sequence[dict], candidates: Sequence[Any], kwargs_of) -> tuple[Any, dict] | None:
    """§13c's choice rule: score each candidate's monitor (``kwargs_of(candidate)``) on ``runs``;
    among those with no false alarm that warn at least one collapse, the one that warns the
    most, then with the largest median lead, then the first in order. (candidate, score) or
    None."""
    best = None
    for cand in candidates:
        s = score_runs(runs, kwargs_of(cand))
        if s["false_alarms"] or not s["warned"]:
            continue
        rank = (s["warned"], s["median_lead"] or 0)
        if best is None or rank > best[0]:
            best = (rank, cand, s)
    return None if best is None else (best[1], best[2])


def public_fields(s: dict) -> dict:
    return {k: v for k, v in s.items() if k != "first_alarm"}


def probe_cost(rows: Sequence[dict]) -> dict[str, float] | None:
    """Median over a run's probe steps of time/probe / (time/rollout + time/update) (the
    probe against the training step it came with, the same run and load), and of the
    cross-scoring part alone (time/probe_score)."""
    ratios, score = [], []
    for r in rows:
        if "time/probe" in r and "time/rollout" in r and "time/update" in r:
            train = r["time/rollout"] + r["time/update"]
            if train > 0:
                ratios.append(r["time/probe"] / train)
                if "time/probe_score" in r:
                    score.append(r["time/probe_score"] / train)
    if not ratios:
        return None
    return {"probe_over_step": statistics.median(ratios), "score_over_step": statistics.median(score) if score else None,
            "n": len(ratios)}


def _bootstrap_median_ci(xs: Sequence[float], seed: int = 0, reps: int = 2000) -> tuple[float, float] | None:
    import numpy as np

    if not xs:
        return None
    rng = np.random.default_rng(seed)
    arr = np.asarray(xs, dtype=float)
    meds = np.median(rng.choice(arr, size=(reps, len(arr)), replace=True), axis=1)
    return float(np.quantile(meds, 0.025)), float(np.quantile(meds, 0.975))


def report_entry(s: dict) -> dict:
    from ragen_envs.eval.metrics import wilson_interval

    return {**public_fields(s), "warned_ci": wilson_interval(s["warned"], s["collapsing"]) if s["collapsing"] else None,
            "false_alarm_ci": wilson_interval(s["false_alarms"], s["healthy"]) if s["healthy"] else None,
            "median_lead_ci": _bootstrap_median_ci(s["leads"])}


def _paired(a: dict, b: dict, runs: Sequence[dict]) -> dict:
    """Exact McNemar on the per-run outcome (warned-before-collapse / no false alarm) of two
    monitors on the same runs."""
    from ragen_envs.starpo.stats import mcnemar_exact

    def ok(w, run):
        c = run["label"]["collapse_step"]
        return (w is not None and w < c) if c is not None else w is None

    only_a = sum(ok(x, r) and not ok(y, r) for x, y, r in zip(a["first_alarm"], b["first_alarm"], runs))
    only_b = sum(ok(y, r) and not ok(x, r) for x, y, r in zip(a["first_alarm"], b["first_alarm"], runs))
    return {"only_a": only_a, "only_b": only_b, "mcnemar_p": mcnemar_exact(only_a, only_b)}


def analyze(out: Path, specs: Sequence[dict], dirs: Sequence[Path], log=print) -> dict[str, Any]:
    """Label every finished run, write OUT/corpus.jsonl, choose thresholds on dev, report on
    held-out (OUT/monitor.json, OUT/monitor.png); returns the report."""
    runs = []
    for spec, d in zip(specs, dirs):
        d = Path(d)
        if not (d / "result.json").exists():
            continue
        rows = read_metrics(d / "metrics.jsonl")
        runs.append({"config": spec["variant"], "seed": spec["seed"], "split": spec["split"],
                     "reused": spec.get("reused"), "label": label_run(rows),
                     "rows": [{k: v for k, v in r.items() if any(k == p or k.startswith(p) for p in KEEP_KEYS)}
                              for r in rows]})
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for run in runs:
            f.write(json.dumps(run) + "\n")
    dev = [r for r in runs if r["split"] == "dev"]
    held = [r for r in runs if r["split"] == "heldout"]
    fine = [r for r in held if r["label"]["eval_grid"] == 2]
    log(f"corpus: {len(runs)} runs ({len(dev)} dev, {len(held)} held-out, {len(fine)} of them on the 2-step grid)")
    for r in runs:
        log(f"  {r['split']:<8} {r['config']:<14} seed {r['seed']:<3} collapse {r['label']['collapse_step']}"
            f"  eval {' '.join(f'{x:.2f}' for x in r['label']['eval_success'])}")

    chosen = {sig: choose_threshold(sig, dev) for sig in MONITOR_SIGNALS}
    combined_alarm = tuple(sig for sig, c in chosen.items() if c["value"] is not None)
    combined = {**ALL_OFF, **{c["key"]: c["value"] for c in chosen.values() if c["value"] is not None},
                "alarm": combined_alarm}
    report: dict[str, Any] = {"chosen": chosen, "combined_kwargs": combined, "sets": {}}
    monitors = {f"{sig} {c['key']}={c['value']}": {**ALL_OFF, c["key"]: c["value"], "alarm": (sig,)}
                for sig, c in chosen.items() if c["value"] is not None}
    monitors["combined (" + " + ".join(combined_alarm) + ")"] = combined
    monitors["paper signals at the old defaults"] = PAPER_SIGNALS
    for set_name, subset in (("dev", dev), ("heldout", held), ("heldout_fine", fine)):
        scores = {name: score_runs(subset, kw) for name, kw in monitors.items()} if subset else {}
        report["sets"][set_name] = {name: report_entry(s) for name, s in scores.items()}
        if scores and combined_alarm:
            comb = scores["combined (" + " + ".join(combined_alarm) + ")"]
            report["sets"][set_name]["paired_combined_vs_paper"] = _paired(comb, scores["paper signals at the old defaults"], subset)
            report["sets"][set_name]["first_alarm_combined"] = [
                {"config": r["config"], "seed": r["seed"], "collapse": r["label"]["collapse_step"], "alarm": w}
                for r, w in zip(subset, comb["first_alarm"])]
    # ROC-style: each signal over its grid, dev and held-out
    roc = []
    for sig, (key, grid) in GRIDS.items():
        for value in grid:
            kw = signal_kwargs(sig, value)
            d, h = score_runs(dev, kw), score_runs(held, kw)
            roc.append({"signal": sig, "key": key, "value": value,
                        "dev": public_fields(d), "heldout": public_fields(h)})
    report["roc"] = roc
    costs = [c for c in (probe_cost(r["rows"]) for r in runs if not r["reused"]) if c]
    if costs:
        report["probe_cost"] = {"runs": len(costs),
                                "probe_over_step_median": statistics.median(c["probe_over_step"] for c in costs),
                                "probe_over_step_range": [min(c["probe_over_step"] for c in costs),
                                                          max(c["probe_over_step"] for c in costs)],
                                "score_over_step_median": statistics.median(c["score_over_step"] for c in costs
                                                                            if c["score_over_step"] is not None)}
    report["probe_summary"] = probe_summary(runs)
    report["runs"] = [{k: r[k] for k in ("config", "seed", "split", "reused", "label")} for r in runs]
    (out / "monitor.json").write_text(json.dumps(report, indent=2))
    for line in monitor_report_lines(report):
        log(line)
    (out / "monitor_tables.md").write_text("\n".join(markdown_tables(report)) + "\n")
    if runs:
        plot_corpus(held or runs, combined, out / "monitor.png", "held-out runs" if held else "development runs")
        if held and dev:
            plot_corpus(dev, combined, out / "monitor_dev.png", "development runs")
    return report


def probe_summary(runs: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """Per configuration, over all its probe rows: mean and sd of the MI proxy, the retrieval
    accuracy and H(Z|X) per token, and the mean first / last probe entropy."""
    out: dict[str, dict[str, Any]] = {}
    for cfg in dict.fromkeys(r["config"] for r in runs):
        rows = [row for r in runs if r["config"] == cfg for row in r["rows"] if "probe/mi" in row]
        if not rows:
            continue
        entry: dict[str, Any] = {"probes": len(rows)}
        for key in ("probe/mi", "probe/retrieval", "probe/h_z_given_x_token", "probe/entropy"):
            xs = [row[key] for row in rows if isinstance(row.get(key), (int, float))]
            if xs:
                entry[key] = {"mean": statistics.fmean(xs), "sd": statistics.pstdev(xs), "min": min(xs), "max": max(xs)}
        out[cfg] = entry
    return out


def monitor_report_lines(report: dict) -> list[str]:
    lines = ["chosen on dev: " + ", ".join(f"{s} {c['key']}={c['value']}" for s, c in report["chosen"].items())]
    for set_name, entries in report["sets"].items():
        lines.append(f"[{set_name}]")
        for name, e in entries.items():
            if not isinstance(e, dict) or "warned" not in e:
                if isinstance(e, dict) and "mcnemar_p" in e:
                    lines.append(f"  combined vs paper signals: only combined right {e['only_a']}, only paper {e['only_b']}, "
                                 f"McNemar p = {e['mcnemar_p']:.3g}")
                continue
            lines.append(f"  {name:<58} warned {e['warned']}/{e['collapsing']} (late {e['late']}), "
                         f"median lead {e['median_lead']}, leads {e['leads']}, false alarms {e['false_alarms']}/{e['healthy']}")
    if "probe_cost" in report:
        p = report["probe_cost"]
        lines.append(f"probe / training step (median over {p['runs']} runs): {p['probe_over_step_median']:.3f} "
                     f"(range {p['probe_over_step_range'][0]:.3f}-{p['probe_over_step_range'][1]:.3f}); "
                     f"cross-scoring alone {p['score_over_step_median']:.3f}")
    return lines


def with_valid(row: dict) -> dict:
    """``row`` with ``rollout/valid_success`` (the success of the episodes whose every reply was
    well formed, as the monitor reads it) and ``rollout/formed`` (their share): the trainer's
    per-episode metrics where the row has them, else the rows' older stand-in (the share of
    well-formed turns; exact for one-turn replies)."""
    share, valid = row.get("rollout/well_formed_episodes"), row.get("rollout/well_formed_success")
    if isinstance(share, (int, float)) and isinstance(valid, (int, float)):
        return {**row, "rollout/valid_success": valid, "rollout/formed": share}
    s, f = row.get("rollout/success"), row.get("rollout/format_error")
    if isinstance(s, (int, float)) and isinstance(f, (int, float)) and f < 1:
        return {**row, "rollout/valid_success": min(1.0, s / (1 - f)), "rollout/formed": 1 - f}
    return row


def plot_corpus(runs: Sequence[dict], kwargs: dict, out_png: Path, title: str = "held-out runs") -> Path:
    """Curves per configuration (mean over seeds, band = min-max over seeds); on every panel
    each run's collapse step (x, its colour) and first warning of the monitor ``kwargs``
    (triangle)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("eval success (the label's curve)", "eval/success"),
              ("rollout success among well-formed episodes", "rollout/valid_success"),
              ("well-formed episodes (share)", "rollout/formed"),
              ("rollout success", "rollout/success"), ("in-group return std", "rollout/in_group_std"),
              ("probe I(X;Z) proxy (nats)", "probe/mi"), ("probe H(Z|X) (nats / token)", "probe/entropy"),
              ("probe think diversity (distinct bigrams)", "probe/distinct_ngrams"),
              ("probe retrieval: own state scores its reply best (chance 1 / states)", "probe/retrieval"),
              ("actor grad norm", "actor/grad_norm"))
    runs = [{**r, "rows": [with_valid(row) for row in r["rows"]]} for r in runs]
    fig, axes = plt.subplots(2, 5, figsize=(23, 8))
    configs = list(dict.fromkeys(r["config"] for r in runs))
    colors = {c: f"C{i}" for i, c in enumerate(configs)}
    for ax, (name, key) in zip(axes.flat, panels):
        for cfg in configs:
            series = [{r2["step"]: r2[key] for r2 in r["rows"] if isinstance(r2.get(key), (int, float))}
                      for r in runs if r["config"] == cfg]
            series = [s for s in series if s]
            if not series:
                continue
            steps = sorted(set().union(*series))
            mean, lo, hi, xs = [], [], [], []
            for st in steps:
                vals = [s[st] for s in series if st in s]
                if vals:
                    xs.append(st)
                    mean.append(sum(vals) / len(vals))
                    lo.append(min(vals))
                    hi.append(max(vals))
            ax.plot(xs, mean, color=colors[cfg], label=f"{cfg} ({len(series)})", linewidth=1.2)
            ax.fill_between(xs, lo, hi, color=colors[cfg], alpha=0.15)
        ymin, ymax = ax.get_ylim()
        for r in runs:
            c = r["label"]["collapse_step"]
            w = replay_monitor(r["rows"], **kwargs)["alarm"]
            if c is not None:
                ax.axvline(c, color=colors[r["config"]], linestyle=":", linewidth=0.8)
                ax.plot([c], [ymin], marker="x", color=colors[r["config"]], clip_on=False)
            if w is not None:
                ax.plot([w], [ymax], marker="v", color=colors[r["config"]], clip_on=False)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{title}: mean over seeds (n per config in the legend), band = min-max over seeds; "
                 "x (and dotted line) collapse step, v first warning of the monitor chosen on dev", fontsize=10)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=72)
    plt.close(fig)
    return out_png


FIXTURE_KEYS = ("step", "final", "rollout/success", "rollout/format_error", "rollout/in_group_std", "rollout/return_mean", "actor/grad_norm", "probe/entropy",
                "probe/distinct_ngrams", "probe/mi", "probe/h_z_given_x_token", "eval/success")


def write_fixture(corpus: Path, picks: dict[str, tuple[str, int]], path: Path) -> Path:
    """Save a few recorded runs of OUT/corpus.jsonl as a small JSON of metric traces for the
    tests: ``picks`` maps a trace name to (config, seed); only the monitor's inputs and the
    evaluation curve are kept."""
    runs = {(r["config"], r["seed"]): r for r in map(json.loads, Path(corpus).read_text().splitlines())}
    out = {}
    for name, key in picks.items():
        if key not in runs:
            raise ValueError(f"no run {key} in {corpus}")
        r = runs[key]
        out[name] = {"config": r["config"], "seed": r["seed"], "split": r["split"],
                     "collapse_step": r["label"]["collapse_step"],
                     "rows": [{k: v for k, v in row.items() if k in FIXTURE_KEYS} for row in r["rows"]]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    return path


def fmt_ci(ci, pct=True):
    if not ci:
        return "-"
    return f"{100 * ci[0]:.0f}-{100 * ci[1]:.0f} %" if pct else f"{ci[0]:g}-{ci[1]:g}"


def markdown_tables(report: dict) -> list[str]:
    """The tables of benchmarks/results/2026-12-03-monitor-multiturn-trap.md §13c from OUT/monitor.json."""
    lines = []
    for set_name in ("dev", "heldout", "heldout_fine"):
        entries = report["sets"].get(set_name) or {}
        if not entries:
            continue
        lines += ["", f"{set_name}:", "",
                  "| monitor | warned before collapse | 95 % CI | late | median lead (steps) | 95 % CI | leads | false alarms | 95 % CI |",
                  "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
        for name, e in entries.items():
            if not isinstance(e, dict) or "warned" not in e:
                continue
            lines.append(f"| {name} | {e['warned']}/{e['collapsing']} | {fmt_ci(e['warned_ci'])} | {e['late']} | "
                         f"{e['median_lead'] if e['median_lead'] is not None else '-'} | {fmt_ci(e['median_lead_ci'], False)} | "
                         f"{', '.join(map(str, e['leads'])) or '-'} | {e['false_alarms']}/{e['healthy']} | {fmt_ci(e['false_alarm_ci'])} |")
        p = entries.get("paired_combined_vs_paper")
        if p:
            lines.append(f"\ncombined vs the paper's signals on the same runs (a run is right when warned before its "
                         f"collapse / quiet when healthy): only combined right {p['only_a']}, only paper signals right "
                         f"{p['only_b']}, exact McNemar p = {p['mcnemar_p']:.3g}")
    lines += ["", "ROC-style (each signal alone over its threshold grid; warned / collapsing, false alarms / healthy, median lead):", "",
              "| signal | threshold | dev warned | dev false alarms | held-out warned | held-out median lead | held-out false alarms |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["roc"]:
        d, h = r["dev"], r["heldout"]
        lines.append(f"| {r['signal']} | {r['key']} = {r['value']} | {d['warned']}/{d['collapsing']} | {d['false_alarms']}/{d['healthy']} | "
                     f"{h['warned']}/{h['collapsing']} | {h['median_lead'] if h['median_lead'] is not None else '-'} | "
                     f"{h['false_alarms']}/{h['healthy']} |")
    return lines


# ----------------------------------------------------------------------------- the trainer's warning rules on a grid
# (labs/monitor_noise.py chooses among them; labs/template_collapse.py scores them on its corpus)
SIGNALS = {"success_drop": ("success_ratio", "success_k"),
           "valid_success_drop": ("valid_success_ratio", "valid_success_k"),
           "well_formed_drop": ("well_formed_ratio", "well_formed_k")}
SUCCESS_SIGNALS = ("success_drop", "valid_success_drop")
FORMED = "well_formed_drop"
GRID = {"window": (3, 5, 10), "ratio": (0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9), "k": (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)}


def kwargs_for(signal: str, window: int, ratio: float, k: float) -> dict[str, Any]:
    """EchoTrapMonitor keywords with only ``signal`` on (the others off), at this window,
    ratio and k."""
    rkey, kkey = SIGNALS[signal]
    return {**ALL_OFF, rkey: ratio, kkey: k, "success_window": window, "alarm": (signal,)}


def rule_kwargs(rule: dict) -> dict[str, Any]:
    """EchoTrapMonitor keywords of a rule: one signal (``{"signal", "window", "ratio", "k"}``)
    or a union of a success signal and ``well_formed_drop`` sharing the window (``{"window",
    "parts": [{"signal", "ratio", "k"}, ...]}``: the warning is the first of either)."""
    if "parts" not in rule:
        return kwargs_for(rule["signal"], rule["window"], rule["ratio"], rule["k"])
    kw: dict[str, Any] = {**ALL_OFF, "success_window": rule["window"], "alarm": tuple(p["signal"] for p in rule["parts"])}
    for part in rule["parts"]:
        rkey, kkey = SIGNALS[part["signal"]]
        kw[rkey], kw[kkey] = part["ratio"], part["k"]
    return kw


def first_fires(runs: Sequence[dict], values: dict = GRID) -> dict[tuple, list[int | None]]:
    """(signal, window, ratio, k) -> each run's first step at which that signal alone fires.

    The drop signals keep separate state and share only the window, so one replay with all
    of :data:`SIGNALS` on at (window, ratio, k) gives each one's first firing; a union's first
    alarm is the earliest of its parts' (:func:`union_alarms`)."""
    table: dict[tuple, list[int | None]] = {}
    for w in values["window"]:
        for r in values["ratio"]:
            for k in values["k"]:
                kw = {**ALL_OFF, "success_window": w, "alarm": tuple(SIGNALS)}
                for rkey, kkey in SIGNALS.values():
                    kw[rkey], kw[kkey] = r, k
                fires = [replay_monitor(run["rows"], **kw) for run in runs]
                for sig in SIGNALS:
                    table[(sig, w, r, k)] = [f[sig] for f in fires]
    return table


def union_alarms(*alarms: Sequence[int | None]) -> list[int | None]:
    """Per run, the earliest of several rules' first alarm steps (None when none fires)."""
    out = []
    for steps in zip(*alarms):
        fired = [s for s in steps if s is not None]
        out.append(min(fired) if fired else None)
    return out


def union_candidates(values: dict = GRID) -> list[dict]:
    """Every rule in choice order: the single signals of :func:`grid` (``well_formed_drop``
    among them), then each (success signal, well_formed_drop) pair at a shared window, each
    part in grid order (least sensitive first)."""
    rules = [dict(zip(("signal", "window", "ratio", "k"), c)) for c in grid(values=values)]
    for w in values["window"]:
        for s in SUCCESS_SIGNALS:
            for c1 in grid((s,), values):
                if c1[1] != w:
                    continue
                for c2 in grid((FORMED,), values):
                    if c2[1] == w:
                        rules.append({"window": w, "parts": [{"signal": s, "ratio": c1[2], "k": c1[3]},
                                                             {"signal": FORMED, "ratio": c2[2], "k": c2[3]}]})
    return rules


def rule_alarms(rule: dict, table: dict[tuple, list[int | None]], index: Sequence[int]) -> list[int | None]:
    """A rule's first alarm step on the runs at positions ``index`` of ``table``'s run list."""
    if "parts" not in rule:
        col = table[(rule["signal"], rule["window"], rule["ratio"], rule["k"])]
        return [col[i] for i in index]
    cols = [table[(p["signal"], rule["window"], p["ratio"], p["k"])] for p in rule["parts"]]
    return union_alarms(*[[c[i] for i in index] for c in cols])


def choose_rule(runs: Sequence[dict], index: Sequence[int], table: dict[tuple, list[int | None]],
                candidates: Sequence[dict]) -> dict[str, Any] | None:
    """§13c's rule over rule dicts on the runs at ``index``: no false alarm and at least one
    collapse warned; then the most warned, then the largest median lead, then the first."""
    best = None
    sub = [runs[i] for i in index]
    for rule in candidates:
        sc = score_alarms(sub, rule_alarms(rule, table, index))
        if sc["false_alarms"] or not sc["warned"]:
            continue
        rank = (sc["warned"], sc["median_lead"] or 0)
        if best is None or rank > best[0]:
            best = (rank, rule, sc)
    return None if best is None else {"rule": best[1], "dev": public_fields(best[2])}


def grid(signals: Sequence[str] = tuple(SIGNALS), values: dict = GRID) -> list[tuple[str, int, float, float]]:
    """(signal, window, ratio, k) in choice order: per signal, largest k first, then smallest
    ratio, then shortest window (the least sensitive rule first)."""
    return [(s, w, r, k) for s in signals for k in sorted(values["k"], reverse=True) for r in values["ratio"]
            for w in values["window"]]


def rule_name(rule: dict) -> str:
    if "parts" in rule:
        return f"w={rule['window']}: " + " OR ".join(f"{p['signal']} ratio={p['ratio']} k={p['k']:g}" for p in rule["parts"])
    return f"{rule['signal']} w={rule['window']} ratio={rule['ratio']} k={rule['k']:g}"
