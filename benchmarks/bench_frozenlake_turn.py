"""One FrozenLake text turn: ``ragen/FrozenLake-v0`` vs Gymnasium's ``FrozenLake-v1`` + ansi render.

Ours: ``env.step(reply)`` with a one-action reply (``<think>...</think><answer>Down</answer>``):
it parses the reply, runs the action (one slip draw), charges the budgets, builds ``info`` and
writes the next observation text (``Reward:`` + the next ``Turn k:`` block with the grid).
Peer: ``env.step(action)`` then ``env.render()`` on ``FrozenLake-v1`` with
``render_mode="ansi"`` (the grid as text with the player highlighted). Both are built with
``gym.make`` (Gymnasium's default wrappers); a second pair of rows times the ``.unwrapped``
envs. The same pre-drawn action sequence drives both sides.

Only steps are timed (each call on its own with ``perf_counter_ns``); when an episode ends,
the reset that follows is not timed. Sides alternate in blocks (``--rounds`` blocks each,
the side that goes first alternating), so drifts in machine load hit both alike.

Run: ``python benchmarks/bench_frozenlake_turn.py [--steps N] [--rounds R] [--profile N]``.
``--only ours|peer --episodes N [--no-steps]`` plays one side alone, untimed (reset + up to 5
steps per episode, seeds 0..N-1), for an instruction count under ``valgrind
--tool=callgrind``: the difference of a run with steps and one without, divided by the steps
it prints, is the instructions per step.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import platform
import pstats
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

import ragen_envs  # noqa: F401  (registers ragen/*)

ACTION_NAMES = ("Left", "Down", "Right", "Up")  # gymnasium's 0..3, the names ours parses
THINK = "The goal is below me and the hole is to my left, so I move away from it."


def reply_for(action: int) -> str:
    return f"<think>{THINK}</think><answer>{ACTION_NAMES[action]}</answer>"


class Side:
    """One env driven through the shared action sequence; ``run`` times a block of steps."""

    def __init__(self, env: gym.Env, turn) -> None:
        self.env = env
        self.turn = turn  # (env, action) -> done
        self.times: list[int] = []
        self.episode = 0
        self._reset()

    def _reset(self) -> None:
        self.env.reset(seed=self.episode)
        self.episode += 1

    def run(self, actions) -> None:
        turn, env, times = self.turn, self.env, self.times
        clock = time.perf_counter_ns
        for action in actions:
            start = clock()
            done = turn(env, action)
            times.append(clock() - start)
            if done:
                self._reset()


def ours_turn(replies):
    def turn(env, action):
        _, _, terminated, truncated, _ = env.step(replies[action])
        return terminated or truncated

    return turn


def peer_turn(env, action):
    _, _, terminated, truncated, _ = env.step(action)
    env.render()
    return terminated or truncated


def compare(label: str, ours: Side, peer: Side, actions: list[int], rounds: int) -> dict[str, float]:
    blocks = np.array_split(np.asarray(actions), rounds)
    warm = [int(a) for a in actions[:200]]
    ours.run(warm)
    peer.run(warm)
    ours.times.clear()
    peer.times.clear()
    round_ratios = []
    for i, block in enumerate(blocks):
        block = [int(a) for a in block]
        n_ours, n_peer = len(ours.times), len(peer.times)
        for side in (ours, peer) if i % 2 == 0 else (peer, ours):
            side.run(block)
        round_ratios.append(statistics.median(peer.times[n_peer:]) / statistics.median(ours.times[n_ours:]))
    row = {}
    for name, side in (("ours", ours), ("peer", peer)):
        us = np.asarray(side.times) / 1e3
        row[name] = {"median": float(np.median(us)), "p95": float(np.percentile(us, 95)), "mean": float(us.mean())}
    row["ratio"] = row["peer"]["median"] / row["ours"]["median"]
    row["round_ratio"] = statistics.median(round_ratios)
    row["label"] = label
    return row


def profile_ours(actions: list[int], replies: list[str], top: int) -> None:
    """cProfile of ours' turns alone (resets excluded), top functions by cumulative time."""
    side = Side(gym.make("ragen/FrozenLake-v0").unwrapped, ours_turn(replies))
    profiler = cProfile.Profile()
    env, turn = side.env, side.turn
    for action in actions:
        profiler.enable()
        done = turn(env, action)
        profiler.disable()
        if done:
            side._reset()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    print(f"Profile of ours, {len(actions)} turns (cProfile inflates every call; read it for shares, not times):")
    print(out.getvalue().split("\n", 3)[-1].rstrip())


