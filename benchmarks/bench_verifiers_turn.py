"""What a turn costs through verifiers 0.4 (run in .venv-verifiers): the expert's episodes of an
env played three ways, one episode at a time, against the scripted fake model server of
tests/verifiers (loopback, answers at once):

- local: ``env.step`` alone;
- direct: one chat completion from this process to the fake server + ``env.step`` (the floor of
  any path that asks a served model);
- verifiers: ``load_environment`` + ``env.run_slot`` (the Python API vf-eval runs): the time
  between one request's arrival at the fake server and the next one's in the same episode
  (fake reply, interception server, harness, ``env.step``, verifiers' turn bookkeeping), and
  the episode's start (``run_slot`` called -> first request: runtime dir, interception slot,
  reset), and the whole ``run_slot`` (start, turns, scoring, teardown) per turn played.

    .venv-verifiers/bin/python benchmarks/bench_verifiers_turn.py --episodes 50
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import httpx
import verifiers.v1 as vf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "verifiers"))
from fake_model import FakeModel, local_episode  # noqa: E402

from ragen_envs.integrations.verifiers import load_environment  # noqa: E402


def local_turns(env_id: str, episodes) -> list[float]:
    env, times = gym.make(env_id), []
    for ep in episodes:
        env.reset(seed=ep.seed)
        for reply in ep.replies:
            t0 = time.perf_counter()
            env.step(reply)
            times.append(time.perf_counter() - t0)
    return times


def direct_turns(env_id: str, episodes, url: str) -> list[float]:
    env, times = gym.make(env_id), []
    with httpx.Client() as http:
        for ep in episodes:
            env.reset(seed=ep.seed)
            for turn in range(len(ep.replies)):
                t0 = time.perf_counter()
                r = http.post(f"{url}/chat/completions", json={"model": "fake", "messages": ep.transcript(turn)})
                env.step(r.json()["choices"][0]["message"]["content"])
                times.append(time.perf_counter() - t0)
    return times


async def verifiers_turns(env_id: str, seeds, model: FakeModel) -> tuple[list[float], list[float], float]:
    env = load_environment(env_id, seeds=list(seeds))
    ctx = vf.ModelContext(model="fake", client=vf.EvalClientConfig(base_url=model.base_url, api_key_var="RAGEN_FAKE_KEY"))
    turns, starts, total, played = [], [], 0.0, 0
    async with env.serving():
        for task in env.taskset:
            (slot,) = env.slots(task, 1)
            before = len(model.arrivals)
            t0 = time.perf_counter()
            episode = await env.run_slot(slot, ctx)
            total += time.perf_counter() - t0
            played += len(episode.traces[0].info["ragen"]["rewards"])
            assert episode.traces[0].ok, episode.traces[0].errors
            arrivals = model.arrivals[before:]
            starts.append(arrivals[0] - t0)
            turns += [b - a for a, b in zip(arrivals, arrivals[1:])]
    return turns, starts, total / played


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--envs", nargs="+", default=["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
    args = p.parse_args()
    for env_id in args.envs:
        episodes = [local_episode(env_id, s, None, "expert") for s in range(args.episodes)]
        with FakeModel(episodes) as model:
            lt = local_turns(env_id, episodes)
            dt = direct_turns(env_id, episodes, model.base_url)
            vt, st, whole = asyncio.run(verifiers_turns(env_id, range(args.episodes), model))
        ml, md, mv = (statistics.median(x) for x in (lt, dt, vt))
        print(f"{env_id}: {args.episodes} episodes, {len(lt)} turns; median per turn: local {ml * 1e3:.3f} ms, "
              f"direct {md * 1e3:.3f} ms, verifiers {mv * 1e3:.3f} ms (between turns: {len(vt)}); "
              f"verifiers episode start (run_slot -> first request) median {statistics.median(st) * 1e3:.1f} ms; "
              f"whole run_slot per turn played {whole * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
