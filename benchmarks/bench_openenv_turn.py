"""What the OpenEnv server costs per turn: the expert's Sokoban / FrozenLake episodes played on a
local env and through `ragen openenv-server` (a real uvicorn on a loopback port, OpenEnv's own
WebSocket client), interleaved episode by episode; medians of the per-turn times and the ratio.

The floor: the same calls, interleaved, against OpenEnv's own ``create_app`` serving a constant
environment (its reset and step return one fixed observation: the env's reset text, an empty
info) under the same uvicorn settings, through the same client. ``over OpenEnv / floor`` is
what our server costs beyond OpenEnv itself (goal: <= 1.2x).

    python benchmarks/bench_openenv_turn.py --episodes 100
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time

import gymnasium as gym

import ragen_envs  # noqa: F401
from ragen_envs.agents import make_agent
from ragen_envs.integrations.openenv import RagenEnvClient


def local_turns(env, agent, seed):
    t0 = time.perf_counter()
    env.reset(seed=seed)
    times, done = [time.perf_counter() - t0], False
    while not done:
        reply = agent.act([])
        t0 = time.perf_counter()
        _, _, term, trunc, _ = env.step(reply)
        times.append(time.perf_counter() - t0)
        done = term or trunc
    return times


def remote_turns(client, mirror, agent, seed):
    """The expert reads the state from a local mirror env (it does not read messages)."""
    mirror.reset(seed=seed)
    t0 = time.perf_counter()
    client.reset(seed=seed)
    times, done = [time.perf_counter() - t0], False
    while not done:
        reply = agent.act([])
        mirror.step(reply)
        t0 = time.perf_counter()
        r = client.step(reply)
        times.append(time.perf_counter() - t0)
        done = r.done
    return times


def floor_turns(client, mirror, agent, seed):
    """The same calls against the constant env (the replies are the expert's, and ignored)."""
    mirror.reset(seed=seed)
    t0 = time.perf_counter()
    client.reset(seed=seed)
    times, done = [time.perf_counter() - t0], False
    while not done:
        reply = agent.act([])
        _, _, term, trunc, _ = mirror.step(reply)
        t0 = time.perf_counter()
        client.step(reply)
        times.append(time.perf_counter() - t0)
        done = term or trunc
    return times


def serve_floor(env_id: str) -> int:
    """Serve the constant env on OpenEnv's create_app (what ``--serve-floor`` runs)."""
    import asyncio
    import socket

    import uvicorn
    from openenv.core.env_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import ConcurrencyConfig

    from ragen_envs.integrations.openenv import RagenAction, RagenObservation, RagenState

    text = gym.make(env_id).reset(seed=0)[0]

    class ConstantEnv(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self._state = RagenState(env_id="constant")

        def reset(self, seed=None, episode_id=None, **kwargs):
            return RagenObservation(observation=text, reward=None, done=False)

        def step(self, action, timeout_s=None, **kwargs):
            return RagenObservation(observation=text, reward=0.0, done=False)

        @property
        def state(self):
            return self._state

    app = create_app(ConstantEnv, RagenAction, RagenObservation, env_name="constant",
                     concurrency_config=ConcurrencyConfig(max_concurrent_envs=4), state_cls=RagenState)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws_ping_interval=20.0,
                            ws_ping_timeout=20.0, ws_max_size=1 << 20)  # the settings of `ragen openenv-server`
    sock = socket.create_server(("127.0.0.1", 0))
    print(f"serving constant on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
    return 0


def _start(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return proc, re.search(r"on (http://\S+)$", proc.stdout.readline().strip()).group(1)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--envs", nargs="+", default=["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
    p.add_argument("--serve-floor", metavar="ENV_ID", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_floor:
        return serve_floor(args.serve_floor)
    for env_id in args.envs:
        procs = []
        try:
            proc, url = _start([sys.executable, "-m", "ragen_envs.cli", "openenv-server", env_id, "--port", "0"])
            procs.append(proc)
            proc, floor_url = _start([sys.executable, __file__, "--serve-floor", env_id])
            procs.append(proc)
            local, mirror = gym.make(env_id), gym.make(env_id)
            la, ma = make_agent("expert", env=local), make_agent("expert", env=mirror)
            lt, rt, ft = [], [], []
            steps = {"local": [], "remote": [], "floor": []}  # the same calls without the resets
            with RagenEnvClient(base_url=url).sync() as client, RagenEnvClient(base_url=floor_url).sync() as floor:
                for seed in range(args.episodes):
                    t = local_turns(local, la, seed)
                    if seed % 2:  # the server that goes first alternates
                        f = floor_turns(floor, mirror, ma, seed)
                        r = remote_turns(client, mirror, ma, seed)
                    else:
                        r = remote_turns(client, mirror, ma, seed)
                        f = floor_turns(floor, mirror, ma, seed)
                    lt, rt, ft = lt + t, rt + r, ft + f
                    steps["local"] += t[1:]
                    steps["remote"] += r[1:]
                    steps["floor"] += f[1:]
            ml, mr, mf = statistics.median(lt), statistics.median(rt), statistics.median(ft)
            print(f"{env_id}: {args.episodes} episodes, {len(lt)} calls (resets + steps) each way; "
                  f"median local {ml * 1e3:.3f} ms, over OpenEnv {mr * 1e3:.3f} ms ({mr / ml:.1f}x local), "
                  f"OpenEnv floor (constant env) {mf * 1e3:.3f} ms; over OpenEnv / floor {mr / mf:.2f}x "
                  f"(goal <= 1.2x: {'met' if mr / mf <= 1.2 else 'NOT met'})")
            sl, sr, sf = (statistics.median(steps[k]) for k in ("local", "remote", "floor"))
            print(f"  steps only ({len(steps['local'])} each way): median local {sl * 1e3:.3f} ms, over OpenEnv "
                  f"{sr * 1e3:.3f} ms, floor {sf * 1e3:.3f} ms; over OpenEnv / floor {sr / sf:.2f}x")
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
