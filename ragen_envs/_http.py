"""A standard-library HTTP server with bounds: connections wait for their first byte in a
selector (no thread), a fixed pool of worker threads serves the ones that have sent something,
a real listen backlog, and timeouts on every read and write.

``http.server.ThreadingHTTPServer`` starts one thread per connection and never times a
connection out, so 4,000 half-open connections hold 4,000 threads; its listen backlog is 5.
:class:`PooledHTTPServer` keeps the handler interface (``BaseHTTPRequestHandler``; subclass
:class:`BoundedHandler` for the keep-alive rules) and instead:

- an accepted connection waits in a selector until it sends its first byte, holding no
  thread; one silent for ``idle_timeout`` seconds is closed, and beyond ``max_waiting``
  silent connections the oldest is closed;
- a connection with data goes to a queue served by ``workers`` threads; when ``queue_size``
  connections already wait there, it is answered ``503`` (``Retry-After: 1``) and closed
  (both the ``openai`` client and the WebShop remote client retry 503);
- listens with a backlog of ``backlog`` (the kernel caps it at ``net.core.somaxconn``);
- every read or write inside a request may wait ``idle_timeout`` seconds; between keep-alive
  requests a worker waits at most ``keep_alive_timeout``, and not at all when connections
  are queued (:meth:`PooledHTTPServer.crowded`): then replies say ``Connection: close``;
- a client that disconnects or times out is counted in :attr:`PooledHTTPServer.stats`, not
  logged with a traceback (other handler errors still are).
"""

from __future__ import annotations

import collections
import queue
import selectors
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

__all__ = ["PooledHTTPServer", "BoundedHandler", "CLIENT_GONE", "address_family"]

# what a vanished, silent or too slow client raises inside a handler
CLIENT_GONE = (ConnectionError, TimeoutError, socket.timeout)

_BUSY_BODY = b'{"error": {"message": "server busy, retry shortly", "type": "server_busy_error"}}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
         b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


def address_family(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 literal (``::1``, ``[::1]``), else AF_INET."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _positive(name: str, value: Any, integer: bool) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive {'integer' if integer else 'number'}, got {value!r}")


class BoundedHandler(BaseHTTPRequestHandler):
    """``BaseHTTPRequestHandler`` with the keep-alive rules of :class:`PooledHTTPServer`:
    the next request on a kept-alive connection must start within ``keep_alive_timeout``, and
    a crowded server closes connections after each reply (``Connection: close``)."""

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            if self.server.crowded():
                break
            self.connection.settimeout(self.server.keep_alive_timeout)
            self.handle_one_request()

    def parse_request(self) -> bool:  # called once the request line is in: back to the request timeout
        self.connection.settimeout(self.server.idle_timeout)
        return super().parse_request()

    def send_response(self, code: int, message: str | None = None) -> None:
        self._said_close = False
        super().send_response(code, message)

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "connection" and value.lower() == "close":
            self._said_close = True
        super().send_header(keyword, value)

    def end_headers(self) -> None:
        if not getattr(self, "_said_close", False) and (self.close_connection or self.server.crowded()):
            self.send_header("Connection", "close")  # also sets close_connection
        super().end_headers()


