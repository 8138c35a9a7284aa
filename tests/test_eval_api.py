"""``openai:`` agent and ``ragen eval`` against a real HTTP server on 127.0.0.1.

The server is ``ragen_envs.serve``'s HTTP layer with a scripted backend that plays the
expert: it finds the episode from the first observation, replays the conversation's
replies, and answers the expert's next move (without the leading ``<think>`` for odd seeds,
like a model whose prompt forced it). A fault plan injects 429 (with Retry-After), 500,
dropped connections and malformed bodies. The client is the official ``openai`` package;
nothing of it is mocked.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import pytest

import ragen_envs
from ragen_envs.agents import AgentFatalError, AgentRequestError, make_agent
from ragen_envs.eval import read_episodes, run_episode
from ragen_envs.serve import ChatHandler, Completion, RequestError, make_server, serve_in_thread

pytest.importorskip("openai")

KEY = "sk-ragen-test-" + secrets.token_hex(16)
KEY_ENV = "RAGEN_TEST_API_KEY"
MODEL = "scripted-expert"


class ExpertBackend:
    """Answers like the expert agent, for the episodes of ``env_ids`` x ``seeds``."""

    model_name = MODEL

    def __init__(self, env_ids, seeds, latency: float = 0.0):
        self.latency = latency
        self.fail_keys: set[tuple[str, int]] = set()
        self.first_obs: dict[str, list[tuple[str, int]]] = {}
        for env_id in env_ids:
            env = gym.make(env_id)
            for seed in seeds:
                obs, _ = env.reset(seed=seed)
                self.first_obs.setdefault(obs, []).append((env_id, seed))
            env.close()

    def _replay(self, messages):
        users = [m["content"] for m in messages if m["role"] == "user"]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        for env_id, seed in self.first_obs.get(users[0], []):
            env = gym.make(env_id)
            obs, _ = env.reset(seed=seed)
            ok = True
            for reply, expected in zip(replies, users[1:]):
                obs, *_ = env.step(reply)
                ok = ok and obs == expected
            if ok:
                return env, env_id, seed
        raise RequestError(400, "unknown episode")

    def complete(self, request):
        env, env_id, seed = self._replay(request.messages)
        if (env_id, seed) in self.fail_keys:
            raise RequestError(503, "overloaded (scripted)", "server_error")
        reply = make_agent("expert", env=env).act(request.messages)
        if seed % 2:
            reply = reply.removeprefix("<think>")
        if self.latency:
            time.sleep(self.latency)
        prompt_words = sum(len(m["content"].split()) for m in request.messages)
        return prompt_words, [Completion(reply, "stop", len(reply.split()))]


class FaultyHandler(ChatHandler):
    """Injects the server's planned faults, one per request, in order; logs every request."""

    def authorized(self) -> bool:
        key = self.server.api_key
        given = self.headers.get("Authorization", "")
        if key and given != f"Bearer {key}":
            # a careless server that echoes the credentials it got: the client must redact them
            self.send_error_json(401, f"invalid api key in header: {given}", "authentication_error")
            return False
        return True

    def handle_chat(self, body):
        srv = self.server
        with srv.lock:
            srv.log.append({"body": body, "auth": self.headers.get("Authorization"), "time": time.monotonic()})
            fault = srv.faults.pop(0) if srv.faults else None
        if fault is None:
            return super().handle_chat(body)
        srv.injected.append(fault)
        if fault.startswith("429"):
            wait = fault.partition(":")[2] or "0"
            self.send_json(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": wait})
        elif fault == "500":
            self.send_error_json(500, "internal error (scripted)", "server_error")
        elif fault == "drop":
            self.close_connection = True  # hang up without an answer
        elif fault == "garbage":
            data = b'{"choices": [ {"mess'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif fault == "html":
            data = b"<html><body>502 Bad Gateway</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif fault == "nochoices":
            self.send_json(200, {"id": "x", "object": "chat.completion", "created": 0, "model": MODEL})
        else:
            raise AssertionError(f"unknown fault {fault}")


@contextmanager
def scripted_server(env_ids, seeds, faults=(), latency=0.0, api_key=KEY):
    server = make_server(ExpertBackend(env_ids, seeds, latency), "127.0.0.1", 0, api_key=api_key,
                         handler=FaultyHandler)
    server.lock = threading.Lock()
    server.log, server.injected, server.faults = [], [], list(faults)
    serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1", server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY_ENV


def assert_no_key(*texts: str, dirs=()):
    for text in texts:
        assert KEY not in text
    for d in dirs:
        for path in Path(d).rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"


def sokoban_messages(seed=124):
    env = gym.make("ragen/Sokoban-v0")
    obs, info = env.reset(seed=seed)
    return [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs}]


