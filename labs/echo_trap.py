"""The Echo Trap lab (RAGEN §4.1-4.2, issue 14): vanilla StarPO against StarPO-S on one tiny model.

    python benchmarks/echo_trap.py --out runs/echo_trap --variants starpo-grpo starpo-s-grpo \
        starpo-ppo starpo-s-ppo --seeds 0 1 2 --keep-sweep --sweep-advantage grpo --jobs 2

1. Build a tiny Qwen2-architecture model and tokenizer for the env (think on; Bandit-v0 by
   default) and give it a *prior* by SFT on scripted replies: varied think texts (three
   random sentence templates) and actions that are the expert's with probability
   ``expert_prob`` (0 by default), else uniformly random. The prior stands in for a
   pretrained model: well-formed replies, diverse reasoning, no preference yet.
2. From that prior, run each variant for several seeds (same prior, same training seeds):

   - ``starpo-ppo`` / ``starpo-grpo``: vanilla StarPO (no filter, KL loss 0.001, symmetric
     clip 0.2), PPO with a critic / GRPO;
   - ``starpo-s-ppo`` / ``starpo-s-grpo``: StarPO-S (top-25 % groups by return std, no KL,
     Clip-Higher 0.2 / 0.28);
   - ``--keep-sweep``: StarPO-S (``--sweep-advantage`` gae = PPO, or grpo) keeping 25 / 50 /
     75 / 100 % of the groups (§5); a run whose config equals another's is not repeated.

3. Per run: the trainer's ``metrics.jsonl`` (Echo Trap monitor events included), the
   evaluation on the 256 ``EVAL_SEEDS`` (T = 0.5) every ``eval_every`` steps and at the end.
4. Summary (``OUT/echo_trap.json``, ``OUT/echo_trap.png``, ``OUT/echo_trap_keep.png``):
   curves with bands (min-max over seeds) of success, return, in-group return std, actor
   grad norm, think diversity (probe distinct bigrams), entropy, reply length, KL; per run
   the first step of each monitor warning (the trainer's thresholds, and replayed with
   looser ones, :data:`SENSITIVE_MONITOR`) and the collapse step (:func:`collapse_step`);
   final success per variant with a Wilson 95 % CI over all (seed, episode) pairs and,
   against its vanilla baseline (:func:`baseline_of`), the paired McNemar exact p-value and
   a seed-stratified bootstrap CI of the difference (same eval seeds and sampling stream
   for the same training seed).

Finished runs under ``OUT/runs`` are reused (delete the folder to start over), so adding
variants to a finished lab only trains the new ones. Everything is seeded; ``--jobs`` runs
that many training processes at once, one thread each.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# name -> (preset, overrides)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "starpo-ppo": ("starpo", {}),
    "starpo-grpo": ("starpo", {"advantage": "grpo"}),
    "starpo-s-ppo": ("starpo-s", {}),
    "starpo-s-grpo": ("starpo-s", {"advantage": "grpo"}),
}
KEEP_SWEEP = (0.25, 0.5, 0.75, 1.0)

SETTINGS: dict[str, Any] = {
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
SMOKE: dict[str, Any] = {
    **SETTINGS,
    "tiny_model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "tokenizer": {"vocab_size": 400},
    "prior": {**SETTINGS["prior"], "episodes": 64, "steps": 4, "batch_size": 16},
    "rl": {**SETTINGS["rl"], "steps": 3, "num_groups": 2, "group_size": 4, "max_new_tokens": 24, "mini_batch_size": 8,
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
              sweep_advantage: str = "gae") -> list[dict[str, Any]]:
    """The runs to do: one dict per (variant, seed) with its name, preset and overrides; the
    keep-ratio sweep is StarPO-S with ``sweep_advantage`` (gae = PPO, or grpo)."""
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
    return specs


def _run_one(args: tuple[dict, str, dict, str]) -> str:
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


def _config_key(spec: dict, settings: dict, prior: str) -> str:
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


def replay_monitor(rows: Sequence[dict], std_ratio: float, spike_factor: float, diversity_ratio: float) -> dict[str, int | None]:
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
    sensitive = replay_monitor(train, **SENSITIVE_MONITOR)
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
        "wall_s": result["wall_s"], "cpu_s": result["cpu_s"],
    }


def baseline_of(variant: str, variants: Sequence[str], sweep_advantage: str = "gae") -> str:
    """The variant a run is compared with: StarPO-S X against vanilla StarPO X, a keep-ratio
    run against vanilla StarPO with the sweep's advantage, when present; else the first."""
    vanilla = {"gae": "starpo-ppo", "grpo": "starpo-grpo"}
    if variant.startswith("starpo-s-"):
        wanted = "starpo-" + variant[len("starpo-s-"):]
    elif variant.startswith("keep-"):
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


