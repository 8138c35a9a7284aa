"""What each path costs per sub-env turn: 4 local envs stepped in a loop vs Gymnasium's
``gym.make_vec`` (sync; async with shared memory on / off; the vector entry point), SkyRL-gym
(``skyrl_gym.make``) and GEM (``gem.make_vec``), all fed the same well-formed replies.

One call = one turn of every sub-env (a step, or the reset that follows an episode's end:
the vectors autoreset inside ``step``, the loops reset explicitly, both timed). Per-turn cost =
call time / 4. Paths alternate in blocks of ``--steps`` calls for ``--rounds`` rounds (a seeded
random order each round; each block starts with one untimed call, so an async vector's worker
processes are awake, as in a busy rollout loop), so load drifts hit all alike; medians over all
calls, ratios to the local loop.

    python benchmarks/bench_vector_paths.py --env ragen/Sokoban-v0 --rounds 15 --steps 20
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import gymnasium as gym

import ragen_envs  # noqa: F401
from ragen_envs.protocol import format_answer

N = 4


class LocalLoop:
    def __init__(self, env_id):
        self.envs = [gym.make(env_id) for _ in range(N)]
        self.done = [False] * N
        for i, env in enumerate(self.envs):
            env.reset(seed=i)

    def call(self, replies):
        for i, env in enumerate(self.envs):
            if self.done[i]:
                env.reset()
                self.done[i] = False
            else:
                _, _, term, trunc, _ = env.step(replies[i])
                self.done[i] = term or trunc

    def close(self):
        for env in self.envs:
            env.close()


class GymVector:
    def __init__(self, env_id, mode, **vector_kwargs):
        self.vec = gym.make_vec(env_id, N, vectorization_mode=mode, vector_kwargs=vector_kwargs or None)
        self.vec.reset(seed=0)

    def call(self, replies):
        self.vec.step(tuple(replies))

    def close(self):
        self.vec.close()


class SkyRLLoop:
    def __init__(self, env_id):
        import skyrl_gym
        from ragen_envs.integrations import skyrl  # noqa: F401

        self.envs = [skyrl_gym.make(env_id, extras={"seed": i}) for i in range(N)]
        self.done = [False] * N
        for env in self.envs:
            env.init([])

    def call(self, replies):
        for i, env in enumerate(self.envs):
            if self.done[i]:
                env.init([])
                self.done[i] = False
            else:
                self.done[i] = env.step(replies[i])["done"]

    def close(self):
        for env in self.envs:
            env.close()


class GemVector:
    def __init__(self, env_id):
        import gem
        from ragen_envs.integrations import gem as _  # noqa: F401

        self.vec = gem.make_vec([env_id] * N, seed=0)
        self.vec.reset()

    def call(self, replies):
        self.vec.step(list(replies))

    def close(self):
        for env in self.vec.envs:
            env.close()


def make_paths(env_id):
    return {
        "local loop": lambda: LocalLoop(env_id),
        "gym sync": lambda: GymVector(env_id, "sync"),
        "gym async, shared memory": lambda: GymVector(env_id, "async"),
        "gym async, no shared memory": lambda: GymVector(env_id, "async", shared_memory=False),
        "gym vector_entry_point": lambda: GymVector(env_id, "vector_entry_point"),
        "SkyRL-gym": lambda: SkyRLLoop(env_id),
        "GEM make_vec": lambda: GemVector(env_id),
    }


def reply_table(env_id, steps):
    """``table[k][i]``: sub-env i's reply at call k (the action names in rotation)."""
    names = gym.make(env_id).unwrapped.action_names()
    words = list(names) if names is not None else ["search[shirt]", "click[< prev]", "click[next >]"]
    return [[format_answer([words[(k + i) % len(words)]], "one step at a time") for i in range(N)]
            for k in range(steps)]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="ragen/Sokoban-v0")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--paths", nargs="+", help="a subset of the path names (the local loop always runs)")
    args = p.parse_args()
    factories = make_paths(args.env)
    if args.paths:
        unknown = set(args.paths) - set(factories)
        if unknown:
            p.error(f"unknown paths {sorted(unknown)}; paths: {list(factories)}")
        factories = {k: v for k, v in factories.items() if k == "local loop" or k in args.paths}
    paths = {name: make() for name, make in factories.items()}
    times = {name: [] for name in paths}
    names = list(paths)
    table = reply_table(args.env, args.steps)
    try:
        rng = random.Random(0)
        for r in range(args.rounds):
            order = rng.sample(names, len(names))
            for name in order:
                path = paths[name]
                path.call(table[-1])  # untimed: wakes a vector's worker processes after the other paths ran
                for k in range(args.steps):
                    replies = table[k]
                    t0 = time.perf_counter()
                    path.call(replies)
                    times[name].append((time.perf_counter() - t0) / N)
    finally:
        for path in paths.values():
            path.close()
    base = statistics.median(times["local loop"])
    print(f"{args.env}: {args.rounds} rounds x {args.steps} calls x {N} sub-envs per path")
    print("| path | median per sub-env turn | ratio to the local loop |")
    print("|---|---:|---:|")
    for name in names:
        m = statistics.median(times[name])
        print(f"| {name} | {m * 1e3:.3f} ms | {m / base:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