# ----------------------------------------------------------------------------- the agent
def test_complete_reply_modes():
    from ragen_envs.agents import complete_reply

    mid = "plan</think><answer>Up</answer>"
    assert complete_reply(mid) == "<think>" + mid
    assert complete_reply("<think>a</think><answer>Up</answer>") == "<think>a</think><answer>Up</answer>"
    assert complete_reply("<think>a</think>", mode="always") == "<think><think>a</think>"
    assert complete_reply(mid, mode="never") == mid
    assert complete_reply("Up</answer>", think=False) == "<answer>Up</answer>"
    assert ragen_envs.parse_answer(complete_reply(mid), ["Up"]).actions == ("Up",)


def test_request_fields_key_header_and_think_prefix(key_env):
    with scripted_server(["ragen/Sokoban-v0"], [123, 124]) as (url, server):
        agent = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=key_env, max_tokens=64,
                           stop=["</answer>x"], extra_body={"user": "eval-test", "seed": 7})
        reply = agent.reply(sokoban_messages(123))  # odd seed: the server drops "<think>"
        assert reply.raw.startswith("I follow") and reply.text == "<think>" + reply.raw
        assert reply.usage["completion_tokens"] == len(reply.raw.split()) and reply.usage_source == "api"
        assert reply.attempts == 1 and reply.finish_reason == "stop"
        body = server.log[0]["body"]
        assert body["temperature"] == 0.5 and body["max_tokens"] == 64 and body["stop"] == ["</answer>x"]
        assert body["user"] == "eval-test" and body["seed"] == 7 and body["model"] == MODEL
        assert server.log[0]["auth"] == f"Bearer {KEY}"
        assert KEY not in repr(agent) and KEY not in json.dumps(agent.config())
        even = agent.reply(sokoban_messages(124))  # the reply already has <think>: unchanged
        assert even.text == even.raw
        never = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=key_env, think_prefix="never")
        assert never.reply(sokoban_messages(123)).text.startswith("I follow")


def test_retry_after_is_honoured(key_env):
    with scripted_server(["ragen/Sokoban-v0"], [124], faults=["429:0.6"]) as (url, server):
        agent = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=key_env, backoff_base=0.01)
        start = time.monotonic()
        reply = agent.reply(sokoban_messages(124))
        assert time.monotonic() - start >= 0.6 and reply.attempts == 2
        gap = server.log[1]["time"] - server.log[0]["time"]
        assert gap >= 0.6


def test_faults_are_retried_then_succeed(key_env):
    faults = ["500", "drop", "garbage", "html", "nochoices"]
    with scripted_server(["ragen/Sokoban-v0"], [124], faults=faults) as (url, server):
        agent = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=key_env, backoff_base=0.01, max_retries=5)
        reply = agent.reply(sokoban_messages(124))
        assert server.injected == faults and reply.attempts == 6
        assert reply.text.startswith("<think>I follow")


def test_retries_exhausted_is_a_request_error(key_env):
    with scripted_server(["ragen/Sokoban-v0"], [124]) as (url, server):
        server.backend.fail_keys.add(("ragen/Sokoban-v0", 124))
        agent = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=key_env, backoff_base=0.01, max_retries=2)
        with pytest.raises(AgentRequestError, match="gave up after 3 attempts"):
            agent.reply(sokoban_messages(124))
        assert len(server.log) == 3


def test_bad_request_is_not_retried(key_env):
    with scripted_server(["ragen/Sokoban-v0"], [124]) as (url, server):
        agent = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=key_env, extra_body={"n": 99})
        with pytest.raises(AgentRequestError, match="HTTP 400"):
            agent.reply(sokoban_messages(124))
        assert len(server.log) == 1


