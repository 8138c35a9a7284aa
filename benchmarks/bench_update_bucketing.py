"""The demo's RL update with micro-batches in batch order vs of similar-length rows (issue 23
goal 2): the same kept batch, the two settings interleaved round by round.

    python benchmarks/bench_update_bucketing.py --sft runs/demo/sft/model --rounds 4 --threads 1

One StarPO-S trainer with the demo's RL settings (``DEMO["rl"]``: 32 groups x 8, keep 25 %,
PPO with a critic, mini-batches of 32, micro-batches of 16) plays one training step's
rollouts from ``--sft``; its kept batch (64 trajectories) is captured and the update
(scoring passes, advantages, the optimiser steps of actor and critic) is timed on it with
``bucket_micro_batches`` off and on, alternately. Reports the median wall and CPU seconds of
each, their ratio, and the token cells the micro-batches held (rows x padded length).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sft", required=True, help="an SFT model directory (the demo's OUT/sft/model)")
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds (each: off, then on; default 4)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--out", help="write the result JSON here")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        p.error("--rounds and --threads must be >= 1")
    if not (Path(args.sft) / "config.json").exists():
        p.error(f"--sft {args.sft!r} is not a model directory (no config.json)")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.demo import DEMO
    from ragen_envs.starpo.trainer import StarPOTrainer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        rl = {**DEMO["rl"], "steps": 1, "save_every": 0, "probe_every": 0, "eval_every": 0}
        cfg = make_config("starpo-s", env_id=DEMO["env_id"], env_kwargs=DEMO["env_kwargs"], model=args.sft,
                          out_dir=tmp, seed=DEMO["seed"], eval_episodes=1, plots=False, **rl)
        tr = StarPOTrainer(cfg, log=lambda s: None)
        captured = []
        real_update = tr._update

        def capture(trajs, rewards, kept):
            captured.append((trajs, rewards, kept))
            return real_update(trajs, rewards, kept)

        tr._update = capture
        tr.train_step()
        tr._update = real_update
        if not captured:
            print("error: the training step kept fewer than 2 trajectories; nothing to update", file=sys.stderr)
            return 2
        trajs, rewards, kept = captured[0]
        cells: list[int] = []
        real_micro = tr._micro

        def micro(batch, idx):
            m = real_micro(batch, idx)
            cells.append(int(m["ids"].shape[1]) * len(idx))
            return m

        tr._micro = micro
        times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        held: dict[bool, int] = {}
        for _ in range(args.rounds):
            for on in (False, True):
                tr.bucket_micro_batches = on
                cells.clear()
                w, c = time.perf_counter(), time.process_time()
                tr._update(trajs, rewards, kept)
                times[on].append((time.perf_counter() - w, time.process_time() - c))
                held[on] = sum(cells)
    tokens = sum(len(t.token_ids) for t in trajs)
    med = {on: (statistics.median(w for w, _ in ts), statistics.median(c for _, c in ts)) for on, ts in times.items()}
    res = {"trajectories": len(trajs), "tokens": tokens, "rounds": args.rounds, "threads": args.threads,
           "cells": {"batch_order": held[False], "bucketed": held[True]},
           "median_wall_s": {"batch_order": med[False][0], "bucketed": med[True][0]},
           "median_cpu_s": {"batch_order": med[False][1], "bucketed": med[True][1]},
           "per_round_cpu_ratio": [a[1] / b[1] for a, b in zip(times[False], times[True])]}
    print(f"the demo's update on one kept batch: {len(trajs)} trajectories, {tokens} tokens; median of "
          f"{args.rounds} interleaved rounds, {args.threads} thread(s)")
    print("| micro-batches | token cells held | update wall | update CPU |\n|---|---:|---:|---:|")
    for on, name in ((False, "batch order"), (True, "length-bucketed")):
        print(f"| {name} | {held[on]} | {med[on][0]:.2f} s | {med[on][1]:.2f} s |")
    print(f"batch order / bucketed: cells {held[False] / held[True]:.2f}x, wall {med[False][0] / med[True][0]:.2f}x, "
          f"CPU {med[False][1] / med[True][1]:.2f}x (per round "
          + ", ".join(f"{r:.2f}" for r in res["per_round_cpu_ratio"]) + ")")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
