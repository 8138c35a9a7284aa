"""``ragen serve``'s HTTP surface on a real loopback port with the tiny checkpoint: streaming
through the official ``openai`` client, bounds on every request, refusal of parameters it does
not honour, cancellation when the client leaves, the key checked before the body, names."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import openai
import pytest

from ragen_envs.agents import make_agent
from ragen_envs.models import build_tiny_checkpoint
from ragen_envs.serve import MAX_STOP, MAX_STOP_CHARS, HFBackend, make_server, serve_in_thread, served_name

MESSAGES = [{"role": "system", "content": "You're a helpful assistant. "},
            {"role": "user", "content": "Turn 1:\nState:\n#P_O#\n"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = build_tiny_checkpoint(tmp_path_factory.mktemp("serve") / "tiny")
    agent = make_agent(f"hf:{path}", max_tokens=8)
    backend = HFBackend(agent, "tiny", aliases=("model",), max_tokens_limit=5000, max_context=4096)
    server = make_server(backend, "127.0.0.1", 0, api_key=None, workers=8, idle_timeout=2.0)
    serve_in_thread(server)
    yield server, backend, f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()
    backend.close()


def _client(url):
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)


def _post(url, body, headers=None, raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url + "/chat/completions", data=data,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_streaming_through_the_official_client_equals_the_plain_reply(served):
    _, _, url = served
    client = _client(url)
    for kwargs in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 7}, {"temperature": 1.0, "seed": 7, "top_p": 0.9}):
        plain = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=24, **kwargs)
        chunks = list(client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=24, stream=True,
                                                     stream_options={"include_usage": True}, **kwargs))
        assert all(c.object == "chat.completion.chunk" and c.model == "tiny" for c in chunks)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert text == plain.choices[0].message.content and finish == [plain.choices[0].finish_reason]
        assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
        assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens > 10
        assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # token by token


def test_stop_strings_cut_streamed_and_plain_replies_alike(served):
    _, _, url = served
    client = _client(url)
    free = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=40, temperature=1.0, seed=3)
    full = free.choices[0].message.content
    assert len(full) > 10
    stop = full[6:9]
    expected = full[: full.find(stop)]
    plain = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=40, temperature=1.0, seed=3,
                                           stop=[stop])
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=40, temperature=1.0, seed=3, stop=[stop], stream=True)
        if c.choices)
    assert plain.choices[0].message.content == streamed == expected
    assert plain.choices[0].finish_reason == "stop"


def test_n_choices_stream_with_their_index(served):
    _, _, url = served
    chunks = list(_client(url).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6, n=3,
                                                       temperature=1.0, seed=1, stream=True))
    finished = sorted(c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason)
    assert finished == [0, 1, 2]


@pytest.mark.parametrize("extra, named", [
    ({"logprobs": True}, "logprobs"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"top_k": 20}, "top_k"),
    ({"my_own_field": 1}, "my_own_field"),
])
def test_parameters_it_cannot_honour_are_refused_by_name(served, extra, named):
    _, _, url = served
    with pytest.raises(openai.BadRequestError) as err:
        _client(url).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, extra_body=extra)
    assert named in err.value.message and "does not support" in err.value.message
    # their no-op values pass
    ok = _client(url).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, logprobs=False,
                                              presence_penalty=0, response_format={"type": "text"}, tools=[])
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_every_request_is_bounded(served):
    _, _, url = served
    cases = [
        ({"max_tokens": 10**6}, "over this server's limit"),
        ({"max_tokens": 4090}, "does not fit"),  # under the limit, beyond the context left after the prompt
        ({"messages": [{"role": "user", "content": "box " * 6000}]}, "context is 4096"),
        ({"stop": ["x" * (MAX_STOP_CHARS + 1)]}, "at most"),
        ({"stop": ["a"] * (MAX_STOP + 1)}, "up to"),
        ({"messages": [{"role": "user", "content": "a\x00b"}]}, "NUL"),
        ({"messages": [{"role": "user", "content": "a\ud800b"}]}, "lone surrogate"),
        ({"stop": "\udfff"}, "lone surrogate"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 17}, "n must be"),
        ({"model": "other"}, "not found"),
    ]
    for extra, needle in cases:
        body = {"model": "tiny", "messages": MESSAGES, **extra}
        raw = json.dumps(body, allow_nan=True).encode()
        status, answer = _post(url, None, raw=raw)
        assert 400 <= status < 500 and needle in answer["error"]["message"], (extra, status, answer)
        assert set(answer["error"]) == {"message", "type", "param", "code"}
    status, answer = _post(url, None, raw=b"[" * 50_000 + b"]" * 50_000)
    assert status == 400 and "nested too deeply" in answer["error"]["message"]
    assert _post(url, {"model": "model", "messages": MESSAGES, "max_tokens": 2})[0] == 200  # the old name still works


def _raw_request(address, body: dict, path="/v1/chat/completions") -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.create_connection(address, timeout=10)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def _wait(predicate, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("stream", [False, True])
def test_generation_stops_when_the_client_leaves(served, stream):
    server, backend, url = served
    stats = backend.engine.stats
    before = stats["cancelled_rows"]
    steps0 = stats["steps"]
    # greedy decoding of the untrained model repeats one token: it would run all 4,000 steps
    s = _raw_request(server.server_address, {"model": "tiny", "messages": MESSAGES, "max_tokens": 4000,
                                              "temperature": 0, "stream": stream})
    assert _wait(lambda: stats["steps"] > steps0 + 5)
    s.close()
    assert _wait(lambda: stats["cancelled_rows"] == before + 1, 3.0)
    steps_at_cancel = stats["steps"]
    start = time.monotonic()
    assert _post(url, {"model": "tiny", "messages": MESSAGES, "max_tokens": 2})[0] == 200
    assert time.monotonic() - start < 2.0  # the next client is not queued behind 4,000 steps
    assert steps_at_cancel - steps0 < 3000


def test_the_key_is_checked_before_the_body_is_read(tmp_path):
    path = build_tiny_checkpoint(tmp_path / "tiny")
    backend = HFBackend(make_agent(f"hf:{path}", max_tokens=2), "tiny")
    server = make_server(backend, "127.0.0.1", 0, api_key="sk-serve-secret", idle_timeout=5.0)
    serve_in_thread(server)
    try:
        s = socket.create_connection(server.server_address, timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000\r\n\r\n")  # no body
        start = time.monotonic()
        reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 401") and time.monotonic() - start < 2.0
        s.close()
        ok = _client(f"http://127.0.0.1:{server.server_port}/v1").with_options(api_key="sk-serve-secret")
        assert ok.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2).choices
    finally:
        server.shutdown()
        server.server_close()
        backend.close()


def test_silent_connections_time_out(served):
    server, _, url = served
    silent = socket.create_connection(server.server_address, timeout=10)
    start = time.monotonic()
    assert silent.recv(1) == b"" and time.monotonic() - start < 5  # idle_timeout=2 in the fixture
    silent.close()


@pytest.mark.parametrize("path, name", [
    ("runs/demo/starpo/model", "starpo/model"),
    ("runs/x/checkpoints/step_000010/actor", "x/checkpoints/step_000010/actor"),
    ("/tmp/somewhere/tiny", "tiny"),
    ("tiny/", "tiny"),
    ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
])
def test_served_name_is_the_checkpoints(path, name):
    assert served_name(path) == name


def test_sampling_keeps_the_top_p_nucleus_and_the_temperature():
    import torch

    from ragen_envs.lm.engine import draw_rows

    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(4000, 1)
    gen = torch.Generator().manual_seed(0)
    gens = [gen] * 4000
    draws = torch.tensor(draw_rows(logits, [1.0] * 4000, [0.7] * 4000, gens))
    freq = torch.bincount(draws, minlength=4).float() / 4000
    assert freq[2:].sum() == 0  # 0.5 + 0.3 crosses 0.7: the nucleus is {0, 1}
    assert abs(freq[0] - 0.5 / 0.8) < 0.03
    assert set(draw_rows(logits[:200], [1.0] * 200, [0.4] * 200, gens)) == {0}  # 0.5 alone crosses 0.4
    cold = torch.tensor(draw_rows(logits, [0.25] * 4000, [1.0] * 4000, gens))  # p^4, renormalised
    expected = probs ** 4 / (probs ** 4).sum()
    assert abs((cold == 0).float().mean() - expected[0]) < 0.03
    mixed = draw_rows(logits[:3], [1.0, 1.0, 0.0], [0.4, 1.0, 1.0], gens[:3])  # per-row settings in one call
    assert mixed[0] == 0 and mixed[2] == 0  # nucleus {0}; greedy


@pytest.mark.parametrize("args, needle", [
    (["--max-tokens", "500", "--max-tokens-limit", "100"], "over --max-tokens-limit"),
    (["--idle-timeout", "nan"], "--idle-timeout must be"),
    (["--workers", "0"], "must be >= 1"),
    (["--max-context", "1"], "--max-context must be"),
])
def test_serve_limit_flags_are_checked_in_one_line(args, needle, capsys):
    from ragen_envs.cli import main

    assert main(["serve", "hf:does-not-matter", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_a_checkpoints_protocol_settings_shape_what_it_serves(tmp_path):
    """A folder with ragen_protocol.json: the forced reply prefix leads every reply (as the
    trained model was evaluated), the saved reply cap and temperature are the defaults, and
    replies end at the saved end-of-turn token."""
    from ragen_envs.lm.settings import ProtocolSettings, save_settings

    path = build_tiny_checkpoint(tmp_path / "trained" / "model")
    save_settings(path, ProtocolSettings(env_id="ragen/Sokoban-v0", env_kwargs={"think": False},
                                         reply_prefix="<answer>", max_new_tokens=5, temperature=0.0))
    agent = make_agent(f"hf:{path}")
    backend = HFBackend(agent, served_name(str(path)))
    assert backend.prefill == "<answer>" and backend.default_max_tokens == 5 and backend.default_temperature == 0.0
    assert backend.model_name == "trained/model"
    server = make_server(backend, "127.0.0.1", 0)
    serve_in_thread(server)
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        client = _client(url)
        plain = client.chat.completions.create(model="trained/model", messages=MESSAGES)
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="trained/model", messages=MESSAGES, stream=True) if c.choices)
        text = plain.choices[0].message.content
        assert text.startswith("<answer>") and streamed == text  # greedy: the same reply both ways
        assert plain.usage.completion_tokens <= 5
        again = client.chat.completions.create(model="trained/model", messages=MESSAGES)
        assert again.choices[0].message.content == text  # temperature 0 from the settings
    finally:
        server.shutdown()
        server.server_close()
        backend.close()