def test_auth_error_is_fatal_and_the_key_is_redacted(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with scripted_server(["ragen/Sokoban-v0"], [124], api_key="sk-the-right-one") as (url, server):
        agent = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=KEY_ENV, backoff_base=0.01)
        with pytest.raises(AgentFatalError) as err:
            agent.reply(sokoban_messages(124))
        message = str(err.value)
        assert "authentication failed (HTTP 401)" in message and KEY_ENV in message
        assert KEY not in message and "***" in message  # the server echoed it; we redacted it
        assert len(server.log) == 0  # refused before the handler: one request, no retries


def test_unknown_model_is_fatal(key_env):
    with scripted_server(["ragen/Sokoban-v0"], [124]) as (url, _):
        agent = make_agent("openai:no-such-model", base_url=url, api_key_env=key_env)
        with pytest.raises(AgentFatalError, match="not found"):
            agent.reply(sokoban_messages(124))


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("RAGEN_NO_SUCH_KEY", raising=False)
    with pytest.raises(ValueError, match="RAGEN_NO_SUCH_KEY"):
        make_agent("openai:gpt-4o", api_key_env="RAGEN_NO_SUCH_KEY")
    # loopback servers may run without a key
    agent = make_agent("openai:m", base_url="http://127.0.0.1:9/v1", api_key_env="RAGEN_NO_SUCH_KEY")
    assert agent.base_url.startswith("http://127.0.0.1")


