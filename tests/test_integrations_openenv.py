"""The OpenEnv server: the expert's episodes through OpenEnv (in process and over a real
uvicorn server driven by OpenEnv's own client) equal the local env's; bad payloads get clear
errors and leave the server serving; sessions are isolated and capped."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from fastapi.testclient import TestClient

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.agents import make_agent
from ragen_envs.integrations import json_part
from ragen_envs.integrations.openenv import (
    RagenAction,
    RagenEnvClient,
    RagenEnvError,
    RagenEnvironment,
    RagenObservation,
    accepted_kwargs,
    create_ragen_app,
)

# (env id, noise seed of seed s or None): FrozenLake is slippery, so its noise seed matters
CASES = [("ragen/Sokoban-v0", None), ("ragen/FrozenLake-v0", lambda s: 1000 + 7 * s), ("ragen/WebShop-v0", None)]
SEEDS = range(20)


def _local_episode(env_id: str, seed: int, noise_seed: int | None):
    """The expert's episode on a local env: [(reply, (obs, reward, terminated, truncated, info))], reset."""
    env = gym.make(env_id)
    agent = make_agent("expert", env=env)
    obs, info = env.reset(seed=seed, options=None if noise_seed is None else {"noise_seed": noise_seed})
    reset = (obs, json_part(info))
    turns = []
    done = False
    while not done:
        reply = agent.act([])
        obs, reward, terminated, truncated, info = env.step(reply)
        turns.append((reply, (obs, float(reward), bool(terminated), bool(truncated), json_part(info))))
        done = terminated or truncated
    env.close()
    return reset, turns


def _obs_tuple(obs: dict, reward, done: bool):
    assert done == (obs["terminated"] or obs["truncated"])
    return obs["observation"], float(reward), obs["terminated"], obs["truncated"], obs["info"]


def test_action_schema_has_exactly_one_required_string_field():
    schema = RagenAction.model_json_schema()
    assert schema["required"] == ["reply"]
    assert schema["properties"]["reply"]["type"] == "string"
    fields = RagenObservation.model_json_schema()["properties"]
    assert {"observation", "system_prompt", "reward", "done", "terminated", "truncated", "info"} <= set(fields)


def test_json_part_keeps_only_json_values():
    import numpy as np

    value = {"a": np.int64(3), "b": [1.5, float("nan"), object()], "c": {"d": np.bool_(True)}, 4: "x", "e": b"z"}
    assert json_part(value) == {"a": 3, "b": [1.5], "c": {"d": True}}
    json.dumps(json_part(value))


@pytest.mark.parametrize("env_id,noise", CASES)
def test_environment_class_matches_local_env(env_id, noise):
    """The Environment object itself (no transport) for 20 seeds."""
    env = RagenEnvironment(env_id)
    for seed in SEEDS:
        ns = noise(seed) if noise else None
        (obs0, info0), turns = _local_episode(env_id, seed, ns)
        first = env.reset(seed=seed, noise_seed=ns)
        assert (first.observation, first.info, first.done, first.reward) == (obs0, info0, False, None)
        assert first.system_prompt == info0["system_prompt"]
        for reply, expected in turns:
            o = env.step(RagenAction(reply=reply))
            assert (o.observation, o.reward, o.terminated, o.truncated, o.info) == expected
        st = env.state
        assert (st.seed, st.noise_seed, st.turn, st.done) == (seed, ns, len(turns), True)
        assert st.success == turns[-1][1][4]["success"]
        with pytest.raises(RagenEnvError, match="ended"):
            env.step(RagenAction(reply="<answer>Up</answer>"))
    env.close()


