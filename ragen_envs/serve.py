"""An OpenAI-compatible chat server for a local model (``ragen serve hf:PATH``).

``POST /v1/chat/completions`` (with or without ``stream``), ``GET /v1/models`` and
``GET /health``, on :class:`ragen_envs._http.PooledHTTPServer` (requests read whole by a
selector thread under a deadline, then a fixed pool of worker threads; slow and kept-alive
connections hold no worker; a listen backlog; an idle timeout per connection). It is meant for small local
checkpoints (tests, the tiny models, a 0.5B model on one GPU); for real-size models serve them
with vLLM or SGLang, which speak the same API.

What a request may ask, and what it gets otherwise (an OpenAI-style error body
``{"error": {"message", "type", "param", "code"}}``):

- honoured: ``model``, ``messages`` (text content), ``temperature`` [0, 2] (below
  :data:`~ragen_envs.lm.engine.MIN_TEMPERATURE` = 1e-5: greedy, as 0), ``top_p`` (0, 1],
  ``max_tokens`` / ``max_completion_tokens``, ``stop`` (up to :data:`MAX_STOP` strings of
  at most :data:`MAX_STOP_CHARS` characters), ``n`` (1..16), ``seed`` (0 .. 2**64 - 1), ``stream``,
  ``stream_options.include_usage``, and ``user`` (an identifier, nothing to do);
- parameters it cannot honour (``logprobs``, ``tools``, ``response_format`` other than
  text, penalties, ``logit_bias``, ...) get 400 naming them when set to anything but their
  no-op value; unknown parameters get 400 too;
- a prompt that does not fit the context (the model's ``max_position_embeddings``, or
  ``--max-context``) gets 400 (one whose characters alone need more tokens than that, by the
  tokenizer's longest token, before it is tokenized: :func:`chars_per_token_bound`), and so
  does ``max_tokens`` beyond ``--max-tokens-limit`` or beyond what the context leaves after
  the prompt; text with NUL or lone surrogates, a body that is not JSON (invalid UTF-8, an
  integer of over 4,300 digits, nesting too deep for the parser), a body over the size limit
  (413), a body that stops arriving (408) are refused with one line, without touching the model;
- the API key (``Authorization: Bearer``) is checked from the headers before the body is read.

Generation runs on one thread (:class:`ragen_envs.lm.token_engine.TokenEngine`, no HTTP in it) with continuous batching: a request
that arrives while others decode is prefilled and joins the running batch at the next step
(up to ``batch_size`` rows), and every step draws one token for every row, each row with its
own temperature, top-p, reply cap, stop strings and random generator, through the trainer's
sampling code (:mod:`ragen_envs.lm.engine`). A row leaves the batch as soon as it is done; one
whose client has gone (the handler sees the socket closed, or a streamed write fails) leaves
at the next step, so nobody computes replies no one will read. Places are shared fairly
between requests (a new request gets its share at the next step, rows above their share
rejoin later with their tokens), and a row whose logits come out NaN fails its own request
only (500); the other requests in the batch finish as if it had not been there. Streaming
sends ``chat.completion.chunk`` server-sent events, then ``data: [DONE]``, as the official
``openai`` client expects.

The HTTP layer (:class:`ChatHandler`, :func:`make_server`) takes any backend with
``model_name`` and ``complete(request) -> (prompt_tokens, [Completion, ...])``; a backend that
also has ``start(request) -> Job`` streams and cancels (:class:`HFBackend`).
"""

from __future__ import annotations

import hmac
import json
import math
import queue
import select
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ._http import CLIENT_GONE, BoundedHandler, PooledHTTPServer
from .lm.token_engine import Completion, Job, TokenEngine

__all__ = ["ChatRequest", "Completion", "ChatBackend", "HFBackend", "RequestError", "ChatHandler", "chars_per_token_bound",
           "make_server", "parse_chat_request", "parse_json_body", "serve_in_thread", "served_name",
           "MAX_BODY", "MAX_STOP", "MAX_STOP_CHARS"]

