"""Every ``ragen/*`` id as a verifiers environment (verifiers 0.4.x, ``verifiers.v1``; its own
venv: ``make verifiers-venv``).

verifiers 0.4 finds an environment by id: ``vf-eval ragen-envs-verifiers`` imports the
package ``ragen_envs_verifiers`` (``environments/ragen_envs_verifiers`` in this repository,
the layout ``vf-init`` scaffolds for the Environments Hub), whose ``__all__`` exports the
three classes defined here:

- :class:`RagenTaskset` — one task (a dataset row) per initial state: ``env_id``, ``seed``,
  ``noise_seed`` and the constructor keywords ride on :class:`RagenTaskData`; the task's
  prompt is the env's first observation and its system prompt the env's. ``-r N`` plays N
  rollouts of a row, all from that one initial state (a group).
- :class:`RagenEnv` — the episode: a fresh env reset with the row's seeds, then one
  ``env.step`` per model reply (the reply's text unchanged, so the env's parser, budgets and
  format penalty apply), the next observation sent back as the next user turn, until the
  env ends the episode. Per-turn rewards, format flags and the step infos go to
  ``trace.info["ragen"]``.
- :class:`RagenChatHarness` — the player's program: one chat completion per turn, in this
  process, through verifiers' interception endpoint (so the trace records every call), on
  ``[system, user(obs_1), assistant(reply_1), user(obs_2), ...]`` and nothing else: no tools,
  no harness prompt. It needs no ``uv``, container or login (verifiers' ``null``/``bash``
  harnesses bootstrap a ``uv`` script from PyPI; ``bash`` adds a coding-agent prompt).

The reward is the episode return (the sum of the env's step rewards, format penalties
included; :meth:`RagenTask.episode_return`); success, turns and format errors are metrics.
The player runs on verifiers' local ``subprocess`` runtime by default (the default
``prime`` runtime is Prime's cloud and asks for a login); this harness starts no process in
it.

:func:`load_environment` builds the environment for the Python API (what ``vf-eval``
runs): ``load_environment("ragen/FrozenLake-v0", seeds=[3, 4], noise_seeds=[7, 8])``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import Iterator
from typing import Any, Self

try:
    import httpx
    import verifiers.v1 as vf
    from pydantic import Field, model_validator
    from verifiers.v1.dialects.chat import message_to_wire
    from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE
    from verifiers.v1.types import content_text
except ImportError as exc:  # pragma: no cover - exercised only outside the verifiers venv
    raise ImportError(
        "the verifiers integration needs verifiers 0.4.x, which pins mcp==2.0.0 and openai<3 (they "
        "clash with the `openenv` extra) and so lives in its own venv: `make verifiers-venv` builds "
        ".venv-verifiers (see docs/integrations.md)"
    ) from exc

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.registration import EVAL_SEEDS

from . import json_part

__all__ = [
    "TASKSET_ID",
    "RagenTaskData",
    "RagenTask",
    "RagenTasksetConfig",
    "RagenTaskset",
    "RagenEnvConfig",
    "RagenEnv",
    "RagenChatHarnessConfig",
    "RagenChatHarness",
    "load_environment",
]

TASKSET_ID = "ragen-envs-verifiers"
"""The id verifiers resolves to the ``ragen_envs_verifiers`` package (``vf-eval ragen-envs-verifiers``)."""


# --- the rows ------------------------------------------------------------------------------


class RagenTaskData(vf.TaskData):
    """One initial state: the env's first observation is ``prompt``, its system prompt
    ``system_prompt``; ``seed`` / ``noise_seed`` / ``env_kwargs`` rebuild it exactly."""

    env_id: str
    seed: int
    noise_seed: int | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)


class RagenTask(vf.Task[RagenTaskData]):
    """Scoring of one episode, from what :class:`RagenEnv` wrote to ``trace.info["ragen"]``."""

    @property
    def key(self) -> str:
        """The initial state, not the row's position (the default hash includes ``idx``)."""
        d = self.data
        return json.dumps({"env_id": d.env_id, "seed": d.seed, "noise_seed": d.noise_seed,
                           "env_kwargs": d.env_kwargs}, sort_keys=True)

    @vf.reward(weight=1.0)
    async def episode_return(self, trace: vf.Trace) -> float:
        """The sum of the env's step rewards (game reward + format penalty) of the episode;
        0.0 when no reply reached the env."""
        return float(sum(_record(trace).get("rewards", [])))

    @vf.metric
    async def episode(self, trace: vf.Trace) -> dict[str, float]:
        record = _record(trace)
        return {
            "success": float(bool(record.get("success", False))),
            "env_turns": float(len(record.get("rewards", []))),
            "format_errors": float(sum(not ok for ok in record.get("format_ok", []))),
        }


