"""Server CPU per reset and per step, by thread (the event loop's vs the others'), ours
(``ragen openenv-server``) vs OpenEnv's floor (``bench_openenv_turn.py``'s constant env),
through OpenEnv's own client; ``/proc/PID/task/*/schedstat`` read around a batch of calls.

    python benchmarks/bench_openenv_threads.py ragen/Sokoban-v0             # 200 resets, 200 mixed calls
    python benchmarks/bench_openenv_threads.py ragen/Sokoban-v0 --steps 1500 --ours-only

``--steps N``: N steps (Left / Right, ``max_turns=100``, a reset when an episode ends) instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import start_url_process  # noqa: E402

from ragen_envs.integrations.openenv import RagenEnvClient  # noqa: E402


def cpu_ns(pid: int) -> tuple[int, int]:
    """(event-loop thread, all other threads) nanoseconds on a CPU."""
    main = other = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                v = int(f.read().split()[0])
        except OSError:
            continue
        if int(tid) == pid:
            main += v
        else:
            other += v
    return main, other


def report(side: str, what: str, pid: int, n: int, run) -> None:
    m0, o0 = cpu_ns(pid)
    c0 = time.process_time()
    run()
    m1, o1 = cpu_ns(pid)
    c1 = time.process_time()
    print(f"{side} {what}: server CPU per call main {(m1 - m0) / n / 1e3:.0f} us + other threads "
          f"{(o1 - o0) / n / 1e3:.0f} us = {(m1 - m0 + o1 - o0) / n / 1e3:.0f} us; client {(c1 - c0) / n * 1e6:.0f} us")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("env_id")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--ours-only", action="store_true")
    args = p.parse_args()
    sides = [("ours", [sys.executable, "-m", "ragen_envs.cli", "openenv-server", args.env_id, "--port", "0"])]
    if not args.ours_only:
        sides.append(("floor", [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_openenv_turn.py"), "--serve-floor",
                                 args.env_id]))
    for side, cmd in sides:
        proc, url = start_url_process(cmd)
        try:
            with RagenEnvClient(base_url=url).sync() as c:
                if args.steps:
                    def play(n):
                        c.reset(seed=0, max_turns=100)
                        for s in range(n):
                            r = c.step("<answer>Left</answer>" if s % 2 else "<answer>Right</answer>")
                            if r.done:
                                c.reset(seed=s % 50, max_turns=100)

                    play(50)
                    report(side, f"{args.steps} steps", proc.pid, args.steps, lambda: play(args.steps))
                    continue
                for s in range(10):
                    c.reset(seed=s)
                report(side, "200 resets", proc.pid, 200, lambda: [c.reset(seed=s % 100) for s in range(200)])

                def mixed():
                    c.reset(seed=0)
                    for s in range(200):
                        if s % 4 == 3:
                            c.reset(seed=3)
                        else:
                            c.step("<answer>Left</answer>")

                report(side, "200 calls, 3 steps : 1 reset", proc.pid, 200, mixed)
        finally:
            proc.terminate()
            proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
