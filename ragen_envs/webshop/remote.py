"""The ``remote`` backend: a client for AgentGym-style WebShop HTTP servers (stdlib urllib).

Works with ``ragen webshop-server`` and with AgentGym's ``agentenv-webshop`` server. One
client = one server-side env (``POST /create`` at the first reset). Calls time out after
``timeout`` seconds. Retries are bounded (``retries``, exponential back-off from
``backoff`` seconds) and only where a repeat cannot apply an action twice: any request
answered 503, any request whose connection was refused, and GETs that timed out or whose
connection dropped. A failed ``/step`` is reported, never silently replayed.

The page type is the server's when it says (ours does), else inferred from the text; the
reward breakdown is None from servers that send ``info: null`` (AgentGym). The goal count
comes from ``GET /goals`` (ours) or must be given (``num_goals=``).

What the server answers is validated, never trusted: a body over ``max_response_bytes``
(1 MiB), a page text over ``max_page_chars`` (65,536: the observation space's length), a
NaN/Infinity anywhere, a reward that is not a finite number (``true`` included), a
``done`` that is not a boolean, or clickables that are not a list of strings raise
:class:`RemoteWebShopError` (that episode's server error). Surrogate code points in the
server's text become U+FFFD (``protocol.jsonsafe``).

A server that cannot be reached (or answers nonsense) while the env is being built — the
first ``GET /goals``, from ``gym.make`` — raises :class:`RemoteWebShopSetupError`, which is
also a ValueError, as for any other constructor argument that does not work: a bad
``base_url`` is then one line from every ``ragen`` command, like a bad ``--env-kwarg``.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..protocol.jsonsafe import UntrustedJSONError, json_safe, loads_untrusted, safe_text
from .base import StepResult, WebShopBackend
from .goals import split_ranges
from .pages import PageView, infer_page_type

__all__ = ["RemoteBackend", "RemoteWebShopError", "RemoteWebShopSetupError"]


MAX_RESPONSE_BYTES = 1 << 20
MAX_PAGE_CHARS = 1 << 16


class RemoteWebShopError(RuntimeError):
    """The server could not be reached, refused a request, or answered something invalid
    (the message says which)."""


class RemoteWebShopSetupError(RemoteWebShopError, ValueError):
    """:class:`RemoteWebShopError` while the env is built (``base_url`` does not lead to a
    working WebShop server): a ValueError too, as a bad constructor argument is."""


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_finite(value: Any, where: str) -> None:
    """Raise RemoteWebShopError for a non-finite float anywhere in ``value`` (``1e999``
    parses to inf)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise RemoteWebShopError(f"{where} answered a non-finite number ({item})")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class RemoteBackend(WebShopBackend):
    """Client of a WebShop server at ``base_url`` (e.g. ``http://127.0.0.1:36001``)."""

    name = "remote"

    def __init__(
        self,
        base_url: str,
        num_goals: int | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.1,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_page_chars: int = MAX_PAGE_CHARS,
    ) -> None:
        if not isinstance(base_url, str) or urllib.parse.urlsplit(base_url).scheme not in ("http", "https") \
                or not urllib.parse.urlsplit(base_url).netloc:
            raise ValueError(f"base_url must be an http(s) URL such as 'http://127.0.0.1:36001', got {base_url!r}")
        try:
            urllib.parse.urlsplit(base_url).port  # noqa: B018 - raises for a port that is not a number in 0..65535
        except ValueError as exc:
            raise ValueError(f"base_url {base_url!r}: {exc}") from None
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        if num_goals is not None and (not isinstance(num_goals, int) or num_goals < 3):
            raise ValueError(f"num_goals must be an integer >= 3, got {num_goals!r}")
        for name, value in (("max_response_bytes", max_response_bytes), ("max_page_chars", max_page_chars)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.max_response_bytes = max_response_bytes
        self.max_page_chars = max_page_chars
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.attempts = 0  # HTTP attempts made (for tests and diagnostics)
        self._num_goals = num_goals
        self._server_info: dict[str, Any] | None = None
        self._env_idx: int | None = None
        self._page: PageView | None = None
        self._instruction = ""

    # ------------------------------------------------------------------ HTTP
    def _request(
        self, method: str, path: str, payload: Any = None, query: dict[str, Any] | None = None, retries: int | None = None
    ) -> Any:
        retries = self.retries if retries is None else retries
        url = self.base_url + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json"} if data is not None else {}
        last = ""
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            self.attempts += 1
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    body = response.read(self.max_response_bytes + 1)
                if len(body) > self.max_response_bytes:
                    raise RemoteWebShopError(
                        f"{method} {url} answered more than {self.max_response_bytes} bytes: not a WebShop page"
                    )
                answer = loads_untrusted(body, allow_nan=False) if body else None  # NaN, 1e999: refused
                _check_finite(answer, f"{method} {url}")
                return answer
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if exc.code == 503:
                    last = f"HTTP 503 {detail}"
                    continue
                raise RemoteWebShopError(f"{method} {url} failed: HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException) as exc:
                # HTTPException: a reply cut short or not HTTP at all (IncompleteRead, BadStatusLine)
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}"
                refused = isinstance(reason, ConnectionRefusedError)
                if refused or method == "GET":
                    continue
                raise RemoteWebShopError(f"{method} {url} failed ({last}); not retried, it may have run") from None
            except UntrustedJSONError as exc:
                raise RemoteWebShopError(f"{method} {url} answered invalid JSON: {exc}") from None
        raise RemoteWebShopError(
            f"cannot reach the WebShop server at {self.base_url} ({method} {path}): {last} "
            f"after {retries + 1} attempt(s)"
        )

    # ------------------------------------------------------------------ backend interface
    def _info(self) -> dict[str, Any] | None:
        """The server's ``GET /goals`` answer (None when it has none: AgentGym); asked once,
        when the env is built, so a failure is a :class:`RemoteWebShopSetupError`."""
        if self._server_info is None:
            try:
                info = self._request("GET", "/goals")
            except RemoteWebShopError as exc:
                if "HTTP 404" not in str(exc):
                    raise RemoteWebShopSetupError(str(exc)) from None
                info = {}
            if not isinstance(info, dict):
                raise RemoteWebShopSetupError(f"GET {self.base_url}/goals answered {_preview(info)}, expected an object")
            self._server_info = info
        return self._server_info or None

    def num_goals(self) -> int:
        if self._num_goals is None:
            info = self._info()
            n = info.get("num_goals") if info else None
            if type(n) is not int or not 3 <= n < 2**32:
                raise ValueError(
                    f"the WebShop server at {self.base_url} does not report its goal count (no GET /goals): "
                    "pass num_goals=... (e.g. gym.make('ragen/WebShop-v0', backend='remote', base_url=..., num_goals=6910))"
                )
            self._num_goals = int(info["num_goals"])
        return self._num_goals

    def split_ranges(self) -> dict[str, tuple[int, int]]:
        info = self._info() if self._num_goals is None else None
        if info and isinstance(info.get("splits"), dict):
            splits = info["splits"]
            if not all(isinstance(v, list) and len(v) == 2 and all(type(x) is int and x >= 0 for x in v)
                       for v in splits.values()):
                raise RemoteWebShopSetupError(f"GET {self.base_url}/goals answered splits {_preview(splits)}, "
                                              "expected {name: [start, stop], ...} of integers")
            return {safe_text(k): (v[0], v[1]) for k, v in splits.items()}
        return split_ranges(self.num_goals())

    def _ensure_env(self) -> int:
        if self._env_idx is None:
            idx = self._request("POST", "/create")
            if not isinstance(idx, int):
                raise RemoteWebShopError(f"POST {self.base_url}/create answered {idx!r}, expected an integer env id")
            self._env_idx = idx
        return self._env_idx

    def _fetch_page(self, text: str, page_type: str | None) -> PageView:
        avail = self._request("GET", "/available_actions", query={"env_idx": self._env_idx})
        clickables = avail.get("clickables") if isinstance(avail, dict) else None
        if not isinstance(clickables, list) or not all(isinstance(c, str) for c in clickables):
            raise RemoteWebShopError(f"GET /available_actions answered {_preview(avail)}, expected "
                                     "{has_search_bar, clickables: [str, ...]}")
        text = self._page_text(text, "the page")
        self._page = PageView(
            text=text,
            page_type=safe_text(page_type) if isinstance(page_type, str) and page_type else infer_page_type(text),
            has_search_bar=bool(avail.get("has_search_bar")),
            clickables=tuple(safe_text(c) for c in clickables),
            instruction=self._instruction,
        )
        return self._page

    def _page_text(self, text: Any, what: str) -> str:
        if not isinstance(text, str):
            raise RemoteWebShopError(f"the WebShop server sent {what} as {type(text).__name__}, expected text")
        if len(text) > self.max_page_chars:
            raise RemoteWebShopError(
                f"the WebShop server sent {what} of {len(text)} characters (more than {self.max_page_chars})"
            )
        return safe_text(text)

    def reset(self, goal_index: int) -> PageView:
        idx = self._ensure_env()
        answer = self._request("POST", "/reset", {"env_idx": idx, "session_id": int(goal_index)})
        text = answer[0] if isinstance(answer, list) and answer else answer
        if not isinstance(text, str):
            raise RemoteWebShopError(f"POST /reset answered {_preview(answer)}, expected [observation, info]")
        instruction = self._request("GET", "/instruction_text", query={"env_idx": idx})
        instruction = self._page_text(instruction, "the instruction") if isinstance(instruction, str) else ""
        self._instruction = instruction.removeprefix("Instruction: ")
        return self._fetch_page(text, None)

    def act(self, action: str) -> StepResult:
        if self._env_idx is None or self._page is None:
            raise RuntimeError("the remote WebShop session has not started: call reset(goal_index) first")
        answer = self._request("POST", "/step", {"env_idx": self._env_idx, "action": action})
        if not isinstance(answer, dict) or "state" not in answer:
            raise RemoteWebShopError(f"POST /step answered {_preview(answer)}, expected {{state, reward, done, info}}")
        reward, done = answer.get("reward", 0), answer.get("done", False)
        if not _is_finite_number(reward):
            raise RemoteWebShopError(f"POST /step answered reward {_preview(reward)}, expected a finite number")
        if not isinstance(done, bool) and done not in (0, 1):
            raise RemoteWebShopError(f"POST /step answered done {_preview(done)}, expected a boolean")
        info = answer.get("info") if isinstance(answer.get("info"), dict) else {}
        breakdown = info.get("reward_breakdown")
        if breakdown is not None and not isinstance(breakdown, dict):
            raise RemoteWebShopError(f"POST /step answered reward_breakdown {_preview(breakdown)}, expected an object")
        try:
            breakdown = None if breakdown is None else json_safe(breakdown)
        except RecursionError:
            raise RemoteWebShopError("POST /step answered a reward_breakdown nested too deeply") from None
        page = self._fetch_page(answer["state"], info.get("page_type"))
        return StepResult(page, reward, bool(done), breakdown)

    def page(self) -> PageView:
        if self._page is None:
            raise RuntimeError("the remote WebShop session has not started: call reset(goal_index) first")
        return self._page

    def instruction_text(self) -> str:
        return f"Instruction: {self._instruction}"

    def close(self) -> None:
        if self._env_idx is None:
            return
        idx, self._env_idx, self._page = self._env_idx, None, None
        try:
            self._request("POST", "/close", {"env_idx": idx}, retries=0)
        except RemoteWebShopError:
            pass  # AgentGym has no /close; a server that is gone needs no closing

    def describe(self) -> dict[str, Any]:
        info = self._info() or {}
        return {
            "backend": self.name,
            "catalog_id": f"remote:{self.base_url}" + (f":{info['catalog_id']}" if info.get("catalog_id") else ""),
            "search_impl": info.get("search_impl", "unknown"),
            "reward_impl": info.get("reward_impl", "unknown"),
            "num_goals": self.num_goals(),
            "splits": {k: list(v) for k, v in self.split_ranges().items()},
        }


def _preview(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters (a hostile answer can be a megabyte)."""
    text = safe_text(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read(1 << 16).decode("utf-8", "replace")  # an error page of any size: read 64 KiB at most
        parsed = loads_untrusted(body)
        if isinstance(parsed, dict) and "error" in parsed:
            error = parsed["error"]
            return safe_text(error[:200]) if isinstance(error, str) else _preview(error)
        return body[:200]
    except Exception:
        return safe_text(str(exc.reason)[:200])
