"""Lying servers and unlucky replies: every record is written or becomes that episode's error,
never the run's, and the API key reaches no file and no console, whole or in part.

The servers here are minimal stdlib HTTP servers that say what a hostile or broken server
would: NaN rewards, megabyte pages, replies that echo the key, lone surrogates.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gymnasium as gym
import pytest

from ragen_envs.agents import Agent, Reply
from ragen_envs.agents.openai_agent import OpenAIAgent
from ragen_envs.cli import main as ragen_main
from ragen_envs.eval.harness import evaluate
from ragen_envs.eval.store import RecordError, encode_record, read_episodes, read_errors
from ragen_envs.webshop.remote import RemoteWebShopError

KEY = "sk-hostile-" + secrets.token_hex(12)  # 35 characters
KEY_ENV = "RAGEN_HOSTILE_TEST_KEY"
BANDIT = "ragen/Bandit-v0"
GOOD = "<think>the dragon pays more</think><answer>Dragon</answer>"


@contextmanager
def http_server(handler_cls, **state):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    server.state = dict(state, requests=0)
    server.lock = threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", server
    finally:
        server.shutdown()
        server.server_close()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def send_raw(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_json(self):
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")


def _leaks(text: str, size: int = 8) -> list[str]:
    """The pieces of KEY of ``size`` characters found in ``text`` (a cut key leaks in part)."""
    return [KEY[i:i + size] for i in range(len(KEY) - size + 1) if KEY[i:i + size] in text]


def assert_no_key_anywhere(out: Path, *texts: str) -> None:
    for text in texts:
        assert not _leaks(text), _leaks(text)
    for path in out.rglob("*"):
        if path.is_file():
            content = path.read_bytes().decode("utf-8")  # every file is valid UTF-8
            assert not _leaks(content), (path, _leaks(content))


# ------------------------------------------------------------------------------- records
def test_encode_record_replaces_surrogates_redacts_and_refuses_non_finite():
    line = encode_record({"a\udc80": ["x\ud800y", {"k": KEY}], "n": 1.5}, redact=lambda s: s.replace(KEY, "***"))
    assert json.loads(line.decode("utf-8")) == {"a\ufffd": ["x\ufffdy", {"k": "***"}], "n": 1.5}
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(RecordError, match=r"non-finite number .* at \$\.turns\[0\]\.r"):
            encode_record({"turns": [{"r": bad}]})


class _ScriptedAgent(Agent):
    """Answers GOOD; for chosen seeds the reply record carries what a broken server sent."""

    name = "scripted"

    def __init__(self, env: gym.Env, seed: int, mode: dict[int, str]):
        self.seed, self.mode = seed, mode

    async def areply(self, messages, think=None):
        mode = self.mode.get(self.seed)
        if mode == "nan_finish":
            return Reply(text=GOOD, raw=GOOD, finish_reason=math.nan)
        if mode == "surrogate":
            text = "<think>\ud800 dragon \udfff</think><answer>Dragon</answer>"
            return Reply(text=text, raw=text)
        return Reply(text=GOOD, raw=GOOD)

    def act(self, messages):  # pragma: no cover - the harness awaits areply
        raise NotImplementedError


def test_unwritable_records_become_that_episodes_error_not_the_runs(tmp_path):
    mode = {1: "nan_finish", 2: "surrogate"}
    for attempt in range(2):  # and a rerun neither crashes nor loses anything
        result = evaluate(lambda env, seed: _ScriptedAgent(env, seed, mode), [BANDIT], [0, 1, 2, 3], tmp_path,
                          progress=False, stop_after_errors=0)
        assert result.errors == 1
    episodes = {e.seed: e for e in read_episodes(tmp_path)}
    assert sorted(episodes) == [0, 2, 3]
    assert episodes[2].turns[0].info["think"] == "\ufffd dragon \ufffd"
    assert episodes[2].turns[0].response == "<think>\ufffd dragon \ufffd</think><answer>Dragon</answer>"
    errors = read_errors(tmp_path)
    assert [(e["seed"], e["kind"]) for e in errors] == [(1, "record"), (1, "record")]
    assert "non-finite number nan at $.meta.turns[0].finish_reason" in errors[0]["error"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["envs"][BANDIT]["errors"] == 1 and summary["envs"][BANDIT]["episodes"] == 3


# ------------------------------------------------------------------------------- the API key
class _ChatHandler(_Handler):
    """An OpenAI-compatible endpoint that misbehaves by the episode's seed (read from the
    Bandit prompt's position in the request count): 400 errors echoing the key at varied
    offsets (so it straddles the 300-character cut), replies echoing it, NaN finish_reason,
    lone surrogates."""

    def do_POST(self):  # noqa: N802
        body = self.read_json()
        with self.server.lock:
            n = self.server.state["requests"]
            self.server.state["requests"] += 1
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        kind = self.server.state["plan"][n % len(self.server.state["plan"])]
        if kind == "error":
            filler = "x" * (240 + 3 * (n % 20))  # the key starts at a different offset each time
            message = {"error": {"message": f"bad request {filler} key={key} end", "type": "invalid_request"}}
            self.send_raw(400, json.dumps(message).encode())
            return
        content = {
            "echo": f"<think>your key is {key}</think><answer>Dragon</answer>",
            "nan": GOOD,
            "surrogate": "<think>\\ud800 x</think><answer>Dragon</answer>",
        }[kind]
        finish = "NaN" if kind == "nan" else '"stop"'
        text = (
            '{"id": "c", "object": "chat.completion", "created": 0, "model": "%s", "choices": [{"index": 0, '
            '"message": {"role": "assistant", "content": %s}, "finish_reason": %s}], '
            '"usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}'
        ) % (body["model"], json.dumps(content).replace("\\\\ud800", "\\ud800"), finish)
        self.send_raw(200, text.encode())


def test_key_is_redacted_before_the_cut_and_in_replies(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(KEY_ENV, KEY)
    plan = ["error"] * 20 + ["echo", "nan", "surrogate"]
    with http_server(_ChatHandler, plan=plan) as (url, server):
        # the agent's own errors: for every offset of the key around the cut, no part of it
        agent = OpenAIAgent("m", base_url=url + "/v1", api_key_env=KEY_ENV, max_retries=0)
        messages = [{"role": "user", "content": "hi"}]
        for _ in range(20):
            with pytest.raises(Exception) as info:
                agent.reply(messages)
            assert not _leaks(str(info.value)), str(info.value)
        # a whole run through the CLI: files and console
        server.state["requests"] = 0
        out = tmp_path / "run"
        code = ragen_main(["eval", BANDIT, "--agent", "openai:m", "--base-url", url + "/v1", "--api-key-env", KEY_ENV,
                           "--seeds", "0..22", "--concurrency", "1", "--max-retries", "0", "--stop-after-errors", "0",
                           "--report-frames", "0", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1  # 20 episodes ended in request errors
    errors = read_errors(out)
    assert len(errors) == 20 and all("***" in e["error"] or "..." in e["error"] for e in errors)
    episodes = read_episodes(out)
    assert len(episodes) == 3  # the echoing, the NaN and the surrogate replies were all written
    finish = [m["finish_reason"] for e in episodes for m in e.meta["turns"]]
    assert sorted(map(str, finish)) == ["None", "stop", "stop"]
    assert any("***" in e.turns[0].response for e in episodes)
    assert_no_key_anywhere(out, captured.out, captured.err)


# ------------------------------------------------------------------------------- remote WebShop
class _ShopHandler(_Handler):
    """An AgentGym-style WebShop server whose /step (or /available_actions) answer is scripted."""

    def do_GET(self):  # noqa: N802
        path = self.path.split("?")[0]
        if path == "/available_actions":
            self.send_raw(200, self.server.state.get("avail", b'{"has_search_bar": true, "clickables": ["search"]}'))
        elif path == "/instruction_text":
            self.send_raw(200, b'"Instruction: buy tea"')
        else:
            self.send_raw(404, b'{"error": "no"}')

    def do_POST(self):  # noqa: N802
        self.read_json()
        path = self.path
        if path == "/create":
            self.send_raw(200, b"0")
        elif path == "/reset":
            self.send_raw(200, b'["WebShop [SEP] Instruction: [SEP] buy tea [SEP] Search", null]')
        elif path == "/step":
            self.send_raw(200, self.server.state["step"])
        else:
            self.send_raw(200, b"null")


def _step_answer(reward: str = "0.0", done: str = "false", state: str = '"Page"') -> bytes:
    return ('{"state": %s, "reward": %s, "done": %s, "info": null}' % (state, reward, done)).encode()


@pytest.mark.parametrize("step, avail, match", [
    (_step_answer(reward="NaN"), None, "non-finite|invalid JSON"),
    (_step_answer(reward="1e999"), None, "non-finite"),
    (_step_answer(reward="-Infinity"), None, "non-finite|invalid JSON"),
    (_step_answer(reward="true"), None, "reward True, expected a finite number"),
    (_step_answer(reward='"1"'), None, "expected a finite number"),
    (_step_answer(done='"yes"'), None, "done 'yes', expected a boolean"),
    (_step_answer(state=json.dumps("x" * (10 << 20))), None, "more than 1048576 bytes"),
    (_step_answer(state=json.dumps("x" * 70_000)), None, "70000 characters"),
    (_step_answer(), b'{"has_search_bar": true, "clickables": "search"}', "expected"),
    (_step_answer(), b'{"has_search_bar": true, "clickables": [1, 2]}', "expected"),
    (b'{"state": "p", "reward": 0, "done": true, "info": {"reward_breakdown": [1]}}', None, "reward_breakdown"),
    (b"[" * 100_000 + b"]" * 100_000, None, "invalid JSON|expected"),
    (b'{"state": "p", "reward": 0, "done": true, "info": {"reward_breakdown": ' + b'{"a": ' * 990 + b"1"
     + b"}" * 991 + b"}", None, "nested too deeply|invalid JSON"),
])
def test_remote_webshop_refuses_what_a_lying_server_sends(step, avail, match):
    state = {"step": step}
    with http_server(_ShopHandler, **state) as (url, server):
        env = gym.make("ragen/WebShop-v0", backend="remote", base_url=url, num_goals=10)
        env.reset(seed=0)
        if avail is not None:
            server.state["avail"] = avail
        with pytest.raises(RemoteWebShopError, match=match):
            env.step("<think>x</think><answer>search[tea]</answer>")
        env.close()


def test_remote_webshop_text_with_surrogates_is_made_safe():
    with http_server(_ShopHandler, step=_step_answer(state='"Results \\ud800 page"')) as (url, server):
        env = gym.make("ragen/WebShop-v0", backend="remote", base_url=url, num_goals=10)
        env.reset(seed=0)
        obs, reward, *_, info = env.step("<think>x</think><answer>search[tea]</answer>")
        assert env.unwrapped.backend.page().text == "Results \ufffd page"
        assert "Results  page" in obs  # the env shows printable ASCII only
        server.state["step"] = (b'{"state": "done", "reward": 1, "done": true, '
                                b'"info": {"reward_breakdown": {"k\\udc00": "v\\ud800"}}}')
        obs, reward, terminated, *_, info = env.step("<think>x</think><answer>click[buy now]</answer>")
        assert terminated and info["reward_breakdown"] == {"k\ufffd": "v\ufffd"}
        json.dumps([obs, info], ensure_ascii=False).encode("utf-8")
        env.close()


def test_remote_webshop_nan_reward_in_eval_is_an_episode_error(tmp_path):
    with http_server(_ShopHandler, step=_step_answer(reward="NaN", done="true")) as (url, _):
        result = evaluate("random", ["ragen/WebShop-v0"], [0, 1], tmp_path, progress=False, stop_after_errors=0,
                          env_kwargs={"backend": "remote", "base_url": url, "num_goals": 10})
    assert result.errors == 2 and result.ran == 0
    assert all("RemoteWebShopError" in e["error"] for e in read_errors(tmp_path))


# ------------------------------------------------------------------------------- config.json
def test_config_stores_seed_ranges_compactly_and_resumes_old_lists(tmp_path):
    from ragen_envs.eval.seeds import count_seeds, format_seed_ranges, merge_seed_ranges, seed_ranges

    big = format_seed_ranges(range(1_000_001))
    assert big == "0..1000000" and count_seeds(big) == 1_000_001
    assert format_seed_ranges([9, 1, 5, 7, 6, 5]) == "1,5..7,9" and seed_ranges("1,5..7,9") == [(1, 1), (5, 7), (9, 9)]
    assert merge_seed_ranges([1, 2, 3], "3..9,20") == "1..9,20"
    for bad in ("3..1", "x", "-1", 5, [1.5], [True]):
        with pytest.raises(ValueError):
            seed_ranges(bad)

    out = tmp_path / "run"
    out.mkdir()
    # a run directory written before this change: seeds as a JSON list
    (out / "config.json").write_text(json.dumps({"agent": "expert", "agent_config": {}, "env_kwargs": {},
                                                 "think": None, "env_ids": [BANDIT], "seeds": [0, 1, 2]}))
    evaluate("expert", [BANDIT], [3, 4, 10], out, progress=False)
    config = json.loads((out / "config.json").read_text())
    assert config["seeds"] == "0..4,10"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["seeds"] == "0..4,10"
    again = evaluate("expert", [BANDIT], [3, 4, 10], out, progress=False)
    assert again.skipped == 3 and again.ran == 0


def test_a_config_json_holding_a_list_is_a_one_line_error(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("[1, 2, 3]")
    code = ragen_main(["eval", BANDIT, "--agent", "expert", "--seeds", "0..1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2 and err[-1].startswith("ragen eval: error: ") and "JSON list" in err[-1]


def test_cli_seeds_follow_the_one_seed_rule(tmp_path, capsys):
    code = ragen_main(["eval", BANDIT, "--agent", "expert", "--seeds", "0..4294967296", "--out", str(tmp_path / "r")])
    assert code == 2 and "2**32 - 1" in capsys.readouterr().err
