"""A labelled corpus of Bandit lab runs and the Echo Trap monitor judged on it (issue 21, items 1 and 3).

    python benchmarks/monitor_corpus.py --out runs/monitor_corpus --jobs 2 [--prior DIR] [--lab-runs DIR]

1. Runs: the lab's Bandit setup (``benchmarks/echo_trap.py``: the same tiny model, prior,
   P x N = 8 x 8) for 30 steps, for the configurations in :data:`CONFIGS` — two that
   collapse in §13 (vanilla GRPO, StarPO-S GRPO keeping 100 % of the groups) and four that
   do not (StarPO-S GRPO keep 25 %, which converges on the solved task; keep 50 %, flat;
   vanilla PPO; StarPO-S PPO) — on the development and held-out seeds of :data:`SEEDS`
   (then :data:`EXTRA_SEEDS`), development runs first, then held-out collapsing and healthy
   runs interleaved. Evaluation every 2 steps on the first 32 EVAL_SEEDS at T = 0.5; the
   probe (think diversity, entropy, the cross-scoring MI proxy and H(Z|X),
   :mod:`ragen_envs.starpo.probes`) every 4 steps. ``--lab-runs DIR`` adds the finished
   §13b runs of :data:`LAB_RUNS` as they are.
2. Labels: :func:`ragen_envs.starpo.diagnostics.collapse_label` on each run's evaluation
   curve (written in docs/monitor.md, fixed before any signal was looked at).
3. ``OUT/corpus.jsonl``: one line per run (config, seed, split, label, per-step metrics).
4. The monitor: thresholds chosen on the development runs only (a grid over each signal's
   threshold, :func:`ragen_envs.starpo.diagnostics.replay_monitor`), reported on the
   held-out runs — per signal and combined: warned collapses, lead (steps from the first
   warning to the collapse), false alarms on healthy runs, a ROC-style table over the
   thresholds; the probe's cost next to a training step. ``OUT/monitor.json`` holds the
   numbers, ``OUT/monitor.png`` the curves (bands over seeds, warnings and collapses marked).

Finished runs under ``OUT/runs`` are reused (delete the folder to start over). Everything is
seeded; ``--jobs`` runs that many training processes at once, one thread each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import echo_trap as lab  # noqa: E402

# name -> (preset, overrides, expected from §13: True = collapses)
CONFIGS: dict[str, tuple[str, dict[str, Any], bool]] = {
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
SEEDS: dict[str, dict[str, tuple[int, ...]]] = {
    "vanilla-grpo": {"dev": (0, 1), "heldout": (2, 3, 4, 5, 6, 7)},
    "keep100-grpo": {"dev": (), "heldout": (2, 3)},
    "starpo-s-grpo": {"dev": (), "heldout": (3, 4)},
    "keep50-grpo": {"dev": (11,), "heldout": (2, 3)},
    "vanilla-ppo": {"dev": (), "heldout": (2, 3)},
    "starpo-s-ppo": {"dev": (), "heldout": (2,)},
}
# trained after the above when the session's time allows (same split rules)
EXTRA_SEEDS: dict[str, tuple[int, ...]] = {"starpo-s-ppo": (3,), "keep50-grpo": (4,), "vanilla-grpo": (8,),
                                           "starpo-s-grpo": (5,)}
# Finished lab runs reused as they are (BENCHMARKS §13b, 50 steps, evaluation every 10 steps
# on the 256 EVAL_SEEDS, the probe every 5 steps without the MI proxy): folder under
# --lab-runs, config name, split, seeds. min_p and top_p converge on the solved task; snr
# collapses. Their collapse step is on a 10-step grid (reported apart: see analysis).
LAB_RUNS = (("filters/min_p", "min_p-grpo", "dev", (0, 1, 2)),
            ("filters/top_p", "top_p-grpo", "heldout", (0, 1, 2)),
            ("filters/snr", "snr-grpo", "heldout", (0, 1, 2)))
EXPECT_COLLAPSE = {"min_p-grpo": False, "top_p-grpo": False, "snr-grpo": True,
                   **{name: c for name, (_p, _o, c) in CONFIGS.items()}}


# the lab's settings but 30 steps, evaluation every 2 steps on 32 EVAL_SEEDS, the probe every
# 4 steps on 8 states x 4 replies: what a shared 2-core machine allowed in one session
RL_OVERRIDES = {"steps": 30, "eval_every": 2, "eval_episodes": 32, "probe_every": 4, "probe_states": 8, "probe_samples": 4}

# The multi-turn corpus (``--task sokoban``): the settings of benchmarks/multiturn_trap.py
# (BENCHMARKS §13d: tiny model, 4 turns, P x N = 8 x 4, 32 episodes a step). name -> (setting,
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
# 100 steps (not §13d's 150: the session's CPU), evaluation every 5 steps on the first 32
# EVAL_SEEDS (the label's curve: the same evaluation cost as §13d's 64 every 10, a finer grid
# for the lead), and (since 2026-12-03) the probe every 5 steps on 8 states x 4 replies: Sokoban's
# prompts differ by state, so the MI proxy and H(Z|X) are recorded where they can speak. The probe
# samples from its own seeded stream, so the training steps are those of the probe-less runs.
MT_RL_OVERRIDES = {"steps": 100, "eval_every": 5, "eval_episodes": 32, "probe_every": 5, "probe_states": 8,
                   "probe_samples": 4}
MT_PRIOR_SETTING = "sokoban-free-noop"  # one prior for both settings: its scripted replies ignore the reward


def mt_settings(setting: str) -> dict[str, Any]:
    """multiturn_trap.py's settings for ``setting`` with :data:`MT_RL_OVERRIDES`."""
    import multiturn_trap

    return multiturn_trap.settings_for(setting, rl=MT_RL_OVERRIDES)


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


