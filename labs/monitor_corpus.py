"""A labelled corpus of Bandit lab runs and the Echo Trap monitor judged on it (issue 21, items 1 and 3).

    python labs/monitor_corpus.py --out runs/monitor_corpus --jobs 2 [--prior DIR] [--lab-runs DIR]

1. Runs: the lab's Bandit setup (``labs/echo_trap.py``: the same tiny model, prior,
   P x N = 8 x 8) for 30 steps, for the configurations in ``CORPUS_CONFIGS`` — two that
   collapse in the Echo Trap lab (benchmarks/results/2026-12-01-echo-trap.md §13; vanilla GRPO, StarPO-S GRPO keeping 100 % of the groups) and four that
   do not (StarPO-S GRPO keep 25 %, which converges on the solved task; keep 50 %, flat;
   vanilla PPO; StarPO-S PPO) — on the development and held-out seeds of ``CORPUS_SEEDS``
   (then ``CORPUS_EXTRA_SEEDS``), development runs first, then held-out collapsing and healthy
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
seeded; ``--jobs`` runs that many training processes at once, one thread each. The run
specs, the lab's runner and the analysis live in ``labs/_labs_common.py`` (``monitor_noise.py``
reads the same corpora).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):  # the checkout (ragen_envs) and this folder (_labs_common)
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _labs_common import (BANDIT_SETTINGS, CORPUS_CONFIGS, analyze, build_mt_prior, corpus_specs,  # noqa: E402
                          mt_settings_for, mt_specs, run_todo)
from _labs_common import build_prior as build_bandit_prior  # noqa: E402  (run_corpus has a build_prior argument)


# Finished lab runs reused as they are (benchmarks/results/2026-12-01-echo-trap.md §13b, 50 steps, evaluation every 10 steps
# on the 256 EVAL_SEEDS, the probe every 5 steps without the MI proxy): folder under
# --lab-runs, config name, split, seeds. min_p and top_p converge on the solved task; snr
# collapses. Their collapse step is on a 10-step grid (reported apart: see analysis).
LAB_RUNS = (("filters/min_p", "min_p-grpo", "dev", (0, 1, 2)),
            ("filters/top_p", "top_p-grpo", "heldout", (0, 1, 2)),
            ("filters/snr", "snr-grpo", "heldout", (0, 1, 2)))
EXPECT_COLLAPSE = {"min_p-grpo": False, "top_p-grpo": False, "snr-grpo": True,
                   **{name: c for name, (_p, _o, c) in CORPUS_CONFIGS.items()}}


# the lab's settings but 30 steps, evaluation every 2 steps on 32 EVAL_SEEDS, the probe every
# 4 steps on 8 states x 4 replies: what a shared 2-core machine allowed in one session
RL_OVERRIDES = {"steps": 30, "eval_every": 2, "eval_episodes": 32, "probe_every": 4, "probe_states": 8, "probe_samples": 4}

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
    return mt_settings_for(setting, rl=MT_RL_OVERRIDES)


def run_corpus(out: Path, settings: dict, specs: list[dict], jobs: int, prior: Path | None, log=print,
               build_prior=None, max_runs: int | None = None) -> list[Path]:
    """Train the specs' missing runs (at most ``max_runs`` of them) under OUT/runs; a spec
    with a ``setting`` trains under :func:`mt_settings` of it, the others under ``settings``.
    ``build_prior(out, settings)`` makes the prior when none is given (default: the lab's)."""
    out.mkdir(parents=True, exist_ok=True)
    if prior is None:
        prior = (build_prior or build_bandit_prior)(out, settings, log=log)
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
    run_todo(todo, jobs, log)
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
        settings = json.loads(json.dumps(BANDIT_SETTINGS))
        settings["rl"].update(RL_OVERRIDES)
        specs, build = corpus_specs(), None
    else:
        settings = mt_settings(MT_PRIOR_SETTING)
        specs, build = mt_specs(), build_mt_prior
    out = Path(args.out)
    try:
        if args.analyze_only:
            dirs = [out / "runs" / sp["variant"] / f"seed{sp['seed']}" for sp in specs]
            if not any((d / "result.json").exists() for d in dirs):
                raise ValueError(f"--analyze-only: no finished run under {out / 'runs'}; train them first (without it)")
        else:
            chosen = [sp for sp in specs if sp["split"] in args.splits and (args.configs is None or sp["variant"] in args.configs)]
            run_corpus(out, settings, chosen, args.jobs, Path(args.prior) if args.prior else None,
                       build_prior=build, max_runs=args.max_runs)
            dirs = [out / "runs" / sp["variant"] / f"seed{sp['seed']}" for sp in specs]
        if not args.runs_only:
            reused = lab_run_dirs(Path(args.lab_runs) if args.lab_runs else None)
            analyze(out, specs + [sp for sp, _ in reused], dirs + [d for _, d in reused])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
