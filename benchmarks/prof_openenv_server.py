"""Where the OpenEnv server's CPU goes per call: a cProfile of every thread of the serving
process (the event loop and the executor threads that run the env's reset and step), ours
(``ragen openenv-server``) or OpenEnv's floor (the constant env of ``bench_openenv_turn.py``),
over the expert's episodes played with OpenEnv's own client.

    python benchmarks/prof_openenv_server.py ours ragen/FrozenLake-v0 --episodes 100
    python benchmarks/prof_openenv_server.py floor ragen/FrozenLake-v0 --episodes 100
    python benchmarks/prof_openenv_server.py ours ragen/Sokoban-v0 --episodes 300 --resets-only

The server is profiled only between the warm-up episodes and the end (SIGUSR1 / SIGUSR2), so
imports and start-up are not in it. Prints the top functions by own time and the call counts
per client call (``--top``), and writes the merged stats to ``--out`` (pstats) if given.
A profile inflates Python calls over C calls: read it for where the calls go, and compare
the two sides' call counts; the wall/CPU ratios are ``bench_openenv_turn.py``'s.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def serve(side: str, env_id: str, out: str) -> int:
    """The profiled server (what the driver runs in a child process)."""
    import asyncio
    import cProfile
    import concurrent.futures.thread as cft
    import pstats
    import socket
    import threading

    import uvicorn

    profiles: list[cProfile.Profile] = []
    local = threading.local()
    on = threading.Event()
    main_prof = cProfile.Profile()
    profiles.append(main_prof)
    run = cft._WorkItem.run

    def profiled_run(self):  # executor threads: one profile each, on while profiling is on
        if not on.is_set():
            return run(self)
        prof = getattr(local, "prof", None)
        if prof is None:
            prof = local.prof = cProfile.Profile()
            profiles.append(prof)
        prof.enable()
        try:
            return run(self)
        finally:
            prof.disable()

    cft._WorkItem.run = profiled_run

    def start(*_):
        on.set()
        main_prof.enable()

    def stop(*_):
        main_prof.disable()
        on.clear()
        stats = pstats.Stats(profiles[0])
        for p in profiles[1:]:
            stats.add(p)
        stats.dump_stats(out)
        print("dumped", flush=True)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    if side == "ours":
        from ragen_envs.commands.openenv_server import build_server

        server = build_server(env_id, "127.0.0.1", 0, 64)
        config = server.config
    else:
        sys.path.insert(0, HERE)
        from _bench_common import floor_app

        app = floor_app(env_id)
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws_ping_interval=20.0,
                                ws_ping_timeout=20.0, ws_max_size=1 << 20)
        server = uvicorn.Server(config)
    sock = socket.create_server(("127.0.0.1", 0))
    print(f"serving on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    asyncio.run(server.serve(sockets=[sock]))
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("side", choices=["ours", "floor"])
    p.add_argument("env_id")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--sort", default="tottime")
    p.add_argument("--out", default="")
    p.add_argument("--resets-only", action="store_true", help="profile resets only (one per episode seed)")
    p.add_argument("--serve", metavar="PSTATS", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        return serve(args.side, args.env_id, args.serve)
    import pstats
    import tempfile

    import gymnasium as gym

    import ragen_envs  # noqa: F401
    from ragen_envs.agents import make_agent
    from ragen_envs.integrations.openenv import RagenEnvClient

    out = args.out or tempfile.mktemp(suffix=".pstats")
    proc = subprocess.Popen([sys.executable, __file__, args.side, args.env_id, "--serve", out],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = re.search(r"on (http://\S+)$", proc.stdout.readline().strip()).group(1)
        mirror = gym.make(args.env_id)
        agent = make_agent("expert", env=mirror)
        calls = 0
        with RagenEnvClient(base_url=url).sync() as client:
            for seed in range(-5, args.episodes):  # 5 warm-up episodes
                if seed == 0:
                    os.kill(proc.pid, signal.SIGUSR1)
                    time.sleep(0.2)
                mirror.reset(seed=seed % 1000)
                client.reset(seed=seed % 1000)
                calls += seed >= 0
                done = args.resets_only
                while not done:
                    reply = agent.act([])
                    _, _, term, trunc, _ = mirror.step(reply)
                    client.step(reply)
                    calls += seed >= 0
                    done = term or trunc
            os.kill(proc.pid, signal.SIGUSR2)
            assert proc.stdout.readline().strip() == "dumped"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    stats = pstats.Stats(out)
    print(f"{args.side} {args.env_id}: {calls} calls profiled; total {stats.total_tt / calls * 1e6:.0f} us "
          f"of profiled time per call, {stats.total_calls / calls:.0f} function calls per call")
    stats.sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
