"""No fragment of the API key is stored or printed (issue 20 §4).

The rule (ragen_envs/agents/redaction.py): runs of 8+ key characters go anywhere; a word
that is the key's rendering (pieces of the key, in order, between mask runs, 4+ key
characters shown) goes whole; 4-7 key characters glued into an ordinary word stay (the
"project" of a key opening sk-proj-). Checked here over random keys and texts, then end to
end: a server that answers with OpenAI's masked echo, and every file of the run directory,
stdout and stderr searched for any 4 characters of the key.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_envs.agents.redaction import KeyRedactor, public_prefix, redact_key


def grams(key: str, n: int = 4) -> set[str]:
    return {key[i:i + n] for i in range(len(key) - n + 1)}


def leaked(key: str, text: str, n: int = 4) -> list[str]:
    return sorted(g for g in grams(key, n) if g in text)


# ----------------------------------------------------------------------------- examples
KEY = "sk-SECRETabcDEF0123456789"


@pytest.mark.parametrize("echo", [
    "Incorrect API key provided: sk-SECRE*********6789.",
    "Incorrect API key provided: 'sk-SECRE*********6789'",
    "key sk-...6789 rejected",
    "key sk-SECR… rejected",
    "key …6789 rejected",
    "key sk-***789 rejected",
    "key sk-SEC•••••6789 rejected",
    "key sk-SECRxxxxxxxxx6789 rejected",
    "the key ending in 6789 is invalid",
    "Bearer sk-SECRETabcDEF0123456789",
    "header=sk-SECRETabc",
    "{'message': 'bad key sk-SECRE****************6789', 'type': 'invalid_request_error'}",
    "glued:xxsk-SECRETabyy",
])
def test_every_rendering_of_the_key_is_redacted(echo):
    out = redact_key(echo, KEY)
    assert not leaked(KEY, out), (echo, out)
    assert "***" in out


@pytest.mark.parametrize("text", [
    "a project by the admin: task-assign",  # with a key sk-proj-... / sk-admin-... these stay
    "Left Right Up Down, seed 123",
    "*** no key here ***",
    "you won... well done",
])
def test_ordinary_words_stay(text):
    for key in ("sk-proj-" + "Q7Z3K9W2" * 4, "sk-admin-Q7Z3K9W2M4", "sk-ant-api03-Q7Z3K9"):
        assert redact_key(text, key) == text


def test_public_prefix():
    assert [public_prefix(k) for k in ("sk-proj-abc", "sk-ant-api03-xyz", "gsk_abc", "AIzaSyABC", "sk-", "a-b")] == \
        ["sk-proj-", "sk-ant-api03-", "gsk_", "", "", "a-"]


def test_short_and_missing_keys():
    assert redact_key("abc", None) == "abc" and redact_key("abc", "") == "abc"
    assert redact_key("xabcdy and abcd", "abcd") == "x***y and ***"  # the whole key, anywhere
    assert redact_key("abc", "abc") == "abc"  # under 4 characters: nothing to find


def test_the_placeholder_key_of_a_keyless_loopback_server_is_not_redacted(monkeypatch):
    from ragen_envs.agents import make_agent

    monkeypatch.delenv("RAGEN_NO_SUCH_KEY", raising=False)
    agent = make_agent("openai:m", base_url="http://127.0.0.1:9/v1", api_key_env="RAGEN_NO_SUCH_KEY")
    assert agent.redact("none of the boxes") == "none of the boxes"


def test_the_agent_redacts_fragments_and_never_pickles_its_redactor(monkeypatch):
    import pickle

    from ragen_envs.agents import make_agent

    monkeypatch.setenv("RAGEN_FRAG_KEY", KEY)
    agent = make_agent("openai:m", base_url="http://127.0.0.1:9/v1", api_key_env="RAGEN_FRAG_KEY")
    assert agent.redact("provided: sk-SECRE*********6789") == "provided: ***"
    assert KEY[-8:].encode() not in pickle.dumps(agent)


# ----------------------------------------------------------------------------- hypothesis
KEY_ALPHABET = string.ascii_uppercase + string.digits + "-_"
FILLER_ALPHABET = string.ascii_lowercase + "!?%&+/"  # no key character: the expected output is exact
SEPARATORS = [" ", "\n", ", ", ": ", "'", '"', " (", ") ", "=", "\t"]
MASKS = ["*", "***", "*********", "...", "…", "•••", "xxxxxx", "●●"]

keys = st.text(KEY_ALPHABET, min_size=4, max_size=64)


@st.composite
def rendering(draw, key: str) -> str:
    """A piece of the key, or a masked rendering (prefix + mask + suffix), showing 4+ key characters."""
    n = len(key)
    if draw(st.booleans()):
        length = draw(st.integers(4, n))
        start = draw(st.integers(0, n - length))
        if key[start:start + length] not in public_prefix(key):  # (a bare public prefix is no secret)
            return key[start:start + length]
    head = draw(st.integers(0, min(n, 12)))
    tail = draw(st.integers(max(0, 4 - head), n - head))
    return key[:head] + draw(st.sampled_from(MASKS)) + key[n - tail:]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), key=keys)
def test_renderings_in_random_text_are_redacted_and_nothing_else_changes(data, key):
    redactor = KeyRedactor(key)
    fillers = data.draw(st.lists(st.text(FILLER_ALPHABET, min_size=1, max_size=12), max_size=8))
    echoes = data.draw(st.lists(rendering(key), min_size=1, max_size=4))
    words = data.draw(st.permutations([(w, False) for w in fillers] + [(e, True) for e in echoes]))
    seps = data.draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(words) + 1, max_size=len(words) + 1))
    text = seps[0] + "".join(w + s for (w, _), s in zip(words, seps[1:]))
    expected = seps[0] + "".join(("***" if echo else w) + s for (w, echo), s in zip(words, seps[1:]))
    out = redactor(text)
    assert out == expected
    assert not leaked(key, out)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), key=st.text(KEY_ALPHABET, min_size=9, max_size=64))
def test_short_runs_glued_into_ordinary_words_stay(data, key):
    length = data.draw(st.integers(4, 7))
    start = data.draw(st.integers(0, len(key) - length))
    left = data.draw(st.text(string.ascii_lowercase, min_size=1, max_size=5))
    right = data.draw(st.text(string.ascii_lowercase, min_size=1, max_size=5))
    text = f"the {left}{key[start:start + length]}{right} word"
    assert redact_key(text, key) == text


@settings(max_examples=300, deadline=None)
@given(key=st.text(min_size=8, max_size=40), text=st.text(max_size=300), data=st.data())
def test_any_text_any_key_no_long_run_survives(key, text, data):
    i = data.draw(st.integers(0, len(text)))
    text = text[:i] + key + text[i:]
    out = redact_key(text, key)
    assert not leaked(key, out, 8)


# ----------------------------------------------------------------------------- end to end
def _echo_key(key: str) -> str:
    n = len(key)
    return (f"Incorrect API key provided: {key[:8]}{'*' * (n - 12)}{key[-4:]}. Also seen as "
            f"{key[:3]}...{key[-4:]}, {key[:10]}… or 'key ending in {key[-4:]}'.")


class _EchoHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        status = self.server.status
        body = json.dumps({"error": {"message": _echo_key(key), "type": "invalid_request_error",
                                     "param": None, "code": "invalid_api_key"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _run_against(status: int, out: Path, key: str) -> subprocess.CompletedProcess:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    server.status = status
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = dict(os.environ, RAGEN_FRAG_KEY=key)
        cmd = [sys.executable, "-c", "import sys; from ragen_envs.cli import main; sys.exit(main())",
               "eval", "ragen/Bandit-v0", "ragen/Sokoban-v0", "--agent", "openai:m",
               "--base-url", f"http://127.0.0.1:{server.server_port}/v1", "--api-key-env", "RAGEN_FRAG_KEY",
               "--seeds", "3", "--max-retries", "0", "--stop-after-errors", "0", "--out", str(out)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    finally:
        server.shutdown()
        server.server_close()


def test_eval_stores_and_prints_no_fragment_of_the_key(tmp_path):
    pytest.importorskip("openai")
    rng = secrets.SystemRandom()
    # capitals and digits by turns: no 4 of them in a row occur in the report's own text by chance
    key = "sk-" + "".join(rng.choice(string.ascii_uppercase) + rng.choice(string.digits) for _ in range(20))
    # 400: each episode's error (errors.jsonl, summary.json, report.html, the closing line on stderr)
    out = tmp_path / "run"
    result = _run_against(400, out, key)
    assert result.returncode == 1, result.stderr
    assert "Incorrect API key provided: ***" in result.stderr
    # 401: the run stops at once with one line on stderr
    fatal = _run_against(401, tmp_path / "fatal", key)
    assert fatal.returncode == 2 and "authentication failed (HTTP 401)" in fatal.stderr
    assert "Incorrect API key provided: ***" in fatal.stderr
    files = [p for d in (out, tmp_path / "fatal") for p in d.rglob("*") if p.is_file()]
    assert {"errors.jsonl", "summary.json", "report.html"} <= {p.name for p in files}
    assert "Incorrect API key provided: ***" in (out / "errors.jsonl").read_text()  # stored, redacted
    for text, where in [(result.stdout, "stdout"), (result.stderr, "stderr"), (fatal.stdout, "stdout 401"),
                        (fatal.stderr, "stderr 401")] + [(p.read_text(encoding="utf-8"), str(p)) for p in files]:
        assert not leaked(key, text), (where, leaked(key, text))