def _record(trace: vf.Trace) -> dict:
    record = trace.info.get("ragen")
    return record if isinstance(record, dict) else {}


class RagenTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: which env and which initial states (one task each)."""

    env_id: str = "ragen/Sokoban-v0"
    """A registered ``ragen/*`` id."""
    seeds: list[int] | None = None
    """Layout seeds, one task each (None: ``ragen_envs.EVAL_SEEDS``, the paper's 256 seeds 123..378)."""
    noise_seeds: list[int | None] | None = None
    """Noise seeds (FrozenLake slips, Bandit payouts), one per seed (None: each seed's own stream)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Constructor keywords for ``gym.make`` (``max_turns``, ``think``, ...)."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        from ragen_envs.envs.limits import validate_env_kwargs

        # the operator's own configuration (vf-eval flags, a TOML file): the gate every env kwarg passes
        validate_env_kwargs(self.env_id, self.env_kwargs, source="env_kwargs", operator=True)
        seeds = self.seeds if self.seeds is not None else list(EVAL_SEEDS)
        if self.noise_seeds is not None and len(self.noise_seeds) != len(seeds):
            raise ValueError(f"noise_seeds has {len(self.noise_seeds)} entries for {len(seeds)} seeds")
        for name, values in (("seeds", seeds), ("noise_seeds", self.noise_seeds or [])):
            for v in values:
                if v is not None and not 0 <= v < 2**32:
                    raise ValueError(f"{name} must be integers in [0, 2**32), got {v!r}")
        return self


class RagenTaskset(vf.Taskset[RagenTask, RagenTasksetConfig]):
    """One :class:`RagenTask` per seed; the prompt is built by resetting the env (cheap: a
    reset generates one layout), lazily, so ``-n`` builds only what it runs."""

    def load(self) -> Iterator[RagenTask]:
        config = self.config
        seeds = config.seeds if config.seeds is not None else list(EVAL_SEEDS)
        noise = config.noise_seeds if config.noise_seeds is not None else [None] * len(seeds)
        env = gym.make(config.env_id, **config.env_kwargs)
        try:
            for seed, noise_seed in zip(seeds, noise):
                obs, info = _reset(env, seed, noise_seed)
                name = f"{config.env_id}#seed={seed}" + ("" if noise_seed is None else f",noise_seed={noise_seed}")
                yield RagenTask(
                    RagenTaskData(id=name, name=name, prompt=obs, system_prompt=info["system_prompt"],
                                  env_id=config.env_id, seed=seed, noise_seed=noise_seed,
                                  env_kwargs=dict(config.env_kwargs)),
                    config.task,
                )
        finally:
            env.close()


def _reset(env: gym.Env, seed: int, noise_seed: int | None):
    return env.reset(seed=seed, options=None if noise_seed is None else {"noise_seed": noise_seed})


# --- the player's program ------------------------------------------------------------------


class RagenChatHarnessConfig(vf.HarnessConfig):
    request_timeout: float | None = Field(None, gt=0)
    """Seconds to wait for one completion (None: no limit; the agent's rollout timeout,
    ``--env.player.timeout.rollout``, bounds the whole exchange either way)."""


class RagenChatHarness(vf.Harness[RagenChatHarnessConfig]):
    """One chat completion per segment, made in this process through the interception
    endpoint (verifiers' contract: every model call goes through ``endpoint`` + ``secret``;
    the trace is the record). The request is ``{"model", "messages"}`` only: the eval's
    sampling settings are applied by the interception server."""

    APPENDS_SYSTEM_PROMPT = True  # the env's system prompt stays a system message
    SUPPORTS_RESUME = True  # each later segment replays the conversation (Harness.resume)
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict] = [] if system is None else [{"role": "system", "content": system}]
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [message_to_wire(m) for m in prompt]
        timeout = httpx.Timeout(self.config.request_timeout, connect=30.0)
        try:
            async with httpx.AsyncClient(timeout=timeout, verify=_ssl_context()) as http:
                response = await http.post(f"{endpoint.rstrip('/')}/chat/completions",
                                           json={"model": ctx.model, "messages": messages},
                                           headers={"Authorization": f"Bearer {secret}"})
        except httpx.TransportError as exc:
            return vf.ProgramResult(exit_code=MODEL_TRANSPORT_ERROR_EXIT_CODE, stdout="",
                                    stderr=f"{type(exc).__name__}: {exc}")
        if response.status_code != 200:
            return vf.ProgramResult(exit_code=1, stdout="", stderr=f"HTTP {response.status_code}: {response.text}")
        choices = response.json().get("choices") or [{}]
        return vf.ProgramResult(exit_code=0, stdout=(choices[0].get("message") or {}).get("content") or "", stderr="")


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One context for every call: building one (loading the CA bundle) is most of the cost
    of a fresh ``httpx.AsyncClient``, about as long as a whole turn otherwise."""
    return ssl.create_default_context()


# --- the episode ---------------------------------------------------------------------------


class RagenEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The one seat (``--env.player.*``): local runtime, the taskset's harness
    (:class:`RagenChatHarness`) unless ``--env.player.harness.id`` names another."""


class RagenEnv(vf.Env[RagenEnvConfig]):
    """One protocol episode per rollout, the env playing the user."""

    async def run(self, task: RagenTask, agents) -> None:
        data = task.data
        env = await asyncio.to_thread(gym.make, data.env_id, **data.env_kwargs)
        try:
            obs, info = await asyncio.to_thread(_reset, env, data.seed, data.noise_seed)
            if obs != data.prompt:
                raise RuntimeError(f"{data.name}: the env's first observation differs from the task's prompt "
                                   "(a different ragen-envs version or env_kwargs built the taskset)")
            record: dict[str, Any] = {
                "env_id": data.env_id, "seed": data.seed, "noise_seed": data.noise_seed,
                "rewards": [], "format_ok": [], "infos": [], "success": False,
                "terminated": False, "truncated": False, "final_observation": None, "ended_by": None,
            }
            async with agents.player.interaction(task) as interaction:
                interaction.trace.info["ragen"] = record
                segment = await interaction.turn()  # the prompt (obs_1) opens the exchange
                while not segment.terminated:
                    obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, _reply(segment))
                    record["rewards"].append(float(reward))
                    record["format_ok"].append(bool(info.get("format_ok", False)))
                    record["infos"].append(json_part(info))
                    record["success"] = bool(info.get("success", False))
                    if terminated or truncated:
                        record.update(terminated=bool(terminated), truncated=bool(truncated),
                                      final_observation=obs, ended_by="env")
                        break
                    segment = await interaction.turn(obs)
                else:  # the agent's run ended first (a verifiers limit, a failed model call)
                    record["ended_by"] = "agent"
        finally:
            env.close()


def _reply(segment) -> str:
    """The root reply's full text, unstripped (``Segment.last_reply`` strips it)."""
    for message in reversed(segment.messages):
        if message.role == "assistant":
            return content_text(message.content) if message.content is not None else ""
    return ""


def load_environment(env_id: str = "ragen/Sokoban-v0", *, seeds: list[int] | None = None,
                     noise_seeds: list[int | None] | None = None, player: vf.AgentConfig | None = None,
                     **env_kwargs: Any) -> RagenEnv:
    """The verifiers environment of ``env_id`` on ``seeds`` (default the 256 eval seeds);
    ``env_kwargs`` go to ``gym.make``; ``player`` overrides the seat's config (harness,
    runtime, limits). Needs the ``ragen_envs_verifiers`` package installed (verifiers
    resolves the taskset and harness by id; ``make verifiers-venv`` installs it)."""
    taskset = RagenTasksetConfig(id=TASKSET_ID, env_id=env_id, seeds=seeds, noise_seeds=noise_seeds,
                                 env_kwargs=env_kwargs)
    config = RagenEnvConfig(taskset=taskset, **({} if player is None else {"player": player}))
    return RagenEnv(config)
