"""Short turns of the pure-CPU games run on the OpenEnv server's event loop, and that changes nothing a client sees.

``RagenEnvironment.step_async`` / ``reset_async`` run a turn of an env in ``INLINE_ENVS`` on the
event loop (a reset only with a seed, no rebuild, and within ``INLINE_RESET_S`` of work; a step
only with a reply of at most ``INLINE_REPLY_CHARS``); everything else goes to a worker thread, and
an inline reset that runs past its budget is started again there. These tests pin:

* the bytes on the WebSocket are the same with the fast path on, off, and with every
  budget-checking reset cut and rerun on a thread (``INLINE_RESET_S = 0``);
* which calls run where (thread names), including a long reset: cut on the loop, finished on a
  thread, the same level as a local env's;
* a stopping server refuses an inline reset as it refuses one on a thread.
"""

from __future__ import annotations

import itertools
import json
import threading

import gymnasium as gym
import pytest
from fastapi.testclient import TestClient

import ragen_envs  # noqa: F401
import ragen_envs.integrations.openenv as openenv_mod
from ragen_envs.agents import make_agent
from ragen_envs.envs.limits import DEFAULT_BOUNDS
from ragen_envs.integrations.openenv import INLINE_ENVS, INLINE_REPLY_CHARS, create_ragen_app

WORKER = "ragen-reset"  # the name prefix of the server's worker threads


def _script(env_id: str, seed: int) -> list[dict]:
    """One session's messages: seeded resets with and without a noise seed, a seedless one, one
    that rebuilds the env, a too-long reply, odd replies, then the expert's replies."""
    env = gym.make(env_id)
    agent = make_agent("expert", env=env)
    msgs: list[dict] = []

    def episode(reset_data: dict, odd: list[str]) -> None:
        msgs.append({"type": "reset", "data": reset_data})
        env.reset(seed=reset_data.get("seed"),
                  options=None if "noise_seed" not in reset_data else {"noise_seed": reset_data["noise_seed"]})
        for turn in range(12):
            reply = odd[turn] if turn < len(odd) else agent.act([])
            msgs.append({"type": "step", "data": {"reply": reply}})
            _, _, terminated, truncated, _ = env.step(reply)
            if terminated or truncated:
                break

    episode({"seed": seed}, ["", "<answer>" * 40])
    episode({"seed": seed + 1, "noise_seed": 7 * seed + 3}, ["<answer>Up</answer>" + "x" * INLINE_REPLY_CHARS])
    episode({}, [])  # seedless: the env's own generator, on a thread either way
    msgs.append({"type": "reset", "data": {"seed": seed, "max_turns": 3}})  # a rebuild
    msgs.append({"type": "step", "data": {"reply": "<answer>Up</answer>"}})
    return msgs


def _transcript(env_id: str, seeds) -> list[str]:
    texts = []
    with TestClient(create_ragen_app(env_id)) as client, client.websocket_connect("/ws") as ws:
        for seed in seeds:
            for msg in _script(env_id, seed):
                ws.send_text(json.dumps(msg))
                texts.append(ws.receive_text())
    return texts


@pytest.mark.parametrize("env_id", sorted(INLINE_ENVS))
def test_the_fast_path_sends_the_same_bytes_as_the_worker_thread(env_id, monkeypatch):
    seeds = (0, 5)
    fast = _transcript(env_id, seeds)
    monkeypatch.setattr(openenv_mod, "INLINE_RESET_S", 0.0)  # every budget-checked reset: cut, rerun on a thread
    cut = _transcript(env_id, seeds)
    monkeypatch.setattr(openenv_mod, "INLINE_ENVS", frozenset())  # everything on worker threads
    threaded = _transcript(env_id, seeds)
    assert fast == cut == threaded
    kinds = [json.loads(t)["type"] for t in fast]
    assert kinds.count("observation") > len(kinds) // 2  # mostly real turns, not errors


