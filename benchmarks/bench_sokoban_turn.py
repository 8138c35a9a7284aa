"""One Sokoban text turn: ``ragen/Sokoban-v0`` vs GEM's and TextArena's Sokoban text envs.

Every side plays the same episodes: ``reset(seed)`` then up to 5 steps, driven by one
pre-drawn sequence of moves (an episode that ends early is cut there). Each reset and each
step is timed on its own with ``perf_counter_ns``; the sides alternate in blocks of episodes
(``--rounds`` blocks, the order rotating every block), so drifts in machine load hit all
alike. All rooms are 6x6 with one box (our Sokoban-v0's size; the peers' levels come from
their own generators).

* ours: ``gym.make("ragen/Sokoban-v0")`` (what a user gets), ``step(reply)`` with
  ``reply = <think>{THINK}</think><answer>Up</answer>``: parse, run, budgets, format penalty,
  the 21-key ``info`` and the next observation text (``Reward:`` + the next ``Turn k:`` block
  with the grid).
* GEM (``gem-llm==0.1.0``): ``gem.make("game:Sokoban-v0-easy", dim_room=(6, 6),
  num_boxes=1)``, ``step(f"{THINK} \\boxed{up}")`` (its observation is a one-line message;
  the board is rendered into ``info["suffix"]``).
* TextArena (``textarena==0.7.4``): ``ta.make("Sokoban-v0-raw", dim_room=(6, 6),
  num_boxes=1)`` (no wrappers), ``step(f"{THINK} [up]")`` + ``get_observation()`` (what the
  model is shown next; TextArena's ``step`` returns only ``(done, info)``).

The peers are imported from ``--peers`` folders (appended to ``sys.path``, so this venv's own
packages win); install them there, never into the project's venv::

    pip install --target /tmp/peers --no-deps gem-llm==0.1.0 textarena==0.7.4
    pip install --target /tmp/peers_deps nltk==3.9.1 "math-verify[antlr4_13_2]" \\
        reasoning-gym==0.1.23 msgspec==0.19.0 openai rich chess python-dotenv requests

A peer that does not import is reported and left out.

Run: ``python benchmarks/bench_sokoban_turn.py [--episodes N] [--rounds R]``.
``--only SIDE --episodes N [--no-steps]`` plays one side alone with no timing, for an
instruction count under ``valgrind --tool=callgrind`` (the difference of a run with steps and
one without, divided by the steps, is the instructions per step; see BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import MOVES, STEPS_PER_EPISODE, THINK, Side, episodes_for, summary  # noqa: E402,F401

def ours_side() -> Side:
    import gymnasium as gym

    import ragen_envs  # noqa: F401

    env = gym.make("ragen/Sokoban-v0")
    replies = {m: f"<think>{THINK}</think><answer>{m.capitalize()}</answer>" for m in MOVES}

    def reset(seed):
        env.reset(seed=seed)

    def step(move):
        _, _, terminated, truncated, _ = env.step(replies[move])
        return terminated or truncated

    return Side("ours", reset, step)


def gem_side() -> Side:
    import logging

    import gem

    logging.getLogger().setLevel(logging.WARNING)  # gem's import sets INFO on the root logger
    env = gem.make("game:Sokoban-v0-easy", dim_room=(6, 6), num_boxes=1)
    replies = {m: f"{THINK} \\boxed{{{m}}}" for m in MOVES}

    def reset(seed):
        env.reset(seed=seed)

    def step(move):
        _, _, terminated, truncated, _ = env.step(replies[move])
        return terminated or truncated

    return Side("GEM", reset, step)


def textarena_side() -> Side:
    import textarena as ta

    env = ta.make("Sokoban-v0-raw", dim_room=(6, 6), num_boxes=1)
    replies = {m: f"{THINK} [{m}]" for m in MOVES}

    def reset(seed):
        env.reset(num_players=1, seed=seed)
        env.get_observation()

    def step(move):
        done, _ = env.step(replies[move])
        env.get_observation()
        return done

    return Side("TextArena", reset, step)


BUILDERS = {"ours": ours_side, "gem": gem_side, "textarena": textarena_side}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=4000, help="timed episodes per side (default 4000)")
    parser.add_argument("--rounds", type=int, default=40, help="interleaved blocks (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the move sequence (default 0)")
    parser.add_argument("--peers", nargs="*", default=["/tmp/peers", "/tmp/peers_deps"],
                        help="folders holding the peers (appended to sys.path)")
    parser.add_argument("--only", choices=sorted(BUILDERS), help="play this side alone, untimed (callgrind)")
    parser.add_argument("--no-steps", action="store_true", help="with --only: resets only")
    args = parser.parse_args(argv)
    sys.path += [p for p in args.peers if p not in sys.path]

    if args.only:
        side = BUILDERS[args.only]()
        side.play(episodes_for(50, args.seed + 1, 10**6))  # warm-up: imports, caches
        side.steps = 0
        side.play(episodes_for(args.episodes, args.seed), timed=False, steps=not args.no_steps)
        print(f"{args.only}: {args.episodes} episodes, {side.steps} steps")
        return 0

    sides, missing = [], []
    for key, build in BUILDERS.items():
        try:
            sides.append(build())
        except Exception as exc:  # a peer that is not installed (or broken) is left out
            missing.append(f"{key}: {type(exc).__name__}: {exc}")
    warm = episodes_for(200, args.seed + 1, 10**6)
    for side in sides:
        side.play(warm)
        side.reset_ns.clear()
        side.step_ns.clear()
    all_eps = episodes_for(args.episodes, args.seed)
    blocks = [all_eps[i::args.rounds] for i in range(args.rounds)]
    block_ratios: dict[str, list[float]] = {s.name: [] for s in sides[1:]}
    for i, block in enumerate(blocks):
        marks = {s.name: len(s.step_ns) for s in sides}
        order = sides[i % len(sides):] + sides[: i % len(sides)]
        for side in order:
            side.play(block)
        ours_med = statistics.median(sides[0].step_ns[marks["ours"]:])
        for s in sides[1:]:
            block_ratios[s.name].append(statistics.median(s.step_ns[marks[s.name]:]) / ours_med)

    print(f"Sokoban one text turn (reset + up to {STEPS_PER_EPISODE} steps), {args.episodes} episodes per side, "
          f"{args.rounds} interleaved blocks")
    print(f"  CPython {platform.python_version()}, numpy {np.__version__}")
    for m in missing:
        print(f"  left out: {m}")
    header = (f"{'side':<11}{'step median us':>15}{'step p95':>10}{'steps':>8}{'reset median us':>17}"
              f"{'step: ours/peer':>17}{'per-block':>11}{'reset: ours/peer':>18}")
    print()
    print(header)
    print("-" * len(header))
    ours_step, ours_reset = summary(sides[0].step_ns), summary(sides[0].reset_ns)
    for s in sides:
        st, rs = summary(s.step_ns), summary(s.reset_ns)
        if s is sides[0]:
            extra = ("", "", "")
        else:
            extra = (f"{st['median'] / ours_step['median']:.2f}x", f"{statistics.median(block_ratios[s.name]):.2f}x",
                     f"{rs['median'] / ours_reset['median']:.1f}x")
        print(f"{s.name:<11}{st['median']:>15.2f}{st['p95']:>10.2f}{st['n']:>8}{rs['median']:>17.2f}"
              f"{extra[0]:>17}{extra[1]:>11}{extra[2]:>18}")
    print()
    print("ours/peer = peer median time / ours median time (> 1: ours is faster);")
    print("per-block = the median over the interleaved blocks of that ratio.")
    for s in sides[1:]:
        ratio = summary(s.step_ns)["median"] / ours_step["median"]
        print(f"goal: ours' step >= 1.0x {s.name}'s -> {ratio:.2f}x -> {'met' if ratio >= 1.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
