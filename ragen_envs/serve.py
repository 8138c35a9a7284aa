"""An OpenAI-compatible chat server for a local model (``ragen serve hf:PATH``).

``POST /v1/chat/completions`` (non-streaming), ``GET /v1/models`` and ``GET /health``, on the
standard library's threading HTTP server. Each request thread hands its prompt to the
model's batching thread (:meth:`HFAgent.submit`), so concurrent clients share ``generate``
calls. Responses carry ``usage`` (prompt, completion and total tokens, counted by the
model's tokenizer). Loopback only by default; with ``api_key`` set, requests need
``Authorization: Bearer <key>``.

The HTTP layer (:class:`ChatHandler`, :func:`make_server`) takes any backend with
``model_name`` and ``complete(request) -> (prompt_tokens, [Completion, ...])``.
"""

from __future__ import annotations

import hmac
import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

__all__ = ["ChatRequest", "Completion", "ChatBackend", "HFBackend", "RequestError", "ChatHandler", "make_server",
           "parse_chat_request", "serve_in_thread"]

MAX_BODY = 32 << 20


class RequestError(Exception):
    """A request the server refuses: answered with ``status`` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, str]]
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class Completion:
    text: str
    finish_reason: str
    completion_tokens: int


class ChatBackend(Protocol):
    model_name: str

    def complete(self, request: ChatRequest) -> tuple[int, list[Completion]]: ...


def _text_content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(400, f"{where}: only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    if content is None:
        return ""
    raise RequestError(400, f"{where}: content must be a string or a list of text parts")


def _number(body: dict, key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise RequestError(400, f"{key} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` JSON body."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    if body.get("stream"):
        raise RequestError(400, "stream=true is not supported by ragen serve; send stream=false")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "developer"):
            raise RequestError(400, f"messages[{i}] needs a role of system, user or assistant")
        role = "system" if m["role"] == "developer" else m["role"]
        clean.append({"role": role, "content": _text_content(m.get("content"), f"messages[{i}]")})
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(400, f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 16:
        stop = tuple(s for s in stop if s)
    else:
        raise RequestError(400, "stop must be a string or a list of up to 16 strings")
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16:
        raise RequestError(400, f"n must be an integer in [1, 16], got {n!r}")
    return ChatRequest(
        model=str(body.get("model", "")),
        messages=clean,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        max_tokens=max_tokens,
        stop=stop,
        n=n,
        raw=body,
    )


class HFBackend:
    """Serves an :class:`~ragen_envs.agents.hf.HFAgent` through its batching thread."""

    def __init__(self, agent, model_name: str, timeout_s: float = 600.0) -> None:
        self.agent = agent
        self.model_name = model_name
        self.timeout_s = timeout_s

    def complete(self, request: ChatRequest) -> tuple[int, list[Completion]]:
        from .agents.hf import SamplingParams

        if request.top_p <= 0:
            raise RequestError(400, "top_p must be > 0")
        params = SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_tokens or self.agent.params.max_tokens,
            stop=request.stop,
        )
        futures = [self.agent.submit(request.messages, params) for _ in range(request.n)]
        gens = [f.result(timeout=self.timeout_s) for f in futures]
        return gens[0].prompt_tokens, [Completion(g.text, g.finish_reason, g.completion_tokens) for g in gens]


class ChatHandler(BaseHTTPRequestHandler):
    """The HTTP side: routes, auth, JSON in and out. ``self.server`` carries ``backend``
    (a :class:`ChatBackend`) and ``api_key`` (or None)."""

    protocol_version = "HTTP/1.1"
    server_version = "ragen-serve"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    # ------------------------------------------------------------------ helpers
    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self.send_json(status, {"error": {"message": message, "type": kind, "code": None, "param": None}})

    def read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise RequestError(411, "a Content-Length header is required")
        if int(length) > MAX_BODY:
            self.close_connection = True  # the body stays unread: do not reuse the connection
            raise RequestError(413, f"the request body is larger than {MAX_BODY} bytes")
        return self.rfile.read(int(length))

    def authorized(self) -> bool:
        """True if no key is required or the request carries it; else answers 401."""
        key = getattr(self.server, "api_key", None)
        if not key:
            return True
        given = self.headers.get("Authorization", "")
        ok = given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), key.encode())
        if not ok:
            self.send_error_json(401, "invalid or missing API key (Authorization: Bearer ...)", "authentication_error")
        return ok

    # ------------------------------------------------------------------ routes
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/health", "/v1/health"):
            self.send_json(200, {"status": "ok"})
        elif path == "/v1/models":
            if self.authorized():
                name = self.server.backend.model_name
                self.send_json(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "ragen-envs"}]})
        else:
            self.send_error_json(404, f"no route GET {path}", "not_found_error")

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        try:
            raw = self.read_body()  # always consumed first, so the connection stays usable
        except RequestError as exc:
            self.send_error_json(exc.status, exc.message, exc.kind)
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path != "/v1/chat/completions":
            self.send_error_json(404, f"no route POST {path} (this server offers /v1/chat/completions)", "not_found_error")
            return
        if not self.authorized():
            return
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            self.send_error_json(400, "the request body is not valid JSON")
            return
        self.handle_chat(body)

    def handle_chat(self, body: Any) -> None:
        """Answer one chat completion request (already authorised, body parsed)."""
        try:
            request = parse_chat_request(body)
            backend = self.server.backend
            if request.model and request.model != backend.model_name:
                raise RequestError(404, f"model {request.model!r} not found; this server serves {backend.model_name!r}",
                                   "not_found_error")
            prompt_tokens, completions = backend.complete(request)
        except RequestError as exc:
            self.send_error_json(exc.status, exc.message, exc.kind)
            return
        except Exception as exc:  # noqa: BLE001 - a model failure is the server's error, not the client's
            self.send_error_json(500, f"generation failed: {type(exc).__name__}: {exc}", "server_error")
            return
        completion_tokens = sum(c.completion_tokens for c in completions)
        self.send_json(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.server.backend.model_name,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": c.text}, "logprobs": None,
                 "finish_reason": c.finish_reason}
                for i, c in enumerate(completions)
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class _Server6(_Server):
    address_family = socket.AF_INET6


def make_server(backend: ChatBackend, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                handler: type[ChatHandler] = ChatHandler, verbose: bool = False) -> ThreadingHTTPServer:
    """A bound (not yet serving) HTTP server; ``port=0`` picks a free port (``server.server_port``)."""
    cls = _Server6 if ":" in host else _Server
    server = cls((host.strip("[]"), port), handler)
    server.backend = backend
    server.api_key = api_key
    server.verbose = verbose
    return server


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    """Run ``server.serve_forever`` on a daemon thread (tests, notebooks)."""
    thread = threading.Thread(target=server.serve_forever, name="ragen-serve", daemon=True)
    thread.start()
    return thread
