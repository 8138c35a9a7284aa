"""The real trainer on 1 vs K processes: ``torchrun --standalone --nproc_per_node=K -m
ragen_envs.starpo`` against one process, the same config, the same cores.

    .venv/bin/python benchmarks/bench_torchrun.py --worlds 1,2 --rounds 2 --steps 4

Each run trains the demo-sized tiny model (0.93 M parameters, built once) for ``--steps``
StarPO-S iterations on Sokoban (``--groups`` x ``--group-size`` rollouts, answer-only
replies, no evaluation); the table gives the median ``time/step``, ``time/rollout`` and
``time/update`` over the steps after the first (warm-up), from rank 0's metrics.jsonl.
One process gets ``--cores`` torch threads, K processes ``--cores // K`` each, so every
world uses the same cores. Worlds run interleaved for ``--rounds`` rounds.

``--gradient-analysis`` turns RAGEN-2's gradient report on at every step (6 quantile buckets
of the kept groups, ``--sharding`` none / ddp / fsdp) and adds its median
``time/gradient_analysis`` and its ratio to the rest of the same step's ``time/update``
(scoring, advantages and the update itself).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_world(world: int, model: Path, out: Path, args) -> list[dict]:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    threads = max(args.cores // world, 1)
    sets = {"num_groups": args.groups, "group_size": args.group_size, "max_new_tokens": 12, "keep_ratio": 0.25,
            "mini_batch_size": 32, "micro_batch_size": 16, "actor_lr": 2e-5, "critic_lr": 5e-4, "eval_every": 0,
            "probe_every": 0, "save_every": 0, "log_samples": 0, "plots": "false", "sharding": args.sharding}
    if args.gradient_analysis:
        sets.update({"gradient_analysis_mode": "true", "gradient_analysis_every": 1})
    head = [torchrun, "--standalone", f"--nproc_per_node={world}", "-m"] if world > 1 else [sys.executable, "-m"]
    cmd = head + ["ragen_envs.starpo", "ragen/Sokoban-v0", "--model", str(model), "--steps", str(args.steps),
                  "--out", str(out), "--env-kwarg", "think=false"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"world {world} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--sharding", default="none", choices=("none", "ddp", "fsdp"))
    ap.add_argument("--gradient-analysis", action="store_true", help="RAGEN-2's gradient report at every step")
    args = ap.parse_args(argv)
    try:
        worlds = [int(w) for w in args.worlds.split(",")]
    except ValueError:
        ap.error(f"--worlds must be process counts like 1,2 (got {args.worlds!r})")
    if min(worlds) < 1 or max(worlds) > args.groups:
        ap.error(f"--worlds must be between 1 and --groups ({args.groups}), got {args.worlds!r}")

    from ragen_envs.starpo.demo import DEMO
    from ragen_envs.starpo.tiny import build_tiny_policy

    tmp = Path(tempfile.mkdtemp(prefix="bench_torchrun_"))
    model = tmp / "model"
    build_tiny_policy(model, "ragen/Sokoban-v0", {"think": False}, seed=0, **DEMO["tiny_model"])
    keys = ("step", "rollout", "update") + (("gradient_analysis",) if args.gradient_analysis else ())
    times: dict[int, dict[str, list[float]]] = {w: {k: [] for k in keys} for w in worlds}
    for r in range(args.rounds):
        for w in worlds:
            rows = run_world(w, model, tmp / f"run_{w}_{r}", args)
            for row in rows[1:]:
                for key in keys:
                    if f"time/{key}" in row:
                        times[w][key].append(row[f"time/{key}"])
            print(f"round {r} world {w}: median step {statistics.median(times[w]['step']):.2f}s", file=sys.stderr)
    base = statistics.median(times[worlds[0]]["step"])
    report = " report | report / update |" if args.gradient_analysis else ""
    print(f"| processes | threads each | step (median s) | rollout | update | speed-up vs {worlds[0]} |{report}")
    print("|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.gradient_analysis else ""))
    for w in worlds:
        med = {k: statistics.median(v) if v else float("nan") for k, v in times[w].items()}
        line = (f"| {w} | {max(args.cores // w, 1)} | {med['step']:.2f} | {med['rollout']:.2f} | {med['update']:.2f} | "
                f"{base / med['step']:.2f}x |")
        if args.gradient_analysis:  # (time/update includes the report: the update alone is the difference)
            ga = med["gradient_analysis"]
            alone = statistics.median(u - g for u, g in zip(times[w]["update"], times[w]["gradient_analysis"]))
            line += f" {ga:.2f} | {ga / alone:.2f}x |"
        print(line)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
