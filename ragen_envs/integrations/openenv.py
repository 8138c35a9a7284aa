"""Any registered ``ragen/*`` id as an OpenEnv environment (the ``openenv`` extra, openenv 0.10).

:class:`RagenEnvironment` is an ``openenv.core.env_server.Environment`` over one gym env; the
wire types are pydantic models:

* :class:`RagenAction` — exactly one required field, ``reply: str``: the model's whole reply,
  passed to ``env.step`` unchanged (the env parses it; a malformed reply costs the format
  penalty, as in every other use of the env). Clients that fill the single required field
  with the raw reply (e.g. verifiers' OpenEnv taskset) work as they are.
* :class:`RagenObservation` — ``observation`` (the text the model sees next), ``system_prompt``,
  ``reward`` (the turn's reward: game reward + format penalty), ``done`` (= terminated or
  truncated), ``terminated``, ``truncated`` and ``info`` (the JSON-safe part of the env's
  ``info``; at reset the reset info).
* :class:`RagenState` — env id, constructor kwargs, layout seed, noise seed (None: the layout
  seed's stream), turn, turns / actions left, success, plus OpenEnv's ``episode_id`` and
  ``step_count``.

``reset(seed=None, noise_seed=None, episode_id=None, **env_kwargs)``: ``env_kwargs`` are
constructor keywords of the env (``max_turns=3``, ``think=False``, ...); when they differ from
the current env's, the env is rebuilt with the server's defaults updated by them (the keywords
of :data:`SERVER_ONLY_KWARGS` only the operator sets). Each keyword must lie within the
server's bounds (:mod:`ragen_envs.envs.limits`: ``max_turns`` 1..100, ``dim_room`` sides
4..16, ``num_boxes`` 1..4, ``search_depth`` 1..1000, ...; the operator widens them), and a
reset that runs past the server's budget (10 s by default), whose client leaves, or that is
running when the server stops, is cancelled. An unknown keyword or a bad value raises :class:`RagenEnvError` (a ``ValueError``): HTTP 400 through
:func:`create_ragen_app`, an ``EXECUTION_ERROR`` message on the WebSocket; such a refused
reset leaves the running episode as it was (its next step continues it).

:func:`create_ragen_app` builds the FastAPI app with OpenEnv's own ``create_app``; ``ragen
openenv-server ENV_ID`` serves it under uvicorn. OpenEnv's HTTP ``/reset`` and ``/step`` are
stateless (a fresh env per request), so multi-turn play goes through the WebSocket ``/ws``
(one env per connection), e.g. with :class:`RagenEnvClient`.

Where the work runs: the pure-CPU games of :data:`INLINE_ENVS` step on the event loop (replies
up to :data:`INLINE_REPLY_CHARS` characters) and reset there too when the reset has a seed and
rebuilds nothing, under a work budget of :data:`INLINE_RESET_S`; a reset that runs past it is
dropped and run again from the start on a worker thread, with the full budget and
cancellation. A reset with a seed starts from that seed alone, so the rerun gives the level
the first attempt would have given. Everything else (WebShop, seedless resets, rebuilds, long
replies) runs on a worker thread, as OpenEnv's own server runs a sync env. A thread hop costs
more CPU than these turns do (``BENCHMARKS.md#openenv-turn``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Optional

import gymnasium as gym

try:
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation, State
    from pydantic import Field, StrictStr
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the OpenEnv integration needs the 'openenv' extra: pip install 'ragen-envs[openenv]'"
    ) from exc

from ..envs.base import check_seed
from ..envs.limits import DEFAULT_BOUNDS, OPERATOR_ONLY, closest, validate_env_kwargs
from ..games.budget import WorkCancelled, work_budget
from ..protocol import PROTOCOL_VERSION
from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted
from ..envs.limits import accepted_kwargs
from . import json_part

__all__ = [
    "RagenAction",
    "RagenObservation",
    "RagenState",
    "RagenEnvironment",
    "RagenEnvError",
    "RagenEnvClient",
    "create_ragen_app",
    "IdleTimeout",
    "INLINE_ENVS",
    "accepted_kwargs",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_RESET_TIMEOUT_S",
    "SERVER_ONLY_KWARGS",
]

DEFAULT_MAX_SESSIONS = 64
DEFAULT_RESET_TIMEOUT_S = 10.0
# set by IdleTimeout for the WebSocket connection whose handler runs in this context: its
# ``gone`` event is set once the client has gone, so the work it asked for can stop
_CONNECTION: contextvars.ContextVar[Any] = contextvars.ContextVar("ragen_connection", default=None)
# Constructor keywords a client may not set per reset: they open windows on the server, read
# its files or make it call other hosts (WebShop's remote backend). The operator sets them.
SERVER_ONLY_KWARGS = frozenset({"render_mode", "backend", "base_url", "backend_kwargs", "catalog", "timeout", "retries"})
_NOT_PER_RESET = SERVER_ONLY_KWARGS | OPERATOR_ONLY


# How long a reset runs before its connection is read in the background, so that a client that
# leaves is noticed (RagenEnvironment.reset_async).
WATCH_AFTER_S = 0.05

# Envs whose reset and step are pure CPU work: no I/O, and a reset either does work of a size
# fixed by its bounded keywords (Bandit) or checks the work budget as it goes (the Sokoban
# family and FrozenLake level generators call ``check_budget``). Their short turns run on the
# event loop; see the module docstring.
INLINE_ENVS = frozenset({"ragen/Bandit-v0", "ragen/BanditRev-v0", "ragen/Sokoban-v0", "ragen/LargeSokoban-v0",
                         "ragen/SokobanNewVocab-v0", "ragen/SokobanPOMDP-v0", "ragen/FrozenLake-v0"})
# The longest an inline reset may hold the event loop before it is moved to a worker thread
# (a default Sokoban reset takes ~0.1-0.3 ms), and the longest reply stepped inline.
INLINE_RESET_S = 0.002
INLINE_REPLY_CHARS = 8192


class _RunOnThread(Exception):
    """An inline reset that would rebuild the env or ran past INLINE_RESET_S: start it again on a thread."""


class RagenEnvError(ValueError):
    """A request the environment cannot serve (unknown kwarg, bad seed, step before reset)."""


class RagenAction(Action):
    """One turn: the model's whole reply (think + answer), exactly as generated."""

    reply: StrictStr = Field(..., description="the model's whole reply; the environment parses it")


