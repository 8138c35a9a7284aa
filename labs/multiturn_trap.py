"""The Echo Trap in multi-turn play (issue 21 item 2): vanilla StarPO vs StarPO-S, tiny model.

    python labs/multiturn_trap.py --setting sokoban-free-noop --out runs/multiturn_trap --seeds 0 1 2

One command for the final comparison of benchmarks/results/2026-12-03-monitor-multiturn-trap.md §13d: for a named setting (env, reply
protocol, prior, RL sizes; ``MT_SETTINGS`` in ``labs/_labs_common.py``), it

1. builds a tiny Qwen2-architecture model and gives it a *prior* by SFT on scripted
   answer-only replies: each reply names ``k`` uniformly random actions, ``k`` uniform in
   ``1 .. max_actions`` (``random_reply_fn``), so the prior plays like a random agent
   whose replies vary in length;
2. trains vanilla StarPO (preset ``starpo``: no filter, KL 0.001, clip 0.2 / 0.2) and
   StarPO-S (preset ``starpo-s``: top-25 % groups by return std, no KL, clip 0.2 / 0.28),
   both GRPO by default, on the same training seeds from the same prior, through the Echo
   Trap lab's runner (``labs/echo_trap.py``'s ``run_lab``, in ``labs/_labs_common.py``; it reuses finished runs);
3. writes ``OUT/multiturn_trap.png`` (the paper's Figure-style curves: evaluation success
   vs step, mean over seeds with a min-max band, each run's collapse step by the evaluation
   label of docs/monitor.md and its first ``MULTITURN_MONITOR`` warning marked; rollout
   success, in-group return std, malformed replies, entropy, reply length) and ``OUT/multiturn_trap.json``
   (per run: collapse steps — the evaluation label, and the lab's rollout-success rule —,
   first warning, peak / final success; per variant: pooled success with a Wilson
   CI; StarPO-S against vanilla on the same (training seed, eval seed) pairs: exact McNemar
   p and a seed-stratified bootstrap CI of the difference, pooled and per seed).

Settings: ``sokoban`` / ``frozenlake`` are the envs' defaults with answer-only replies and 4
turns; ``sokoban-free-noop`` also sets ``format_penalty=0``, so a malformed reply (a turn
without a move) pays 0 while every move costs 0.1: the Bandit's safe arm in multi-turn form.
In a group where nobody solves the level (most groups, for a near-random policy) the member
that moved least has the highest return, and GRPO's per-group normalisation gives that 0.1-0.4
gap the same unit advantage as the 10.9 of a solve; StarPO-S's filter keeps the high-std
groups, those with a solve, when the batch has one (§13d: vanilla collapses to
no-move replies by step 28, StarPO-S about 40 steps later, seed 0). ``sokoban-free-noop-n16``
is the same with the paper's group size, 8 x 16 (BENCHMARKS.md#multi-turn-trap: there StarPO-S avoids the
collapse that vanilla falls into on every seed). The search of §13d (one seed, vanilla only, other settings) is
the same command with ``--variants starpo-grpo --seeds 0`` and ``--set`` / ``--env-kwarg``
changes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):  # the checkout (ragen_envs) and this folder (_labs_common)
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _labs_common import (MT_SETTINGS, VARIANTS, baseline_of, build_mt_prior, config_key,  # noqa: E402
                          mt_settings_for, parse_kv, run_lab, run_specs, smooth)


VARIANT_LABELS = {"starpo-grpo": "vanilla StarPO (GRPO)", "starpo-s-grpo": "StarPO-S (GRPO)",
                  "starpo-ppo": "vanilla StarPO (PPO)", "starpo-s-ppo": "StarPO-S (PPO)"}


# ----------------------------------------------------------------------------- analysis
def curve(rows: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows that carry a finite number under ``key``."""
    pts = [(r["step"], float(r[key])) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [s for s, _ in pts], [v for _, v in pts]


def band(series: Sequence[tuple[Sequence[int], Sequence[float]]]) -> tuple[list[int], list[float], list[float], list[float]]:
    """Mean, min and max over runs at the steps every run has: for each shared step t,
    mean_t = (1/R) Σ_r x_r(t), lo_t = min_r x_r(t), hi_t = max_r x_r(t)."""
    if not series:
        return [], [], [], []
    maps = [dict(zip(s, v)) for s, v in series]
    steps = sorted(set.intersection(*(set(m) for m in maps)))
    mean = [sum(m[t] for m in maps) / len(maps) for t in steps]
    return steps, mean, [min(m[t] for m in maps) for t in steps], [max(m[t] for m in maps) for t in steps]


def per_seed_tests(results: dict[str, list[dict]], base: str, other: str) -> dict[int, dict[str, Any]]:
    """For each training seed both variants ran: success of each and the exact McNemar p of
    ``other`` against ``base`` on that seed's eval episodes (same eval seeds and stream)."""
    from ragen_envs.starpo.stats import mcnemar_exact, paired_counts

    a = {r["spec"]["seed"]: r["final_success"] for r in results.get(base, [])}
    b = {r["spec"]["seed"]: r["final_success"] for r in results.get(other, [])}
    out = {}
    for s in sorted(set(a) & set(b)):
        if not a[s] or len(a[s]) != len(b[s]):
            continue
        c = paired_counts(a[s], b[s])
        out[s] = {base: sum(a[s]) / len(a[s]), other: sum(b[s]) / len(b[s]), "only_base": c["only_a"],
                  "only_other": c["only_b"], "mcnemar_p": mcnemar_exact(c["only_a"], c["only_b"])}
    return out


def run_marks(rows: Sequence[dict]) -> dict[str, Any]:
    """A run's evaluation curve and peak, its collapse step by the corpus's label (the
    evaluation curve below a quarter of its running best for good, docs/monitor.md:
    ``collapse_label``) and the first warning of ``monitor.MULTITURN_MONITOR`` replayed on its
    metrics (the noise-aware rule for sparse multi-turn tasks)."""
    from ragen_envs.starpo.diagnostics import collapse_label, replay_monitor
    from ragen_envs.starpo.monitor import MULTITURN_MONITOR

    steps, ev = curve(rows, "eval/success")
    return {"eval_curve": ev, "eval_peak": max(ev) if ev else None,
            "eval_collapse_step": collapse_label(steps, ev) if ev else None,
            "multiturn_warning": replay_monitor(rows, **MULTITURN_MONITOR)["alarm"]}


def plot_figure(rows_by_variant: dict[str, list[list[dict]]], summaries: Sequence[dict], out_png: Path,
                title: str, window: int = 5) -> Path:
    """The Figure-style panels: eval success (mean over seeds, min-max band, a dashed line at
    each run's collapse step by the evaluation label, a triangle at its first
    ``MULTITURN_MONITOR`` warning), rollout success (trailing mean over ``window`` steps),
    in-group return std, share of malformed replies, entropy, reply tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    axes = list(axes.flat)
    colors = {v: f"C{i}" for i, v in enumerate(rows_by_variant)}
    getters = (
        ("eval success (T = 0.5, same eval seeds)", lambda rows: curve(rows, "eval/success")),
        (f"rollout success ({window}-step mean)",
         lambda rows: (lambda s, v: (s, smooth(v, window)))(*curve(rows, "rollout/success"))),
        ("in-group return std", lambda rows: curve(rows, "rollout/in_group_std")),
        ("malformed replies (no move; rollouts)", lambda rows: curve(rows, "rollout/format_error")),
        ("actor entropy", lambda rows: curve(rows, "actor/entropy")),
        ("reply tokens (rollouts)", lambda rows: curve(rows, "rollout/response_length")),
    )
    for ax, (name, get) in zip(axes, getters):
        for variant, runs in rows_by_variant.items():
            steps, mean, lo, hi = band([get(rows) for rows in runs])
            if not steps:
                continue
            ax.plot(steps, mean, color=colors[variant], label=VARIANT_LABELS.get(variant, variant),
                    marker="." if len(steps) < 30 else None)
            ax.fill_between(steps, lo, hi, color=colors[variant], alpha=0.18)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.tick_params(labelsize=8)
    for ax in axes[:2]:
        top = ax.get_ylim()[1]
        for s in summaries:
            c = s.get("eval_collapse_step")
            if c is not None:
                ax.axvline(c, color=colors.get(s["variant"], "k"), ls="--", lw=0.9, alpha=0.7)
            w = s.get("multiturn_warning")
            if w is not None:
                ax.plot([w], [top], marker="v", color=colors.get(s["variant"], "k"), clip_on=False)
    axes[0].legend(fontsize=8)
    fig.suptitle(title + "\n(bands: min-max over seeds; dashed: a run's collapse by the evaluation label; "
                 "v: its first MULTITURN_MONITOR warning)", fontsize=10)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=72)
    plt.close(fig)
    return out_png


def run(out: Path, settings: dict, variants: Sequence[str], seeds: Sequence[int], jobs: int = 1,
        prior: Path | None = None, log=print) -> dict[str, Any]:
    """Prior (built or given), the lab's runs, then the figure and the JSON; returns the report."""
    from ragen_envs.starpo.diagnostics import read_metrics

    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    if prior is None:
        for spec in run_specs(variants, seeds, False):  # refuse bad settings before the prior
            config_key(spec, settings, "")
        prior = build_mt_prior(out, settings, log=log)
    lab = run_lab(out, settings, variants, seeds, jobs=jobs, prior=Path(prior), log=log)
    rows_by_variant: dict[str, list[list[dict]]] = {}
    results: dict[str, list[dict]] = {}
    for v in variants:
        for s in seeds:
            run_dir = out / "runs" / v / f"seed{s}"
            rows_by_variant.setdefault(v, []).append(read_metrics(run_dir / "metrics.jsonl"))
            results.setdefault(v, []).append({**json.loads((run_dir / "result.json").read_text()),
                                              "spec": {"variant": v, "seed": s}})
    runs = [{k: r[k] for k in ("variant", "seed", "collapse_step", "peak_rollout_success", "last_rollout_success",
                               "final_success", "final_ci", "in_group_std_first5", "in_group_std_last5", "wall_s",
                               "cpu_s")} for r in lab["runs"]]
    for r, rows in zip(runs, [rows for v in variants for rows in rows_by_variant[v]]):
        r.update(run_marks(rows))
    report: dict[str, Any] = {"settings": settings, "variants": list(variants), "seeds": list(seeds), "prior": str(prior),
                              "runs": runs, "final": lab["final"]}
    vanilla = [v for v in variants if not v.startswith("starpo-s-")]
    cured = [v for v in variants if v.startswith("starpo-s-")]
    report["per_seed"] = {f"{c} vs {baseline_of(c, list(variants))}":
                          per_seed_tests(results, baseline_of(c, list(variants)), c) for c in cured if vanilla}
    rl = settings["rl"]
    title = (f"{settings['env_id']} {json.dumps(settings['env_kwargs'])}: tiny model, P x N = {rl['num_groups']} x "
             f"{rl['group_size']}, actor lr {rl['actor_lr']}, cap {rl['max_new_tokens']} tokens, {len(seeds)} seed(s)")
    plot_figure(rows_by_variant, runs, out / "multiturn_trap.png", title, settings["collapse"]["window"])
    report["wall_s"] = time.monotonic() - t0
    (out / "multiturn_trap.json").write_text(json.dumps(report, indent=2))
    for line in report_lines(report):
        log(line)
    return report


def report_lines(report: dict) -> list[str]:
    lines = []
    for r in report["runs"]:
        lines.append(f"{r['variant']:<14} seed {r['seed']}: final {r['final_success']:.3f} "
                     f"[{r['final_ci'][0]:.3f}, {r['final_ci'][1]:.3f}], eval peak {r['eval_peak']}, rollout peak "
                     f"{r['peak_rollout_success']:.3f} -> last5 {r['last_rollout_success']:.3f}, collapse (eval label) "
                     f"{r.get('eval_collapse_step')}, rollout rule {r['collapse_step']}, MULTITURN_MONITOR warning "
                     f"{r.get('multiturn_warning')}, {r['cpu_s']:.0f} s CPU / {r['wall_s']:.0f} s wall")
    for v, f in report["final"].items():
        line = f"{v:<14} pooled {f['success']:.3f} [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}] (n = {f['n']})"
        if "vs_base" in f:
            b = f["vs_base"]
            line += (f"; vs {b['base']}: {b['diff']:+.3f} [{b['diff_ci'][0]:+.3f}, {b['diff_ci'][1]:+.3f}], "
                     f"only base {b['only_a']} / only this {b['only_b']}, McNemar p = {b['mcnemar_p']:.3g}")
        lines.append(line)
    for name, per in report.get("per_seed", {}).items():
        for s, e in per.items():
            lines.append(f"{name} seed {s}: {e['only_base']} / {e['only_other']} discordant, p = {e['mcnemar_p']:.3g}")
    return lines



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", default="sokoban-free-noop", choices=sorted(MT_SETTINGS))
    parser.add_argument("--out", default="runs/multiturn_trap")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["starpo-grpo", "starpo-s-grpo"], choices=sorted(VARIANTS))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="an rl setting, e.g. actor_lr=1e-3")
    parser.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON", help="an env kwarg (prior and RL)")
    parser.add_argument("--prior-set", action="append", default=[], metavar="KEY=JSON",
                        help="a prior setting, e.g. max_actions=2")
    parser.add_argument("--prior", default=None, help="reuse this prior model directory")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps (the test)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    try:
        settings = mt_settings_for(args.setting, args.smoke, parse_kv(args.set, "--set", parser),
                                parse_kv(args.env_kwarg, "--env-kwarg", parser),
                                parse_kv(args.prior_set, "--prior-set", parser))
        if args.prior and not (Path(args.prior) / "config.json").exists():
            raise ValueError(f"--prior {args.prior} is not a model directory (no config.json)")
        run(Path(args.out), settings, args.variants, args.seeds, jobs=args.jobs,
            prior=Path(args.prior) if args.prior else None)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