@pytest.mark.parametrize("env_id,noise", CASES)
def test_websocket_in_process_matches_local_env(env_id, noise):
    with TestClient(create_ragen_app(env_id)) as client, client.websocket_connect("/ws") as ws:
        for seed in SEEDS:
            ns = noise(seed) if noise else None
            (obs0, info0), turns = _local_episode(env_id, seed, ns)
            data = {"seed": seed} if ns is None else {"seed": seed, "noise_seed": ns}
            ws.send_json({"type": "reset", "data": data})
            msg = ws.receive_json()
            assert msg["type"] == "observation", msg
            assert (msg["data"]["observation"]["observation"], msg["data"]["observation"]["info"]) == (obs0, info0)
            for reply, expected in turns:
                ws.send_json({"type": "step", "data": {"reply": reply}})
                msg = ws.receive_json()["data"]
                assert _obs_tuple(msg["observation"], msg["reward"], msg["done"]) == expected
            ws.send_json({"type": "state"})
            state = ws.receive_json()["data"]
            assert (state["env_id"], state["seed"], state["noise_seed"], state["turn"]) == (env_id, seed, ns, len(turns))
            assert state["step_count"] == len(turns) and state["done"] is True


def test_http_routes_and_clear_400s():
    env_id = "ragen/Sokoban-v0"
    (obs0, info0), _ = _local_episode(env_id, 5, None)
    with TestClient(create_ragen_app(env_id)) as client:
        schema = client.get("/schema").json()
        assert schema["action"]["required"] == ["reply"]
        assert "env_id" in schema["state"]["properties"]
        r = client.post("/reset", json={"seed": 5})
        assert r.status_code == 200 and r.json()["observation"]["observation"] == obs0
        r = client.post("/reset", json={"seed": 5, "max_turns": 2})
        assert r.status_code == 200 and r.json()["observation"]["info"]["turns_left"] == 2
        for payload, pattern in [({"seed": 5, "bogus": 1}, r"unknown keyword\(s\) \['bogus'\]"),
                                 ({"seed": 5, "max_turns": "x"}, "max_turns must be an integer"),
                                 ({"seed": 5, "render_mode": "human"}, "set by the server operator"),
                                 ({"seed": 5, "noise_seed": -3}, "noise_seed must be an integer")]:
            r = client.post("/reset", json=payload)
            assert r.status_code == 400 and re.search(pattern, r.json()["detail"]), r.json()
        assert client.post("/reset", json={"seed": -1}).status_code == 422
        r = client.post("/step", json={"action": {"reply": "<answer>Up</answer>"}})
        assert r.status_code == 400 and "/ws" in r.json()["detail"]
        for action in ({"reply": 5}, {}, {"reply": "x", "extra": 1}, {"reply": None}):
            assert client.post("/step", json={"action": action}).status_code == 422
        assert client.get("/metadata").json()["name"] == env_id
        assert client.get("/health").status_code == 200


def test_websocket_bad_messages_get_errors_and_the_session_goes_on():
    env_id = "ragen/Sokoban-v0"
    (obs0, _), turns = _local_episode(env_id, 9, None)
    with TestClient(create_ragen_app(env_id)) as client:
        with client.websocket_connect("/ws") as ws:
            def ask(raw):
                ws.send_text(raw if isinstance(raw, str) else json.dumps(raw))
                return ws.receive_json()

            assert ask('{"type": "reset", ')["data"]["code"] == "INVALID_JSON"
            assert ask({"type": "step", "data": {"reply": "x"}})["data"]["message"].startswith("no episode in progress")
            assert ask({"type": "jump"})["data"]["code"] == "UNKNOWN_TYPE"
            err = ask({"type": "reset", "data": {"seed": 9, "nope": 1}})["data"]
            assert err["code"] == "EXECUTION_ERROR" and "unknown keyword(s) ['nope']" in err["message"]
            assert ask({"type": "reset", "data": {"seed": 9}})["data"]["observation"]["observation"] == obs0
            for bad in ({"reply": 3}, {"reply": ["a"]}, {}, {"reply": "x", "more": 1}):
                assert ask({"type": "step", "data": bad})["data"]["code"] == "VALIDATION_ERROR"
            # the episode is untouched by the rejected messages
            for reply, expected in turns:
                msg = ask({"type": "step", "data": {"reply": reply}})["data"]
                assert _obs_tuple(msg["observation"], msg["reward"], msg["done"]) == expected
        # a message that is not an object ends that connection only
        with client.websocket_connect("/ws") as ws:
            ws.send_text("[1, 2]")
            assert ws.receive_json()["type"] == "error"
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {"seed": 9}})
            assert ws.receive_json()["data"]["observation"]["observation"] == obs0


