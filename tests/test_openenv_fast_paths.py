"""The OpenEnv server's fast paths send exactly what the slow paths send.

* Short steps of the pure-CPU games run on the event loop (``RagenEnvironment.step_async``);
  the slow path is OpenEnv's own: every step on a worker thread. The same episodes, with odd
  replies and hostile info values, give byte-identical WebSocket messages both ways.
* ``IdleTimeout`` keeps one lazily re-armed idle timer per connection instead of one per
  message: a connection that keeps talking for several timeouts' worth of time is kept, a
  silent one is still freed.
"""

from __future__ import annotations

import json
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from fastapi.testclient import TestClient

import ragen_envs  # noqa: F401
from ragen_envs.agents import make_agent
from ragen_envs.integrations import openenv as oe
from ragen_envs.integrations.openenv import INLINE_STEP_MAX_CHARS, create_ragen_app

ODD_INFO = {
    "nan": float("nan"), "inf": float("-inf"), "np_int": np.int64(7), "np_float": np.float32(0.5),
    "np_bool": np.bool_(True), "array": np.arange(3), "tuple": (1, "a", (2, float("nan"))), "set": {1, 2},
    "bytes": b"x", "surrogate": "a\ud800b", "accent": "é\u2028", 5: "int key", "obj": object(),
    "nested": {"k": [float("inf"), {"z": np.bool_(False), "w": None}], "\udc80key": 1}, "big": 10 ** 30,
}


ODD_REPLIES = ["", "<answer>Up</answer>é\u2028\x00",
               "<think>" + "a" * (INLINE_STEP_MAX_CHARS - 40) + "</think><answer>Up</answer>",  # just inline
               "<answer>Up</answer>" + "b" * (INLINE_STEP_MAX_CHARS + 1),  # just over: a worker thread
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


@pytest.fixture
def odd_info_and_threads(monkeypatch):
    """Every step of every env adds ODD_INFO to its info and records the thread it ran on."""
    threads: list[tuple[int, str]] = []
    original = gym.Wrapper.step

    def step(self, action):
        obs, reward, terminated, truncated, info = original(self, action)
        name = threading.current_thread().name
        if name != "MainThread":  # not the local env that _replies plays
            threads.append((len(action), name))
        return obs, reward, terminated, truncated, {**info, **ODD_INFO}

    monkeypatch.setattr(gym.Wrapper, "step", step)
    return threads


@pytest.mark.parametrize("env_id", ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
def test_steps_on_the_loop_send_what_the_worker_thread_sends(env_id, odd_info_and_threads, monkeypatch):
    seeds = range(6)
    fast = _play(create_ragen_app(env_id), env_id, seeds)
    fast_threads = list(odd_info_and_threads)
    odd_info_and_threads.clear()
    monkeypatch.setattr(oe, "INLINE_STEP_ENTRY_POINTS", frozenset())  # OpenEnv's way: every step on a thread
    slow = _play(create_ragen_app(env_id), env_id, seeds)
    slow_threads = list(odd_info_and_threads)
    assert fast == slow
    # the comparison is not vacuous: the odd values reached the client, cleaned, and the two
    # apps took different paths (short replies on the loop, long ones and all slow ones on a worker)
    step = json.loads(fast[1])["data"]["observation"]["info"]
    assert step["np_int"] == 7 and step["tuple"] == [1, "a", [2]] and step["surrogate"] == "a\ufffdb"
    assert "nan" not in step and "set" not in step and "5" not in step and "\ufffdkey" in step["nested"]
    assert {n.startswith("ragen-reset") for size, n in fast_threads if size <= INLINE_STEP_MAX_CHARS} == {False}
    assert {n.startswith("ragen-reset") for size, n in fast_threads if size > INLINE_STEP_MAX_CHARS} == {True}
    assert {n.startswith("ragen-reset") for _, n in slow_threads} == {True}


def test_webshop_steps_stay_on_a_worker_thread():
    assert oe.RagenEnvironment("ragen/WebShop-v0")._inline_step is False
    assert oe.RagenEnvironment("ragen/Sokoban-v0")._inline_step is True


def test_a_talking_connection_outlives_many_idle_timeouts_and_a_silent_one_does_not():
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
