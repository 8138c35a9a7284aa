"""The remote backend against our own server on 127.0.0.1 (ephemeral ports, real HTTP):
identical transcripts, bad requests, concurrency, bounded sessions and memory, retries."""

from __future__ import annotations

import gc
import http.client
import json
import random
import subprocess
import sys
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest

from ragen_envs.agents import make_agent
from ragen_envs.eval import run_episode
from ragen_envs.webshop.backends import MiniBackend
from ragen_envs.webshop.pages import available_actions
from ragen_envs.webshop.remote import RemoteBackend, RemoteWebShopError
from ragen_envs.webshop.server import WebShopServer

ID = "ragen/WebShop-v0"
CLI = [sys.executable, "-c", "import sys; from ragen_envs.cli import main; sys.exit(main())"]  # the `ragen` command


@pytest.fixture(scope="module")
def server():
    srv = WebShopServer(max_sessions=64).start()
    yield srv
    srv.stop()


def _script(backend, goal: int, seed: int, steps: int = 10):
    """Play random listed actions (plus some invalid ones); return the transcript."""
    rng = random.Random(seed)
    page = backend.reset(goal)
    out = [("reset", page, backend.instruction_text())]
    for _ in range(steps):
        choices = available_actions(page.has_search_bar, page.clickables) + ["click[nothing]", "Click[x]", "search[]"]
        action = rng.choice(choices).replace("<content>", rng.choice(["tea", "boots", "shampoo usb", "x"]))
        result = backend.act(action)
        page = result.page
        out.append((action, page, result.reward, type(result.reward), result.done, result.breakdown))
        if result.done:
            break
    return out


def test_remote_transcripts_equal_the_mini_engine(server):
    mini, remote = MiniBackend(), RemoteBackend(server.url)
    assert remote.num_goals() == mini.num_goals() == 2266
    assert remote.split_ranges() == mini.split_ranges()
    for goal in range(0, 2266, 97):
        assert _script(remote, goal, goal) == _script(mini, goal, goal), goal
    d = remote.describe()
    assert d["catalog_id"] == f"remote:{server.url}:mini-v1-seed0-n1000" and d["reward_impl"] == "port"
    remote.close()


def test_env_over_remote_plays_the_same_episodes(server):
    local = gym.make(ID)
    far = gym.make(ID, backend="remote", base_url=server.url)
    for kind in ("expert", "random"):
        if kind == "expert":
            a, b = make_agent("expert", env=local), None
            # the expert needs the goal: the remote backend says so clearly
            with pytest.raises(NotImplementedError, match="backend='mini'"):
                far.reset(seed=1)
                far.unwrapped.expert_actions()
            continue
        a, b = make_agent("random", env=local, seed=5), make_agent("random", env=far, seed=5)
        for seed in (0, 17, 123):
            ea, eb = run_episode(local, a, seed), run_episode(far, b, seed)
            assert [t.observation for t in ea.turns] == [t.observation for t in eb.turns]
            assert [t.reward for t in ea.turns] == [t.reward for t in eb.turns]
            for ta, tb in zip(ea.turns, eb.turns):
                ia = {k: v for k, v in ta.info.items() if k not in ("catalog_id", "backend")}
                ib = {k: v for k, v in tb.info.items() if k not in ("catalog_id", "backend")}
                assert ia == ib
            assert eb.turns[-1].info["backend"] == "remote"
    far.close()


def _raw(server, method, path, body=None, headers=None):
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data else None


def test_bad_requests_get_4xx_and_the_server_keeps_serving(server):
    status, idx = _raw(server, "POST", "/create")
    assert status == 200 and isinstance(idx, int)
    cases = [
        ("POST", "/reset", b"{not json", 400, "not valid JSON"),
        ("POST", "/reset", json.dumps({"env_idx": idx}).encode(), 400, "missing field"),
        ("POST", "/reset", json.dumps([1, 2]).encode(), 400, "JSON object"),
        ("POST", "/reset", json.dumps({"env_idx": idx, "session_id": 99999}).encode(), 400, "goal index"),
        ("POST", "/reset", json.dumps({"env_idx": idx, "session_id": None}).encode(), 400, "goal index"),
        ("POST", "/reset", json.dumps({"env_idx": "abc", "session_id": 1}).encode(), 400, "integer"),
        ("POST", "/reset", json.dumps({"env_idx": 10**9, "session_id": 1}).encode(), 404, "unknown or expired"),
        ("POST", "/step", json.dumps({"env_idx": idx, "action": "search[x]"}).encode(), 409, "reset"),
        ("GET", f"/available_actions?env_idx={idx}", None, 409, "reset"),
        ("GET", "/available_actions", None, 400, "env_idx"),
        ("GET", "/reset", None, 405, "not allowed"),
        ("GET", "/nowhere", None, 404, "no such endpoint"),
        ("DELETE", "/step", None, 405, "not allowed"),
    ]
    for method, path, body, code, text in cases:
        status, payload = _raw(server, method, path, body, {"Content-Type": "application/json"} if body else None)
        assert status == code, (method, path, payload)
        assert text in payload["error"], (method, path, payload)
    # a declared body over 1 MiB is refused before it is read (no upload race on the socket)
    for length, code, text in (("2097152", 413, "over"), ("-5", 400, "Content-Length"), ("abc", 400, "Content-Length")):
        status, payload = _raw(server, "POST", "/step", b"{}", {"Content-Length": length})
        assert status == code, (method, path, payload)
        assert text in payload["error"], (method, path, payload)
    status, page = _raw(server, "POST", "/reset", json.dumps({"env_idx": idx, "session_id": 3}).encode())
    assert status == 200 and page[0].startswith("WebShop [SEP] Instruction:") and page[1] is None
    status, payload = _raw(server, "POST", "/step", json.dumps({"env_idx": idx, "action": 5}).encode())
    assert status == 400 and "string" in payload["error"]
    status, step = _raw(server, "POST", "/step", json.dumps({"env_idx": idx, "action": "search[tea]"}).encode())
    assert status == 200 and step["info"]["page_type"] == "results" and step["done"] is False
    status, avail = _raw(server, "GET", f"/available_actions?env_idx={idx}")
    assert status == 200 and avail["clickables"][0] == "back to search" and avail["has_search_bar"] is False
    assert _raw(server, "GET", f"/observation?env_idx={idx}")[1] == step["state"]
    assert _raw(server, "GET", f"/instruction_text?env_idx={idx}")[1].startswith("Instruction: ")
    assert _raw(server, "GET", "/")[1] == "ok"
    assert _raw(server, "POST", "/close", json.dumps({"env_idx": idx}).encode())[1] == {"closed": True}
    assert _raw(server, "POST", "/close", json.dumps({"env_idx": idx}).encode())[0] == 404


