"""Both HTTP servers (``ragen serve``'s and ``ragen webshop-server``'s) against clients that
send slowly or hold connections, plus the small input bounds of issue 20: a slow or idle
connection holds no worker, session ids of any length, sessions of other clients, seeds."""

from __future__ import annotations

import http.client
import json
import resource
import socket
import time

import pytest

from ragen_envs.serve import Completion, RequestError, make_server, parse_chat_request, serve_in_thread
from ragen_envs.webshop.server import WebShopServer

SLOW = 200  # more than the 32 workers of either server; the benchmark holds 1,500 (BENCHMARKS.md#servers)


def _room_for(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 2 * n + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class EchoBackend:
    model_name = "echo"

    def complete(self, request):
        return 3, [Completion("ok", "stop", 1) for _ in range(request.n)]


def _slow_clients(address, n: int, head: bytes) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(address, timeout=5)
        s.sendall(head)
        out.append(s)
    return out


def _timed(address, method: str, path: str, body=None, timeout: float = 10.0):
    start = time.monotonic()
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), time.monotonic() - start
    except (socket.timeout, TimeoutError):
        return "timeout", None, time.monotonic() - start
    finally:
        conn.close()


# The bound is loose for a loaded CI machine; on main these requests waited for the 20 s idle
# timeout (issue 20: 28 s with 40 such connections). The 1 s goal is checked by the benchmark.
VICTIM_BOUND_S = 3.0

SLOW_HEADS = {
    "body": b"POST /create HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{",
    "headers": b"POST /create HTTP/1.1\r\nHost: x\r\nContent-Le",
}


@pytest.mark.parametrize("kind", sorted(SLOW_HEADS))
def test_webshop_server_answers_while_slow_clients_hold_connections(kind):
    _room_for(SLOW)
    with WebShopServer(idle_timeout=20.0) as srv:
        slow = _slow_clients(srv.address, SLOW, SLOW_HEADS[kind])
        try:
            time.sleep(0.3)
            status, answer, seconds = _timed(srv.address, "GET", "/")
            assert (status, answer) == (200, "ok") and seconds < VICTIM_BOUND_S, (status, seconds)
            status, idx, seconds = _timed(srv.address, "POST", "/create")
            assert status == 200 and seconds < VICTIM_BOUND_S, (status, seconds)
            assert srv.httpd.waiting() >= SLOW  # they are all still open, waiting in the selector
        finally:
            for s in slow:
                s.close()


@pytest.mark.parametrize("kind", sorted(SLOW_HEADS))
def test_ragen_serve_answers_while_slow_clients_hold_connections(kind):
    _room_for(SLOW)
    server = make_server(EchoBackend(), "127.0.0.1", 0, idle_timeout=20.0)
    serve_in_thread(server)
    head = SLOW_HEADS[kind].replace(b"/create", b"/v1/chat/completions")
    try:
        slow = _slow_clients(server.server_address[:2], SLOW, head)
        try:
            time.sleep(0.3)
            status, _, seconds = _timed(server.server_address[:2], "GET", "/health")
            assert status == 200 and seconds < VICTIM_BOUND_S, (status, seconds)
            body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
            status, answer, seconds = _timed(server.server_address[:2], "POST", "/v1/chat/completions", body)
            assert status == 200 and answer["choices"][0]["message"]["content"] == "ok", (status, answer)
            assert seconds < VICTIM_BOUND_S, seconds
        finally:
            for s in slow:
                s.close()
    finally:
        server.shutdown()
        server.server_close()


class SlowJobBackend(EchoBackend):
    """Answers after 0.6 s through a Job, so the handler checks meanwhile whether its client left."""

    def start(self, request):
        import threading

        from ragen_envs.lm.token_engine import Job

        job = Job(3, stream=request.stream)

        def later():
            time.sleep(0.6)
            job.events.put(("delta", 0, "ok"))
            job.events.put(("done", 0, Completion("ok", "stop", 1)))

        threading.Thread(target=later, daemon=True).start()
        return job


def test_a_request_on_a_socket_numbered_past_1024_is_not_taken_for_abandoned():
    _room_for(1200)
    filler = [socket.socket() for _ in range(1100)]  # the server's next sockets get numbers past 1,024
    server = make_server(SlowJobBackend(), "127.0.0.1", 0, idle_timeout=20.0)
    serve_in_thread(server)
    try:
        body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
        status, answer, _ = _timed(server.server_address[:2], "POST", "/v1/chat/completions", body)
        assert status == 200 and answer["choices"][0]["message"]["content"] == "ok", (status, answer)
    finally:
        server.shutdown()
        server.server_close()
        for s in filler:
            s.close()


def test_kept_alive_connections_hold_no_worker():
    """Idle keep-alive connections wait in the selector too, not in a worker."""
    server = make_server(EchoBackend(), "127.0.0.1", 0, workers=2, idle_timeout=20.0, keep_alive_timeout=20.0)
    serve_in_thread(server)
    try:
        idle = []
        for _ in range(6):
            conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
            conn.request("GET", "/health")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.getheader("Connection") is None
            resp.read()
            idle.append(conn)
        status, _, seconds = _timed(server.server_address[:2], "GET", "/health")
        assert status == 200 and seconds < VICTIM_BOUND_S
        for conn in idle:  # and each of them is still served on the same connection
            conn.request("GET", "/health")
            assert conn.getresponse().status == 200
            conn.close()
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------------- small bounds (issue 20, 7)
@pytest.mark.parametrize("idx", ["1" * 5000, "１２", "²", "-" + "9" * 40])
def test_an_env_idx_of_any_length_is_a_400(idx):
    from urllib.parse import quote

    with WebShopServer() as srv:
        status, answer, _ = _timed(srv.address, "GET", "/observation?env_idx=" + quote(idx))
        assert status == 400 and "env_idx" in answer["error"], (status, answer)


def _create_from(address, source: str) -> int:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(address)
    conn = http.client.HTTPConnection(*address, timeout=10)
    conn.sock = s
    conn.request("POST", "/create")
    resp = conn.getresponse()
    assert resp.status == 200
    idx = json.loads(resp.read())
    conn.close()
    return idx


def test_a_client_creating_sessions_evicts_its_own_not_others():
    with WebShopServer(max_sessions=20) as srv:
        mine = _create_from(srv.address, "127.0.0.2")
        _timed(srv.address, "POST", "/reset", {"env_idx": mine, "session_id": 3})
        for _ in range(60):  # another client (127.0.0.1) creates three times the table
            _create_from(srv.address, "127.0.0.1")
        status, page, _ = _timed(srv.address, "GET", f"/observation?env_idx={mine}")
        assert status == 200 and isinstance(page, str), (status, page)
        assert srv.session_count() == 20 and srv.stats["evicted"] == 41


@pytest.mark.parametrize("seed", [-1, -2**63, 2**64, 1.5, True])
def test_ragen_serve_refuses_a_seed_out_of_range(seed):
    with pytest.raises(RequestError) as err:
        parse_chat_request({"messages": [{"role": "user", "content": "hi"}], "seed": seed})
    assert err.value.status == 400 and err.value.param == "seed"
    assert parse_chat_request({"messages": [{"role": "user", "content": "hi"}], "seed": 0}).seed == 0
    assert parse_chat_request({"messages": [{"role": "user", "content": "hi"}], "seed": 2**64 - 1}).seed == 2**64 - 1
