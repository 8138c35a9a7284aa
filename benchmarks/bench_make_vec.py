"""What building a vector env costs: ``gym.make_vec(id, N)`` (the project's vector entry point,
sync), with the action space's copies sharing their character tables (``CharsetText``, the
default) and with every copy deep-copying them (Gymnasium's ``Text``, what the envs had before),
alternated in one process.

Gymnasium's ``SyncVectorEnv`` builds N envs, then ``batch_space`` deep-copies the single
action space N times. The "deep-copied tables" side is ``CharsetText`` with its
``__deepcopy__`` removed for the duration, i.e. exactly ``gymnasium.spaces.Text``'s copying.

    python benchmarks/bench_make_vec.py --num-envs 256 --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def build_seconds(env_id: str, n: int) -> tuple[float, float]:
    """(wall, CPU) seconds of ``gym.make_vec(env_id, n)`` (closed after)."""
    import gymnasium as gym

    w, c = time.perf_counter(), time.process_time()
    vec = gym.make_vec(env_id, n)
    out = time.perf_counter() - w, time.process_time() - c
    vec.close()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--rounds", type=int, default=9, help="alternations of the two sides (default 9)")
    args = p.parse_args(argv)
    if args.num_envs < 1 or args.rounds < 1:
        p.error("--num-envs and --rounds must be >= 1")
    import ragen_envs  # noqa: F401
    from ragen_envs.envs.space import CharsetText

    shared = CharsetText.__deepcopy__
    for env_id in args.envs:
        build_seconds(env_id, args.num_envs)  # warm-up: imports, caches
        times: dict[str, list[tuple[float, float]]] = {"deep-copied tables": [], "shared tables": []}
        for _ in range(args.rounds):
            for side in times:
                if side == "deep-copied tables":
                    del CharsetText.__deepcopy__
                try:
                    times[side].append(build_seconds(env_id, args.num_envs))
                finally:
                    CharsetText.__deepcopy__ = shared
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
        a, b = med["deep-copied tables"], med["shared tables"]
        print(f"{env_id}: gym.make_vec(id, {args.num_envs}), median of {args.rounds} alternated builds: "
              f"deep-copied tables {a[0] * 1e3:.1f} ms wall / {a[1] * 1e3:.1f} ms CPU, shared tables "
              f"{b[0] * 1e3:.1f} ms / {b[1] * 1e3:.1f} ms: {a[1] / b[1]:.2f}x less CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