def test_remote_client_reports_server_errors_clearly(server):
    remote = RemoteBackend(server.url)
    with pytest.raises(RemoteWebShopError, match="HTTP 400: session_id must be a goal index"):
        remote.reset(5000)
    with pytest.raises(RuntimeError, match="reset"):
        RemoteBackend(server.url).act("search[x]")


def test_concurrent_sessions(server):
    errors, results = [], {}

    def worker(k: int) -> None:
        try:
            remote = RemoteBackend(server.url)
            for goal in range(k, 2266, 331):
                results[(k, goal)] = _script(remote, goal, goal, steps=6)
            remote.close()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    mini = MiniBackend()
    for (k, goal), transcript in list(results.items())[::7]:
        assert transcript == _script(mini, goal, goal, steps=6)
    assert len(results) == sum(len(range(k, 2266, 331)) for k in range(12))


def test_sessions_are_capped_and_memory_stays_flat():
    srv = WebShopServer(max_sessions=40).start()
    try:
        def churn(n: int) -> None:
            remote = RemoteBackend(srv.url)
            for i in range(n):
                remote._env_idx = None  # a fresh server-side session each time, never closed
                remote.reset(i % 2266)

        churn(60)  # warm caches (imports, thread machinery)
        gc.collect()
        tracemalloc.start()
        churn(80)
        gc.collect()
        first, _ = tracemalloc.get_traced_memory()
        churn(320)
        gc.collect()
        second, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert srv.session_count() <= 40
        assert srv.stats["evicted"] == 60 + 80 + 320 - 40
        assert second - first < 256 * 1024, (first, second)  # 4x more sessions, no growth
    finally:
        srv.stop()


def test_idle_sessions_expire():
    srv = WebShopServer(session_ttl=0.2).start()
    try:
        remote = RemoteBackend(srv.url)
        remote.reset(1)
        time.sleep(0.35)
        with pytest.raises(RemoteWebShopError, match="HTTP 404: unknown or expired env_idx"):
            remote.act("search[tea]")
        assert srv.stats["expired"] == 1 and srv.session_count() == 0
    finally:
        srv.stop()


def test_agentgym_surface_without_close_or_goals():
    srv = WebShopServer(agentgym_compat=True).start()
    try:
        with pytest.raises(ValueError, match="num_goals"):
            RemoteBackend(srv.url).num_goals()
        remote, mini = RemoteBackend(srv.url, num_goals=2266), MiniBackend()
        a, b = _script(remote, 42, 1), _script(mini, 42, 1)
        for ra, rb in zip(a, b):
            assert ra[1] == rb[1]  # same pages; the page type is inferred from the text
            if ra[0] != "reset":
                assert ra[2:5] == rb[2:5] and ra[5] is None  # AgentGym sends info: null
        remote.close()  # POST /close -> 404, tolerated
        env = gym.make(ID, backend="remote", base_url=srv.url, num_goals=2266)
        _, info = env.reset(seed=3)
        *_, info = env.step("<think>x</think><answer>search[tea]</answer>")
        assert info["page_type"] == "results" and info["catalog_id"] == f"remote:{srv.url}"
        env.close()
    finally:
        srv.stop()


class _Always503(BaseHTTPRequestHandler):
    hits = 0

    def do_POST(self):  # noqa: N802
        type(self).hits += 1
        self.send_response(503)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def test_503_is_retried_a_bounded_number_of_times():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Always503)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        remote = RemoteBackend(f"http://127.0.0.1:{httpd.server_address[1]}", num_goals=10, retries=3, backoff=0.01)
        with pytest.raises(RemoteWebShopError, match="HTTP 503.*after 4 attempt"):
            remote.reset(0)
        assert _Always503.hits == 4 and remote.attempts == 4
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_connection_refused_is_retried_then_reported():
    srv = WebShopServer()
    url = srv.url
    srv.httpd.server_close()  # bound once, now closed: nothing listens there
    remote = RemoteBackend(url, num_goals=10, retries=2, backoff=0.01)
    with pytest.raises(RemoteWebShopError, match="cannot reach the WebShop server.*after 3 attempt"):
        remote.reset(0)
    assert remote.attempts == 3


def test_cli_server_starts_on_an_ephemeral_port():
    proc = subprocess.Popen(CLI + ["webshop-server", "--backend", "mini", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving WebShop (mini, mini-v1-seed0-n1000, 2266 goals) on http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1].strip()
        remote = RemoteBackend(url)
        assert remote.num_goals() == 2266
        page = remote.reset(0)
        assert page.page_type == "search"
        remote.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bad = subprocess.run(CLI + ["webshop-server", "--port", "70000"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--port must be in 0..65535" in bad.stderr
