"""The WebShop server's limits on real loopback sockets: idle timeout, bounded worker threads,
listen backlog, quiet disconnects, bounded search cache, private session ids, option checks."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from ragen_envs.cli import main as cli_main
from ragen_envs.webshop.remote import RemoteBackend
from ragen_envs.webshop.search import BM25Index, cache_entry_bytes
from ragen_envs.webshop.server import WebShopServer


def _connect(srv: WebShopServer, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(srv.address, timeout=timeout)


def _get(srv: WebShopServer, path: str, method: str = "GET", body=None):
    conn = http.client.HTTPConnection(*srv.address, timeout=5)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_silent_connections_hold_no_thread_and_are_closed():
    srv = WebShopServer(workers=4, idle_timeout=0.5).start()
    try:
        before = threading.active_count()
        silent = [_connect(srv) for _ in range(200)]  # connect, never send a byte
        time.sleep(0.2)
        assert threading.active_count() == before  # they wait in a selector, not in threads
        start = time.monotonic()
        assert _get(srv, "/") == (200, "ok")  # served at once: every worker is free
        assert time.monotonic() - start < 0.5
        for s in silent:  # the server hangs up on every one of them after the idle timeout
            s.settimeout(5)
            assert s.recv(1) == b""
            s.close()
        assert time.monotonic() - start < 3
        assert srv.httpd.stats["closed_silent"] == 200 and srv.httpd.waiting() == 0
    finally:
        srv.stop()


def test_the_oldest_silent_connections_go_first_beyond_max_waiting():
    srv = WebShopServer(idle_timeout=30.0).start()
    srv.httpd.max_waiting = 5
    try:
        first = [_connect(srv) for _ in range(5)]
        time.sleep(0.2)
        later = [_connect(srv) for _ in range(5)]
        for s in first:
            assert s.recv(1) == b""  # closed to make room, long before the 30 s timeout
        deadline = time.monotonic() + 2
        while srv.httpd.waiting() != 5 and time.monotonic() < deadline:  # the last arrival registers just after
            time.sleep(0.01)
        assert srv.httpd.waiting() == 5
        for s in later:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.0 200")
        for s in first + later:
            s.close()
    finally:
        srv.stop()


def _pooled(handler_body, **kwargs):
    """A PooledHTTPServer on a free port whose GET runs ``handler_body(handler)``; serving."""
    from ragen_envs._http import BoundedHandler, PooledHTTPServer

    class Handler(BoundedHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            handler_body(self)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"hi")

        def log_message(self, *args):
            pass

    httpd = PooledHTTPServer(("127.0.0.1", 0), Handler, **kwargs)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def test_a_full_queue_answers_503_at_once():
    release = threading.Event()
    httpd = _pooled(lambda h: release.wait(10), workers=1, queue_size=1, idle_timeout=5.0)
    try:
        hold = []
        for _ in range(2):  # one request occupies the only worker, the next one waits in the queue
            hold.append(socket.create_connection(httpd.server_address[:2], timeout=5))
            hold[-1].sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.2)
        s = socket.create_connection(httpd.server_address[:2], timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        start = time.monotonic()
        reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in reply
        assert time.monotonic() - start < 1.0
        assert httpd.stats["rejected_busy"] == 1
        release.set()
        for h in hold:
            assert h.recv(4096).startswith(b"HTTP/1.1 200")
            h.close()
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()


def test_connections_still_sending_their_request_hold_no_worker():
    """Unfinished headers and bodies wait in the selector: with fewer workers than slow clients,
    an ordinary request is served at once (main: it waited for the idle timeout)."""
    httpd = _pooled(lambda h: None, workers=2, idle_timeout=20.0)
    slow = []
    try:
        for i in range(10):
            s = socket.create_connection(httpd.server_address[:2], timeout=5)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" if i % 2 else
                      b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            slow.append(s)
        time.sleep(0.3)
        start = time.monotonic()
        conn = http.client.HTTPConnection(*httpd.server_address[:2], timeout=30)
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"hi"
        assert time.monotonic() - start < 3.0
        conn.close()
    finally:
        for s in slow:
            s.close()
        httpd.shutdown()
        httpd.server_close()


def test_a_request_must_arrive_whole_within_its_deadline():
    """A byte every 0.2 s does not keep a request alive past ``request_timeout``: 408."""
    httpd = _pooled(lambda h: None, workers=1, idle_timeout=5.0, request_timeout=0.6)
    try:
        s = socket.create_connection(httpd.server_address[:2], timeout=5)
        start = time.monotonic()
        reply = b""
        for ch in b"GET / HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxx":
            try:
                s.sendall(bytes([ch]))
            except OSError:
                break
            s.settimeout(0.2)
            try:
                reply = s.recv(4096)
                break
            except socket.timeout:
                continue
        assert reply.startswith(b"HTTP/1.1 408"), reply
        assert time.monotonic() - start < 3.0
        # the server counts the refusal as it closes, just after sending the 408: wait for it
        deadline = time.monotonic() + 2
        while httpd.stats["closed_slow"] != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert httpd.stats["closed_slow"] == 1
        s.close()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_client_over_its_connection_cap_loses_its_oldest():
    httpd = _pooled(lambda h: None, idle_timeout=30.0, max_per_client=3)
    try:
        socks = [socket.create_connection(httpd.server_address[:2], timeout=5) for _ in range(5)]
        for s in socks[:2]:
            assert s.recv(1) == b""  # closed to stay within the cap
        deadline = time.monotonic() + 2
        while httpd.waiting() != 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert httpd.waiting() == 3
        for s in socks[2:]:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        for s in socks:
            s.close()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_keep_alive_waits_are_short_and_give_way_when_crowded():
    from ragen_envs._http import BoundedHandler, PooledHTTPServer

    class Hello(BoundedHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"hi")

        def log_message(self, *args):
            pass

    httpd = PooledHTTPServer(("127.0.0.1", 0), Hello, workers=1, idle_timeout=5.0, keep_alive_timeout=0.3)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection(*httpd.server_address[:2], timeout=5)
        for _ in range(3):  # kept alive between requests
            conn.request("GET", "/")
            resp = conn.getresponse()
            assert resp.read() == b"hi" and resp.getheader("Connection") is None
        start = time.monotonic()
        other = http.client.HTTPConnection(*httpd.server_address[:2], timeout=5)
        other.request("GET", "/")  # the only worker waits on the idle keep-alive connection: at most 0.3 s
        assert other.getresponse().read() == b"hi" and time.monotonic() - start < 1.5
        conn.close()
        other.close()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_listen_backlog_holds_a_burst_of_connections():
    srv = WebShopServer()  # bound and listening, not yet accepting: the kernel's queue holds the burst
    try:
        socks, done = [], 0
        for _ in range(100):
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(srv.address)
                done += 1
            except OSError:
                pass
            socks.append(s)
        assert done == 100  # with the standard library's backlog of 5 only about 6 complete
    finally:
        for s in socks:
            s.close()
        srv.httpd.server_close()


def test_slow_body_gets_408_and_no_traceback(capfd):
    srv = WebShopServer(idle_timeout=0.3).start()
    try:
        s = _connect(srv)
        s.sendall(b"POST /create HTTP/1.0\r\nContent-Length: 50\r\n\r\n{")
        reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 408"), reply
        s.close()
        for exc in (ConnectionResetError(), BrokenPipeError(), TimeoutError()):  # what a vanished client raises
            try:
                raise exc
            except OSError:
                srv.httpd.handle_error(None, ("127.0.0.1", 1))
        assert srv.httpd.stats["client_gone"] == 3
        assert _get(srv, "/") == (200, "ok")
    finally:
        srv.stop()
    assert "Traceback" not in capfd.readouterr().err


def test_deeply_nested_json_gets_400():
    with WebShopServer() as srv:
        conn = http.client.HTTPConnection(*srv.address, timeout=5)
        conn.request("POST", "/step", body=b"[" * 100_000 + b"]" * 100_000)
        resp = conn.getresponse()
        assert resp.status == 400 and "nested too deeply" in json.loads(resp.read())["error"]
        conn.close()
        assert _get(srv, "/") == (200, "ok")


def test_private_ids_are_unguessable_and_not_listed():
    with WebShopServer(private_ids=True) as srv:
        a, b = RemoteBackend(srv.url), RemoteBackend(srv.url)
        a.reset(3)
        b.reset(4)
        ids = [a._env_idx, b._env_idx]
        assert all(isinstance(i, int) and i > 2**20 for i in ids) and ids[0] != ids[1]
        assert _get(srv, "/list_envs")[0] == 403
        assert _get(srv, "/observation?env_idx=0")[0] == 404  # the first sequential id is not a session
        assert a.act("search[tea]").page.page_type == "results"
        a.close()
        b.close()
    with WebShopServer() as srv:  # the default stays AgentGym's: ids 0, 1, ... and listed
        assert [_get(srv, "/create", "POST")[1] for _ in range(2)] == [0, 1]
        assert _get(srv, "/list_envs") == (200, [0, 1])


@pytest.mark.parametrize("ttl", ["nan", "inf", "0", "-1"])
def test_bad_session_ttl_is_a_one_line_cli_error(ttl, capsys):
    assert cli_main(["webshop-server", "--port", "0", "--session-ttl", ttl]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "session_ttl must be a positive, finite number of seconds" in err
    with pytest.raises(ValueError):
        WebShopServer(session_ttl=float(ttl))


def test_search_cache_is_bounded_in_bytes():
    docs = [f"red tea number {i} green boots size {i % 7}" for i in range(300)]
    plain = BM25Index(docs)
    index = BM25Index(docs, cache_bytes=100_000)
    queries = [("tea boots " * 1_000) + str(i) for i in range(60)]  # ~10 KB each, every one distinct
    for q in queries + queries[::-1]:
        assert index.search(q) == plain.search(q)  # the cache never changes an answer
        assert 0 <= index.cache_used <= 100_000
    assert index.cache_used == sum(cache_entry_bytes(q, r) for q, r in index._cache.items())
    huge = "tea " * 10_000  # over an eighth of the budget: answered, not kept
    assert index.search(huge) == plain.search(huge) and huge not in index._cache
