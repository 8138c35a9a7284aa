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

Generation runs on one thread (:class:`TokenEngine`) with continuous batching: a request
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

import collections
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
from typing import Any, Callable, Hashable, Protocol

from ._http import CLIENT_GONE, BoundedHandler, PooledHTTPServer

__all__ = ["ChatRequest", "Completion", "ChatBackend", "HFBackend", "Job", "RequestError", "ChatHandler",
           "TokenEngine", "chars_per_token_bound", "fair_evictions", "fair_pick", "fair_share", "join_now",
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


@dataclass
class Completion:
    text: str
    finish_reason: str
    completion_tokens: int


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


# ---------------------------------------------------------------------- generation engine
class _Row:
    """One reply being generated: its settings, tokens, text so far, and where events go."""

    def __init__(self, index: int, prompt_ids: list[int], job: "Job", temperature: float, top_p: float,
                 max_new: int, stop: tuple[str, ...], generator: Any, prefix: str) -> None:
        self.index, self.prompt_ids, self.job = index, prompt_ids, job
        self.temperature, self.top_p, self.max_new, self.stop = temperature, top_p, max_new, stop
        self.generator = generator
        self.prefix = prefix
        self.ids: list[int] = []
        self.count = 0  # completion tokens (EOS counts, as in HFAgent)
        self.text = ""  # incrementally decoded text
        self._prefix_off = self._read_off = 0
        self.sent = 0  # characters of ``text`` already emitted
        self.hold = max((len(s) for s in stop), default=1) - 1  # a stop string may be forming
        self.finish: str | None = None
        self.queued_at = 0  # the engine's step count when it started waiting for a place
        self.admitted_at = 0  # the engine's step count when it last joined the batch
        self.preempted = 0  # times it left the batch for a fairer share (it rejoins with its tokens)


class Job:
    """The handle of one request inside :class:`TokenEngine`: ``events`` receives
    ``("delta", index, text)``, ``("done", index, Completion)`` and ``("error", None, message)``;
    :meth:`cancel` makes its rows leave the batch at the next step."""

    def __init__(self, prompt_tokens: int, stream: bool = True) -> None:
        self.prompt_tokens = prompt_tokens
        self.stream = stream  # False: no delta events before each choice's last one
        self.events: queue.Queue = queue.Queue()
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()


def join_now(running: int, room: int, waiting: int, waited: int, next_cap: int, join_batch: int,
             join_wait_steps: int) -> bool:
    """Whether the engine admits its waiting rows at this step (one prefill pass for
    ``min(room, waiting)`` of them). ``running`` rows decode with ``room`` places free,
    ``waiting`` rows wait, the first for ``waited`` steps since a place was free for it (steps
    in a full batch do not count: no gathering delayed it then); ``next_cap`` is the fewest
    tokens any running row may still draw before its reply cap (it leaves then at the latest).

    Admit when the batch is empty; or the first waiter has waited ``join_wait_steps`` (the
    latency bound); or all waiters fit; or at least ``join_batch`` fit and no running row hits
    its cap before the first waiter's bound (``next_cap > join_wait_steps - waited``). Else
    wait: the places that open then take more of the waiters in the same prefill.
    E.g. 12 of 16 rows at token 10 of 16, 4 places free, 48 waiting, waited 0: wait (6 <= 8);
    at 16 places free the 16 are admitted in one prefill instead of 4 + 12 in two."""
    if running == 0:
        return True
    if room <= 0:
        return False
    if waited >= join_wait_steps or room >= waiting:
        return True
    return room >= join_batch and next_cap > join_wait_steps - waited


def fair_share(batch_size: int, requests: int) -> int:
    """The places one request may hold while others want some: an equal split of the batch
    among the requests present (running or waiting), at least one."""
    return max(1, batch_size // max(1, requests))


def fair_evictions(running: list[Hashable], progress: list[int], ran: list[int], waiting: list[Hashable],
                   batch_size: int, slice_steps: int) -> list[int]:
    """Which running rows leave the batch (to rejoin later, their tokens kept) so that waiting
    requests get their fair places now. ``running[i]`` is the request of batch row ``i``,
    ``progress[i]`` its tokens so far (the cost of bringing it back), ``ran[i]`` the steps since it
    last joined; ``waiting`` the request of each waiting row. Returns batch indices.

    Each request present is owed up to :func:`fair_share` places. When the places free do not
    cover what waiting requests are owed, rows of requests above their share leave: from the
    request holding the most (on ties the one listed last in ``running``, then ``waiting``), its
    rows with the fewest tokens first. With more requests than places (a share of 1), a request
    with no place still gets one within ``slice_steps`` steps: rows that have run that long leave,
    longest first (0: never). E.g. batch 16, one request holding all 16, a request of n=1
    arrives: share 8, one row leaves."""
    order = list(dict.fromkeys([*running, *waiting]))  # requests in order of arrival
    share = fair_share(batch_size, len(order))
    held = {q: 0 for q in order}
    for q in running:
        held[q] += 1
    wants = {q: 0 for q in order}
    for q in waiting:
        wants[q] += 1
    need = sum(min(wants[q], max(0, share - held[q])) for q in order) - (batch_size - len(running))
    out: list[int] = []
    while need > 0:
        donors = [q for q in order if held[q] > share]
        if not donors:
            break
        rank = {q: i for i, q in enumerate(order)}
        q = max(donors, key=lambda d: (held[d], rank[d]))
        i = min((i for i, r in enumerate(running) if r == q and i not in out), key=lambda i: (progress[i], -i))
        out.append(i)
        held[q] -= 1
        need -= 1
    starved = sum(1 for q in order if wants[q] and held[q] == 0)
    if need > 0 and starved and slice_steps > 0:
        long_run = sorted((i for i in range(len(running)) if i not in out and ran[i] >= slice_steps),
                          key=lambda i: (-ran[i], i))
        out += long_run[:min(need, starved)]
    return out


def fair_pick(waiting: list[Hashable], held: dict[Hashable, int], k: int) -> list[int]:
    """Indices of the ``k`` waiting rows to admit (of ``waiting``'s requests, in arrival order):
    round robin between requests, the request holding the fewest places first, a request's own
    rows first come first served. ``held``: places each request holds now.
    E.g. waiting [A, A, A, B], held {A: 4}, k 2 -> [3, 0] (B holds none)."""
    held = dict(held)
    queues: dict[Hashable, list[int]] = {}
    for i, q in enumerate(waiting):
        queues.setdefault(q, []).append(i)
    rank = {q: n for n, q in enumerate(queues)}
    picked: list[int] = []
    while len(picked) < k and queues:
        q = min(queues, key=lambda q: (held.get(q, 0), rank[q]))
        picked.append(queues[q].pop(0))
        held[q] = held.get(q, 0) + 1
        if not queues[q]:
            del queues[q]
    return picked


class TokenEngine:
    """One thread that generates for every request, with continuous batching: rows decode
    together in a :class:`ragen_envs.lm.engine.RunningBatch` (one KV cache), and a request that
    arrives while others decode is prefilled and joins them at the next step, up to
    ``batch_size`` rows. When the batch is empty the first arrival waits ``batch_wait_s`` for
    company. Each step draws one token per row with :func:`ragen_envs.lm.engine.draw_rows`, the
    trainer's sampling code: each row with its own temperature / top-p (below
    :data:`~ragen_envs.lm.engine.MIN_TEMPERATURE`: greedy), from the engine's generator (seeded
    with ``seed``) or, for a request with a ``seed``, from its own, so a seeded request gets the
    same tokens alone or in a busy batch. A row leaves at once on EOS, a stop string, its reply
    cap or cancellation (its cache rows are dropped). A row whose logits come out NaN or +inf
    fails its own request (an error event), while the other rows draw as if it were not there.

    Places are shared fairly between requests, so one request (``n=16, max_tokens=4000``) cannot
    hold the batch while another waits: waiting rows are admitted round robin between requests,
    the one holding the fewest places first (:func:`fair_pick`), and when a request that holds
    less than its share (:func:`fair_share`) waits while the batch is full, rows of requests above
    their share leave at once to make room, or, with more requests than places, rows that ran
    ``slice_steps`` steps (:func:`fair_evictions`). A row that leaves keeps its tokens and its
    generator and rejoins later by prefilling its prompt and those tokens: its reply is the one it
    would have got uninterrupted (up to float rounding, as for any batch composition).

    Joining costs a prefill forward pass, as much as a decoding step for a small model, so
    joiners are gathered (:func:`join_now`): waiting rows are admitted when they all fit, or
    when at least ``join_batch`` of them fit (default a quarter of ``batch_size``) and no row
    reaches its reply cap within the steps the first of them may still wait, or once it has
    waited ``join_wait_steps`` steps (default 8). A lone request beside a few long ones joins at
    the next step; under a full load a prefill serves several rows, and rows that started
    together are refilled together."""

    def __init__(self, model, tokenizer, device, *, batch_size: int = 16, batch_wait_s: float = 0.01,
                 seed: int = 0, stop_ids: tuple[int, ...] = (), join_batch: int | None = None,
                 join_wait_steps: int = 8, slice_steps: int = 256) -> None:
        import torch

        self.model, self.tokenizer, self.device = model, tokenizer, torch.device(device)
        self.batch_size, self.batch_wait_s = batch_size, batch_wait_s
        self.join_batch = max(1, batch_size // 4) if join_batch is None else max(1, int(join_batch))
        self.join_wait_steps = int(join_wait_steps)
        self.slice_steps = int(slice_steps)
        gen = model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else list(eos or [])) | frozenset(stop_ids)
        pad = gen.pad_token_id if gen.pad_token_id is not None else tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else next(iter(self.eos_ids), 0))
        self._seed = int(seed)
        self._generator = torch.Generator()  # tokens are drawn on the CPU, as in the trainer's sampler
        self._generator.manual_seed(self._seed)
        # forwards: every forward pass; prefills: those over new rows; joined_rows: rows that joined
        # a decoding batch; preempted_rows: rows that left for a fairer share (and rejoined later);
        # failed_rows: rows whose logits were not usable
        self.stats = {"forwards": 0, "prefills": 0, "rows": 0, "joined_rows": 0, "cancelled_rows": 0, "steps": 0,
                      "max_rows": 0, "preempted_rows": 0, "failed_rows": 0}
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="ragen-serve-engine", daemon=True)
        self._thread.start()

    def context_length(self) -> int | None:
        config = getattr(self.model, "config", None)
        value = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        return int(value) if isinstance(value, int) and value > 0 else None

    def submit(self, job: Job, prompt_ids: list[int], n: int, temperature: float, top_p: float, max_new: int,
               stop: tuple[str, ...], seed: int | None, prefix: str = "") -> None:
        import torch

        for i in range(n):
            gen = self._generator
            if seed is not None:
                gen = torch.Generator()
                gen.manual_seed((seed + i) % 2**64)
            self._queue.put(_Row(i, list(prompt_ids), job, temperature, top_p, max_new, stop, gen, prefix))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    # ------------------------------------------------------------------ the loop
    def _gather(self, waiting: collections.deque, deadline: float | None, limit: int | None) -> bool:
        """Move queued rows to ``waiting`` (stamped with the step they arrived at): until
        ``deadline`` or ``limit`` rows are waiting, or (``deadline`` None) only those already
        queued. False when the shutdown sentinel came."""
        while limit is None or len(waiting) < limit:
            try:
                row = (self._queue.get_nowait() if deadline is None
                       else self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                return True
            if row is None:
                return False
            row.queued_at = self.stats["steps"]
            waiting.append(row)
        return True

    def _loop(self) -> None:
        from .lm.engine import RunningBatch

        batch = RunningBatch(self.model, self.pad_id, self.device)
        waiting: collections.deque[_Row] = collections.deque()
        room_since: int | None = None  # the step since which places are free while rows wait
        while True:
            if not batch.rows and not waiting:  # idle: block, then gather who arrives together
                row = self._queue.get()
                if row is None:
                    return
                row.queued_at = self.stats["steps"]
                waiting.append(row)
                if not self._gather(waiting, time.monotonic() + self.batch_wait_s, self.batch_size):
                    return self._shut(batch, waiting)
            elif not self._gather(waiting, None, None):  # decoding: whoever arrived joins at this step
                return self._shut(batch, waiting)
            for _ in range(len(waiting)):  # a request whose client left before it started
                row = waiting.popleft()
                if row.job.cancelled.is_set():
                    self.stats["cancelled_rows"] += 1
                else:
                    waiting.append(row)
            forced = bool(waiting) and bool(batch.rows) and batch.can_join and self._preempt(batch, waiting)
            room = self.batch_size - len(batch.rows)
            if not waiting or room <= 0:
                room_since = None
            elif room_since is None:
                room_since = self.stats["steps"]  # a place opened while rows wait: the bound starts
            if waiting and room > 0 and (batch.can_join or not batch.rows) and (forced or join_now(
                    len(batch.rows), room, len(waiting), self.stats["steps"] - max(waiting[0].queued_at, room_since),
                    min((r.max_new - r.count for r in batch.rows), default=0), self.join_batch,
                    self.join_wait_steps)):
                room_since = None
                new = self._take(batch, waiting, room)
                joined = bool(batch.rows)
                try:
                    batch.admit([r.prompt_ids + r.ids for r in new], new)
                except Exception as exc:  # noqa: BLE001 - reported to these requests, the batch goes on
                    self._fail(new, exc)
                    continue
                for r in new:
                    r.admitted_at = self.stats["steps"]
                self.stats["prefills"] += 1
                self.stats["forwards"] += 1
                self.stats["rows"] += sum(1 for r in new if not r.preempted)
                self.stats["joined_rows"] += len(new) if joined else 0
                self.stats["max_rows"] = max(self.stats["max_rows"], len(batch.rows))
            if not batch.rows:
                continue
            try:
                self._step(batch)
            except Exception as exc:  # noqa: BLE001 - reported to the waiting requests, the engine goes on
                self._fail(batch.rows, exc)
                batch.keep([])

    def _preempt(self, batch, waiting: collections.deque) -> bool:
        """Let the rows :func:`fair_evictions` names leave the batch for the back of ``waiting``
        (their tokens, text and generator kept: they rejoin by prefilling prompt + tokens).
        True when some left, so the places go to the waiting requests at this step."""
        steps = self.stats["steps"]
        rows = batch.rows
        out = fair_evictions([id(r.job) for r in rows], [len(r.ids) for r in rows],
                             [steps - r.admitted_at for r in rows], [id(r.job) for r in waiting],
                             self.batch_size, self.slice_steps)
        if not out:
            return False
        leaving = set(out)
        batch.keep([j for j in range(len(rows)) if j not in leaving])
        for j in sorted(leaving):
            rows[j].queued_at = steps
            rows[j].preempted += 1
            waiting.append(rows[j])
        self.stats["preempted_rows"] += len(out)
        return True

    def _take(self, batch, waiting: collections.deque, room: int) -> list[_Row]:
        """Remove and return the waiting rows to admit into ``room`` places (:func:`fair_pick`)."""
        held: dict[int, int] = {}
        for r in batch.rows:
            held[id(r.job)] = held.get(id(r.job), 0) + 1
        queued = list(waiting)
        picked = fair_pick([id(r.job) for r in queued], held, min(room, len(queued)))
        chosen = set(picked)
        waiting.clear()
        waiting.extend(r for i, r in enumerate(queued) if i not in chosen)
        return [queued[i] for i in picked]

    def _fail(self, rows: list[_Row], exc: Exception) -> None:
        for r in rows:
            if r.finish is None:
                r.finish = "error"
                r.job.events.put(("error", None, f"generation failed: {type(exc).__name__}: {exc}"))

    def _fail_request(self, row: _Row, message: str) -> None:
        """End ``row``'s request with an error (its other rows leave at the next step as if
        cancelled); the other requests in the batch go on."""
        self.stats["failed_rows"] += 1
        row.finish = "error"
        if not row.job.cancelled.is_set():
            row.job.events.put(("error", None, message))
        row.job.cancel()

    def _shut(self, batch, waiting) -> None:
        for r in [*batch.rows, *waiting]:
            if r.finish is None:
                r.finish = "error"
                r.job.events.put(("error", None, "the server is shutting down"))
        batch.keep([])

    def _step(self, batch) -> None:
        """Draw one token for every row, let finished and cancelled rows leave, feed the rest."""
        from .lm.engine import BAD_ROW, draw_rows

        gone = [j for j, r in enumerate(batch.rows) if r.job.cancelled.is_set()]
        if gone:
            for j in gone:
                batch.rows[j].finish = "cancelled"
            self.stats["cancelled_rows"] += len(gone)
            batch.keep([j for j, r in enumerate(batch.rows) if r.finish is None])
            if not batch.rows:
                return
        self.stats["steps"] += 1
        rows = batch.rows
        tokens = draw_rows(batch.logits, [r.temperature for r in rows], [r.top_p for r in rows],
                           [r.generator for r in rows])
        for r, tok in zip(rows, tokens):
            if tok == BAD_ROW:
                self._fail_request(r, "generation failed: the model's logits were not finite (NaN or +inf)")
            elif not r.job.cancelled.is_set():  # (a sibling of a row that failed leaves at the next step)
                self._accept(r, tok)
        keep = [j for j, r in enumerate(rows) if r.finish is None]
        batch.keep(keep)
        if keep:
            batch.step([tokens[j] for j in keep])
            self.stats["forwards"] += 1

    def _accept(self, row: _Row, tok: int) -> None:
        """Add one drawn token to ``row``: extend its text, emit what is safe to show, and
        decide whether it is finished."""
        row.count += 1
        if tok in self.eos_ids:
            return self._finish(row, "stop")
        if tok == self.pad_id:
            row.count -= 1  # as HFAgent: a pad (not EOS) ends the reply uncounted
            return self._finish(row, "stop")
        row.ids.append(tok)
        if not row.job.stream and not row.stop:  # nobody reads the text before the end: decode once then
            if row.count >= row.max_new:
                self._finish(row, "length")
            return None
        # incremental detokenisation: decode a short window, keep incomplete UTF-8 for the next step
        prefix_text = self.tokenizer.decode(row.ids[row._prefix_off:row._read_off], skip_special_tokens=True)
        new_text = self.tokenizer.decode(row.ids[row._prefix_off:], skip_special_tokens=True)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            start = len(row.text)
            row.text += new_text[len(prefix_text):]
            row._prefix_off, row._read_off = row._read_off, len(row.ids)
            if row.stop:
                window = row.text[max(0, start - row.hold):]
                if any(s in window for s in row.stop):
                    return self._finish(row, "stop")
        if row.count >= row.max_new:
            return self._finish(row, "length")
        safe = len(row.text) - row.hold
        if safe > row.sent and row.job.stream:
            row.job.events.put(("delta", row.index, (row.prefix if row.sent == 0 else "") + row.text[row.sent:safe]))
            row.sent = safe
        return None

    def _finish(self, row: _Row, reason: str) -> None:
        text = self.tokenizer.decode(row.ids, skip_special_tokens=True)
        cut = min((text.find(s) for s in row.stop if s in text), default=-1)
        if cut >= 0:
            text, reason = text[:cut], "stop"
        row.finish = reason
        shown = row.text[:row.sent]
        rest = text[len(shown):] if text.startswith(shown) else ""
        if row.job.stream and (rest or row.sent == 0):
            row.job.events.put(("delta", row.index, (row.prefix if row.sent == 0 else "") + rest))
        row.job.events.put(("done", row.index, Completion(row.prefix + text, reason, row.count)))


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
