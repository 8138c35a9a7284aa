"""GEM (``gem-llm``): every ``ragen/*`` id in GEM's registry, groups in ``gem.make_vec``.

Importing this module registers every id (``register_all()`` does it again idempotently)::

    import gem
    import ragen_envs.integrations.gem               # registers ragen/Sokoban-v0, ...

    env = gem.make("ragen/Sokoban-v0", seed=123)
    obs, info = env.reset()                          # the first reset plays seed 123
    obs, reward, terminated, truncated, info = env.step("<think>...</think><answer>Down</answer>")

An env is the Gymnasium env (``gym.make(id, **kwargs)``: same text, rewards, ``info``) behind
GEM's API: ``reset(seed=None)`` (GEM has no options), ``step(reply)``, ``spawn()``,
``sample_random_action()``. Constructor keywords:

* ``seed``: the seed of the env's episodes (what ``gem.make_vec(..., seed=s)`` passes as
  ``s + i``): the first ``reset()`` without a seed plays ``seed``; the k-th later unseeded reset
  (GEM's autoreset) plays ``ragen_envs.vector.episode_seed(seed, k)``, so envs built with one
  seed play one sequence of initial states. ``reset(seed=t)`` restarts the sequence from ``t``.
* ``noise_seed``: the noise stream (slips, bandit draws) of the first episode (default: the
  layout seed's own stream).
* ``member`` / ``shared_noise``: a group member's index; ``shared_noise=False`` draws its noise
  from ``member_noise_seed(seed, member)`` (``docs/groups.md``).
* anything else: the Gymnasium env's keywords (``max_turns=3``, ``think=False``, ...).

Groups in ``gem.make_vec``: :func:`group_vec_kwargs` gives each member its group's seed::

    envs = gem.make_vec(["ragen/Sokoban-v0"] * 8, vec_kwargs=group_vec_kwargs(8, group_size=4, seed=123))
    obs, infos = envs.reset()                        # envs 0-3 play seed 123, envs 4-7 seed 124
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

try:
    import gem
    from gem.envs.registration import ENV_REGISTRY
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("ragen_envs.integrations.gem needs gem-llm: pip install 'ragen-envs[gem]'") from e

from ..envs.base import check_seed
from ..protocol import format_answer
from ..registration import ENV_SPECS
from ..vector import GroupSeeding

__all__ = ["RagenGemEnv", "group_vec_kwargs", "register_all"]


class RagenGemEnv(gem.Env):
    """One ``ragen/*`` env (``gym_id``) behind GEM's ``Env`` API (see the module docstring)."""

    def __init__(self, gym_id: str, seed: int | None = None, noise_seed: int | None = None, member: int = 0,
                 shared_noise: bool = True, **env_kwargs: Any) -> None:
        super().__init__()
        if gym_id not in gym.registry:
            raise ValueError(f"unknown environment {gym_id!r}")
        env_id = gym_id
        if not isinstance(member, int) or isinstance(member, bool) or member < 0:
            raise ValueError(f"member must be an integer >= 0, got {member!r}")
        self.gym_id = self.env_id = env_id  # gem.make sets env_id too
        self._config = dict(seed=seed, noise_seed=noise_seed, member=member, shared_noise=shared_noise, **env_kwargs)
        self._next_seed = None if seed is None else check_seed("seed", seed)
        self._next_noise = None if noise_seed is None else check_seed("noise_seed", noise_seed)
        self.env = GroupSeeding(gym.make(env_id, **env_kwargs), member, shared_noise)
        self._rng = np.random.default_rng(self._next_seed)
        self._episode: tuple[int, int | None] | None = None

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        seed = self._next_seed if seed is None else check_seed("seed", seed)
        options = None if self._next_noise is None else {"noise_seed": self._next_noise}
        self._next_seed = self._next_noise = None
        obs, info = self.env.reset(seed=seed, options=options)
        self._episode = (info["seed"], options and options["noise_seed"])
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self.env.step(action)

    def sample_random_action(self) -> str:
        """A well-formed reply with one random action (WebShop: one of the page's actions)."""
        base = self.env.unwrapped
        names = base.action_names()
        if names is None:
            names = base.available_actions() or ["search[item]"]
        return format_answer([names[int(self._rng.integers(len(names)))]], "random", base.think)

    def spawn(self, same_state: bool = False, **kwargs: Any) -> "RagenGemEnv":
        """A new env of the same configuration (``kwargs`` override it). ``same_state=True``:
        its first reset plays this env's current initial state (layout and noise seed)."""
        config = {**self._config, **kwargs}
        if same_state:
            if self._episode is None:
                raise RuntimeError("spawn(same_state=True) needs an episode: call reset() first")
            config["seed"], config["noise_seed"] = self._episode
        return RagenGemEnv(self.gym_id, **config)

    def close(self) -> None:
        self.env.close()


def group_vec_kwargs(num_envs: int, group_size: int = 1, seed: int = 0, shared_noise: bool = True) -> list[dict]:
    """``vec_kwargs`` for ``gem.make_vec``: env i is member ``i % group_size`` of group
    ``i // group_size``, which plays seed ``seed + group`` (as ``ragen_envs.make_vec``)."""
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    if not isinstance(group_size, int) or group_size < 1 or num_envs % group_size:
        raise ValueError(f"group_size must be a positive divisor of num_envs={num_envs}, got {group_size!r}")
    check_seed("seed", seed)
    return [{"seed": seed + i // group_size, "member": i % group_size, "shared_noise": shared_noise}
            for i in range(num_envs)]


def register_all() -> None:
    """Register every ``ragen/*`` id with GEM (idempotent; importing this module calls it)."""
    for spec in ENV_SPECS:
        if spec.id not in ENV_REGISTRY:
            gem.register(spec.id, entry_point="ragen_envs.integrations.gem:RagenGemEnv", gym_id=spec.id)


register_all()
