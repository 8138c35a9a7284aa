"""Reset and step cost of the Sokoban ids side by side: ``ragen/Sokoban-v0`` against
``ragen/CoordSokoban-v0`` (the same levels, coordinate lines above the grid) and
``ragen/LargeSokoban-v0`` against ``ragen/LargeSokoban-v1`` (the same levels, another
instruction).

Every id plays the same episodes (``reset(seed)`` then up to 5 one-move replies from one
pre-drawn sequence; the timing loop bench_sokoban_turn.py uses too, in _bench_common.py); the ids
alternate in ``--rounds`` blocks, the order rotating every block.

Run: ``python benchmarks/bench_sokoban_ids.py [--episodes N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import MOVES, THINK, Side, episodes_for, summary  # noqa: E402

IDS = ("ragen/Sokoban-v0", "ragen/CoordSokoban-v0", "ragen/LargeSokoban-v0", "ragen/LargeSokoban-v1")


def side(env_id: str) -> Side:
    import warnings

    import gymnasium as gym

    import ragen_envs  # noqa: F401

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # LargeSokoban-v0 beside -v1
        env = gym.make(env_id)
    replies = {m: f"<think>{THINK}</think><answer>{m.capitalize()}</answer>" for m in MOVES}

    def step(move):
        _, _, terminated, truncated, _ = env.step(replies[move])
        return terminated or truncated

    return Side(env_id, lambda seed: env.reset(seed=seed), step)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000, help="timed episodes per id (default 1000)")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved blocks (default 20)")
    args = parser.parse_args(argv)
    sides = [side(env_id) for env_id in IDS]
    for s in sides:
        s.play(episodes_for(50, 1, 10**6))  # warm-up
        s.reset_ns.clear()
        s.step_ns.clear()
    eps = episodes_for(args.episodes, 0)
    for i in range(args.rounds):
        block = eps[i::args.rounds]
        for s in sides[i % len(sides):] + sides[: i % len(sides)]:
            s.play(block)
    print(f"{args.episodes} episodes per id, {args.rounds} interleaved blocks; CPython {platform.python_version()}, "
          f"numpy {np.__version__}")
    print(f"{'id':<24}{'reset median us':>16}{'reset p95':>11}{'step median us':>16}{'step p95':>10}{'steps':>8}")
    med = {}
    for s in sides:
        r, st = summary(s.reset_ns), summary(s.step_ns)
        med[s.name] = (r["median"], st["median"])
        print(f"{s.name:<24}{r['median']:>16.1f}{r['p95']:>11.1f}{st['median']:>16.2f}{st['p95']:>10.2f}{st['n']:>8}")
    for new, base in ((IDS[1], IDS[0]), (IDS[3], IDS[2])):
        print(f"{new} / {base}: reset {med[new][0] / med[base][0]:.3f}x, step {med[new][1] / med[base][1]:.3f}x")
    print(f"LargeSokoban-v0 / Sokoban-v0: reset {med[IDS[2]][0] / med[IDS[0]][0]:.3f}x, "
          f"step {med[IDS[2]][1] / med[IDS[0]][1]:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