def test_sessions_are_isolated_and_capped():
    env_id = "ragen/FrozenLake-v0"
    eps = {s: _local_episode(env_id, s, 50 + s) for s in (1, 2)}
    with TestClient(create_ragen_app(env_id, max_sessions=2)) as client:
        with client.websocket_connect("/ws") as a, client.websocket_connect("/ws") as b:
            with client.websocket_connect("/ws") as c:  # a third concurrent session is refused
                c.send_json({"type": "reset", "data": {}})
                err = c.receive_json()
                assert err["type"] == "error" and err["data"]["code"] == "CAPACITY_REACHED"
            for ws, s in ((a, 1), (b, 2)):
                ws.send_json({"type": "reset", "data": {"seed": s, "noise_seed": 50 + s}})
                assert ws.receive_json()["data"]["observation"]["observation"] == eps[s][0][0]
            # interleave the two episodes turn by turn
            for k in range(max(len(eps[1][1]), len(eps[2][1]))):
                for ws, s in ((a, 1), (b, 2)):
                    if k < len(eps[s][1]):
                        reply, expected = eps[s][1][k]
                        ws.send_json({"type": "step", "data": {"reply": reply}})
                        msg = ws.receive_json()["data"]
                        assert _obs_tuple(msg["observation"], msg["reward"], msg["done"]) == expected
        # both connections dropped without a 'close' message: their slots are free again
        with client.websocket_connect("/ws") as a, client.websocket_connect("/ws") as b:
            for ws in (a, b):
                ws.send_json({"type": "reset", "data": {"seed": 1, "noise_seed": 51}})
                assert ws.receive_json()["type"] == "observation"


def test_a_silent_connection_frees_its_session():
    with TestClient(create_ragen_app("ragen/Sokoban-v0", max_sessions=1, idle_timeout_s=0.5)) as client:
        with client.websocket_connect("/ws") as a:
            a.send_json({"type": "reset", "data": {"seed": 1}})
            assert a.receive_json()["type"] == "observation"
            with client.websocket_connect("/ws") as b:  # the one slot is taken
                b.send_json({"type": "reset", "data": {}})
                assert b.receive_json()["data"]["code"] == "CAPACITY_REACHED"
            time.sleep(1.0)  # a says nothing for longer than the idle timeout
            with client.websocket_connect("/ws") as c:
                c.send_json({"type": "reset", "data": {"seed": 1}})
                assert c.receive_json()["type"] == "observation"


def test_unknown_id_and_bad_settings_are_refused_up_front():
    with pytest.raises(RagenEnvError, match="unknown environment"):
        create_ragen_app("ragen/Nope-v0")
    with pytest.raises(RagenEnvError, match="unknown keyword"):
        create_ragen_app("ragen/Sokoban-v0", {"bogus": 1})
    with pytest.raises(ValueError, match="max_sessions"):
        create_ragen_app("ragen/Sokoban-v0", max_sessions=0)
    with pytest.raises(ValueError, match="idle_timeout_s"):
        create_ragen_app("ragen/Sokoban-v0", idle_timeout_s=0)
    assert "max_turns" in accepted_kwargs("ragen/Sokoban-v0") and "slippery" in accepted_kwargs("ragen/FrozenLake-v0")


def _cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "ragen_envs.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_cli_refuses_bad_input_in_one_line():
    for args, pattern in [(["ragen/Nope-v0"], "unknown environment"), (["ragen/Sokoban-v0", "--port", "70000"], "--port"),
                          (["ragen/Sokoban-v0", "--max-sessions", "0"], "--max-sessions"),
                          (["ragen/Sokoban-v0", "--idle-timeout", "0"], "--idle-timeout"),
                          (["ragen/Sokoban-v0", "--env-kwarg", "bogus=1"], "bogus")]:
        r = _cli("openenv-server", *args)
        assert r.returncode == 2 and re.search(pattern, r.stderr), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.fixture(scope="module")
