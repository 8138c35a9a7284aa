"""What the OpenEnv server costs per turn: the expert's Sokoban / FrozenLake episodes played on a
local env and through `ragen openenv-server` (a real uvicorn on a loopback port, OpenEnv's own
WebSocket client), interleaved episode by episode; medians of the per-turn times and the ratio.

The floor: the same calls, interleaved, against OpenEnv's own ``create_app`` serving a constant
environment (its reset and step return one fixed observation: the env's reset text, an empty
info) under the same uvicorn settings, through the same client. ``over OpenEnv / floor`` is
what our server costs beyond OpenEnv itself (goal: <= 1.2x). That ratio is of medians over all
calls, resets and steps together, and a reset does the env's own work (a Sokoban room is generated)
where the constant env does none; so the steps and the resets are also reported apart, and "the
server's own share": per call, the time over OpenEnv minus the same call played locally (the
same seeds and replies, in the same order), against the floor.

CPU time beside the wall time (under load the wall time of a loopback round trip through three
processes is mostly waiting for a core): around every call, the serving process's CPU time
(the sum over its threads of ``/proc/PID/task/*/schedstat``, nanoseconds on a CPU, read
before and after the call, outside its wall time) plus the client's ``time.process_time``;
``CPU ours / floor`` is the ratio of the per-call sums (medians of the per-call values too).

    python benchmarks/bench_openenv_turn.py --episodes 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import gymnasium as gym

import ragen_envs  # noqa: F401
from ragen_envs.agents import make_agent
from ragen_envs.integrations.openenv import RagenEnvClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import floor_app, start_url_process  # noqa: E402


CPU = {"remote": [], "floor": []}  # per call: (server CPU s, client CPU s, is a step)
PIDS = {"remote": 0, "floor": 0}


def server_cpu_ns(pid: int) -> int:
    """Nanoseconds on a CPU of every live thread of ``pid`` (Linux schedstat; 0 elsewhere)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total


def _timed(side, call, *args, **kwargs):
    """``call(...)`` and its wall seconds; its server and client CPU go into ``CPU[side]``."""
    is_step = call.__name__ == "step"
    s0 = server_cpu_ns(PIDS[side])
    c0 = time.process_time()
    t0 = time.perf_counter()
    out = call(*args, **kwargs)
    wall = time.perf_counter() - t0
    c1 = time.process_time()
    CPU[side].append(((server_cpu_ns(PIDS[side]) - s0) / 1e9, c1 - c0, is_step))
    return out, wall


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
    _, wall = _timed("remote", client.reset, seed=seed)
    times, done = [wall], False
    while not done:
        reply = agent.act([])
        mirror.step(reply)
        r, wall = _timed("remote", client.step, reply)
        times.append(wall)
        done = r.done
    return times


def floor_turns(client, mirror, agent, seed):
    """The same calls against the constant env (the replies are the expert's, and ignored)."""
    mirror.reset(seed=seed)
    _, wall = _timed("floor", client.reset, seed=seed)
    times, done = [wall], False
    while not done:
        reply = agent.act([])
        _, _, term, trunc, _ = mirror.step(reply)
        _, wall = _timed("floor", client.step, reply)
        times.append(wall)
        done = term or trunc
    return times