MAX_BODY = 8 << 20
MAX_STOP = 16
MAX_STOP_CHARS = 256
MAX_N = 16
DISCONNECT_CHECK_S = 0.25  # how often a waiting request looks whether its client is still there

# parameter -> the values that ask for nothing this server would have to do
_NO_OP: dict[str, Callable[[Any], bool]] = {
    "logprobs": lambda v: v is None or v is False,
    "top_logprobs": lambda v: v is None or v == 0,
    "tools": lambda v: v is None or v == [],
    "functions": lambda v: v is None or v == [],
    "tool_choice": lambda v: v is None or v in ("none", "auto"),
    "function_call": lambda v: v is None or v in ("none", "auto"),
    "parallel_tool_calls": lambda v: v is None or isinstance(v, bool),
    "response_format": lambda v: v is None or v == {"type": "text"},
    "presence_penalty": lambda v: v is None or v == 0,
    "frequency_penalty": lambda v: v is None or v == 0,
    "logit_bias": lambda v: v is None or v == {},
    "store": lambda v: v is None or v is False,
    "metadata": lambda v: v is None or v == {},
    "service_tier": lambda v: v is None or v in ("auto", "default"),
    "modalities": lambda v: v is None or v == ["text"],
    "audio": lambda v: v is None,
    "prediction": lambda v: v is None,
    "reasoning_effort": lambda v: v is None,
    "web_search_options": lambda v: v is None,
    "top_k": lambda v: v is None or v in (0, -1),
    "repetition_penalty": lambda v: v is None or v == 1,
}
_HONOURED = {"model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "n",
             "seed", "stream", "stream_options", "user"}


