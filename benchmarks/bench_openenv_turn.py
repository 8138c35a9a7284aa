"""What the OpenEnv server costs per turn: the expert's Sokoban / FrozenLake episodes played on a
local env and through `ragen openenv-server` (a real uvicorn on a loopback port, OpenEnv's own
WebSocket client), interleaved episode by episode; medians of the per-turn times and the ratio.

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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--envs", nargs="+", default=["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
    args = p.parse_args()
    for env_id in args.envs:
        proc = subprocess.Popen([sys.executable, "-m", "ragen_envs.cli", "openenv-server", env_id, "--port", "0"],
                                stdout=subprocess.PIPE, text=True)
        try:
            url = re.search(r"on (http://\S+)$", proc.stdout.readline().strip()).group(1)
            local, mirror = gym.make(env_id), gym.make(env_id)
            la, ma = make_agent("expert", env=local), make_agent("expert", env=mirror)
            lt, rt = [], []
            with RagenEnvClient(base_url=url).sync() as client:
                for seed in range(args.episodes):
                    lt += local_turns(local, la, seed)
                    rt += remote_turns(client, mirror, ma, seed)
            ml, mr = statistics.median(lt), statistics.median(rt)
            print(f"{env_id}: {args.episodes} episodes, {len(lt)} calls (resets + steps) each way; "
                  f"median local {ml * 1e3:.3f} ms, over OpenEnv {mr * 1e3:.3f} ms, ratio {mr / ml:.1f}x")
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
