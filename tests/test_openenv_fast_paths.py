"""The OpenEnv server's cheaper message path sends exactly what OpenEnv would send.

* ``IdleTimeout`` no longer relays every message through a reader task and a queue, and
  resets read the connection in the background only after ``WATCH_AFTER_S``: the same
  episodes, with odd replies and hostile info values, give over the WebSocket the bytes that
  OpenEnv's own serialisation gives for the bare ``RagenEnvironment`` driven with no transport.
* ``IdleTimeout`` keeps one lazily re-armed idle timer per connection instead of one per
  message: a connection that keeps talking for several timeouts' worth of time is kept, a
  silent one is still freed.
"""

from __future__ import annotations

import json
import time

import gymnasium as gym
import numpy as np
import pytest
from fastapi.testclient import TestClient

import ragen_envs  # noqa: F401
from ragen_envs.agents import make_agent
from ragen_envs.integrations.openenv import RagenAction, RagenEnvironment, RagenEnvError, create_ragen_app

LONG = 8192  # replies around this length and past it

ODD_INFO = {
    "nan": float("nan"), "inf": float("-inf"), "np_int": np.int64(7), "np_float": np.float32(0.5),
    "np_bool": np.bool_(True), "array": np.arange(3), "tuple": (1, "a", (2, float("nan"))), "set": {1, 2},
    "bytes": b"x", "surrogate": "a\ud800b", "accent": "é\u2028", 5: "int key", "obj": object(),
    "nested": {"k": [float("inf"), {"z": np.bool_(False), "w": None}], "\udc80key": 1}, "big": 10 ** 30,
}


ODD_REPLIES = ["", "<answer>Up</answer>é\u2028\x00",
               "<think>" + "a" * (LONG - 40) + "</think><answer>Up</answer>",
               "<answer>Up</answer>" + "b" * (LONG + 1),
               "<answer>" * 50]


def _replies(env_id: str, seed: int) -> list[str]:
    """One episode's replies: a few odd ones (format penalties, wasted turns), then the expert's."""
    env = gym.make(env_id)
    agent = make_agent("expert", env=env)
    env.reset(seed=seed)
    odd = ODD_REPLIES[:3] if seed % 2 == 0 else ODD_REPLIES[2:]
    out, done = [], False
    while not done:
        reply = odd[len(out)] if len(out) < len(odd) else agent.act([])
        out.append(reply)
        _, _, terminated, truncated, _ = env.step(reply)
        done = terminated or truncated
    return out


def _play(app, env_id: str, seeds) -> list[str]:
    texts = []
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        for seed in seeds:
            ws.send_text(json.dumps({"type": "reset", "data": {"seed": seed}}))
            texts.append(ws.receive_text())
            for reply in _replies(env_id, seed):
                ws.send_text(json.dumps({"type": "step", "data": {"reply": reply}}))
                texts.append(ws.receive_text())
            ws.send_text(json.dumps({"type": "step", "data": {"reply": "<answer>Up</answer>"}}))  # after the end
            texts.append(ws.receive_text())
    return texts


def _expected(env_id: str, seeds) -> list[str]:
    """What OpenEnv's handler sends for the bare environment's answers (no transport)."""
    from openenv.core.env_server.serialization import serialize_observation
    from openenv.core.env_server.types import WSErrorCode, WSErrorResponse, WSObservationResponse

    env = RagenEnvironment(env_id)
    out = []
    for seed in seeds:
        replies = _replies(env_id, seed)
        out.append(WSObservationResponse(data=serialize_observation(env.reset(seed=seed))).model_dump_json())
        for reply in replies + ["<answer>Up</answer>"]:
            try:
                out.append(WSObservationResponse(data=serialize_observation(env.step(RagenAction(reply=reply))))
                           .model_dump_json())
            except RagenEnvError as exc:
                out.append(WSErrorResponse(data={"message": str(exc), "code": WSErrorCode.EXECUTION_ERROR})
                           .model_dump_json())
    return out


@pytest.fixture
def odd_info(monkeypatch):
    """Every step of every env adds ODD_INFO to its info."""
    original = gym.Wrapper.step

    def step(self, action):
        obs, reward, terminated, truncated, info = original(self, action)
        return obs, reward, terminated, truncated, {**info, **ODD_INFO}

    monkeypatch.setattr(gym.Wrapper, "step", step)


@pytest.mark.parametrize("env_id", ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
def test_the_websocket_sends_what_openenv_serialises_for_the_bare_env(env_id, odd_info):
    seeds = range(6)
    got = _play(create_ragen_app(env_id), env_id, seeds)
    assert got == _expected(env_id, seeds)
    # the odd values reached the client, cleaned as json_part promises
    step = json.loads(got[1])["data"]["observation"]["info"]
    assert step["np_int"] == 7 and step["tuple"] == [1, "a", [2]] and step["surrogate"] == "a\ufffdb"
    assert "nan" not in step and "set" not in step and "5" not in step and "\ufffdkey" in step["nested"]
    assert json.loads(got[-1])["data"]["message"].startswith("the episode has ended")


@pytest.mark.parametrize("uncancel", [True, False], ids=["task-uncancel", "py310-wait_for"])
def test_a_talking_connection_outlives_many_idle_timeouts_and_a_silent_one_does_not(uncancel, monkeypatch):
    # False: the Python 3.10 path (wait_for per wait), which runs on newer Pythons as well
    import ragen_envs.integrations.openenv as openenv_mod

    monkeypatch.setattr(openenv_mod, "_UNCANCEL", uncancel)
    with TestClient(create_ragen_app("ragen/FrozenLake-v0", max_sessions=1, idle_timeout_s=0.4)) as client:
        with client.websocket_connect("/ws") as a:
            end = time.monotonic() + 2.0  # five timeouts' worth, a message every 0.1 s
            while time.monotonic() < end:
                a.send_json({"type": "reset", "data": {"seed": 1}})
                assert a.receive_json()["type"] == "observation"
                time.sleep(0.1)
            with client.websocket_connect("/ws") as b:  # a still holds the one slot
                b.send_json({"type": "reset", "data": {}})
                assert b.receive_json()["data"]["code"] == "CAPACITY_REACHED"
            time.sleep(1.0)  # now a is silent for longer than the timeout
            with client.websocket_connect("/ws") as c:
                c.send_json({"type": "reset", "data": {"seed": 1}})
                assert c.receive_json()["type"] == "observation"