class RagenObservation(Observation):
    """What the model sees after a reset or a turn, with the turn's reward and ends."""

    observation: str = Field(..., description="the observation text (the next user message)")
    system_prompt: str = Field("", description="the system message to send before the first observation")
    terminated: bool = Field(False, description="the game ended (solved, fell, bought)")
    truncated: bool = Field(False, description="the turn or action budget ran out first")
    info: dict[str, Any] = Field(default_factory=dict, description="the JSON-safe part of the env's info dict")


class RagenState(State):
    """Where the session's episode stands."""

    env_id: str = ""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: Optional[int] = None
    noise_seed: Optional[int] = None
    turn: int = 0
    turns_left: int = 0
    actions_left: int = 0
    success: bool = False
    done: bool = True


def _known_ids() -> list[str]:
    import ragen_envs

    return [s.id for s in ragen_envs.ENV_SPECS]


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in ``value`` (a JSON-like value: numbers, lists, dicts;
    walked without recursion, as a message may nest as deep as its parser allowed)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return True


def _make(env_id: str, kwargs: Mapping[str, Any]) -> gym.Env:
    if env_id not in _known_ids():
        raise RagenEnvError(f"unknown environment {env_id!r}; known: {', '.join(_known_ids())}")
    unknown = sorted(set(kwargs) - accepted_kwargs(env_id))
    if unknown:
        raise RagenEnvError(f"unknown keyword(s) {unknown} for {env_id}; accepted: {sorted(accepted_kwargs(env_id))}")
    try:
        return gym.make(env_id, **dict(kwargs))
    except TypeError as exc:  # an unknown constructor keyword
        raise RagenEnvError(f"{env_id}: {exc}") from None
    except ValueError as exc:
        raise RagenEnvError(f"{env_id}: {exc}") from None


