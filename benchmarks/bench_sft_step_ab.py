"""One SFT step (forward + backward of ``sequence_logprobs`` on the same 32 expert Sokoban
episodes) under two checkouts of the code, alternated A/B/A/B in separate processes: did a
change slow the demo's SFT step down, or is it the machine?

    python benchmarks/bench_sft_step_ab.py --a /path/to/old/checkout --b . --model runs/demo/model_init

Each process loads ``--model`` (a demo ``model_init``), builds the batch (expert episodes on
seeds 10000..10031, answer-only replies, two actions a reply), times ``--steps`` steps after
one warm-up step with 2 torch threads, and prints the median CPU and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, statistics, sys, time, torch
import ragen_envs.starpo.policy as P
from ragen_envs.starpo.expert import expert_trajectories
torch.set_num_threads(2)
model_dir, steps = sys.argv[1], int(sys.argv[2])
model, tok = P.load_policy(model_dir), P.load_tokenizer(model_dir)
fmt = P.ChatFormat(tok, "<answer>")
trajs = expert_trajectories("ragen/Sokoban-v0", fmt, range(10000, 10032), env_kwargs={"think": False}, actions_per_turn=2)
ids = P.pad_right([t.token_ids for t in trajs], tok.pad_token_id)
att = P.pad_right([[1] * len(t.token_ids) for t in trajs], 0)
mask = P.pad_right([t.loss_mask for t in trajs], 0, dtype=torch.float32)
cpu, wall = [], []
for i in range(steps + 1):
    model.zero_grad()
    c, w = time.process_time(), time.perf_counter()
    lp, _ = P.sequence_logprobs(model, ids, att, mask)
    (-lp.sum()).backward()
    if i:
        cpu.append(time.process_time() - c); wall.append(time.perf_counter() - w)
print(json.dumps({"shape": list(ids.shape), "cpu": statistics.median(cpu), "wall": statistics.median(wall)}))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="checkout A (its root directory)")
    parser.add_argument("--b", required=True, help="checkout B")
    parser.add_argument("--model", required=True, help="a demo model_init directory")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    for side in (args.a, args.b):
        if not (Path(side) / "ragen_envs" / "__init__.py").exists():
            parser.error(f"{side} is not a ragen-envs checkout (no ragen_envs/__init__.py)")
    if not (Path(args.model) / "config.json").exists():
        parser.error(f"--model {args.model} is not a model directory (no config.json)")
    res: dict[str, list[dict]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        for name, root in (("A", args.a), ("B", args.b)):
            env = {**os.environ, "PYTHONPATH": str(Path(root).resolve())}
            out = subprocess.run([sys.executable, "-c", CHILD, args.model, str(args.steps)], env=env,
                                 capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"error: checkout {name} ({root}) failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                return 1
            res[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for name in ("A", "B"):
        rows = res[name]
        print(f"{name}: batch {rows[0]['shape']}, SFT step median over rounds: "
              f"{statistics.median(r['cpu'] for r in rows):.3f} s CPU, {statistics.median(r['wall'] for r in rows):.3f} s wall "
              f"(rounds: {', '.join(format(r['wall'], '.3f') for r in rows)})")
    a = statistics.median(r["cpu"] for r in res["A"])
    b = statistics.median(r["cpu"] for r in res["B"])
    print(f"B / A CPU: {b / a:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
