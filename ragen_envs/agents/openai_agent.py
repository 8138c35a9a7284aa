"""``openai:MODEL``: any OpenAI-compatible chat endpoint through the official async client.

OpenAI itself, vLLM, SGLang, Ollama, OpenRouter, ``ragen serve``, ... — ``base_url`` picks the
server. The API key is read from the environment variable named by ``api_key_env`` (default
``OPENAI_API_KEY``) and nowhere else; it is never stored in a record, printed, or left in an
error message: server error bodies that echo it, whole or in part (``sk-SECRE****6789``), are
redacted by :class:`~ragen_envs.agents.redaction.KeyRedactor`.

Faults are retried here, not in the client (``max_retries=0`` there): HTTP 429, 408, 409 and
5xx, timeouts, dropped connections and malformed bodies wait ``min(backoff_max, backoff_base *
2**k)`` with jitter (half fixed, half uniform) or what the server's ``Retry-After`` /
``retry-after-ms`` asks for, whichever is longer, up to ``max_retries`` retries; then
:class:`AgentRequestError`. HTTP 401/403 (key) and 404 (model or URL) raise
:class:`AgentFatalError` at once: every further request would fail the same way.

A reply is sent to the env as :func:`complete_reply` makes it (``think_prefix="auto"``:
prepend ``<think>`` only if the reply lacks it); the raw text is kept in :class:`Reply.raw`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
from typing import Any, Sequence
from urllib.parse import urlparse

from . import AgentFatalError, AgentRequestError, Reply, THINK_PREFIX_MODES, complete_reply
from .base import Agent, Messages
from .redaction import KeyRedactor

__all__ = ["OpenAIAgent", "require_openai", "retry_after_seconds", "backoff_delay"]

RETRY_STATUS = frozenset({408, 409, 429})
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def require_openai():
    """Import ``openai`` or raise a clear error naming the extra."""
    try:
        import openai
    except ImportError:  # pragma: no cover - depends on the installation
        raise ImportError('the openai: agent needs the openai package: pip install "ragen-envs[api]"') from None
    return openai


def retry_after_seconds(headers: Any) -> float | None:
    """The wait a server asks for: ``retry-after-ms``, or ``retry-after`` as seconds or an HTTP date."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_delay(retry: int, base: float, cap: float, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number ``retry`` (1-based).

    Exponential ``d = min(cap, base * 2**(retry-1))`` with "equal jitter" (``d/2 + U(0, d/2)``),
    so simultaneous failures spread out; never shorter than the server's ``Retry-After``.
    """
    d = min(cap, base * (2 ** (retry - 1)))
    wait = d / 2 + rng.uniform(0, d / 2)
    if retry_after is not None:
        wait = max(wait, retry_after)
    return wait


class _Malformed(Exception):
    """The server answered 2xx with a body that is not a chat completion."""


class OpenAIAgent(Agent):
    """A chat model behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        model: the model name sent with each request.
        base_url: the API root (``http://127.0.0.1:8000/v1``); default: the client's
            (``OPENAI_BASE_URL`` or api.openai.com).
        api_key_env: the environment variable holding the key. On a loopback ``base_url``
            a missing key is allowed (local servers rarely check it).
        temperature: sampling temperature (0.5, the paper's evaluation value).
        max_tokens: the reply cap (512, the reference's API evaluation), sent as
            ``max_tokens_field`` (``"max_tokens"``, or ``"max_completion_tokens"`` for models
            that require it).
        top_p: sent only when given.
        stop: stop sequences.
        extra_body: extra JSON fields merged into each request (e.g. ``{"top_k": 20}``).
        timeout: seconds per request.
        max_retries, backoff_base, backoff_max: the retry policy (module docstring).
        think: the env's think mode (which tag :func:`complete_reply` restores).
        think_prefix: ``"auto"`` | ``"always"`` | ``"never"`` (see :func:`complete_reply`).
        tokenizer: a local tokenizer (path or object) to count tokens when the server reports
            no ``usage``.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.5,
        max_tokens: int | None = 512,
        max_tokens_field: str = "max_tokens",
        top_p: float | None = None,
        stop: Sequence[str] | str | None = None,
        extra_body: dict[str, Any] | None = None,
        timeout: float = 120.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        think: bool = True,
        think_prefix: str = "auto",
        tokenizer: Any = None,
    ) -> None:
        require_openai()
        if not model:
            raise ValueError("openai: agent needs a model name, e.g. openai:gpt-4o")
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_field must be max_tokens or max_completion_tokens, got {max_tokens_field!r}")
        if think_prefix not in THINK_PREFIX_MODES:
            raise ValueError(f"think_prefix must be one of {THINK_PREFIX_MODES}, got {think_prefix!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if extra_body is not None and not isinstance(extra_body, dict):
            raise ValueError(f"extra_body must be a JSON object, got {type(extra_body).__name__}")
        if base_url is not None:
            parsed = urlparse(base_url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ValueError(f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}")
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.__key = os.environ.get(api_key_env) or None
        self.__redactor = KeyRedactor(self.__key)
        if self.__key is None:
            host = urlparse(base_url).hostname if base_url else None
            if host not in LOOPBACK_HOSTS:
                raise ValueError(
                    f"the environment variable {api_key_env} holding the API key is not set "
                    f"(export it, or name another variable with --api-key-env)"
                )
            self.__key = "none"  # loopback servers (ragen serve, vLLM) usually take any key
        self.temperature = float(temperature)
        self.max_tokens = max_tokens
        self.max_tokens_field = max_tokens_field
        self.top_p = top_p
        self.stop = [stop] if isinstance(stop, str) else (list(stop) if stop else None)
        self.extra_body = dict(extra_body or {})
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.think = bool(think)
        self.think_prefix = think_prefix
        self._tokenizer_spec = tokenizer
        self._tokenizer = None
        self._rng = random.Random()  # jitter only; never touches the global RNG
        self._client = None
        self._client_loop = None

    # ------------------------------------------------------------------ config / secrets
    def config(self) -> dict[str, Any]:
        """The settings that shape the replies (recorded in config.json; no key)."""
        return {
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "max_tokens_field": self.max_tokens_field,
            "top_p": self.top_p,
            "stop": self.stop,
            "extra_body": self.extra_body,
            "think_prefix": self.think_prefix,
        }

    def redact(self, text: str) -> str:
        """``text`` with the API key and every fragment or masked rendering of it replaced
        by ``***`` (:mod:`ragen_envs.agents.redaction`; the placeholder key of a keyless
        loopback server is no secret and is left alone)."""
        redactor = self.__redactor
        return redactor(text) if redactor is not None else text

    def _describe(self, exc: BaseException) -> str:
        """``exc`` as one short line for an error message: redacted first, then cut (a cut
        first could keep part of a key that straddles the cut)."""
        return self.redact(_short(self.redact(str(exc))))

    def __getstate__(self):  # never pickle the key along
        state = self.__dict__.copy()
        state["_OpenAIAgent__key"] = state["_OpenAIAgent__redactor"] = None
        state["_client"] = state["_client_loop"] = None
        return state

    # ------------------------------------------------------------------ the client
    def _get_client(self):
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            openai = require_openai()
            kwargs: dict[str, Any] = {"api_key": self.__key, "max_retries": 0, "timeout": self.timeout}
            if self.base_url:
                kwargs["base_url"] = self.base_url
            self._client = openai.AsyncOpenAI(**kwargs)
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections (call from the loop that used them)."""
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.close()

    def request_body(self, messages: Messages) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``messages``."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.max_tokens is not None:
            body[self.max_tokens_field] = self.max_tokens
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.stop:
            body["stop"] = self.stop
        if self.extra_body:
            body["extra_body"] = self.extra_body
        return body

    # ------------------------------------------------------------------ requests
    @staticmethod
    def _parse(completion: Any) -> tuple[str, str | None, dict[str, int] | None]:
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise _Malformed(f"no choices in the response body (got {type(completion).__name__})")
        message = getattr(choices[0], "message", None)
        if message is None:
            raise _Malformed("the first choice has no message")
        content = getattr(message, "content", None)
        if content is not None and not isinstance(content, str):
            raise _Malformed(f"message content is {type(content).__name__}, not text")
        usage = None
        u = getattr(completion, "usage", None)
        if u is not None and _is_count(getattr(u, "completion_tokens", None)):
            prompt = getattr(u, "prompt_tokens", None)
            prompt = int(prompt) if _is_count(prompt) else None
            total = getattr(u, "total_tokens", None)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": int(u.completion_tokens),
                "total_tokens": int(total) if _is_count(total) and total else (prompt or 0) + int(u.completion_tokens),
            }
        finish = getattr(choices[0], "finish_reason", None)
        # a server's NaN or number here is no reason: recorded as unknown (None), never written as NaN
        return content or "", finish if isinstance(finish, str) else None, usage

    def _retry_after_or_raise(self, exc: BaseException) -> float | None:
        """For a retryable failure, the wait the server asked for (or None); else raise the
        error the harness acts on."""
        openai = require_openai()
        where = self.base_url or "the OpenAI API"
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            raise AgentFatalError(
                f"authentication failed (HTTP {exc.status_code}) at {where}: check the key in "
                f"${self.api_key_env} ({self._describe(exc)})"
            ) from None
        if isinstance(exc, openai.NotFoundError):
            raise AgentFatalError(
                f"not found (HTTP 404) at {where}: check the model name {self.model!r} and --base-url "
                f"({self._describe(exc)})"
            ) from None
        if isinstance(exc, openai.APIStatusError):
            if exc.status_code in RETRY_STATUS or exc.status_code >= 500:
                return retry_after_seconds(exc.response.headers)
            raise AgentRequestError(f"HTTP {exc.status_code}: {self._describe(exc)}") from None
        if isinstance(exc, (openai.APIConnectionError, openai.APIResponseValidationError, _Malformed,
                            json.JSONDecodeError)):
            return None
        raise exc

    async def areply(self, messages: Messages, think: bool | None = None) -> Reply:
        """One chat completion with retries; the reply completed for the env's parser."""
        start = time.monotonic()
        client = self._get_client()
        body = self.request_body(messages)
        attempt = 0
        while True:
            attempt += 1
            try:
                completion = await client.chat.completions.create(**body)
                raw, finish, usage = self._parse(completion)
                break
            except (AgentFatalError, AgentRequestError):
                raise
            except Exception as exc:  # noqa: BLE001 - sorted by _retry_after_or_raise
                retry_after = self._retry_after_or_raise(exc)
                if attempt > self.max_retries:
                    raise AgentRequestError(
                        f"gave up after {attempt} attempts: {type(exc).__name__}: {self._describe(exc)}"
                    ) from None
                await asyncio.sleep(backoff_delay(attempt, self.backoff_base, self.backoff_max, self._rng, retry_after))
        source = "api" if usage is not None else None
        if usage is None and self._tokenizer_spec is not None:
            usage, source = self._count_tokens(messages, raw), "tokenizer"
        return Reply(
            text=complete_reply(raw, self.think if think is None else think, self.think_prefix),
            raw=raw,
            usage=usage,
            usage_source=source,
            latency_s=time.monotonic() - start,
            attempts=attempt,
            finish_reason=finish,
        )

    def _count_tokens(self, messages: Messages, raw: str) -> dict[str, int]:
        if self._tokenizer is None:
            from .hf import load_tokenizer

            self._tokenizer = load_tokenizer(self._tokenizer_spec)
        from .hf import count_chat_tokens

        prompt = count_chat_tokens(self._tokenizer, messages)
        completion = len(self._tokenizer.encode(raw, add_special_tokens=False))
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    async def aact(self, messages: Messages) -> str:
        return (await self.areply(messages)).text

    def reply(self, messages: Messages, think: bool | None = None) -> Reply:
        """Synchronous :meth:`areply` (its own event loop and connections)."""

        async def once() -> Reply:
            try:
                return await self.areply(messages, think)
            finally:
                await self.aclose()

        return asyncio.run(once())

    def act(self, messages: Messages) -> str:
        return self.reply(messages).text

    def __repr__(self) -> str:
        return f"OpenAIAgent(model={self.model!r}, base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(text: str, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs -> one space), cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
