"""A standard-library HTTP server with bounds: one selector thread reads every request whole
(non-blocking, under a deadline), a fixed pool of worker threads only ever handles complete
requests, a real listen backlog, and caps on connections per client.

``http.server.ThreadingHTTPServer`` starts one thread per connection and never times a
connection out, so 4,000 half-open connections hold 4,000 threads; its listen backlog is 5.
A pool whose workers read the request themselves is no better against slow clients: 40
connections that send their headers and one byte of body hold 32 workers until the read
timeout. :class:`PooledHTTPServer` keeps the handler interface (``BaseHTTPRequestHandler``;
subclass :class:`BoundedHandler`) and instead:

- an accepted connection waits in a selector (the *waiting room*, no thread) while its
  request arrives; the selector thread reads what is there without blocking until the
  headers and the ``Content-Length`` body are in. A connection silent for ``idle_timeout``
  seconds is closed; one whose request is not complete ``request_timeout`` seconds after its
  first byte gets ``408`` and is closed (a deadline for the whole request, not per read, so
  a byte every few seconds does not keep it open);
- only then does the request go to a queue served by ``workers`` threads, which parse and
  answer it from memory; a kept-alive connection goes back to the waiting room after its
  reply (no worker waits on it), and must start its next request within
  ``keep_alive_timeout``; when ``queue_size`` requests already wait for a worker, it is
  answered ``503`` (``Retry-After: 1``) and closed (both the ``openai`` client and the WebShop
  remote client retry 503);
- at most ``max_waiting`` connections wait in all (about the process's file-descriptor limit
  at most) and at most ``max_per_client`` from one client address: beyond either, the oldest
  waiting one (of that client) is closed; headers over :data:`MAX_HEADER_BYTES` get 431 and
  buffered request bytes over ``max_buffered`` in all get 503;
- a body over ``max_body`` bytes, a ``Transfer-Encoding`` body or a bad ``Content-Length`` is
  not read: the handler gets the headers alone (to answer 413 / 411 / 400) and the connection
  is closed after its reply; ``early_dispatch(method, path, headers)`` (settable) may send a
  request to its handler before its body is read (``ragen serve`` does for a missing API key);
- listens with a backlog of ``backlog`` (the kernel caps it at ``net.core.somaxconn``);
  replies are written by the worker, each write waiting at most ``idle_timeout`` seconds;
- a client that disconnects or times out is counted in :attr:`PooledHTTPServer.stats`, not
  logged with a traceback (other handler errors still are).
"""

from __future__ import annotations

import collections
import heapq
import io
import itertools
import queue
import selectors
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Callable

__all__ = ["PooledHTTPServer", "BoundedHandler", "CLIENT_GONE", "address_family", "MAX_HEADER_BYTES"]

# what a vanished, silent or too slow client raises inside a handler
CLIENT_GONE = (ConnectionError, TimeoutError, socket.timeout)

MAX_HEADER_BYTES = 64 << 10  # request line + headers


def _canned(status: str, message: str, kind: str) -> bytes:
    body = ('{"error": {"message": "%s", "type": "%s", "param": null, "code": null}}' % (message, kind)).encode()
    return (b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), len(body), body))


_BUSY = _canned("503 Service Unavailable", "server busy, retry shortly", "server_busy_error").replace(
    b"Connection: close\r\n", b"Retry-After: 1\r\nConnection: close\r\n")
_SLOW = _canned("408 Request Timeout", "the request did not arrive in time", "invalid_request_error")
_TOO_LARGE = _canned("431 Request Header Fields Too Large", f"the request headers are over {MAX_HEADER_BYTES} bytes",
                     "invalid_request_error")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def address_family(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 literal (``::1``, ``[::1]``), else AF_INET."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _positive(name: str, value: Any, integer: bool) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive {'integer' if integer else 'number'}, got {value!r}")


