"""A standard-library HTTP server with bounds: a fixed pool of worker threads, a bounded
queue of accepted connections, a real listen backlog and an idle timeout per connection.

``http.server.ThreadingHTTPServer`` starts one thread per connection and never times a
connection out, so 4,000 half-open connections hold 4,000 threads; its listen backlog is 5.
:class:`PooledHTTPServer` keeps the same handler interface (``BaseHTTPRequestHandler``) and
instead:

- accepts into a queue of at most ``queue_size`` connections served by ``workers`` threads;
  a connection that finds the queue full is answered ``503`` (``Retry-After: 1``) at once
  and closed (both the ``openai`` client and the WebShop remote client retry 503);
- listens with a backlog of ``backlog`` (the kernel caps it at ``net.core.somaxconn``);
- gives every socket operation of a connection ``idle_timeout`` seconds: a client that
  stops sending (or stops reading) loses its connection and its worker;
- while connections wait in the queue, :meth:`PooledHTTPServer.crowded` is true and the
  handlers answer with ``Connection: close``, so keep-alive clients take turns instead of
  holding workers;
- a client that disconnects or times out is counted in :attr:`PooledHTTPServer.stats`, not
  logged with a traceback (other handler errors still are).
"""

from __future__ import annotations

import queue
import socket
import sys
import threading
import time
import traceback
from http.server import HTTPServer
from typing import Any

__all__ = ["PooledHTTPServer", "CLIENT_GONE", "address_family"]

# what a vanished, silent or too slow client raises inside a handler
CLIENT_GONE = (ConnectionError, TimeoutError, socket.timeout)

_BUSY_BODY = b'{"error": {"message": "server busy, retry shortly", "type": "server_busy_error"}}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
         b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


def address_family(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 literal (``::1``, ``[::1]``), else AF_INET."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class PooledHTTPServer(HTTPServer):
    """``HTTPServer`` served by a fixed worker pool (module docstring).

    Args:
        address: ``(host, port)``; port 0 picks a free one.
        handler: a ``BaseHTTPRequestHandler`` subclass.
        workers: threads serving connections (at most this many handled at once).
        queue_size: accepted connections waiting for a worker before new ones get 503.
        backlog: the listen backlog (connections the kernel holds before ``accept``).
        idle_timeout: seconds any read or write on a connection may wait.
    """

    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, *, workers: int = 32, queue_size: int = 1024,
                 backlog: int = 1024, idle_timeout: float = 30.0) -> None:
        for name, value in (("workers", workers), ("queue_size", queue_size), ("backlog", backlog)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(idle_timeout, bool) or not isinstance(idle_timeout, (int, float)) or not 0 < idle_timeout < float("inf"):
            raise ValueError(f"idle_timeout must be a positive number of seconds, got {idle_timeout!r}")
        self.address_family = address_family(address[0])
        self.request_queue_size = backlog  # read by server_activate's listen()
        self.idle_timeout = float(idle_timeout)
        self.workers = workers
        self.queue_size = queue_size
        self._pending: queue.Queue = queue.Queue()  # bounded by process_request (the only producer)
        self._stats_lock = threading.Lock()
        self.stats = {"connections": 0, "rejected_busy": 0, "client_gone": 0, "handler_errors": 0}
        super().__init__((address[0].strip("[]"), address[1]), handler)
        self._threads = [threading.Thread(target=self._work, name=f"http-worker-{i}", daemon=True)
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ accepting
    def process_request(self, request: socket.socket, client_address: Any) -> None:
        self.count("connections")
        if self._pending.qsize() < self.queue_size:
            self._pending.put((request, client_address))
        else:
            self.count("rejected_busy")
            try:
                request.settimeout(0.5)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)

    def crowded(self) -> bool:
        """True while accepted connections wait for a worker."""
        return not self._pending.empty()

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