def serve_floor(env_id: str) -> int:
    """Serve the constant env on OpenEnv's create_app (what ``--serve-floor`` runs)."""
    import asyncio
    import socket

    import uvicorn

    app = floor_app(env_id)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws_ping_interval=20.0,
                            ws_ping_timeout=20.0, ws_max_size=1 << 20)  # the settings of `ragen openenv-server`
    sock = socket.create_server(("127.0.0.1", 0))
    print(f"serving constant on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
    return 0


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
            proc, url = start_url_process([sys.executable, "-m", "ragen_envs.cli", "openenv-server", env_id, "--port", "0"])
            procs.append(proc)
            proc, floor_url = start_url_process([sys.executable, os.path.abspath(__file__), "--serve-floor", env_id])
            procs.append(proc)
            CPU.update(remote=[], floor=[])
            PIDS.update(remote=procs[0].pid, floor=procs[1].pid)
            local, mirror = gym.make(env_id), gym.make(env_id)
            la, ma = make_agent("expert", env=local), make_agent("expert", env=mirror)
            lt, rt, ft = [], [], []
            steps = {"local": [], "remote": [], "floor": []}  # the same calls without the resets
            resets = {"local": [], "remote": [], "floor": []}  # and the resets alone
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
                    for k, v in (("local", t), ("remote", r), ("floor", f)):
                        resets[k].append(v[0])
                        steps[k] += v[1:]
            ml, mr, mf = statistics.median(lt), statistics.median(rt), statistics.median(ft)
            print(f"{env_id}: {args.episodes} episodes, {len(lt)} calls (resets + steps) each way; "
                  f"median local {ml * 1e3:.3f} ms, over OpenEnv {mr * 1e3:.3f} ms ({mr / ml:.1f}x local), "
                  f"OpenEnv floor (constant env) {mf * 1e3:.3f} ms; over OpenEnv / floor {mr / mf:.2f}x "
                  f"(goal <= 1.2x: {'met' if mr / mf <= 1.2 else 'NOT met'})")
            sl, sr, sf = (statistics.median(steps[k]) for k in ("local", "remote", "floor"))
            print(f"  steps only ({len(steps['local'])} each way): median local {sl * 1e3:.3f} ms, over OpenEnv "
                  f"{sr * 1e3:.3f} ms, floor {sf * 1e3:.3f} ms; over OpenEnv / floor {sr / sf:.2f}x")
            rl, rr, rf = (statistics.median(resets[k]) for k in ("local", "remote", "floor"))
            print(f"  resets only ({len(resets['local'])} each way, {len(resets['local']) / len(lt):.0%} of the calls): "
                  f"median local {rl * 1e3:.3f} ms, over OpenEnv {rr * 1e3:.3f} ms, floor {rf * 1e3:.3f} ms; "
                  f"over OpenEnv / floor {rr / rf:.2f}x")
            # the same call played locally and through the server (same seeds, same replies, in order): the
            # server's own share of a call, next to the floor, whose constant env does no work of its own
            if len(rt) != len(lt):
                raise RuntimeError(f"the local and the served episodes made different calls ({len(lt)} vs {len(rt)})")
            over = statistics.median(r - t for r, t in zip(rt, lt))
            print(f"  the server's own share (over OpenEnv minus the same call locally, per call): median "
                  f"{over * 1e3:.3f} ms vs floor {mf * 1e3:.3f} ms; {over / mf:.2f}x")
            (ours_srv, ours_cli), (floor_srv, floor_cli) = (
                [sum(x[i] for x in CPU[k]) / len(CPU[k]) for i in (0, 1)] for k in ("remote", "floor"))
            if ours_srv > 0 and floor_srv > 0:
                med = {k: statistics.median(a + b for a, b, _ in CPU[k]) for k in CPU}
                print(f"  CPU per call (resets + steps, mean): ours server {ours_srv * 1e6:.0f} us + client "
                      f"{ours_cli * 1e6:.0f} us, floor server {floor_srv * 1e6:.0f} us + client {floor_cli * 1e6:.0f} us; "
                      f"CPU ours / floor {(ours_srv + ours_cli) / (floor_srv + floor_cli):.2f}x "
                      f"(servers alone {ours_srv / floor_srv:.2f}x; per-call medians {med['remote'] * 1e6:.0f} vs "
                      f"{med['floor'] * 1e6:.0f} us, {med['remote'] / med['floor']:.2f}x)")
                (os_, oc), (fs, fc) = ([statistics.fmean(x[i] for x in CPU[k] if x[2]) for i in (0, 1)]
                                       for k in ("remote", "floor"))
                print(f"  CPU per step (mean): ours server {os_ * 1e6:.0f} us + client {oc * 1e6:.0f} us, floor server "
                      f"{fs * 1e6:.0f} us + client {fc * 1e6:.0f} us; CPU ours / floor {(os_ + oc) / (fs + fc):.2f}x "
                      f"(servers alone {os_ / fs:.2f}x)")
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
