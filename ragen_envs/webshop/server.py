"""A WebShop HTTP server speaking AgentGym's endpoints, on the standard library.

``ragen webshop-server --backend mini --port N`` (loopback by default) serves the bundled
engine so that several processes or machines can share one catalog, and so the remote
client can be tested against a real server. Endpoints (JSON in and out):

| endpoint | request | response |
|---|---|---|
| ``GET /`` | | ``"ok"`` |
| ``GET /list_envs`` | | ``[env_idx, ...]`` (live sessions) |
| ``POST /create`` | | ``env_idx`` (int) |
| ``POST /reset`` | ``{"env_idx": i, "session_id": goal_index}`` | ``[observation, null]`` |
| ``POST /step`` | ``{"env_idx": i, "action": "click[...]"}`` | ``{"state", "reward", "done", "info"}`` |
| ``GET /available_actions?env_idx=i`` | | ``{"has_search_bar", "clickables"}`` |
| ``GET /observation?env_idx=i`` | | the page text |
| ``GET /instruction_text?env_idx=i`` | | ``"Instruction: ..."`` |
| ``POST /close`` (ours) | ``{"env_idx": i}`` | ``{"closed": true}`` |
| ``GET /goals`` (ours) | | ``{"num_goals", "catalog_id", "splits", "search_impl", "reward_impl", "backend"}`` |

``info`` of ``/step`` is ``{"page_type", "reward_breakdown"}`` (AgentGym sends ``null``).
``session_id`` must be a goal index (upstream draws a random goal for null; here runs stay
reproducible). Bad requests get a 4xx with ``{"error": message}`` and the server keeps
serving.

Sessions are bounded: at most ``max_sessions`` live at once and a session idle for
``session_ttl`` seconds expires; a request for an evicted or expired ``env_idx`` gets 404.
Creating one more when the table is full evicts the least recently used session of the client
address that holds the most sessions, so one client creating sessions in a loop evicts only
its own (a per-client share of the table), never those of a client that holds fewer. ``agentgym_compat=True`` serves only AgentGym's
endpoints (no ``/close``, no ``/goals``, ``info: null``), to test clients against that
surface.

Session ids are not secrets by default: like AgentGym's, they count up from 0, and any client
that can reach the server can read, step or close any session (``GET /list_envs`` lists them).
``private_ids=True`` (``--private-ids``) draws each id at random from 2**53 values with
:mod:`secrets` (still an integer, so AgentGym clients keep working) and turns ``/list_envs``
off (403), so a client can only use the sessions it created. The server has no accounts: bind
it to loopback (the default) or a trusted network.

Connections are served by :class:`ragen_envs._http.PooledHTTPServer`: each request is read
whole by one selector thread, without blocking (a connection silent for ``idle_timeout``
seconds is closed; a request not complete ``idle_timeout`` seconds after its first byte gets
408), then ``workers`` threads answer complete requests, at most ``queue_size`` wait for one
(more get 503), the listen backlog is ``backlog``; kept-alive and slow connections hold no
worker, so 1,500 clients sending their bodies a byte at a time do not delay anyone else.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from collections import OrderedDict
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from .._http import CLIENT_GONE, BoundedHandler, PooledHTTPServer
from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted
from .backends import WebShopBackend, make_backend

__all__ = ["WebShopServer", "serve", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 1 << 20


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Entry:
    __slots__ = ("backend", "lock", "last_used", "started", "client")

    def __init__(self, backend: WebShopBackend, client: str) -> None:
        self.backend = backend
        self.client = client
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self.started = False


class WebShopServer:
    """Sessions + HTTP. ``backend_factory`` builds one backend per session (they share the
    immutable catalog). Use :meth:`start` / :meth:`stop` (a background thread) or
    :meth:`serve_forever`."""

    def __init__(
        self,
        backend_factory: Callable[[], WebShopBackend] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_sessions: int = 1024,
        session_ttl: float = 3600.0,
        agentgym_compat: bool = False,
        verbose: bool = False,
        private_ids: bool = False,
        workers: int = 32,
        queue_size: int = 1024,
        backlog: int = 1024,
        idle_timeout: float = 30.0,
    ) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
        if (isinstance(session_ttl, bool) or not isinstance(session_ttl, (int, float))
                or not (math.isfinite(session_ttl) and session_ttl > 0)):
            raise ValueError(f"session_ttl must be a positive, finite number of seconds, got {session_ttl!r}")
        self.backend_factory = backend_factory or (lambda: make_backend("mini"))
        probe = self.backend_factory()
        self.info = probe.describe()
        probe.close()
        self.max_sessions = max_sessions
        self.session_ttl = float(session_ttl)
        self.agentgym_compat = bool(agentgym_compat)
        self.verbose = bool(verbose)
        self.private_ids = bool(private_ids)
        self._sessions: OrderedDict[int, _Entry] = OrderedDict()
        self._owned: dict[str, int] = {}  # client address -> live sessions it created
        self._lock = threading.Lock()
        self._next_id = 0
        self.stats = {"created": 0, "evicted": 0, "expired": 0, "requests": 0, "errors": 0}
        self.httpd = PooledHTTPServer((host, port), self._handler_class(), workers=workers, queue_size=queue_size,
                                      backlog=backlog, idle_timeout=idle_timeout, max_body=MAX_BODY_BYTES)
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> "WebShopServer":
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="webshop-server", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for entry in self._sessions.values():
                entry.backend.close()
            self._sessions.clear()
            self._owned.clear()

    def __enter__(self) -> "WebShopServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def session_count(self) -> int:
        with self._lock:
            return len(self._sessions)

    # ------------------------------------------------------------------ sessions
    def _expire(self, now: float) -> None:
        # caller holds self._lock; the OrderedDict is in least-recently-used order
        while self._sessions:
            idx, entry = next(iter(self._sessions.items()))
            if now - entry.last_used <= self.session_ttl:
                break
            self._drop(idx)
            self.stats["expired"] += 1

    def _drop(self, idx: int) -> _Entry:
        # caller holds self._lock
        entry = self._sessions.pop(idx)
        left = self._owned[entry.client] - 1
        if left:
            self._owned[entry.client] = left
        else:
            del self._owned[entry.client]
        entry.backend.close()
        return entry

    def create(self, client: str = "local") -> int:
        """A new session for ``client`` (its address). When the table is full, the least
        recently used session of the client holding the most goes: a client that creates
        sessions in a loop evicts its own, never those of a client holding fewer."""
        backend = self.backend_factory()
        with self._lock:
            now = time.monotonic()
            self._expire(now)
            while len(self._sessions) >= self.max_sessions:
                heaviest = max(self._owned.items(), key=lambda kv: (kv[1], kv[0] == client))[0]
                victim = next(i for i, e in self._sessions.items() if e.client == heaviest)
                self._drop(victim)
                self.stats["evicted"] += 1
            idx = self._new_id()
            self._sessions[idx] = _Entry(backend, client)
            self._owned[client] = self._owned.get(client, 0) + 1
            self.stats["created"] += 1
            return idx

    def _new_id(self) -> int:
        # caller holds self._lock
        if not self.private_ids:
            idx = self._next_id
            self._next_id += 1
            return idx
        while True:
            idx = secrets.randbelow(1 << 53)  # exact in JSON parsers that read numbers as doubles
            if idx not in self._sessions:
                return idx

    @staticmethod
    def _parse_idx(idx: Any) -> int:
        if isinstance(idx, str):
            text = idx.strip()
            digits = text[1:] if text.startswith("-") else text
            if not (digits.isascii() and digits.isdigit() and len(digits) <= 20):  # ids are below 2**53
                raise _HTTPError(400, f"env_idx must be an integer of at most 20 digits, got {idx[:40]!r}"
                                      + ("..." if len(idx) > 40 else ""))
            idx = int(text)
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise _HTTPError(400, f"env_idx must be an integer, got {idx!r}")
        return idx

    def _get(self, idx: Any) -> _Entry:
        idx = self._parse_idx(idx)
        with self._lock:
            now = time.monotonic()
            self._expire(now)
            entry = self._sessions.get(idx)
            if entry is None:
                raise _HTTPError(404, f"unknown or expired env_idx {idx}; POST /create makes a new one")
            entry.last_used = now
            self._sessions.move_to_end(idx)
            return entry

    def close(self, idx: Any) -> None:
        self._get(idx)
        with self._lock:
            if self._parse_idx(idx) in self._sessions:
                self._drop(self._parse_idx(idx))

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    # ------------------------------------------------------------------ routes
    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any, client: str = "local") -> Any:
        route = (method, path.rstrip("/") or "/")
        if route == ("GET", "/"):
            return "ok"
        if route == ("GET", "/list_envs"):
            if self.private_ids:
                raise _HTTPError(403, "this server keeps session ids private (--private-ids): /list_envs is off")
            with self._lock:
                return list(self._sessions)
        if route == ("POST", "/create"):
            return self.create(client)
        if route == ("POST", "/reset"):
            fields = _fields(body, ("env_idx", "session_id"))
            entry = self._get(fields["env_idx"])
            goal = fields["session_id"]
            n = self.info["num_goals"]
            if not isinstance(goal, int) or isinstance(goal, bool) or not 0 <= goal < n:
                raise _HTTPError(400, f"session_id must be a goal index in 0..{n - 1}, got {goal!r}")
            with entry.lock:
                page = entry.backend.reset(goal)
                entry.started = True
            return [page.text, None]
        if route == ("POST", "/step"):
            fields = _fields(body, ("env_idx", "action"))
            if not isinstance(fields["action"], str):
                raise _HTTPError(400, f"action must be a string, got {type(fields['action']).__name__}")
            entry = self._started(fields["env_idx"])
            with entry.lock:
                result = entry.backend.act(fields["action"])
            info = None if self.agentgym_compat else {"page_type": result.page.page_type, "reward_breakdown": result.breakdown}
            return {"state": result.page.text, "reward": result.reward, "done": result.done, "info": info}
        if method == "GET" and route[1] in ("/available_actions", "/observation", "/instruction_text"):
            entry = self._started(_query_idx(query))
            with entry.lock:
                if route[1] == "/available_actions":
                    page = entry.backend.page()
                    return {"has_search_bar": page.has_search_bar, "clickables": list(page.clickables)}
                if route[1] == "/observation":
                    return entry.backend.page().text
                return entry.backend.instruction_text()
        if not self.agentgym_compat:
            if route == ("POST", "/close"):
                fields = _fields(body, ("env_idx",))
                self.close(fields["env_idx"])
                return {"closed": True}
            if route == ("GET", "/goals"):
                return {k: self.info.get(k) for k in ("num_goals", "catalog_id", "splits", "search_impl", "reward_impl", "backend")}
        known = {"/", "/list_envs", "/create", "/reset", "/step", "/available_actions", "/observation", "/instruction_text"}
        if not self.agentgym_compat:
            known |= {"/close", "/goals"}
        if route[1] in known:
            raise _HTTPError(405, f"{method} is not allowed on {route[1]}")
        raise _HTTPError(404, f"no such endpoint: {method} {path}")

    def _started(self, idx: Any) -> _Entry:
        entry = self._get(idx)
        if not entry.started:
            raise _HTTPError(409, f"env_idx {idx} has not been reset yet: POST /reset first")
        return entry

    def _handler_class(self) -> type[BoundedHandler]:
        server = self

        class Handler(BoundedHandler):
            server_version = "ragen-webshop/1"

            def _dispatch(self, method: str) -> None:
                server._count("requests")
                try:
                    parts = urlsplit(self.path)
                    body = None
                    if method == "POST":
                        body = self._read_json()
                    result = server.handle(method, parts.path, parse_qs(parts.query), body,
                                           client=str(self.client_address[0]))
                    self._send(200, result)
                except _HTTPError as exc:
                    server._count("errors")
                    self._send(exc.status, {"error": exc.message})
                except CLIENT_GONE:
                    self.close_connection = True  # nothing to answer to; counted by the HTTP server
                    raise
                except Exception as exc:  # a bug must not take the server down
                    server._count("errors")
                    self._send(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})

            def _read_json(self) -> Any:
                length = self.headers.get("Content-Length")
                if length is None:
                    return None
                try:
                    n = int(length)
                except ValueError:
                    raise _HTTPError(400, f"bad Content-Length {length!r}") from None
                if n < 0:
                    raise _HTTPError(400, f"bad Content-Length {length!r}")
                if n > MAX_BODY_BYTES:
                    raise _HTTPError(413, f"request body over {MAX_BODY_BYTES} bytes")
                try:
                    raw = self.rfile.read(n)
                except TimeoutError:
                    self.close_connection = True
                    raise _HTTPError(408, "timed out reading the request body") from None
                if len(raw) < n:
                    self.close_connection = True
                    raise _HTTPError(400, f"the body ended after {len(raw)} of {n} bytes")
                if not raw:
                    return None
                try:
                    return loads_untrusted(raw, allow_nan=False)
                except UntrustedJSONError as exc:
                    raise _HTTPError(400, f"request body: {exc}") from None

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._dispatch("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._dispatch("POST")

            def do_PUT(self) -> None:  # noqa: N802
                self._dispatch("PUT")

            def do_DELETE(self) -> None:  # noqa: N802
                self._dispatch("DELETE")

            def log_message(self, fmt: str, *args: Any) -> None:
                if server.verbose:
                    super().log_message(fmt, *args)

        return Handler


def _fields(body: Any, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _HTTPError(400, f"expected a JSON object with {', '.join(names)}")
    missing = [n for n in names if n not in body]
    if missing:
        raise _HTTPError(400, f"missing field(s): {', '.join(missing)}")
    return {n: body[n] for n in names}


def _query_idx(query: dict[str, list[str]]) -> str:
    values = query.get("env_idx")
    if not values:
        raise _HTTPError(400, "missing query parameter env_idx")
    return values[0]


def serve(
    backend: str = "mini",
    host: str = "127.0.0.1",
    port: int = 0,
    catalog: str | None = None,
    max_sessions: int = 1024,
    session_ttl: float = 3600.0,
    verbose: bool = False,
    **server_kwargs: Any,
) -> WebShopServer:
    """A server for ``backend`` (``mini`` or ``inprocess``), bound but not yet serving."""
    if backend == "mini":
        factory = (lambda: make_backend("mini", catalog=catalog)) if catalog else (lambda: make_backend("mini"))
    elif backend == "inprocess":
        if catalog:
            raise ValueError("--catalog applies to the mini backend only")
        factory = lambda: make_backend("inprocess")  # noqa: E731
    else:
        raise ValueError(f"the server backend must be 'mini' or 'inprocess', got {backend!r}")
    return WebShopServer(factory, host=host, port=port, max_sessions=max_sessions, session_ttl=session_ttl, verbose=verbose,
                         **server_kwargs)