def live_server():
    """`ragen openenv-server` for each env id on a free loopback port (a real uvicorn)."""
    procs, urls = [], {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        for env_id, _ in CASES:
            p = subprocess.Popen([sys.executable, "-m", "ragen_envs.cli", "openenv-server", env_id, "--port", "0",
                                  "--max-sessions", "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            procs.append(p)
        for (env_id, _), p in zip(CASES, procs):
            line = p.stdout.readline()
            m = re.search(r"on (http://127\.0\.0\.1:\d+)$", line.strip())
            assert m, (line, p.stderr.read() if p.poll() is not None else "")
            urls[env_id] = m.group(1)
        yield urls
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()


@pytest.mark.parametrize("env_id,noise", CASES)
def test_real_server_with_openenv_client_matches_local_env(live_server, env_id, noise):
    with RagenEnvClient(base_url=live_server[env_id]).sync() as client:
        for seed in SEEDS:
            ns = noise(seed) if noise else None
            (obs0, info0), turns = _local_episode(env_id, seed, ns)
            r = client.reset(seed=seed, **({} if ns is None else {"noise_seed": ns}))
            assert (r.observation.observation, r.observation.info, r.done) == (obs0, info0, False)
            for reply, expected in turns:
                r = client.step(RagenAction(reply=reply))
                o = r.observation
                assert (o.observation, r.reward, o.terminated, o.truncated, o.info) == expected
                assert r.done == (o.terminated or o.truncated)
            st = client.state()
            assert (st.env_id, st.seed, st.noise_seed, st.turn, st.done) == (env_id, seed, ns, len(turns), True)
        with pytest.raises(RuntimeError, match="unknown keyword"):
            client.reset(seed=0, bogus=1)
        assert client.reset(seed=0).observation.observation == _local_episode(env_id, 0, None)[0][0]


def test_real_server_keeps_serving_after_a_broken_client(live_server):
    import websockets
    import websockets.sync.client as wsc

    url = live_server["ragen/Sokoban-v0"].replace("http", "ws", 1) + "/ws"
    with wsc.connect(url) as ws:
        ws.send("[not an object")
        assert json.loads(ws.recv())["data"]["code"] == "INVALID_JSON"
        ws.send(json.dumps({"type": "step", "data": {"reply": 7}}))
        assert json.loads(ws.recv())["data"]["code"] == "VALIDATION_ERROR"
    with contextlib.suppress(OSError, websockets.exceptions.WebSocketException), wsc.connect(url) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        ws.recv()
        ws.socket.shutdown(socket.SHUT_RDWR)  # abandoned: dropped without a close message
    time.sleep(0.2)
    for _ in range(4):  # all 4 slots are usable again
        with RagenEnvClient(base_url=live_server["ragen/Sokoban-v0"]).sync() as client:
            assert client.reset(seed=2).observation.observation == _local_episode("ragen/Sokoban-v0", 2, None)[0][0]


def test_space_manifest_names_an_importable_app(monkeypatch):
    import importlib
    from pathlib import Path

    import yaml

    import ragen_envs.integrations.openenv as mod

    manifest = yaml.safe_load((Path(__file__).parents[1] / "spaces" / "openenv" / "openenv.yaml").read_text())
    assert manifest["spec_version"] == 1 and manifest["runtime"] == "fastapi"
    module, attr = manifest["app"].split(":")
    monkeypatch.setenv("RAGEN_ENV_ID", "ragen/FrozenLake-v0")
    monkeypatch.delitem(mod.__dict__, "app", raising=False)
    app = getattr(importlib.import_module(module), attr)
    with TestClient(app) as client:
        assert client.get("/metadata").json()["name"] == "ragen/FrozenLake-v0"
    monkeypatch.delitem(mod.__dict__, "app", raising=False)
    monkeypatch.setenv("RAGEN_MAX_SESSIONS", "many")
    with pytest.raises(RagenEnvError, match="RAGEN_MAX_SESSIONS"):
        getattr(mod, "app")
    monkeypatch.delitem(mod.__dict__, "app", raising=False)


def test_json_part_follows_the_protocols_string_rule():
    assert json_part({"a\ud800": ["x\udfff", float("inf")]}) == {"a\ufffd": ["x\ufffd"]}