def plot(rows_by_variant: dict[str, list[list[dict]]], summaries: list[dict], out_png: Path, title: str) -> Path:
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
            jobs: int = 1, sweep_advantage: str = "gae", prior: Path | None = None, log=print) -> dict[str, Any]:
    from ragen_envs.starpo.diagnostics import read_metrics

    t0 = time.monotonic()
    specs = run_specs(variants, seeds, keep_sweep, sweep_advantage)
    for spec in specs:  # refuse bad settings before any training
        _config_key(spec, settings, "")
    out.mkdir(parents=True, exist_ok=True)
    if prior is None:
        prior = build_prior(out, settings, log=log)
    elif not (Path(prior) / "config.json").exists():
        raise ValueError(f"--prior {prior} is not a model directory (no config.json)")
    todo = []
    seen: dict[str, Path] = {}
    for spec in specs:
        run_dir = out / "runs" / spec["variant"] / f"seed{spec['seed']}"
        key = _config_key(spec, settings, str(prior))
        if key in seen:  # the same training run under another name (e.g. keep-25 = starpo-s-*)
            spec["same_as"] = str(seen[key])
            continue
        seen[key] = run_dir
        if not (run_dir / "result.json").exists():
            todo.append((spec, str(prior), settings, str(run_dir)))
    log(f"{len(specs)} runs ({len(specs) - len(todo)} already done), {jobs} at once")
    if jobs > 1 and len(todo) > 1:
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            for done in pool.map(_run_one, todo):
                log(f"  done {done}")
    else:
        for item in todo:
            log(f"  done {_run_one(item)}")

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
        plot(main_runs, [s for s in summaries if s["variant"] in main_runs], out / "echo_trap.png", title)
    if sweep_runs:  # the keep-ratio sweep on its own figure (keep-25 repeats starpo-s-*)
        plot(sweep_runs, [s for s in summaries if s["variant"] in sweep_runs], out / "echo_trap_keep.png",
             title + f", keep-ratio sweep ({sweep_advantage})")
    for line in report_lines(report):
        log(line)
    return report


def report_lines(report: dict) -> list[str]:
    lines = [f"{'variant':<14} {'final success':>13} {'95 % CI':>13}  per seed  | warn/sensitive warn -> collapse per seed | vs baseline"]
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
        lines.append(f"{v:<14} {f['success']:>13.3f} {f['ci'][0]:>6.3f}-{f['ci'][1]:.3f}  {per} | {wc} | {vs}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/echo_trap")
    parser.add_argument("--env", default=None, help="env id (default ragen/Bandit-v0)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["starpo-grpo", "starpo-s-grpo"], choices=sorted(VARIANTS))
    parser.add_argument("--keep-sweep", action="store_true", help="also StarPO-S PPO keeping 25/50/75/100 %% of groups")
    parser.add_argument("--sweep-advantage", default="gae", choices=("gae", "grpo"),
                        help="advantage of the keep-ratio sweep's StarPO-S runs (gae = PPO)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--actor-lr", type=float, default=None)
    parser.add_argument("--group-size", type=int, default=None)
    parser.add_argument("--num-groups", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--expert-prob", type=float, default=None, help="the prior's share of expert actions")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="any rl setting, e.g. kl_coef=0.01")
    parser.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON",
                        help="an env constructor kwarg, e.g. think=false (prior and training)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--prior", default=None, help="reuse this prior model directory (e.g. OTHER_OUT/prior/model)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps (the test)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    settings = json.loads(json.dumps(SMOKE if args.smoke else SETTINGS))
    if args.env:
        settings["env_id"] = args.env
    for key, value in (("steps", args.steps), ("actor_lr", args.actor_lr), ("group_size", args.group_size),
                       ("num_groups", args.num_groups), ("max_new_tokens", args.max_new_tokens)):
        if value is not None:
            settings["rl"][key] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set needs KEY=VALUE, got {item!r}")
        try:
            settings["rl"][key] = json.loads(value)
        except json.JSONDecodeError:
            settings["rl"][key] = value
    for item in args.env_kwarg:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--env-kwarg needs KEY=VALUE, got {item!r}")
        try:
            settings["env_kwargs"][key] = json.loads(value)
        except json.JSONDecodeError:
            settings["env_kwargs"][key] = value
    if args.expert_prob is not None:
        settings["prior"]["expert_prob"] = args.expert_prob
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    try:
        run_lab(Path(args.out), settings, args.variants, args.seeds, keep_sweep=args.keep_sweep, jobs=args.jobs,
                sweep_advantage=args.sweep_advantage, prior=Path(args.prior) if args.prior else None)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