def _fd_room() -> int:
    """Connections this process can hold open: its soft file-descriptor limit less a reserve."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 10_000
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(16, soft - 128)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str], bool]:
    """(method, path, first value of each lower-cased header, duplicate Content-Length)."""
    lines = head.split(b"\n")
    words = lines[0].decode("latin-1").split()
    method, path = (words[0], words[1]) if len(words) >= 2 else ("", "")
    headers: dict[str, str] = {}
    duplicate = False
    for line in lines[1:]:
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            continue
        name = name.strip().lower()
        if name in headers:
            duplicate |= name == "content-length"
            continue
        headers[name] = value.strip()
    return method, path, headers, duplicate


class _Conn:
    """A connection in the waiting room: what has arrived of its next request, and its deadline."""

    __slots__ = ("sock", "address", "client", "buf", "deadline", "continued", "wanted")

    def __init__(self, sock: socket.socket, address: Any, buf: bytes) -> None:
        self.sock, self.address = sock, address
        self.client = address[0] if isinstance(address, tuple) and address else str(address)
        self.buf = bytearray(buf)
        self.deadline = 0.0
        self.continued = False  # sent "100 Continue" already
        self.wanted = 0  # bytes the request needs in ``buf`` before it can be complete (0: not known yet)


class BoundedHandler(BaseHTTPRequestHandler):
    """``BaseHTTPRequestHandler`` for :class:`PooledHTTPServer`: it handles exactly one request,
    read whole beforehand by the server's selector thread (``self.rfile`` is in memory); the
    server decides from ``close_connection`` whether the connection goes back to wait for
    another."""

    def setup(self) -> None:
        super().setup()
        data = self.server._request_data()
        if data is not None:
            self.rfile.close()
            self.rfile = io.BytesIO(data)

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()

    def handle_expect_100(self) -> bool:
        return True  # the selector thread has answered "100 Continue" before reading the body


class PooledHTTPServer(HTTPServer):
    """``HTTPServer`` with a waiting room that reads requests whole and a fixed worker pool
    (module docstring).

    Args:
        address: ``(host, port)``; port 0 picks a free one.
        handler: a :class:`BoundedHandler` subclass.
        workers: threads serving requests (at most this many handled at once).
        queue_size: complete requests waiting for a worker before new ones get 503.
        backlog: the listen backlog (connections the kernel holds before ``accept``).
        idle_timeout: seconds a new connection may stay silent, and any write may wait.
        keep_alive_timeout: seconds a kept-alive connection may wait before its next request.
        request_timeout: seconds from a request's first byte until it must be complete
            (default: ``idle_timeout``).
        max_waiting: connections held in the waiting room at most (default: 10,000, or the
            file-descriptor limit less a reserve when that is lower).
        max_per_client: waiting connections from one client address at most.
        max_body: bodies up to this many bytes are read before the handler runs.
        max_buffered: request bytes held in the waiting room in all.
    """

    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, *, workers: int = 32, queue_size: int = 1024,
                 backlog: int = 1024, idle_timeout: float = 30.0, keep_alive_timeout: float = 5.0,
                 request_timeout: float | None = None, max_waiting: int | None = None, max_per_client: int = 2048,
                 max_body: int = 8 << 20, max_buffered: int = 256 << 20) -> None:
        if not (isinstance(handler, type) and issubclass(handler, BoundedHandler)):
            raise TypeError("PooledHTTPServer serves BoundedHandler subclasses (they read the buffered request)")
        max_waiting = min(10_000, _fd_room()) if max_waiting is None else max_waiting
        request_timeout = idle_timeout if request_timeout is None else request_timeout
        for name, value in (("workers", workers), ("queue_size", queue_size), ("backlog", backlog),
                            ("max_waiting", max_waiting), ("max_per_client", max_per_client),
                            ("max_body", max_body), ("max_buffered", max_buffered)):
            _positive(name, value, integer=True)
        for name, value in (("idle_timeout", idle_timeout), ("keep_alive_timeout", keep_alive_timeout),
                            ("request_timeout", request_timeout)):
            _positive(name, value, integer=False)
        self.address_family = address_family(address[0])
        self.request_queue_size = backlog  # read by server_activate's listen()
        self.idle_timeout = float(idle_timeout)
        self.keep_alive_timeout = min(float(keep_alive_timeout), self.idle_timeout)
        self.request_timeout = float(request_timeout)
        self.workers = workers
        self.queue_size = queue_size
        self.max_waiting = max_waiting
        self.max_per_client = max_per_client
        self.max_body = max_body
        self.max_buffered = max_buffered
        self.early_dispatch: Callable[[str, str, dict[str, str]], bool] | None = None
        self._pending: queue.Queue = queue.Queue()  # bounded by _dispatch (the poller is the only producer)
        self._stats_lock = threading.Lock()
        self.stats = {"connections": 0, "requests": 0, "rejected_busy": 0, "closed_silent": 0, "closed_slow": 0,
                      "closed_crowded": 0, "client_gone": 0, "handler_errors": 0}
        self._local = threading.local()
        super().__init__((address[0].strip("[]"), address[1]), handler)
        # the waiting room, in arrival order: fd -> _Conn; per client address, the same in order
        self._conns: dict[int, _Conn] = {}
        self._by_client: dict[str, dict[int, None]] = {}
        self._deadlines: list[tuple[float, int, int]] = []  # heap of (deadline, seq, fd); stale entries skipped
        self._seq = itertools.count()
        self._buffered = 0
        self._arrivals: collections.deque = collections.deque()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._closing = False
        self._poller = threading.Thread(target=self._poll, name="http-poller", daemon=True)
        self._poller.start()
        self._threads = [threading.Thread(target=self._work, name=f"http-worker-{i}", daemon=True)
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ accepting
    def process_request(self, request: socket.socket, client_address: Any) -> None:
        """Runs on the accept thread: hand the connection to the waiting room."""
        self.count("connections")
        self._arrive(request, client_address, b"", False)

    def _arrive(self, request: socket.socket, client_address: Any, buf: bytes, kept: bool) -> None:
        self._arrivals.append((request, client_address, buf, kept))
        try:
            self._wake_w.send(b"\0")
        except OSError:  # the wake-up pipe is full: the poller is awake anyway
            pass

    def _poll(self) -> None:
        while not self._closing:
            timeout = None
            while self._deadlines:
                deadline, _, fd = self._deadlines[0]
                conn = self._conns.get(fd)
                if conn is None or conn.deadline != deadline:
                    heapq.heappop(self._deadlines)  # stale: closed, dispatched or rescheduled
                    continue
                timeout = max(0.0, deadline - time.monotonic())
                break
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self._wake_r:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, InterruptedError):
                        pass
                    continue
                conn = self._conns.get(key.fd)
                if conn is not None:
                    self._read(conn)
            while self._arrivals:
                self._admit(*self._arrivals.popleft())
            now = time.monotonic()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, _, fd = heapq.heappop(self._deadlines)
                conn = self._conns.get(fd)
                if conn is None or conn.deadline > now:
                    continue
                if conn.buf:
                    self._refuse(conn, _SLOW, "closed_slow")
                else:
                    self._close(conn, "closed_silent")

    def _admit(self, sock: socket.socket, address: Any, buf: bytes, kept: bool) -> None:
        conn = _Conn(sock, address, buf)
        while len(self._conns) >= self.max_waiting:
            self._close(self._conns[next(iter(self._conns))], "closed_crowded")
        while len(self._by_client.get(conn.client, ())) >= self.max_per_client:
            self._close(self._conns[next(iter(self._by_client[conn.client]))], "closed_crowded")
        try:
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
        except (ValueError, OSError):
            self.shutdown_request(sock)
            return
        fd = sock.fileno()
        self._conns[fd] = conn
        self._by_client.setdefault(conn.client, {})[fd] = None
        self._buffered += len(conn.buf)
        self._schedule(conn, self.request_timeout if buf else self.keep_alive_timeout if kept else self.idle_timeout)
        if buf:
            self._advance(conn)

    def _schedule(self, conn: _Conn, seconds: float) -> None:
        conn.deadline = time.monotonic() + seconds
        heapq.heappush(self._deadlines, (conn.deadline, next(self._seq), conn.sock.fileno()))

    def _forget(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        self._conns.pop(fd, None)
        mine = self._by_client.get(conn.client)
        if mine is not None:
            mine.pop(fd, None)
            if not mine:
                del self._by_client[conn.client]
        self._buffered -= len(conn.buf)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _close(self, conn: _Conn, reason: str | None) -> None:
        self._forget(conn)
        if reason:
            self.count(reason)
        self.shutdown_request(conn.sock)

    def _refuse(self, conn: _Conn, reply: bytes, reason: str) -> None:
        # counted before the reply goes out (as rejected_busy is): a client that has read the
        # refusal finds it in the stats
        self._forget(conn)
        self.count(reason)
        try:
            conn.sock.send(reply)  # best effort: the socket buffer of a fresh connection holds it
        except OSError:
            pass
        self.shutdown_request(conn.sock)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, "client_gone")
            return
        if not data:  # the client hung up before its request was complete
            self._close(conn, "client_gone" if conn.buf else None)
            return
        if not conn.buf:
            self._schedule(conn, self.request_timeout)  # the request's deadline runs from its first byte
        if self._buffered + len(data) > self.max_buffered:
            self._refuse(conn, _BUSY, "rejected_busy")
            return
        conn.buf += data
        self._buffered += len(data)
        if len(conn.buf) >= conn.wanted:  # (re-scanning a body at each read made an 8 MB one cost seconds)
            self._advance(conn)

    def _advance(self, conn: _Conn) -> None:
        """Dispatch the request in ``conn.buf`` if it is complete (or must go without its body)."""
        buf = conn.buf
        start = 0
        while buf.startswith(b"\r\n", start) or buf.startswith(b"\n", start):  # blank lines between requests
            start += 1 if buf[start] == 10 else 2
        ends = [i for i in (buf.find(b"\r\n\r\n", start), buf.find(b"\n\n", start)) if i >= 0]
        if not ends:
            if len(buf) - start > MAX_HEADER_BYTES:
                self._refuse(conn, _TOO_LARGE, "closed_slow")
            elif start == len(buf):
                self._buffered -= len(buf)
                conn.buf = bytearray()
            return
        cut = min(ends)
        end = cut + (4 if buf.startswith(b"\r\n\r\n", cut) else 2)
        if end - start > MAX_HEADER_BYTES:
            self._refuse(conn, _TOO_LARGE, "closed_slow")
            return
        method, path, headers, duplicate = _parse_head(bytes(buf[start:end]))
        length_text = headers.get("content-length", "0")
        framed = (not duplicate and "transfer-encoding" not in headers and length_text.isascii()
                  and length_text.isdigit() and len(length_text) <= 18 and int(length_text) <= self.max_body)
        if framed and self.early_dispatch is not None and self.early_dispatch(method, path, headers):
            framed = False
        if framed:
            stop = end + int(length_text)
            if len(buf) < stop:
                conn.wanted = stop
                if not conn.continued and headers.get("expect", "").lower() == "100-continue":
                    conn.continued = True
                    try:
                        conn.sock.send(_CONTINUE)
                    except OSError:
                        pass
                return
        else:
            stop = end  # the handler answers from the headers; the connection closes after it
        data, rest = bytes(buf[start:stop]), bytes(buf[stop:]) if framed else b""
        self._forget(conn)
        self._dispatch(conn.sock, conn.address, data, rest, keep=framed)

    def _dispatch(self, request: socket.socket, client_address: Any, data: bytes, rest: bytes, keep: bool) -> None:
        if self._pending.qsize() < self.queue_size:
            self._pending.put((request, client_address, data, rest, keep))
            return
        self.count("rejected_busy")
        try:
            request.send(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def crowded(self) -> bool:
        """True while complete requests wait for a worker."""
        return not self._pending.empty()

    def waiting(self) -> int:
        """Connections in the waiting room (accepted, their next request not yet complete)."""
        return len(self._conns)

    def _request_data(self) -> bytes | None:
        return getattr(self._local, "data", None)

    def finish_request(self, request: Any, client_address: Any) -> Any:
        return self.RequestHandlerClass(request, client_address, self)

    def _work(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, client_address, data, rest, keep = item
            self._local.data = data
            self.count("requests")
            try:
                request.setblocking(True)
                request.settimeout(self.idle_timeout)
                handler = self.finish_request(request, client_address)
                keep = keep and not handler.close_connection
            except Exception:  # noqa: BLE001 - one connection's failure must not stop the worker
                keep = False
                self.handle_error(request, client_address)
            finally:
                self._local.data = None
            if keep and not self._closing:
                self._arrive(request, client_address, rest, True)  # back to the waiting room, no worker held
            else:
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, CLIENT_GONE):
            self.count("client_gone")
            return
        self.count("handler_errors")
        print(f"error while serving {client_address}:", file=sys.stderr)
        traceback.print_exc()

    def count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] = self.stats.get(key, 0) + n

    # ------------------------------------------------------------------ closing
    def server_close(self) -> None:
        super().server_close()
        if self._closing:
            return
        self._closing = True
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass
        self._poller.join(timeout=5)
        for conn in list(self._conns.values()):
            self.shutdown_request(conn.sock)
        self._conns.clear()
        self._by_client.clear()
        while self._arrivals:
            self.shutdown_request(self._arrivals.popleft()[0])
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        while True:  # requests never picked up: close their connections
            try:
                item = self._pending.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.shutdown_request(item[0])
        for _ in self._threads:
            self._pending.put(None)
        deadline = time.monotonic() + min(5.0, self.idle_timeout)
        for t in self._threads:  # daemon threads: a worker still generating is not waited for long
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads = []
