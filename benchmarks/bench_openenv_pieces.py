"""The OpenEnv server's per-message pieces, timed in process (``perf_counter_ns``, min of 7
repeats; ``process_time`` for the middleware): what our server does per turn beside what
OpenEnv's floor (``bench_openenv_turn.py``'s constant env) does.

* ``IdleTimeout``: CPU per message of a ping-pong between a client task and an app through the
  middleware's receive, minus the same without the middleware.
* the step's and the reset's own pieces (``json_part`` of the info, the observation model, its
  serialisation, the client's parse), ours vs the floor's constant observation.

    python benchmarks/bench_openenv_pieces.py [ENV_ID]

Run it with ``PYTHONPATH`` at another checkout to time that tree's middleware.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import threading
import time
import uuid

import gymnasium as gym

import ragen_envs  # noqa: F401
from ragen_envs.agents import make_agent
from ragen_envs.integrations import json_part
from ragen_envs.integrations.openenv import (IdleTimeout, RagenAction, RagenEnvClient, RagenEnvironment,
                                             RagenObservation, RagenState)


def best_us(f, n=3000, rep=7) -> float:
    runs = []
    for _ in range(rep):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            f()
        runs.append((time.perf_counter_ns() - t0) / n / 1000)
    return min(runs)


def middleware_us(n: int = 20000, rounds: int = 5) -> tuple[float, float]:
    """CPU us per message without and with IdleTimeout (medians over rounds, interleaved)."""

    async def run(with_mw: bool) -> float:
        inbox: asyncio.Queue = asyncio.Queue()
        seen: asyncio.Queue = asyncio.Queue()

        async def receive():
            return await inbox.get()

        async def send(message):
            pass

        async def app(scope, receive, send):
            for _ in range(n):
                seen.put_nowait(await receive())

        async def client():
            for _ in range(n):
                inbox.put_nowait({"type": "websocket.receive", "text": "x"})
                await seen.get()

        target = IdleTimeout(app, 600.0) if with_mw else app
        c0 = time.process_time()
        await asyncio.gather(target({"type": "websocket"}, receive, send), client())
        return (time.process_time() - c0) / n * 1e6

    res: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for k in (False, True):
            res[k].append(asyncio.run(run(k)))
    return statistics.median(res[False]), statistics.median(res[True])


def main() -> int:
    env_id = sys.argv[1] if len(sys.argv) > 1 else "ragen/FrozenLake-v0"
    from openenv.core.env_server.serialization import deserialize_action, serialize_observation
    from openenv.core.env_server.types import WSObservationResponse, WSStepMessage

    none, with_mw = middleware_us()
    print(f"IdleTimeout: {none:.2f} us CPU per message without, {with_mw:.2f} with: {with_mw - none:.2f} us per message")

    env = gym.make(env_id)
    agent = make_agent("expert", env=env)
    env.reset(seed=1)
    reply = agent.act([])
    obs, reward, _, _, info = env.step(reply)
    text0 = gym.make(env_id).reset(seed=0)[0]
    ji = json_part(info)
    ours = lambda: RagenObservation(observation=obs, system_prompt="sp", reward=float(reward), done=False,  # noqa: E731
                                    terminated=False, truncated=False, info=ji)
    floor = lambda: RagenObservation(observation=text0, reward=0.0, done=False)  # noqa: E731
    o, f = ours(), floor()
    so = WSObservationResponse(data=serialize_observation(o)).model_dump_json()
    sf = WSObservationResponse(data=serialize_observation(f)).model_dump_json()
    client = RagenEnvClient.__new__(RagenEnvClient)
    msg = json.dumps({"type": "step", "data": {"reply": reply}})
    rows = [
        ("json_part(step info)", lambda: json_part(info), None),
        ("RagenObservation(...) validated", ours, floor),
        ("RagenObservation.model_construct", lambda: RagenObservation.model_construct(
            observation=obs, system_prompt="sp", reward=float(reward), done=False, terminated=False, truncated=False,
            info=ji), None),
        ("serialize_observation", lambda: serialize_observation(o), lambda: serialize_observation(f)),
        ("WSObservationResponse + model_dump_json", lambda: WSObservationResponse(data=serialize_observation(o)).model_dump_json(),
         lambda: WSObservationResponse(data=serialize_observation(f)).model_dump_json()),
        ("client json.loads", lambda: json.loads(so), lambda: json.loads(sf)),
        ("client json.loads + _parse_result", lambda: client._parse_result(json.loads(so)["data"]),
         lambda: client._parse_result(json.loads(sf)["data"])),
        ("server: parse a step message", lambda: deserialize_action(WSStepMessage(**json.loads(msg)).data, RagenAction),
         None),
    ]
    print(f"{env_id}: reply bytes ours {len(so)}, floor {len(sf)}")
    for name, a, b in rows:
        line = f"  {name:42s} ours {best_us(a):6.2f} us"
        if b is not None:
            line += f"   floor {best_us(b):6.2f} us"
        print(line)

    renv = RagenEnvironment(env_id)
    r_obs, r_info = renv.env.reset(seed=1)
    st = renv._state
    print(f"{env_id} reset pieces:")
    print(f"  {'env.reset (the game, seeds 0..99)':42s} {best_us(lambda: renv.env.reset(seed=int(time.time_ns()) % 100), 300, 5):6.2f} us")

    class Instant:  # the env's reset for free: what RagenEnvironment adds around it
        def reset(self, seed=None, options=None):
            return r_obs, r_info

        def close(self):
            pass

    game, renv.env = renv.env, Instant()
    print(f"  {'RagenEnvironment._reset around it':42s} {best_us(lambda: renv._reset((), 1, None, None, {})):6.2f} us")
    renv.env = game
    for name, fn in [("state.done = True (validated)", lambda: setattr(st, "done", True)),
                     ("state.__dict__['done'] = True", lambda: st.__dict__.__setitem__("done", True)),
                     ("uuid4", lambda: str(uuid.uuid4())), ("threading.Event()", threading.Event),
                     ("RagenState(...)", lambda: RagenState(episode_id="x", step_count=0, env_id=env_id, env_kwargs={},
                                                             seed=1, noise_seed=None, turn=0, turns_left=5,
                                                             actions_left=10, success=False, done=False))]:
        print(f"  {name:42s} {best_us(fn):6.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