def corpus_specs(configs=CONFIGS, seeds=SEEDS) -> list[dict]:
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
             for name, seeds_ in EXTRA_SEEDS.items() for s in seeds_] if seeds is SEEDS else []
    return dev + mixed + extra


def run_corpus(out: Path, settings: dict, specs: list[dict], jobs: int, prior: Path | None, log=print,
               build_prior=None, max_runs: int | None = None) -> list[Path]:
    """Train the specs' missing runs (at most ``max_runs`` of them) under OUT/runs; a spec
    with a ``setting`` trains under :func:`mt_settings` of it, the others under ``settings``.
    ``build_prior(out, settings)`` makes the prior when none is given (default: the lab's)."""
    out.mkdir(parents=True, exist_ok=True)
    if prior is None:
        prior = (build_prior or lab.build_prior)(out, settings, log=log)
    elif not (Path(prior) / "config.json").exists():
        raise ValueError(f"--prior {prior} is not a model directory (no config.json)")
    dirs, todo = [], []
    for spec in specs:
        run_dir = out / "runs" / spec["variant"] / f"seed{spec['seed']}"
        dirs.append(run_dir)
        if not (run_dir / "result.json").exists():
            todo.append((spec, str(prior), mt_settings(spec["setting"]) if "setting" in spec else settings, str(run_dir)))
    log(f"{len(specs)} runs ({len(specs) - len(todo)} already done), {jobs} at once")
    if max_runs is not None:
        todo = todo[:max_runs]
    t0 = time.monotonic()
    if jobs > 1 and len(todo) > 1:
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            for done in pool.map(lab._run_one, todo):
                log(f"  done {done} ({time.monotonic() - t0:.0f} s)")
    else:
        for item in todo:
            log(f"  done {lab._run_one(item)} ({time.monotonic() - t0:.0f} s)")
    return dirs


def lab_run_dirs(lab_root: Path | None) -> list[tuple[dict, Path]]:
    """(spec, run folder) of the reused lab runs that exist under ``lab_root``."""
    if lab_root is None:
        return []
    out = []
    for folder, name, split, seeds in LAB_RUNS:
        for s in seeds:
            d = lab_root / folder / "runs" / "starpo-s-grpo" / f"seed{s}"
            if (d / "result.json").exists():
                out.append(({"variant": name, "seed": s, "split": split, "reused": str(d)}, d))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/monitor_corpus")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--prior", default=None, help="reuse this prior model directory (e.g. OTHER_OUT/prior/model)")
    parser.add_argument("--runs-only", action="store_true", help="train the runs, skip the analysis")
    parser.add_argument("--analyze-only", action="store_true",
                        help="train nothing: label and analyse the runs already finished under OUT/runs")
    parser.add_argument("--lab-runs", default=None, help="the folder holding the §13b lab outputs (filters/top_p ...) to reuse")
    parser.add_argument("--task", default="bandit", choices=("bandit", "sokoban"),
                        help="bandit: the lab's Bandit corpus; sokoban: the multi-turn corpus (MT_CONFIGS)")
    parser.add_argument("--splits", nargs="+", default=["dev", "heldout"], choices=("dev", "heldout"),
                        help="train only these splits' runs")
    parser.add_argument("--max-runs", type=int, default=None, help="train at most this many missing runs, then stop")
    parser.add_argument("--configs", nargs="+", default=None, help="train only these configurations' runs")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    if args.max_runs is not None and args.max_runs < 0:
        parser.error("--max-runs must be >= 0")
    if args.task == "bandit":
        settings = json.loads(json.dumps(lab.SETTINGS))
        settings["rl"].update(RL_OVERRIDES)
        specs, build = corpus_specs(), None
    else:
        import multiturn_trap

        settings = mt_settings(MT_PRIOR_SETTING)
        specs, build = mt_specs(), multiturn_trap.build_prior
    out = Path(args.out)
    try:
        if args.analyze_only:
            dirs = [out / "runs" / sp["variant"] / f"seed{sp['seed']}" for sp in specs]
        else:
            chosen = [sp for sp in specs if sp["split"] in args.splits and (args.configs is None or sp["variant"] in args.configs)]
            run_corpus(out, settings, chosen, args.jobs, Path(args.prior) if args.prior else None,
                       build_prior=build, max_runs=args.max_runs)
            dirs = [out / "runs" / sp["variant"] / f"seed{sp['seed']}" for sp in specs]
        if not args.runs_only:
            from monitor_analysis import analyze

            reused = lab_run_dirs(Path(args.lab_runs) if args.lab_runs else None)
            analyze(out, specs + [sp for sp, _ in reused], dirs + [d for _, d in reused])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