class RequestError(Exception):
    """A request the server refuses: answered with ``status`` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


@dataclass
class ChatRequest:
    model: str
    messages: list[dict[str, str]]
    temperature: float | None = None  # None: the backend's default
    top_p: float = 1.0
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    raw: dict[str, Any] = field(default_factory=dict)


class ChatBackend(Protocol):
    model_name: str

    def complete(self, request: ChatRequest) -> tuple[int, list[Completion]]: ...


# ---------------------------------------------------------------------- request validation
def _check_text(text: str, where: str) -> str:
    """Refuse NUL and lone surrogates (they cannot be tokenized or written as UTF-8)."""
    if "\x00" in text:
        raise RequestError(400, f"{where} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(400, f"{where} contains a lone surrogate (not valid Unicode text)") from None
    return text


def _text_content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return _check_text(content, where)
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(400, f"{where}: only text content parts are supported")
            parts.append(_check_text(part["text"], where))
        return "".join(parts)
    if content is None:
        return ""
    raise RequestError(400, f"{where}: content must be a string or a list of text parts")


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters (a JSON integer may have
    4,300 digits)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}... ({len(text)} characters)"


def _number(body: dict, key: str, default: float | None, lo: float, hi: float, lo_open: bool = False) -> float | None:
    """``body[key]`` as a float in the span, ``default`` when absent. Compared before any float
    conversion: a JSON integer of thousands of digits is out of range, not an OverflowError."""
    value = body.get(key)
    if value is None:
        return default
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and (isinstance(value, int)
                                                                             or math.isfinite(value))
    if not ok or not (lo < value if lo_open else lo <= value) or value > hi:
        span = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise RequestError(400, f"{key} must be a number in {span}, got {_shown(value)}", param=key)
    return float(value)


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of a request body, or :class:`RequestError` 400 with one line for anything
    the parser refuses: invalid UTF-8 or syntax, an integer of more digits than Python converts
    (a plain ValueError, not a JSONDecodeError), nesting too deep for the parser
    (RecursionError). ``NaN`` / ``Infinity`` are read (as Python's parser does) and refused by
    the checks of the field they stand in, which name it (:func:`parse_chat_request`)."""
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise RequestError(400, "the request body is not valid UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise RequestError(400, f"the request body is not valid JSON: {exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise RequestError(400, "the request body is nested too deeply") from None
    except ValueError as exc:  # an integer past sys.get_int_max_str_digits() is no JSONDecodeError
        if "digits" in str(exc):
            limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
            raise RequestError(400, f"the request body has an integer of more than {limit} digits") from None
        raise RequestError(400, f"the request body is not valid JSON: {' '.join(str(exc).split())[:160]}") from None


def unsupported_parameters(body: dict) -> list[str]:
    """Names in ``body`` this server would not honour (set to more than their no-op value)."""
    return sorted(k for k, v in body.items() if k not in _HONOURED and not (k in _NO_OP and _NO_OP[k](v)))


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` JSON body (the module docstring lists the rules)."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    bad = unsupported_parameters(body)
    if bad:
        names = ", ".join(b if len(b) <= 60 else _shown(b) for b in bad[:8])
        names += f" and {len(bad) - 8} more" if len(bad) > 8 else ""
        raise RequestError(400, f"ragen serve does not support {names} (it would be ignored); "
                                "remove it or use a server that does (vLLM, SGLang)", param=bad[0])
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list", param="messages")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "developer"):
            raise RequestError(400, f"messages[{i}] needs a role of system, user or assistant", param="messages")
        role = "system" if m["role"] == "developer" else m["role"]
        clean.append({"role": role, "content": _text_content(m.get("content"), f"messages[{i}]")})
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(400, f"max_tokens must be an integer >= 1, got {_shown(max_tokens)}", param="max_tokens")
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOP:
        stop = tuple(s for s in stop if s)
    else:
        raise RequestError(400, f"stop must be a string or a list of up to {MAX_STOP} strings", param="stop")
    for s in stop:
        _check_text(s, "stop")
        if len(s) > MAX_STOP_CHARS:
            raise RequestError(400, f"each stop string may have at most {MAX_STOP_CHARS} characters, got {len(s)}",
                               param="stop")
    n = body.get("n", 1)
    if n is None:
        n = 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise RequestError(400, f"n must be an integer in [1, {MAX_N}], got {_shown(n)}", param="n")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64):
        raise RequestError(400, f"seed must be an integer in [0, 2**64), got {_shown(seed)}", param="seed")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(400, f"stream must be true or false, got {_shown(stream)}", param="stream")
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict) or set(options) - {"include_usage"}
                                or not isinstance(options.get("include_usage", False), bool)):
        raise RequestError(400, "stream_options must be {\"include_usage\": bool}, and only with stream=true",
                           param="stream_options")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise RequestError(400, f"model must be a string, got {type(model).__name__}", param="model")
    return ChatRequest(
        model=_check_text(model, "model"),
        messages=clean,
        temperature=_number(body, "temperature", None, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        max_tokens=max_tokens,
        stop=stop,
        n=n,
        seed=seed,
        stream=bool(stream),
        include_usage=bool((options or {}).get("include_usage", False)),
        raw=body,
    )


def served_name(path: str) -> str:
    """The model name to serve a checkpoint folder under: its path's tail up to the last folder
    whose name says what it is. ``runs/demo/starpo/model`` -> ``starpo/model``,
    ``runs/x/checkpoints/best/actor`` -> ``x/checkpoints/best/actor``, ``runs/tiny`` -> ``tiny``;
    a hub id (``Qwen/Qwen2.5-0.5B-Instruct``) is kept whole."""
    import os
    from pathlib import PurePath

    generic = {"model", "actor", "final", "best", "latest", "checkpoints", "checkpoint", "output", "out", "runs"}
    norm = os.path.normpath(path)
    parts = [p for p in PurePath(norm).parts if p not in ("/", ".", "..", "~") and not p.endswith(":\\")]
    if not os.path.exists(os.path.expanduser(path)) and len(parts) == 2 and not norm.startswith((".", "/", "~")):
        return "/".join(parts)  # a hub id
    tail: list[str] = []
    for part in reversed(parts):
        tail.insert(0, part)
        if part.lower() not in generic and not part.lower().startswith(("step_", "step-", "checkpoint-")):
            break
    return "/".join(tail) or norm


# Normalizers that merge at most this many characters into one (NFC composes a base letter and
# up to three marks); a tokenizer with any other normaliser (one that strips characters) gets no
# character bound.
_MERGING_NORMALIZERS = {"NFC": 4, "NFD": 1, "NFKC": 4, "NFKD": 1, "Lowercase": 1, "Prepend": 1}


def _normalizer_merge(node: Any) -> int | None:
    """How many input characters one normalised character may stand for, for a normaliser tree
    (``tokenizer.json``'s ``normalizer``); None when that is unbounded or unknown."""
    if node is None:
        return 1
    kind = node.get("type")
    if kind == "Sequence":
        factor = 1
        for child in node.get("normalizers", []):
            merge = _normalizer_merge(child)
            if merge is None:
                return None
            factor *= merge
        return factor
    if kind == "Replace":
        pattern, content = node.get("pattern", {}), node.get("content", "")
        if "String" not in pattern:
            return None  # a regex may delete any amount of text
        return max(1, -(-len(pattern["String"]) // max(1, len(content))))
    return _MERGING_NORMALIZERS.get(kind)


def chars_per_token_bound(tokenizer) -> int | None:
    """At most how many characters of a text one token of ``tokenizer`` covers, or None when no
    such bound is known (a slow tokenizer, a normaliser that deletes characters). A text of L
    characters then has at least L / bound tokens, so a prompt longer than context x bound can be
    refused without tokenizing it (tokenizing 7.9 MB took 16 s and held ~1 GB).

    The bound is (the longest single-token decoding over the vocabulary, special tokens included,
    + 1 for a leading space a decoder drops) x what the normaliser may merge into one character:
    a byte-level token that splits a character decodes to a replacement character per piece, so a
    token's decoding is never shorter than the characters it touches. Computed once per model."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        merge = _normalizer_merge(json.loads(backend.to_str()).get("normalizer"))
    except (ValueError, AttributeError):
        return None
    if merge is None:
        return None
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=False,
                                   clean_up_tokenization_spaces=False)
    return (max(map(len, texts), default=0) + 1) * merge


class HFBackend:
    """Serves a local model (an :class:`~ragen_envs.agents.hf.HFAgent`'s ``model`` and
    ``tokenizer``) through a :class:`TokenEngine`.

    Args:
        agent: the loaded model (``.model``, ``.tokenizer``, ``.device``, ``.prompt_text``;
            its ``params.max_tokens`` is the default reply cap).
        model_name: the name clients send; ``aliases`` are accepted too (not listed).
        max_tokens_limit: the most ``max_tokens`` a request may ask for.
        max_context: the most prompt + reply tokens (default and upper bound: the model's
            ``max_position_embeddings``).
        prefill: text forced at the start of every reply (e.g. ``<answer>``), put back in
            front of the returned text; None: the agent's own (a checkpoint's saved protocol
            settings, see :mod:`ragen_envs.lm.settings`). Replies also end at the settings'
            end-of-turn token, and a request without ``temperature`` samples at the agent's.
        timeout_s: how long a non-streaming :meth:`complete` waits.
    """

    def __init__(self, agent, model_name: str, timeout_s: float = 600.0, *, aliases: tuple[str, ...] = (),
                 max_tokens_limit: int = 4096, max_context: int | None = None, batch_size: int = 16,
                 batch_wait_s: float = 0.01, prefill: str | None = None, seed: int = 0) -> None:
        self.agent = agent
        self.model_name = model_name
        self.aliases = tuple(a for a in aliases if a and a != model_name)
        self.timeout_s = timeout_s
        self.default_max_tokens = int(getattr(getattr(agent, "params", None), "max_tokens", 400) or 400)
        self.max_tokens_limit = int(max_tokens_limit)
        if prefill is None:
            think = getattr(agent, "think", True)
            prefill = ("<think>" if think else "<answer>") if getattr(agent, "prefill", False) else ""
        self.prefill = prefill
        self.default_temperature = float(getattr(getattr(agent, "params", None), "temperature", 1.0))
        settings = getattr(agent, "settings", None)
        eot = getattr(settings, "eot_token", None) or agent.tokenizer.eos_token
        eot_id = agent.tokenizer.convert_tokens_to_ids(eot) if eot else None
        stop_ids = (int(eot_id),) if isinstance(eot_id, int) and eot_id != agent.tokenizer.unk_token_id else ()
        self.engine = TokenEngine(agent.model, agent.tokenizer, agent.device, batch_size=batch_size,
                                  batch_wait_s=batch_wait_s, seed=seed, stop_ids=stop_ids)
        model_ctx = self.engine.context_length()
        if max_context is not None and model_ctx is not None and max_context > model_ctx:
            raise ValueError(f"max_context {max_context} is beyond the model's context of {model_ctx} tokens")
        self.max_context = max_context or model_ctx
        if self.max_context is None:
            raise ValueError("the model does not say its context length; pass max_context")
        self.chars_per_token = chars_per_token_bound(agent.tokenizer)

    def close(self) -> None:
        self.engine.close()

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        text = self.agent.prompt_text(request.messages, self.prefill)
        return self.agent.tokenizer(text, add_special_tokens=False)["input_ids"]

    def check_prompt_length(self, request: ChatRequest) -> None:
        """Refuse, before tokenizing, a prompt whose characters alone need more tokens than the
        context holds (:func:`chars_per_token_bound`; the template and prefix only add tokens)."""
        per_token = self.chars_per_token
        if not per_token:
            return
        chars = sum(len(m["content"]) for m in request.messages)
        least = -(-chars // per_token)
        if least >= self.max_context:
            raise RequestError(400, f"the prompt is {chars} characters, so at least {least} tokens (a token of this "
                                    f"model covers at most {per_token} characters); this model's context is "
                                    f"{self.max_context} tokens (prompt + reply)", param="messages")

    def start(self, request: ChatRequest) -> Job:
        """Check the request against the context and the caps, then queue its ``n`` rows."""
        self.check_prompt_length(request)
        ids = self.prompt_ids(request)
        room = self.max_context - len(ids)
        if room < 1:
            raise RequestError(400, f"the prompt is {len(ids)} tokens; this model's context is {self.max_context} "
                                    "tokens (prompt + reply)", param="messages", kind="invalid_request_error")
        if request.max_tokens is not None:
            if request.max_tokens > self.max_tokens_limit:
                raise RequestError(400, f"max_tokens {_shown(request.max_tokens)} is over this server's limit of "
                                        f"{self.max_tokens_limit} (--max-tokens-limit)", param="max_tokens")
            if request.max_tokens > room:
                raise RequestError(400, f"max_tokens {request.max_tokens} does not fit: the prompt is {len(ids)} "
                                        f"tokens and the context {self.max_context}", param="max_tokens")
            max_new = request.max_tokens
        else:
            max_new = min(self.default_max_tokens, self.max_tokens_limit, room)
        job = Job(len(ids), stream=request.stream)
        temperature = self.default_temperature if request.temperature is None else request.temperature
        self.engine.submit(job, ids, request.n, temperature, request.top_p, max_new, request.stop,
                           request.seed, self.prefill)
        return job

    def complete(self, request: ChatRequest) -> tuple[int, list[Completion]]:
        job = self.start(request)
        done: dict[int, Completion] = {}
        deadline = time.monotonic() + self.timeout_s
        try:
            while len(done) < request.n:
                kind, index, payload = job.events.get(timeout=max(0.0, deadline - time.monotonic()))
                if kind == "error":
                    raise RuntimeError(payload)
                if kind == "done":
                    done[index] = payload
        except queue.Empty:
            raise RequestError(504, f"generation took longer than {self.timeout_s} s", "server_error") from None
        finally:
            job.cancel()
        return job.prompt_tokens, [done[i] for i in range(request.n)]


# ---------------------------------------------------------------------- HTTP
def _bearer_ok(given: str, key: str) -> bool:
    return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), key.encode())


class ChatHandler(BoundedHandler):
    """The HTTP side: routes, auth, limits, JSON and server-sent events. ``self.server``
    carries ``backend`` (a :class:`ChatBackend`), ``api_key`` (or None) and ``max_body``."""

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

    def send_error_json(self, status: int, message: str, kind: str = "invalid_request_error",
                        param: str | None = None) -> None:
        self.send_json(status, {"error": {"message": message, "type": kind, "param": param, "code": None}})

    def _refuse(self, exc: RequestError) -> None:
        self.send_error_json(exc.status, exc.message, exc.kind, exc.param)

    def read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise RequestError(411, "send the body with a Content-Length (no chunked transfer encoding)")
        if length is None or not (length.isascii() and length.isdigit()):
            self.close_connection = True
            raise RequestError(411, "a Content-Length header is required")
        limit = getattr(self.server, "max_body", MAX_BODY)
        if len(length) > 18 or int(length) > limit:
            self.close_connection = True  # the body stays unread: do not reuse the connection
            raise RequestError(413, f"the request body is larger than {limit} bytes")
        try:
            data = self.rfile.read(int(length))
        except TimeoutError:
            self.close_connection = True
            raise RequestError(408, "timed out reading the request body") from None
        if len(data) < int(length):
            self.close_connection = True
            raise RequestError(400, f"the body ended after {len(data)} of {length} bytes")
        return data

    def authorized(self) -> bool:
        """True if no key is required or the request carries it; else answers 401."""
        key = getattr(self.server, "api_key", None)
        if not key:
            return True
        ok = _bearer_ok(self.headers.get("Authorization", ""), key)
        if not ok:
            self.close_connection = True  # any body stays unread
            self.send_error_json(401, "invalid or missing API key (Authorization: Bearer ...)", "authentication_error")
        return ok

    def client_gone(self) -> bool:
        """True once the client has closed its side (a pipelined next request is not that).
        ``poll``, not ``select``: with 1,000+ connections open the socket's number is past
        ``select``'s limit of 1,024, and every request would look abandoned."""
        try:
            if hasattr(select, "poll"):
                poller = select.poll()
                poller.register(self.connection, select.POLLIN)
                readable = bool(poller.poll(0))
            else:  # pragma: no cover - Windows
                readable = bool(select.select([self.connection], [], [], 0)[0])
            return readable and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

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
        path = self.path.split("?", 1)[0].rstrip("/")
        if path != "/v1/chat/completions":
            self.close_connection = True  # the body stays unread
            self.send_error_json(404, f"no route POST {path} (this server offers /v1/chat/completions)", "not_found_error")
            return
        if not self.authorized():
            return
        try:
            body = parse_json_body(self.read_body())
        except RequestError as exc:
            self._refuse(exc)
            return
        self.handle_chat(body)

    def handle_chat(self, body: Any) -> None:
        """Answer one chat completion request (authorised, its JSON body parsed)."""
        backend = self.server.backend
        try:
            request = parse_chat_request(body)
            names = (backend.model_name, *getattr(backend, "aliases", ()))
            if request.model and request.model not in names:
                raise RequestError(404, f"model {_shown(request.model)} not found; this server serves {backend.model_name!r}",
                                   "not_found_error", "model")
            if hasattr(backend, "start"):
                job = backend.start(request)
            else:  # a plain backend: no streaming of tokens, no cancellation
                prompt_tokens, completions = backend.complete(request)
                job = Job(prompt_tokens)
                for i, c in enumerate(completions):
                    job.events.put(("delta", i, c.text))
                    job.events.put(("done", i, c))
        except RequestError as exc:
            self._refuse(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a model failure is the server's error, not the client's
            self.send_error_json(500, f"generation failed: {type(exc).__name__}: {exc}", "server_error")
            return
        try:
            if request.stream:
                self._stream(request, job)
            else:
                self._respond(request, job)
        except CLIENT_GONE:
            job.cancel()
            raise
        finally:
            job.cancel()  # nothing left to compute for this request

    def _events(self, request: ChatRequest, job: Job):
        """Yield the job's events until every choice is done; cancel if the client leaves."""
        done, checked = 0, time.monotonic()
        while done < request.n:
            try:
                event = job.events.get(timeout=DISCONNECT_CHECK_S)
            except queue.Empty:
                event = None
            if time.monotonic() - checked >= DISCONNECT_CHECK_S:  # deltas may come every step: check on a clock
                checked = time.monotonic()
                if self.client_gone():
                    job.cancel()
                    self.close_connection = True
                    return
            if event is None:
                continue
            if event[0] == "done":
                done += 1
            yield event
            if event[0] == "error":
                return

    def _respond(self, request: ChatRequest, job: Job) -> None:
        completions: dict[int, Completion] = {}
        for kind, index, payload in self._events(request, job):
            if kind == "error":
                self.send_error_json(500, payload, "server_error")
                return
            if kind == "done":
                completions[index] = payload
        if len(completions) < request.n:
            return  # the client left
        choices = [completions[i] for i in range(request.n)]
        completion_tokens = sum(c.completion_tokens for c in choices)
        self.send_json(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.server.backend.model_name,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": c.text}, "logprobs": None,
                 "finish_reason": c.finish_reason}
                for i, c in enumerate(choices)
            ],
            "usage": {"prompt_tokens": job.prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": job.prompt_tokens + completion_tokens},
        })

    def _chunk(self, payload: Any) -> None:
        data = f"data: {json.dumps(payload)}\n\n".encode("utf-8") if payload is not None else b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, request: ChatRequest, job: Job) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": self.server.backend.model_name}

        def chunk(index: int, delta: dict, finish: str | None = None) -> dict:
            return {**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        for i in range(request.n):
            self._chunk(chunk(i, {"role": "assistant", "content": ""}))
        completion_tokens = finished = 0
        for kind, index, payload in self._events(request, job):
            if kind == "error":
                self._chunk({"error": {"message": payload, "type": "server_error", "param": None, "code": None}})
                break
            if kind == "delta":
                if payload:
                    self._chunk(chunk(index, {"content": payload}))
            else:
                completion_tokens += payload.completion_tokens
                finished += 1
                self._chunk(chunk(index, {}, payload.finish_reason))
        else:
            if finished < request.n:
                return  # the client left
            if request.include_usage:
                self._chunk({**base, "choices": [], "usage": {
                    "prompt_tokens": job.prompt_tokens, "completion_tokens": completion_tokens,
                    "total_tokens": job.prompt_tokens + completion_tokens}})
        self._chunk(None)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def make_server(backend: ChatBackend, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                handler: type[ChatHandler] = ChatHandler, verbose: bool = False, *, workers: int = 32,
                queue_size: int = 1024, backlog: int = 1024, idle_timeout: float = 30.0,
                keep_alive_timeout: float = 5.0, max_body: int = MAX_BODY) -> PooledHTTPServer:
    """A bound (not yet serving) HTTP server; ``port=0`` picks a free port (``server.server_port``)."""
    server = PooledHTTPServer((host, port), handler, workers=workers, queue_size=queue_size, backlog=backlog,
                              idle_timeout=idle_timeout, keep_alive_timeout=keep_alive_timeout, max_body=max_body)
    if api_key:  # a request without the key is answered 401 before its body is read
        server.early_dispatch = lambda method, path, headers: not _bearer_ok(headers.get("authorization", ""), api_key)
    server.backend = backend
    server.api_key = api_key
    server.verbose = verbose
    server.max_body = max_body
    return server


def serve_in_thread(server: PooledHTTPServer) -> threading.Thread:
    """Run ``server.serve_forever`` on a daemon thread (tests, notebooks)."""
    thread = threading.Thread(target=server.serve_forever, name="ragen-serve", daemon=True)
    thread.start()
    return thread
