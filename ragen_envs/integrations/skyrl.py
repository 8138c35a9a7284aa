"""SkyRL-gym: every ``ragen/*`` id in ``skyrl_gym``'s registry, no glue to write.

Importing this module registers every id (``register_all()`` does it again idempotently)::

    import skyrl_gym
    import ragen_envs.integrations.skyrl            # registers ragen/Sokoban-v0, ...

    env = skyrl_gym.make("ragen/Sokoban-v0", extras={"seed": 123})
    messages, metadata = env.init([])               # [system, user(first observation)]
    out = env.step("<think>...</think><answer>Down</answer>")   # observations, reward, done, metadata

SkyRL's generator builds each env as ``skyrl_gym.make(env_class, env_config=..., extras=row)``:

* ``extras`` (the dataset row) carries the episode: ``seed`` (the layout seed; rows with one
  seed are one group's initial state), ``noise_seed`` and ``env_kwargs`` (constructor keywords),
  read from the row itself or its ``extra_info`` dict, as SkyRL datasets nest them;
* ``env_config`` (SkyRL's ``environment.skyrl_gym.<id>`` section) gives constructor keywords
  for every episode of that id (``env_kwargs`` of a row win).

``init(prompt)`` ignores the dataset prompt: the env writes its own system prompt and first
observation (the protocol's text). ``step(reply)`` hands the whole reply to ``env.step``: the
reward is the turn's (game reward + format penalty), ``done`` = terminated or truncated, the
next user message is the env's observation (none once done; the final ``Reward:`` text is in
``metadata["observation"]``), ``metadata`` is the JSON-safe ``info`` plus ``observation``,
``terminated`` and ``truncated``. ``get_metrics()`` reports ``return``, ``success`` and
``turns``.
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.registration import register, registry
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("ragen_envs.integrations.skyrl needs skyrl-gym: pip install 'ragen-envs[skyrl]'") from e

from . import json_part
from ..registration import ENV_SPECS

__all__ = ["RagenSkyRLEnv", "register_all", "episode_extras"]

_EPISODE_KEYS = ("seed", "noise_seed", "env_kwargs")


def episode_extras(seed: int, noise_seed: int | None = None, env_kwargs: Mapping[str, Any] | None = None) -> dict:
    """The ``extras`` (dataset-row fields) of one episode."""
    out: dict[str, Any] = {"seed": seed}
    if noise_seed is not None:
        out["noise_seed"] = noise_seed
    if env_kwargs:
        out["env_kwargs"] = dict(env_kwargs)
    return out


def _as_dict(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if isinstance(value, Mapping) or hasattr(value, "items"):
        return {str(k): v for k, v in value.items()}
    raise ValueError(f"{what} must be a mapping, got {type(value).__name__}")


class RagenSkyRLEnv(BaseTextEnv):
    """One ``ragen/*`` env as a SkyRL ``BaseTextEnv`` (see the module docstring)."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None, *, env_id: str) -> None:
        super().__init__()
        if env_id not in gym.registry:
            raise ValueError(f"unknown environment {env_id!r}")
        extras = _as_dict(extras, "extras")
        nested = _as_dict(extras.get("extra_info"), "extras['extra_info']")
        episode = {k: extras[k] if k in extras else nested[k] for k in _EPISODE_KEYS if k in extras or k in nested}
        if "seed" not in episode:
            raise ValueError(f"{env_id}: extras must carry the episode's 'seed' (or extras['extra_info']['seed'])")
        kwargs = {**_as_dict(env_config, "env_config"), **_as_dict(episode.get("env_kwargs"), "env_kwargs")}
        self.env_id = env_id
        self.seed = episode["seed"]
        self.noise_seed = episode.get("noise_seed")
        self.env = gym.make(env_id, **kwargs)
        self.max_turns = self.env.unwrapped.budget.max_turns
        self.episode_return = 0.0
        self.success = False

    def init(self, prompt: Any = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        options = None if self.noise_seed is None else {"noise_seed": self.noise_seed}
        obs, info = self.env.reset(seed=self.seed, options=options)
        self.turns, self.episode_return, self.success = 0, 0.0, False
        messages = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs}]
        return messages, json_part(info)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self.episode_return += float(reward)
        self.success = bool(info["success"])
        done = bool(terminated or truncated)
        metadata = {**json_part(info), "observation": obs, "terminated": bool(terminated), "truncated": bool(truncated)}
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": obs}],
            reward=float(reward),
            done=done,
            metadata=metadata,
            postprocessed_action=None,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"return": self.episode_return, "success": float(self.success), "turns": self.turns}

    def close(self) -> None:
        self.env.close()


def register_all() -> None:
    """Register every ``ragen/*`` id with ``skyrl_gym`` (idempotent; importing this module
    calls it)."""
    for spec in ENV_SPECS:
        if spec.id not in registry:
            register(id=spec.id, entry_point="ragen_envs.integrations.skyrl:RagenSkyRLEnv", kwargs={"env_id": spec.id})


register_all()