def play_alone(side: str, episodes: int, steps: bool, seed: int) -> int:
    """``--only``: reset + up to 5 steps per episode on one side; returns the steps played."""
    env = gym.make("ragen/FrozenLake-v0") if side == "ours" else gym.make("FrozenLake-v1", render_mode="ansi")
    replies = [reply_for(a) for a in range(4)]
    moves = np.random.default_rng(seed).integers(0, 4, size=(episodes, 5)).tolist()

    def run(with_steps: bool) -> int:
        played = 0
        for episode, row in enumerate(moves):
            env.reset(seed=episode)
            if side == "peer":
                env.render()
            for action in row if with_steps else ():
                done = ours_turn(replies)(env, action) if side == "ours" else peer_turn(env, action)
                played += 1
                if done:
                    break
        return played

    run(True)  # warm-up: imports, caches
    return run(steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20000, help="timed steps per side and setting (default 20000)")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved blocks per side (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the action sequence (default 0)")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="also print ours' top N functions")
    parser.add_argument("--only", choices=("ours", "peer"), help="play this side alone, untimed (callgrind)")
    parser.add_argument("--episodes", type=int, default=1000, help="with --only: episodes (default 1000)")
    parser.add_argument("--no-steps", action="store_true", help="with --only: resets only")
    args = parser.parse_args(argv)
    if args.only:
        print(f"{args.only}: {args.episodes} episodes, {play_alone(args.only, args.episodes, not args.no_steps, args.seed)} steps")
        return 0
    if args.steps < args.rounds or args.rounds < 1:
        parser.error("need --steps >= --rounds >= 1")

    actions = [int(a) for a in np.random.default_rng(args.seed).integers(0, 4, size=args.steps)]
    replies = [reply_for(a) for a in range(4)]
    rows = []
    for label, unwrap in (("gym.make", False), (".unwrapped", True)):
        ours_env = gym.make("ragen/FrozenLake-v0")
        peer_env = gym.make("FrozenLake-v1", render_mode="ansi")
        if unwrap:
            ours_env, peer_env = ours_env.unwrapped, peer_env.unwrapped
        rows.append(compare(label, Side(ours_env, ours_turn(replies)), Side(peer_env, peer_turn), actions, args.rounds))

    print(f"FrozenLake one text turn, {args.steps} timed steps per side and setting, {args.rounds} interleaved blocks")
    print(f"  CPython {platform.python_version()}, gymnasium {gym.__version__}, numpy {np.__version__}")
    print(f"  ours: ragen/FrozenLake-v0 step(reply), reply = {replies[1]!r}")
    print("  peer: FrozenLake-v1 (4x4, slippery) step(action) + render() in ansi mode")
    print()
    header = (
        f"{'setting':<12}{'side':<7}{'median us':>10}{'p95 us':>9}{'mean us':>9}{'turns/s':>10}"
        f"{'speed ours/peer':>17}{'per-block':>11}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        for name in ("peer", "ours"):
            s = row[name]
            extra = ("", "") if name == "peer" else (f"{row['ratio']:.2f}x", f"{row['round_ratio']:.2f}x")
            print(
                f"{row['label'] if name == 'peer' else '':<12}{name:<7}{s['median']:>10.2f}{s['p95']:>9.2f}"
                f"{s['mean']:>9.2f}{1e6 / s['mean']:>10,.0f}{extra[0]:>17}{extra[1]:>11}"
            )
    print()
    print("speed ours/peer = peer median time / ours median time (> 1: ours is faster);")
    print("per-block = the median over the interleaved blocks of that ratio.")
    ratio = rows[0]["ratio"]
    verdict = "met" if ratio >= 0.5 else "NOT met"  # issue 23: within 2x of gymnasium's step + render
    print(f"goal: ours >= 0.5x gymnasium's step + ansi render (gym.make) -> {ratio:.2f}x -> {verdict}")
    if args.profile:
        print()
        profile_ours(actions, replies, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