class PooledHTTPServer(HTTPServer):
    """``HTTPServer`` with a waiting room and a fixed worker pool (module docstring).

    Args:
        address: ``(host, port)``; port 0 picks a free one.
        handler: a ``BaseHTTPRequestHandler`` subclass (best a :class:`BoundedHandler`).
        workers: threads serving requests (at most this many handled at once).
        queue_size: connections with data waiting for a worker before new ones get 503.
        backlog: the listen backlog (connections the kernel holds before ``accept``).
        idle_timeout: seconds a new connection may stay silent, and any read or write may wait.
        keep_alive_timeout: seconds a worker waits for the next request on a kept-alive connection.
        max_waiting: silent connections held at most (the oldest is closed beyond it).
    """

    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, *, workers: int = 32, queue_size: int = 1024,
                 backlog: int = 1024, idle_timeout: float = 30.0, keep_alive_timeout: float = 5.0,
                 max_waiting: int = 10_000) -> None:
        for name, value in (("workers", workers), ("queue_size", queue_size), ("backlog", backlog),
                            ("max_waiting", max_waiting)):
            _positive(name, value, integer=True)
        _positive("idle_timeout", idle_timeout, integer=False)
        _positive("keep_alive_timeout", keep_alive_timeout, integer=False)
        self.address_family = address_family(address[0])
        self.request_queue_size = backlog  # read by server_activate's listen()
        self.idle_timeout = float(idle_timeout)
        self.keep_alive_timeout = min(float(keep_alive_timeout), self.idle_timeout)
        self.workers = workers
        self.queue_size = queue_size
        self.max_waiting = max_waiting
        self._pending: queue.Queue = queue.Queue()  # bounded by _dispatch (the poller is the only producer)
        self._stats_lock = threading.Lock()
        self.stats = {"connections": 0, "rejected_busy": 0, "closed_silent": 0, "client_gone": 0,
                      "handler_errors": 0}
        super().__init__((address[0].strip("[]"), address[1]), handler)
        # the waiting room: connections not yet sent a byte, in arrival order (= deadline order)
        self._waiting: collections.OrderedDict[int, tuple[socket.socket, Any, float]] = collections.OrderedDict()
        self._arrivals: collections.deque = collections.deque()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
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
        self._arrivals.append((request, client_address))
        try:
            self._wake_w.send(b"\0")
        except OSError:  # the wake-up pipe is full: the poller is awake anyway
            pass

    def _poll(self) -> None:
        while not self._closing:
            now = time.monotonic()
            timeout = None
            if self._waiting:
                timeout = max(0.0, next(iter(self._waiting.values()))[2] - now)
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self._wake_r:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, InterruptedError):
                        pass
                    continue
                entry = self._waiting.pop(key.fd, None)
                self._selector.unregister(key.fileobj)
                if entry is not None:
                    self._dispatch(entry[0], entry[1])
            while self._arrivals:
                request, address = self._arrivals.popleft()
                if len(self._waiting) >= self.max_waiting:
                    _, (old, _, _) = self._waiting.popitem(last=False)
                    self._drop_silent(old)
                try:
                    self._selector.register(request, selectors.EVENT_READ)
                except (ValueError, OSError):
                    self.shutdown_request(request)
                    continue
                self._waiting[request.fileno()] = (request, address, time.monotonic() + self.idle_timeout)
            now = time.monotonic()
            while self._waiting:
                fd, (request, _, deadline) = next(iter(self._waiting.items()))
                if deadline > now:
                    break
                del self._waiting[fd]
                self._drop_silent(request)

    def _drop_silent(self, request: socket.socket) -> None:
        try:
            self._selector.unregister(request)
        except (KeyError, ValueError):
            pass
        self.count("closed_silent")
        self.shutdown_request(request)

    def _dispatch(self, request: socket.socket, client_address: Any) -> None:
        if self._pending.qsize() < self.queue_size:
            self._pending.put((request, client_address))
            return
        self.count("rejected_busy")
        try:
            request.settimeout(0.5)
            request.sendall(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def crowded(self) -> bool:
        """True while connections with a request wait for a worker."""
        return not self._pending.empty()

    def waiting(self) -> int:
        """Connections in the waiting room (accepted, nothing sent yet)."""
        return len(self._waiting)

    def _work(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, client_address = item
            try:
                request.settimeout(self.idle_timeout)
                self.finish_request(request, client_address)
            except Exception:  # noqa: BLE001 - one connection's failure must not stop the worker
                self.handle_error(request, client_address)
            finally:
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
        for request, _, _ in list(self._waiting.values()):
            self.shutdown_request(request)
        self._waiting.clear()
        while self._arrivals:
            self.shutdown_request(self._arrivals.popleft()[0])
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        while True:  # connections never picked up: close them
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
