"""What RAGEN-2's collapse metrics and gradient report cost next to a training step (tiny model).

    python benchmarks/bench_collapse_cost.py --steps 6 --threads 1

One StarPO-S run on ragen/Sokoban-v0 with the tiny local model, the reference's batch (8
groups x 16 rollouts) and its collapse_detection defaults (num_samples 64, micro-batches of
128), both samples on (first turn, trajectory-uniform multi-turn) and the gradient report
(6 quantile buckets) on every step. The replies are the expert's (a grounded think text
and its moves, through the trainer's own token-in/token-out rollout code): a tiny model
barely ever closes ``</think>``, which would leave nothing to score. The update, the
cross-scoring and the gradient passes run the tiny model as in any run.

Per step: ``time/collapse`` and ``time/gradient_analysis`` next to the rest of the same step
(``time/step`` minus both), so each ratio is measured side by side; the medians over the
steps after the first (warm-up) are printed, with the number of scored pairs. With the
expert's replies a rollout costs next to nothing, so ``--sampled-baseline`` then runs the
same configuration once more with the tiny model sampling its own replies (metrics off) and
reports its median step too, for the cost against an ordinary step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=6, help="training steps (the first is warm-up; default 6)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--num-samples", default="64", help='collapse_detection num_samples (default 64; "all")')
    p.add_argument("--sampled-baseline", action="store_true",
                   help="also time steps whose replies the tiny model samples (collapse metrics and report off)")
    p.add_argument("--out", help="write the result JSON here")
    args = p.parse_args(argv)
    if args.steps < 2 or args.threads < 1:
        p.error("--steps must be >= 2 and --threads >= 1")
    num_samples = "all" if args.num_samples == "all" else int(args.num_samples)

    import torch

    torch.set_num_threads(args.threads)
    from ragen_envs.starpo import trainer as T
    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.diagnostics import read_metrics
    from ragen_envs.starpo.expert import expert_reply_fn
    from ragen_envs.starpo.rollout import ScriptedResponder

    sampler = T.CachedResponder
    T.CachedResponder = lambda model, fmt, *a, **k: ScriptedResponder(fmt, expert_reply_fn("grounded"))
    settings = dict(steps=args.steps, num_groups=8, group_size=16, eval_every=0, probe_every=0, save_every=0, plots=False,
                    log_samples=0, mini_batch_size=32, micro_batch_size=16, max_new_tokens=64)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = make_config("starpo-s", out_dir=tmp, **settings,
                          collapse_detection={"first_turn_enabled": True, "multi_turn_enabled": True,
                                              "compute_freq": 1, "num_samples": num_samples},
                          gradient_analysis_mode=True, gradient_analysis_every=1)
        T.StarPOTrainer(cfg, log=lambda m: None).train()
        rows = [r for r in read_metrics(Path(tmp) / "metrics.jsonl") if not r.get("final")][1:]
    sampled = None
    if args.sampled_baseline:
        T.CachedResponder = sampler
        with tempfile.TemporaryDirectory() as tmp:
            T.StarPOTrainer(make_config("starpo-s", out_dir=tmp, **settings), log=lambda m: None).train()
            sampled = [r for r in read_metrics(Path(tmp) / "metrics.jsonl") if not r.get("final")][1:]
    med = statistics.median
    rest = [r["time/step"] - r["time/collapse"] - r.get("time/gradient_analysis", 0.0) for r in rows]
    result = {
        "steps_measured": len(rows),
        "threads": args.threads,
        "num_samples": num_samples,
        "median_step_without_s": med(rest),
        "median_collapse_s": med(r["time/collapse"] for r in rows),
        "median_collapse_first_turn_s": med(r["time/collapse_first_turn"] for r in rows),
        "median_collapse_multi_turn_s": med(r["time/collapse_multi_turn"] for r in rows),
        "median_gradient_analysis_s": med(r["time/gradient_analysis"] for r in rows),
        "median_collapse_ratio": med(r["time/collapse"] / x for r, x in zip(rows, rest)),
        "median_gradient_ratio": med(r["time/gradient_analysis"] / x for r, x in zip(rows, rest)),
        "median_update_s": med(r["time/update"] - r["time/gradient_analysis"] for r in rows),
        "first_turn_rows": med(r["collapse/first_turn_num_valid"] for r in rows),
        "update_trajectories": med(r["update/trajectories"] for r in rows),
        "mi_first_turn": [round(r["collapse_first_turn_sample/mi_estimate"], 4) for r in rows],
        "mi_upper_bound_first_turn": rows[0]["collapse_first_turn_sample/mi_upper_bound"],
    }
    if sampled:
        result["sampled_median_step_s"] = med(r["time/step"] for r in sampled)
        result["sampled_median_rollout_s"] = med(r["time/rollout"] for r in sampled)
        result["collapse_over_sampled_step"] = result["median_collapse_s"] / result["sampled_median_step_s"]
        result["first_turn_over_sampled_step"] = result["median_collapse_first_turn_s"] / result["sampled_median_step_s"]
        result["gradient_over_sampled_step"] = result["median_gradient_analysis_s"] / result["sampled_median_step_s"]
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