@pytest.mark.parametrize("spec, kwargs, match", [
    ("openai:", {}, "needs a model name"),
    ("openai:m", {"base_url": "ftp://x"}, "base_url must be an http"),
    ("openai:m", {"base_url": "http://127.0.0.1:9/v1", "temperature": -1}, "temperature"),
    ("openai:m", {"base_url": "http://127.0.0.1:9/v1", "think_prefix": "sometimes"}, "think_prefix"),
    ("gpt:m", {}, "unknown agent spec"),
])
def test_bad_agent_specs(spec, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_agent(spec, **kwargs)


# ----------------------------------------------------------------------------- ragen eval
RAGEN = [sys.executable, "-c", "import sys; from ragen_envs.cli import main; sys.exit(main())"]


def ragen(*args, env=None, timeout=120):
    """Run the ``ragen`` CLI in a subprocess; returns the CompletedProcess."""
    return subprocess.run([*RAGEN, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


def cli_env(**extra):
    env = dict(os.environ)
    env.update({"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy", "PYGAME_HIDE_SUPPORT_PROMPT": "1"})
    env.update(extra)
    return env


def expert_results(env_ids, seeds):
    out = {}
    for env_id in env_ids:
        env = gym.make(env_id)
        agent = make_agent("expert", env=env)
        for seed in seeds:
            ep = run_episode(env, agent, seed, env_id=env_id)
            out[(env_id, seed)] = (ep.success, round(ep.total_reward, 6), [t.response for t in ep.turns])
        env.close()
    return out


ENVS = ["ragen/Sokoban-v0", "ragen/FrozenLake-v0", "ragen/Bandit-v0"]
SEEDS = list(range(123, 131))


def test_eval_cli_with_faults_errors_apart_and_resume(tmp_path):
    out = tmp_path / "run"
    faults = ["429:0.2", "500", "drop", "garbage", "html", "nochoices", "500", "drop"]
    with scripted_server(ENVS, SEEDS, faults=faults) as (url, server):
        server.backend.fail_keys.add(("ragen/FrozenLake-v0", 126))
        args = ["eval", *ENVS, "--agent", f"openai:{MODEL}", "--base-url", url, "--api-key-env", KEY_ENV,
                "--seeds", "123..130", "--concurrency", "4", "--out", out, "--retry-backoff", "0.01",
                "--max-retries", "8", "--prices", "1.5,6"]
        first = ragen(*args, env=cli_env(**{KEY_ENV: KEY}))
        assert first.returncode == 1, first.stderr  # one episode kept failing: reported, exit 1
        assert sorted(server.injected) == sorted(faults), first.stderr
        assert "1 episode(s) ended in errors" in first.stderr and "overloaded" in first.stderr
        assert re.search(r"\] 24/24 .*eta .*success \d+/23 \(\d+\.\d%\), errors 1", first.stderr)  # progress line
        summary = json.loads((out / "summary.json").read_text())
        fl = summary["envs"]["ragen/FrozenLake-v0"]
        assert fl["errors"] == 1 and fl["error_seeds"] == [126] and fl["episodes"] == 7
        assert "gave up after 9 attempts" in fl["error_reasons"]["126"]
        errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
        assert [(e["env_id"], e["seed"], e["kind"]) for e in errors] == [("ragen/FrozenLake-v0", 126, "request")]

        # the faults changed nothing: every finished episode is the expert's own
        expected = expert_results(ENVS, SEEDS)
        episodes = read_episodes(out)
        assert len(episodes) == 23
        for ep in episodes:
            success, ret, responses = expected[(ep.env_id, ep.seed)]
            assert (ep.success, round(ep.total_reward, 6), [t.response for t in ep.turns]) == (success, ret, responses)
            raws = [m["raw_response"] for m in ep.meta["turns"]]
            if ep.env_id == "ragen/Sokoban-v0":  # one layout per seed (Bandit's first prompts repeat)
                assert all(r.startswith("<think>") == (ep.seed % 2 == 0) for r in raws)
        assert sum(m["attempts"] - 1 for ep in episodes for m in ep.meta["turns"]) >= len(faults) - 1
        for env_id in ENVS:
            s = summary["envs"][env_id]
            eps = [e for e in episodes if e.env_id == env_id]
            assert s["successes"] == sum(e.success for e in eps)
            assert s["token_count_source"] == "api" and s["completion_tokens"] > 0
            assert s["cost_usd"] == pytest.approx(s["prompt_tokens"] * 1.5e-6 + s["completion_tokens"] * 6e-6)
        for env_id in ENVS:
            assert env_id in first.stdout  # the printed table

        # the endpoint recovers: the same command runs only the failed episode
        server.backend.fail_keys.clear()
        before = len(server.log)
        second = ragen(*args, env=cli_env(**{KEY_ENV: KEY}))
        assert second.returncode == 0, second.stderr
        assert "22 episodes already" not in second.stderr and "23 episodes already" in second.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["envs"]["ragen/FrozenLake-v0"]["errors"] == 0
        assert summary["envs"]["ragen/FrozenLake-v0"]["episodes"] == 8
        assert len(server.log) - before == len(expected[("ragen/FrozenLake-v0", 126)][2])
        lines = (out / "episodes.jsonl").read_text().splitlines()
        assert len(lines) == 24 and len({(json.loads(line)["env_id"], json.loads(line)["seed"]) for line in lines}) == 24
    assert_no_key(first.stdout, first.stderr, second.stdout, second.stderr, dirs=[out])


def test_eval_cli_sigkill_then_resume(tmp_path):
    out = tmp_path / "run"
    envs, seeds = ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"], list(range(123, 139))
    with scripted_server(envs, seeds, latency=0.08) as (url, server):
        args = ["eval", *envs, "--agent", f"openai:{MODEL}", "--base-url", url, "--api-key-env", KEY_ENV,
                "--seeds", "123..138", "--concurrency", "3", "--out", out]
        proc = subprocess.Popen([*RAGEN, *map(str, args)],
                                env=cli_env(**{KEY_ENV: KEY}), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        path = out / "episodes.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and path.read_bytes().count(b"\n") >= 5:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        killed = path.read_bytes()
        assert killed.endswith(b"\n")  # whole lines only
        kept = [json.loads(line) for line in killed.splitlines()]
        assert 5 <= len(kept) < 32, "the run finished before the kill; slow the server down"

        resumed = ragen(*args, env=cli_env(**{KEY_ENV: KEY}))
        assert resumed.returncode == 0, resumed.stderr
        assert f"{len(kept)} episodes already" in resumed.stderr
        final = path.read_bytes()
        assert final.startswith(killed)  # nothing written before the kill changed
        records = [json.loads(line) for line in final.splitlines()]
        keys = [(r["env_id"], r["seed"]) for r in records]
        assert len(keys) == 32 and len(set(keys)) == 32  # every episode once
        expected = expert_results(envs, seeds)
        for r in records:
            assert [t["response"] for t in r["turns"]] == expected[(r["env_id"], r["seed"])][2]
        summary = json.loads((out / "summary.json").read_text())
        assert sum(s["episodes"] for s in summary["envs"].values()) == 32
    assert_no_key(stdout.decode(), stderr.decode(), resumed.stdout, resumed.stderr, dirs=[out])


def test_eval_cli_auth_error_stops_at_once(tmp_path):
    out = tmp_path / "run"
    with scripted_server(["ragen/Sokoban-v0"], SEEDS, api_key="sk-the-right-one") as (url, server):
        start = time.monotonic()
        result = ragen("eval", "ragen/Sokoban-v0", "--agent", f"openai:{MODEL}", "--base-url", url,
                       "--api-key-env", KEY_ENV, "--seeds", "8", "--out", out, env=cli_env(**{KEY_ENV: KEY}))
        assert time.monotonic() - start < 30
    assert result.returncode == 2
    assert "authentication failed (HTTP 401)" in result.stderr and KEY_ENV in result.stderr
    assert "Traceback" not in result.stderr
    assert not (out / "episodes.jsonl").exists() or (out / "episodes.jsonl").read_text() == ""
    assert_no_key(result.stdout, result.stderr, dirs=[out])


def test_eval_cli_user_errors_are_one_line(tmp_path):
    cases = [
        (["eval", "ragen/Nope-v0", "--agent", "expert", "--out", tmp_path / "a"], "unknown environment"),
        (["eval", "ragen/Sokoban-v0", "--agent", "expert", "--seeds", "0", "--out", tmp_path / "a"], "--seeds"),
        (["eval", "ragen/Sokoban-v0", "--agent", "expert", "--seeds", "9..3", "--out", tmp_path / "a"], "--seeds"),
        (["eval", "ragen/Sokoban-v0", "--agent", "gpt", "--out", tmp_path / "a"], "unknown agent"),
        (["eval", "ragen/Sokoban-v0", "--agent", "openai:gpt-4o", "--api-key-env", "RAGEN_NO_SUCH_KEY",
          "--out", tmp_path / "a"], "RAGEN_NO_SUCH_KEY"),
        (["eval", "ragen/Sokoban-v0", "--agent", "hf:/no/such/model", "--out", tmp_path / "a"], "does not exist"),
        (["eval", "ragen/Sokoban-v0", "--agent", "expert", "--prices", "1", "--out", tmp_path / "a"], "--prices"),
        (["eval", "ragen/Sokoban-v0", "--agent", "expert", "--concurrency", "0", "--out", tmp_path / "a"],
         "--concurrency"),
        (["eval", "ragen/Sokoban-v0", "--agent", "openai:m", "--base-url", "http://127.0.0.1:9/v1",
          "--extra-body", "{x", "--out", tmp_path / "a"], "--extra-body"),
        (["eval", "ragen/Sokoban-v0", "--agent", "expert", "--compare", tmp_path / "none", "--out", tmp_path / "a"],
         "--compare"),
    ]
    env = cli_env()
    env.pop("RAGEN_NO_SUCH_KEY", None)
    for args, needle in cases:
        result = ragen(*args, env=env)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr, (args, result.stderr)


def test_eval_refuses_other_settings_in_the_same_dir(tmp_path, key_env):
    from ragen_envs.eval import evaluate
    from ragen_envs.eval.harness import RunConfigMismatch

    with scripted_server(["ragen/Bandit-v0"], [123, 124]) as (url, _):
        agent = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=key_env)
        evaluate(agent, ["ragen/Bandit-v0"], [123, 124], tmp_path, concurrency=2, progress=False)
        hotter = make_agent(f"openai:{MODEL}", base_url=url, api_key_env=key_env, temperature=1.0)
        with pytest.raises(RunConfigMismatch, match="temperature"):
            evaluate(hotter, ["ragen/Bandit-v0"], [123, 124], tmp_path, concurrency=2, progress=False)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["agent_config"]["temperature"] == 0.5 and KEY not in json.dumps(config)
