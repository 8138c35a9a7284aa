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
of :data:`SERVER_ONLY_KWARGS` only the operator sets). An unknown keyword or a bad value raises :class:`RagenEnvError` (a ``ValueError``): HTTP 400 through
:func:`create_ragen_app`, an ``EXECUTION_ERROR`` message on the WebSocket.

:func:`create_ragen_app` builds the FastAPI app with OpenEnv's own ``create_app``; ``ragen
openenv-server ENV_ID`` serves it under uvicorn. OpenEnv's HTTP ``/reset`` and ``/step`` are
stateless (a fresh env per request), so multi-turn play goes through the WebSocket ``/ws``
(one env per connection), e.g. with :class:`RagenEnvClient`.
"""

from __future__ import annotations

import functools
import uuid
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

from ..protocol import PROTOCOL_VERSION
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
    "accepted_kwargs",
    "DEFAULT_MAX_SESSIONS",
    "SERVER_ONLY_KWARGS",
]

DEFAULT_MAX_SESSIONS = 64
# Constructor keywords a client may not set per reset: they open windows on the server, read
# its files or make it call other hosts (WebShop's remote backend). The operator sets them.
SERVER_ONLY_KWARGS = frozenset({"render_mode", "backend", "base_url", "backend_kwargs", "catalog", "timeout", "retries"})


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


# gym.make's own keywords, accepted for every id
_MAKE_KWARGS = frozenset({"render_mode", "max_episode_steps", "disable_env_checker"})


def accepted_kwargs(env_id: str) -> frozenset[str]:
    """The constructor keywords of ``env_id``'s class (its ``__init__`` and, through
    ``**kwargs``, its bases') plus gym.make's own."""
    import inspect

    from gymnasium.envs.registration import load_env_creator

    cls = load_env_creator(gym.spec(env_id).entry_point)
    names: set[str] = set(_MAKE_KWARGS)
    for klass in getattr(cls, "__mro__", (cls,)):
        init = klass.__dict__.get("__init__") if isinstance(klass, type) else klass
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return frozenset(names)


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

    No state is shared between instances, so the server may run many at once.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id = env_id
        self.default_kwargs = dict(env_kwargs or {})
        self.env_kwargs = dict(self.default_kwargs)
        self.env = _make(env_id, self.env_kwargs)
        self._state = RagenState(env_id=env_id, env_kwargs=json_part(self.env_kwargs))
        self._system_prompt = ""

    # ------------------------------------------------------------------ OpenEnv API
    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, noise_seed: Optional[int] = None,
              **env_kwargs: Any) -> RagenObservation:
        fixed = sorted(set(env_kwargs) & SERVER_ONLY_KWARGS)
        if fixed:
            raise RagenEnvError(f"keyword(s) {fixed} are set by the server operator (--env-kwarg), not per reset")
        kwargs = {**self.default_kwargs, **env_kwargs}
        if kwargs != self.env_kwargs:
            new = _make(self.env_id, kwargs)  # fails before the old env is dropped
            self.env.close()
            self.env, self.env_kwargs = new, kwargs
        options = None if noise_seed is None else {"noise_seed": noise_seed}
        try:
            obs, info = self.env.reset(seed=seed, options=options)
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
                                terminated=False, truncated=False, info=json_part(dict(info)))

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
                                info=json_part(dict(info)))

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
class IdleTimeout:
    """ASGI middleware: a WebSocket that sends nothing for ``timeout_s`` seconds is treated as
    disconnected (its handler sees a disconnect and OpenEnv frees the session's env), so a
    client that holds a connection open and forgets it cannot keep a session slot forever."""

    def __init__(self, app, timeout_s: float) -> None:
        self.app, self.timeout_s = app, float(timeout_s)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)

        async def timed_receive():
            import asyncio

            try:
                return await asyncio.wait_for(receive(), self.timeout_s)
            except asyncio.TimeoutError:
                return {"type": "websocket.disconnect", "code": 1001}

        return await self.app(scope, timed_receive, send)


def create_ragen_app(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
                     max_sessions: int = DEFAULT_MAX_SESSIONS, idle_timeout_s: float | None = 600.0):
    """The FastAPI app of OpenEnv's ``create_app`` serving ``env_id``.

    ``max_sessions`` caps concurrent WebSocket sessions (one env each; a further connection
    gets a ``CAPACITY_REACHED`` error); a closed or dropped connection frees its env, and so
    does a connection silent for ``idle_timeout_s`` seconds (:class:`IdleTimeout`; None: never;
    also OpenEnv's reaper timeout for sessions without a socket). :class:`RagenEnvError`
    (unknown kwarg, bad seed, step without reset on the stateless HTTP routes) becomes HTTP
    400 with a one-line ``detail``.
    """
    if not isinstance(max_sessions, int) or isinstance(max_sessions, bool) or max_sessions < 1:
        raise ValueError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ValueError(f"idle_timeout_s must be > 0 or None, got {idle_timeout_s!r}")
    _make(env_id, env_kwargs or {}).close()  # fail now on an unknown id / kwarg, not per session
    factory = functools.partial(RagenEnvironment, env_id=env_id, env_kwargs=dict(env_kwargs or {}))
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s)
    app = create_app(factory, RagenAction, RagenObservation, env_name=env_id.replace("/", "-"),
                     concurrency_config=config, state_cls=RagenState, mode="simulation")

    async def _bad_request(request: Request, exc: RagenEnvError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    app.add_exception_handler(RagenEnvError, _bad_request)
    if idle_timeout_s is not None:
        app.add_middleware(IdleTimeout, timeout_s=idle_timeout_s)
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