@pytest.fixture
def where(monkeypatch):
    """Every gym-level reset and step records (call, on a worker thread?)."""
    calls: list[tuple[str, bool]] = []
    reset, step = gym.Wrapper.reset, gym.Wrapper.step

    def on_worker() -> bool:
        return threading.current_thread().name.startswith(WORKER)

    def rec_reset(self, **kw):
        calls.append(("reset", on_worker()))
        return reset(self, **kw)

    def rec_step(self, action):
        calls.append(("step", on_worker()))
        return step(self, action)

    monkeypatch.setattr(gym.Wrapper, "reset", rec_reset)
    monkeypatch.setattr(gym.Wrapper, "step", rec_step)
    return calls


def _outermost(calls):
    """One entry per env call: gym.make stacks wrappers, and each layer of one call records the same entry."""
    return [key for key, _ in itertools.groupby(calls)]


def test_which_turns_run_on_the_loop_and_which_on_a_worker_thread(where):
    with TestClient(create_ragen_app("ragen/Sokoban-v0")) as client, client.websocket_connect("/ws") as ws:
        def send(msg):
            where.clear()
            ws.send_json(msg)
            reply = ws.receive_json()
            assert reply["type"] == "observation", reply
            return _outermost(where)

        assert send({"type": "reset", "data": {"seed": 3}}) == [("reset", False)]
        assert send({"type": "step", "data": {"reply": "<answer>Up</answer>"}}) == [("step", False)]
        long = "<answer>Up</answer>" + " " * INLINE_REPLY_CHARS
        assert send({"type": "step", "data": {"reply": long}}) == [("step", True)]
        assert send({"type": "reset", "data": {}}) == [("reset", True)]  # seedless
        assert send({"type": "reset", "data": {"seed": 3, "max_turns": 4}}) == [("reset", True)]  # rebuild
        assert send({"type": "reset", "data": {"seed": 3, "max_turns": 4}}) == [("reset", False)]  # rebuilt now


def test_a_long_reset_is_cut_on_the_loop_and_finished_on_a_thread_with_the_same_level(where):
    kwargs = {"dim_room": [10, 10], "num_boxes": 3}  # tens of ms or more: far past INLINE_RESET_S
    with TestClient(create_ragen_app("ragen/Sokoban-v0", env_kwargs=kwargs)) as client, \
            client.websocket_connect("/ws") as ws:
        where.clear()
        ws.send_json({"type": "reset", "data": {"seed": 11}})
        got = ws.receive_json()
    assert _outermost(where) == [("reset", False), ("reset", True)]
    obs, info = gym.make("ragen/Sokoban-v0", dim_room=(10, 10), num_boxes=3).reset(seed=11)
    assert got["data"]["observation"]["observation"] == obs
    assert got["data"]["observation"]["info"]["seed"] == info["seed"]


def test_a_stopping_server_refuses_an_inline_reset():
    app = create_ragen_app("ragen/Sokoban-v0")
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        ws.send_json({"type": "reset", "data": {"seed": 1}})
        assert ws.receive_json()["type"] == "observation"
        app.state.ragen_stopping.set()
        ws.send_json({"type": "reset", "data": {"seed": 2}})
        err = ws.receive_json()
    assert err["type"] == "error" and "the server is stopping" in err["data"]["message"]


def test_an_inline_reset_keeps_the_operators_short_budget():
    # a reset budget at or below INLINE_RESET_S: the reset goes to the thread, where that budget applies
    assert DEFAULT_BOUNDS["dim_room"][1] >= 10
    app = create_ragen_app("ragen/Sokoban-v0", env_kwargs={"dim_room": [10, 10], "num_boxes": 3},
                           reset_timeout_s=openenv_mod.INLINE_RESET_S)
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        ws.send_json({"type": "reset", "data": {"seed": 11}})
        err = ws.receive_json()
    assert err["type"] == "error" and "reset budget" in err["data"]["message"]