class RagenEnvironment(Environment[RagenAction, RagenObservation, RagenState]):
    """One session's environment: a ``gym.make(env_id, **env_kwargs)`` driven by replies.

    No state is shared between instances, so the server may run many at once. A client's
    reset keywords must lie within ``kwarg_bounds`` (:data:`ragen_envs.envs.limits.DEFAULT_BOUNDS`
    unless the operator widened them); a reset (env rebuild included) that runs past
    ``reset_timeout_s`` seconds, whose client has gone, or that is still running when the
    server stops (``stopping``) is cancelled and answered with a :class:`RagenEnvError`.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
                 kwarg_bounds: Mapping[str, tuple[float, float]] | None = None,
                 reset_timeout_s: float | None = DEFAULT_RESET_TIMEOUT_S, stopping: threading.Event | None = None,
                 executor: ThreadPoolExecutor | None = None) -> None:
        super().__init__()
        self.env_id = env_id
        self.kwarg_bounds = dict(DEFAULT_BOUNDS if kwarg_bounds is None else kwarg_bounds)
        self.reset_timeout_s = reset_timeout_s
        self._stopping = stopping
        self._executor = executor
        self.default_kwargs = dict(env_kwargs or {})
        self.env_kwargs = dict(self.default_kwargs)
        self.env = _make(env_id, self.env_kwargs)
        self._state = RagenState(env_id=env_id, env_kwargs=json_part(self.env_kwargs))
        self._system_prompt = ""
        self._inline = env_id in INLINE_ENVS
        self._accepted: frozenset[str] | None = None  # the keywords a client may reset with (on first need)

    # ------------------------------------------------------------------ OpenEnv API
    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, noise_seed: Optional[int] = None,
              **env_kwargs: Any) -> RagenObservation:
        return self._reset((), seed, episode_id, noise_seed, env_kwargs)

    async def reset_async(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
                          noise_seed: Optional[int] = None, **env_kwargs: Any) -> RagenObservation:
        """:meth:`reset` on the event loop when it is short (module docstring), else on a worker
        thread, cancelled when its client goes or its task is cancelled."""
        if (self._inline and seed is not None
                and (self.reset_timeout_s is None or self.reset_timeout_s > INLINE_RESET_S)):
            try:
                return self._reset((), seed, episode_id, noise_seed, env_kwargs, inline=True)
            except _RunOnThread:
                pass  # from the start, with the full budget
        cancel = threading.Event()
        conn = _CONNECTION.get()
        loop = asyncio.get_running_loop()
        # a client that leaves during a reset that lasts stops it: the connection is read from
        # WATCH_AFTER_S on (most resets are over by then, and need no reader task)
        watch = None if conn is None else loop.call_later(WATCH_AFTER_S, conn.watch)
        events = (cancel, None if conn is None else conn.gone)
        try:
            return await loop.run_in_executor(self._executor, self._reset, events, seed, episode_id, noise_seed,
                                              env_kwargs)
        except asyncio.CancelledError:
            cancel.set()  # the thread stops at its next budget check
            raise
        finally:
            if watch is not None:
                watch.cancel()

    def _check_reset(self, seed: Any, episode_id: Any, noise_seed: Any, env_kwargs: Mapping[str, Any]) -> None:
        """A :class:`RagenEnvError` for a reset request the env would refuse, raised before
        anything is touched, so a refused reset leaves the running episode as it was:
        operator-only or unknown keywords (the accepted ones listed, never the operator's),
        keywords outside the server's bounds, a non-finite number, a seed or noise seed
        outside ``[0, 2**32)``, an episode id that is not a string."""
        if env_kwargs:
            fixed = sorted(set(env_kwargs) & _NOT_PER_RESET)
            if fixed:
                raise RagenEnvError(f"keyword(s) {fixed} are set by the server operator (--env-kwarg), not per reset")
            if self._accepted is None:
                self._accepted = accepted_kwargs(self.env_id) - _NOT_PER_RESET
            unknown = sorted(set(env_kwargs) - self._accepted)
            if unknown:
                hint = closest(unknown[0], self._accepted)
                raise RagenEnvError(f"unknown keyword(s) {unknown} for {self.env_id}"
                                    + (f" (did you mean {hint!r}?)" if hint else "")
                                    + f"; accepted: {sorted(self._accepted)}")
            for name, value in env_kwargs.items():
                if not _finite(value):
                    raise RagenEnvError(f"{name} must not hold NaN or an infinity, got {value!r}")
        try:
            if env_kwargs:  # the gate of every source: booleans that are booleans, the server's bounds
                validate_env_kwargs(self.env_id, env_kwargs, source="", bounds=self.kwarg_bounds)
            for name, value in (("seed", seed), ("noise_seed", noise_seed)):
                if value is not None:
                    check_seed(name, value)
        except ValueError as exc:
            raise RagenEnvError(str(exc)) from None
        if episode_id is not None and not isinstance(episode_id, str):
            raise RagenEnvError(f"episode_id must be a string, got {type(episode_id).__name__}")

    def _reset(self, events: tuple, seed: Any, episode_id: Any, noise_seed: Any,
               env_kwargs: dict[str, Any], inline: bool = False) -> RagenObservation:
        self._check_reset(seed, episode_id, noise_seed, env_kwargs)  # refused: the episode goes on
        kwargs = {**self.default_kwargs, **env_kwargs}
        if inline and kwargs != self.env_kwargs:
            raise _RunOnThread  # building an env is not short
        options = None if noise_seed is None else {"noise_seed": noise_seed}
        try:
            with work_budget(INLINE_RESET_S if inline else self.reset_timeout_s, self._stopping, *events):
                if kwargs != self.env_kwargs:
                    new = _make(self.env_id, kwargs)  # fails before the old env is dropped: the episode goes on
                    self._state.__dict__["done"] = True  # the old episode's env goes now
                    self.env.close()
                    self.env, self.env_kwargs = new, kwargs
                # from here the env's state changes: no episode until this reset has succeeded
                # (a bool: no validation needed)
                self._state.__dict__["done"] = True
                obs, info = self.env.reset(seed=seed, options=options)
        except WorkCancelled as exc:
            stopping = self._stopping is not None and self._stopping.is_set()
            if inline and not stopping:
                raise _RunOnThread from None
            why = ("the server is stopping" if stopping
                   else f"it ran past the server's reset budget of {self.reset_timeout_s:g} s (--reset-timeout)"
                   if "budget" in str(exc) else "its client left")
            raise RagenEnvError(f"reset cancelled: {why}") from None
        except (TypeError, ValueError) as exc:
            raise RagenEnvError(f"reset: {exc}") from None
        self._system_prompt = str(info.get("system_prompt", ""))
        noise = info.get("noise_seed", -1)
        self._state = RagenState(
            episode_id=episode_id or str(uuid.uuid4()),
            step_count=0,
            env_id=self.env_id,
            env_kwargs=json_part(self.env_kwargs),
            seed=int(info["seed"]),
            noise_seed=None if noise is None or int(noise) < 0 else int(noise),
            turn=0,
            turns_left=int(info.get("turns_left", 0)),
            actions_left=int(info.get("actions_left", 0)),
            success=False,
            done=False,
        )
        return RagenObservation(observation=obs, system_prompt=self._system_prompt, reward=None, done=False,
                                terminated=False, truncated=False, info=json_part(info))

    def step(self, action: RagenAction, timeout_s: Optional[float] = None, **kwargs: Any) -> RagenObservation:
        if not isinstance(action, RagenAction):
            raise RagenEnvError(f"expected a RagenAction with a 'reply' string, got {type(action).__name__}")
        if self._state.done:
            raise RagenEnvError(
                "no episode in progress: send 'reset' first (OpenEnv's HTTP /step is stateless; "
                "play episodes over the WebSocket /ws)" if self._state.seed is None
                else "the episode has ended: send 'reset' to start another"
            )
        obs, reward, terminated, truncated, info = self.env.step(action.reply)
        st = self._state
        # The fields' own types (int, bool), written in one go: State validates every
        # attribute assignment (validate_assignment), ~1.5 us each, on every turn. The fields
        # were all set at reset, so the fields-set record needs no update.
        st.__dict__.update(
            step_count=st.step_count + 1,
            turn=int(info.get("turn", st.turn + 1)),
            turns_left=int(info.get("turns_left", st.turns_left)),
            actions_left=int(info.get("actions_left", st.actions_left)),
            success=bool(info.get("success", False)),
            done=bool(terminated or truncated),
        )
        return RagenObservation(observation=obs, system_prompt=self._system_prompt, reward=float(reward),
                                done=st.done, terminated=bool(terminated), truncated=bool(truncated),
                                info=json_part(info))

    async def step_async(self, action: RagenAction, timeout_s: Optional[float] = None,
                         **kwargs: Any) -> RagenObservation:
        """:meth:`step` on the event loop for the games of :data:`INLINE_ENVS` and replies up to
        :data:`INLINE_REPLY_CHARS` characters, else on a worker thread."""
        if self._inline and isinstance(action, RagenAction) and len(action.reply) <= INLINE_REPLY_CHARS:
            return self.step(action, timeout_s, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(self.step, action, timeout_s, **kwargs))

    @property
    def state(self) -> RagenState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        spec = gym.spec(self.env_id)
        return EnvironmentMetadata(
            name=self.env_id,
            description=f"{self.env_id} on the RAGEN multi-turn text protocol {PROTOCOL_VERSION} "
                        f"({spec.entry_point}); action: {{'reply': <the model's whole reply>}}",
            version=PROTOCOL_VERSION,
        )

    def close(self) -> None:
        self.env.close()


# ---------------------------------------------------------------------------------- server
_DISCONNECT = {"type": "websocket.disconnect", "code": 1001}
_UNCANCEL = hasattr(asyncio.Task, "uncancel")  # Python >= 3.11


class _Connection:
    """The reading side of one WebSocket connection under :class:`IdleTimeout`.

    :meth:`receive` (what the app reads with) waits for the client's next message and gives up
    after ``timeout_s`` seconds of silence (the app then sees a disconnect). The idle deadline
    is one timer per connection, armed when a wait begins and moved on lazily (a wait that
    began later pushes it back when it fires), not a timer per message. :meth:`watch` starts
    reading the next message while the app is busy (a reset): when the client leaves
    meanwhile, ``gone`` is set at once, so the reset's work stops."""

    __slots__ = ("_receive", "timeout_s", "gone", "_pending", "_closed", "_waiting_since", "_timer",
                 "_task", "_expired")

    def __init__(self, receive, timeout_s: float | None) -> None:
        self._receive, self.timeout_s = receive, timeout_s
        self.gone = threading.Event()
        self._pending: asyncio.Future | None = None  # a read started by watch()
        self._closed = False  # the client has gone (or timed out): every later read is a disconnect
        self._waiting_since: float | None = None  # loop time the app's current wait began
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None  # the task waiting in receive()
        self._expired = False

    async def _read(self):
        try:
            message = await self._receive()
        except Exception:  # noqa: BLE001 - the connection broke: the same as a disconnect
            message = _DISCONNECT
        if message["type"] == "websocket.disconnect":
            self._closed = True
            self.gone.set()
        return message

    def watch(self) -> None:
        """Read the next message in the background until the app asks for it."""
        if self._pending is None and not self._closed:
            self._pending = asyncio.ensure_future(self._read())

    async def receive(self):
        pending = self._pending
        if pending is not None:
            if pending.done():  # read already: no wait, no timer
                self._pending = None
                return pending.result()
        elif self._closed:
            return _DISCONNECT
        if self.timeout_s is None:
            self._pending = None
            return await (pending if pending is not None else self._read())
        if not _UNCANCEL:  # Python 3.10: wait_for (a task per wait)
            try:
                return await asyncio.wait_for(pending if pending is not None else self._read(), self.timeout_s)
            except asyncio.TimeoutError:
                return self._expire()
            finally:
                self._pending = None
        loop = asyncio.get_running_loop()
        self._waiting_since = loop.time()
        self._task = asyncio.current_task()
        if self._timer is None:
            self._timer = loop.call_at(self._waiting_since + self.timeout_s, self._check)
        try:
            return await (pending if pending is not None else self._read())
        except asyncio.CancelledError:
            if self._expired and self._task.uncancel() == 0:  # our deadline, nobody else's cancel
                return self._expire()
            raise
        finally:
            self._waiting_since = self._task = self._pending = None

    def _check(self) -> None:
        """The idle timer: expire the wait if it has lasted ``timeout_s``, else move on."""
        self._timer = None
        since = self._waiting_since
        if since is None or self._task is None:  # not waiting: the next wait re-arms
            return
        loop = asyncio.get_running_loop()
        if loop.time() - since >= self.timeout_s:
            self._expired = True
            self._task.cancel()
        else:
            self._timer = loop.call_at(since + self.timeout_s, self._check)

    def _expire(self):
        self._closed = True
        self.gone.set()
        return _DISCONNECT

    def close(self) -> None:
        self.gone.set()  # the connection is over: nothing it asked for is still wanted
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None


class IdleTimeout:
    """ASGI middleware for WebSockets: one that sends nothing for ``timeout_s`` seconds (None:
    never) is treated as disconnected (its handler sees a disconnect and OpenEnv frees the
    session's env), so a client that holds a connection open and forgets it cannot keep a
    session slot forever. While a reset runs it also reads the connection (one message ahead),
    so a client that leaves during a long reset is noticed at once: the connection's ``gone``
    event (in ``_CONNECTION``) is set and the reset stops. Between resets the handler reads the
    socket itself: no reader task, queue or timer per message (:class:`_Connection`)."""

    def __init__(self, app, timeout_s: float | None) -> None:
        self.app, self.timeout_s = app, None if timeout_s is None else float(timeout_s)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        conn = _Connection(receive, self.timeout_s)
        token = _CONNECTION.set(conn)
        try:
            return await self.app(scope, conn.receive, send)
        finally:
            conn.close()
            _CONNECTION.reset(token)


class JSONBodyCheck:
    """ASGI middleware for HTTP requests: a JSON body that Python's ``json`` would accept but
    FastAPI cannot answer about (NaN, Infinity, a number that overflows to infinity: its own
    422 then fails to encode and the client gets a 500; an integer of more than 4,300
    digits; nesting past the recursion limit) is answered 400 with one line, before the app
    sees it. Bodies that are simply not JSON go on to FastAPI's own 422. WebSocket messages
    are not touched (the reset checks refuse a non-finite keyword there)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left: let the app see it
                return await self.app(scope, _replay([message], receive), send)
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body.strip():
            try:
                loads_untrusted(body, allow_nan=False)
            except UntrustedJSONError as exc:
                if exc.reason != "syntax":
                    return await JSONResponse(status_code=400, content={"detail": f"request body: {exc}"})(
                        scope, receive, send)
        return await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive),
                              send)


def _replay(messages: list, receive):
    """An ASGI ``receive`` that gives ``messages`` first, then reads on."""
    pending = list(messages)

    async def replayed():
        return pending.pop(0) if pending else await receive()

    return replayed


def create_ragen_app(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
                     max_sessions: int = DEFAULT_MAX_SESSIONS, idle_timeout_s: float | None = 600.0,
                     kwarg_bounds: Mapping[str, tuple[float, float]] | None = None,
                     reset_timeout_s: float | None = DEFAULT_RESET_TIMEOUT_S):
    """The FastAPI app of OpenEnv's ``create_app`` serving ``env_id``.

    ``kwarg_bounds`` bound the keywords of the operator's ``env_kwargs`` and of every client
    reset (default :data:`ragen_envs.envs.limits.DEFAULT_BOUNDS`); a reset is cancelled after
    ``reset_timeout_s`` seconds (None: never), when its client leaves, and when the app's
    ``app.state.ragen_stopping`` event is set (``ragen openenv-server`` sets it on shutdown).

    ``max_sessions`` caps concurrent WebSocket sessions (one env each; a further connection
    gets a ``CAPACITY_REACHED`` error); a closed or dropped connection frees its env, and so
    does a connection silent for ``idle_timeout_s`` seconds (:class:`IdleTimeout`; None: never;
    also OpenEnv's reaper timeout for sessions without a socket). :class:`RagenEnvError`
    (unknown kwarg, bad seed, step without reset on the stateless HTTP routes) becomes HTTP
    400 with a one-line ``detail``, and so does an HTTP body holding NaN or Infinity
    (:class:`JSONBodyCheck`).
    """
    if not isinstance(max_sessions, int) or isinstance(max_sessions, bool) or max_sessions < 1:
        raise ValueError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ValueError(f"idle_timeout_s must be > 0 or None, got {idle_timeout_s!r}")
    if reset_timeout_s is not None and not reset_timeout_s > 0:
        raise ValueError(f"reset_timeout_s must be > 0 or None, got {reset_timeout_s!r}")
    bounds = dict(DEFAULT_BOUNDS if kwarg_bounds is None else kwarg_bounds)
    try:  # the operator's own keywords (--env-kwarg): the gate, operator-only ones allowed
        validate_env_kwargs(env_id, env_kwargs, source="--env-kwarg", operator=True, bounds=bounds)
    except ValueError as exc:
        raise RagenEnvError(str(exc)) from None
    _make(env_id, env_kwargs or {}).close()  # fail now on an unknown id / kwarg, not per session
    stopping = threading.Event()
    executor = ThreadPoolExecutor(max_workers=max_sessions, thread_name_prefix="ragen-reset")
    factory = functools.partial(RagenEnvironment, env_id=env_id, env_kwargs=dict(env_kwargs or {}),
                                kwarg_bounds=bounds, reset_timeout_s=reset_timeout_s, stopping=stopping,
                                executor=executor)
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s)
    app = create_app(factory, RagenAction, RagenObservation, env_name=env_id.replace("/", "-"),
                     concurrency_config=config, state_cls=RagenState, mode="simulation")

    async def _bad_request(request: Request, exc: RagenEnvError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    app.add_exception_handler(RagenEnvError, _bad_request)
    app.add_middleware(IdleTimeout, timeout_s=idle_timeout_s)
    app.add_middleware(JSONBodyCheck)
    app.state.ragen_stopping = stopping
    return app


# ---------------------------------------------------------------------------------- client
class RagenEnvClient(EnvClient[RagenAction, RagenObservation, RagenState]):
    """OpenEnv's WebSocket client for a RAGEN server: ``reset(seed=..., noise_seed=...)``,
    ``step(RagenAction(reply=...))`` (or a plain string), ``state()``. Async by default;
    ``.sync()`` gives a blocking handle."""

    def _step_payload(self, action: RagenAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            return {"reply": action}
        return {"reply": action.reply}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RagenObservation]:
        obs = dict(payload.get("observation", {}))
        obs.pop("metadata", None)
        observation = RagenObservation(**obs, reward=payload.get("reward"), done=bool(payload.get("done", False)))
        return StepResult(observation=observation, reward=payload.get("reward"), done=bool(payload.get("done", False)))

    def _parse_state(self, payload: dict[str, Any]) -> RagenState:
        return RagenState(**payload)


# ---------------------------------------------------------------------------------- Space entry point
def __getattr__(name: str):
    """``ragen_envs.integrations.openenv:app`` (what ``openenv.yaml`` / uvicorn import): the app
    for ``$RAGEN_ENV_ID`` (default ragen/Sokoban-v0) with ``$RAGEN_MAX_SESSIONS`` sessions."""
    if name == "app":
        import os

        env_id = os.environ.get("RAGEN_ENV_ID", "ragen/Sokoban-v0")
        try:
            max_sessions = int(os.environ.get("RAGEN_MAX_SESSIONS", DEFAULT_MAX_SESSIONS))
        except ValueError:
            raise RagenEnvError(f"RAGEN_MAX_SESSIONS must be an integer, got {os.environ['RAGEN_MAX_SESSIONS']!r}") from None
        app = create_ragen_app(env_id, max_sessions=max_sessions)
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
