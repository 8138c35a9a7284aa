"""``hf:`` agent (batched local generation) and ``ragen serve`` (an OpenAI-compatible server
for it), with the tiny Qwen2-architecture checkpoint of ``ragen_envs.models``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.agents import make_agent  # noqa: E402
from ragen_envs.eval import evaluate, format_compare_table, load_summary, read_episodes  # noqa: E402
from ragen_envs.models import build_tiny_checkpoint  # noqa: E402

RAGEN = [sys.executable, "-c", "import sys; from ragen_envs.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "tiny")


def conversation(text="Turn 1:\nState:\n#P_O#\n"):
    return [{"role": "system", "content": "You're a helpful assistant. "}, {"role": "user", "content": text}]


def test_batched_generation_equals_one_by_one(tiny):
    agent = make_agent(f"hf:{tiny}", temperature=0.0, max_tokens=12, batch_size=4)
    prompts = [conversation(), conversation("short"), conversation("a much longer prompt " * 12)]
    batched = agent.generate(prompts)
    single = [agent.generate([p])[0] for p in prompts]
    assert [g.text for g in batched] == [g.text for g in single]
    assert [g.prompt_tokens for g in batched] == [g.prompt_tokens for g in single]
    assert batched[2].prompt_tokens > batched[1].prompt_tokens
    for g in batched:
        assert 1 <= g.completion_tokens <= 12 and g.finish_reason in ("stop", "length")


def test_reply_records_usage_and_completes_the_think_tag(tiny):
    agent = make_agent(f"hf:{tiny}", temperature=0.7, max_tokens=16, seed=3)
    reply = agent.reply(conversation())
    assert reply.text == (reply.raw if "<think>" in reply.raw else "<think>" + reply.raw)
    assert reply.usage_source == "tokenizer" and reply.usage["prompt_tokens"] > 10
    assert reply.usage["total_tokens"] == reply.usage["prompt_tokens"] + reply.usage["completion_tokens"]
    # sampling is seeded per agent and leaves the global torch RNG alone
    import torch

    state = torch.random.get_rng_state()
    again = make_agent(f"hf:{tiny}", temperature=0.7, max_tokens=16, seed=3).reply(conversation())
    assert again.raw == reply.raw and torch.equal(state, torch.random.get_rng_state())
    prefilled = make_agent(f"hf:{tiny}", temperature=0.0, max_tokens=4, prefill=True)
    assert prefilled.reply(conversation(), think=False).text.startswith("<answer>")


def test_concurrent_areply_goes_through_the_batcher(tiny):
    agent = make_agent(f"hf:{tiny}", temperature=0.0, max_tokens=8, batch_size=8, batch_wait_s=0.05)
    calls = []
    original = agent._sample
    agent._sample = lambda items: calls.append(len(items)) or original(items)

    async def main():
        return await asyncio.gather(*[agent.areply(conversation(f"prompt {i}")) for i in range(8)])

    replies = asyncio.run(main())
    assert len(replies) == 8 and sum(calls) == 8 and max(calls) > 1  # batched, nothing lost
    agent.close()


def test_openai_agent_counts_tokens_locally_when_the_api_reports_none(tiny):
    from ragen_envs.serve import ChatHandler, make_server, serve_in_thread

    text = "<think>push</think><answer>Up</answer>"

    class NoUsage(ChatHandler):
        def handle_chat(self, body):
            self.send_json(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})

    class Named:
        model_name = "m"

    server = make_server(Named(), "127.0.0.1", 0, handler=NoUsage)
    serve_in_thread(server)
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        reply = make_agent("openai:m", base_url=url, api_key_env="RAGEN_NO_SUCH_KEY", tokenizer=str(tiny)).reply(
            conversation())
        bare = make_agent("openai:m", base_url=url, api_key_env="RAGEN_NO_SUCH_KEY").reply(conversation())
    finally:
        server.shutdown()
        server.server_close()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny))
    assert reply.usage_source == "tokenizer"
    assert reply.usage["completion_tokens"] == len(tok.encode(text, add_special_tokens=False))
    assert reply.usage["prompt_tokens"] > 10
    assert bare.usage is None and bare.usage_source is None


def test_hf_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        make_agent(f"hf:{tmp_path / 'missing'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="cannot load"):
        make_agent(f"hf:{tmp_path / 'empty'}")


def _start_server(tiny, *extra):
    env = dict(os.environ, SDL_VIDEODRIVER="dummy", PYGAME_HIDE_SUPPORT_PROMPT="1")
    proc = subprocess.Popen([*RAGEN, "serve", f"hf:{tiny}", "--port", "0", "--max-tokens", "16", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if " at http://" not in line:
        proc.kill()
        raise AssertionError(f"ragen serve did not start: {line!r} {proc.stderr.read()}")
    url = line.split(" at ", 1)[1].split()[0]
    return proc, url


def _post(url, body, headers=None):
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_serve_then_eval_through_the_openai_client(tiny, tmp_path):
    proc, url = _start_server(tiny)
    try:
        assert url.startswith("http://127.0.0.1:")  # loopback by default
        with urllib.request.urlopen(url + "/models", timeout=30) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "tiny"
        status, body = _post(url, {"model": "tiny", "messages": conversation(), "max_tokens": 5, "n": 2})
        assert status == 200 and len(body["choices"]) == 2
        usage = body["usage"]
        assert usage["prompt_tokens"] > 10 and 2 <= usage["completion_tokens"] <= 10
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert _post(url, {"model": "other", "messages": conversation()})[0] == 404
        assert _post(url, {"model": "tiny", "messages": []})[0] == 400
        assert _post(url, {"model": "tiny", "messages": conversation(), "logprobs": True})[0] == 400

        # the same evaluation path as any API model, and the same replies as the local hf: agent
        out_api, out_hf = tmp_path / "api", tmp_path / "hf"
        envs, seeds = ["ragen/Bandit-v0", "ragen/Sokoban-v0"], [123, 124, 125]
        env = dict(os.environ, SDL_VIDEODRIVER="dummy", PYGAME_HIDE_SUPPORT_PROMPT="1")
        env.pop("OPENAI_API_KEY", None)  # a loopback server needs no key
        api = subprocess.run([*RAGEN, "eval", *envs, "--agent", "openai:tiny", "--base-url", url, "--seeds", "3",
                              "--temperature", "0", "--max-tokens", "12", "--report-frames", "0", "--quiet",
                              "--out", out_api], capture_output=True, text=True, env=env, timeout=120)
        assert api.returncode == 0, api.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    summary = json.loads((out_api / "summary.json").read_text())
    for env_id in envs:
        s = summary["envs"][env_id]
        assert s["episodes"] == 3 and s["errors"] == 0
        assert s["token_count_source"] == "api" and s["completion_tokens"] > 0
    local = evaluate(make_agent(f"hf:{tiny}", temperature=0.0, max_tokens=12), envs, seeds, out_hf,
                     progress=False, frame_episodes=0, compare=[("openai:tiny", load_summary(out_api))])
    by_key = {(e.env_id, e.seed): e for e in read_episodes(out_hf)}
    for ep in read_episodes(out_api):
        other = by_key[(ep.env_id, ep.seed)]
        assert [t.response for t in ep.turns] == [t.response for t in other.turns]
        assert [m["usage"]["completion_tokens"] for m in ep.meta["turns"]] == \
               [m["usage"]["completion_tokens"] for m in other.meta["turns"]]
    assert "compare-table" in (out_hf / "report.html").read_text()
    assert "diff (pp)" in format_compare_table([local.summary, summary], ["hf:tiny", "openai:tiny"])


def test_served_model_requires_the_key_when_asked(tiny):
    from ragen_envs.serve import HFBackend, make_server, serve_in_thread

    server = make_server(HFBackend(make_agent(f"hf:{tiny}", max_tokens=2), "tiny"), "127.0.0.1", 0,
                         api_key="sk-serve-secret")
    serve_in_thread(server)
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        body = {"model": "tiny", "messages": conversation()}
        assert _post(url, body)[0] == 401
        assert _post(url, body, {"Authorization": "Bearer sk-wrong"})[0] == 401
        assert _post(url, body, {"Authorization": "Bearer sk-serve-secret"})[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_serve_user_errors(tmp_path):
    for args, needle in [(["serve", "openai:x"], "hf:PATH"), (["serve", f"hf:{tmp_path / 'nope'}"], "does not exist"),
                         (["serve", "hf:x", "--api-key-env", "RAGEN_NO_SUCH_VAR"], "RAGEN_NO_SUCH_VAR")]:
        env = dict(os.environ)
        env.pop("RAGEN_NO_SUCH_VAR", None)
        result = subprocess.run([*RAGEN, *args], capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr, result.stderr
