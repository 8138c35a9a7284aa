"""A group of rollouts of one initial state as a PettingZoo ``ParallelEnv``.

| | |
|---|---|
| Import | ``from ragen_envs.multiagent import parallel_env`` (needs ``pip install "ragen-envs[pz]"``) |
| API | Parallel (``env()`` gives the AEC view through ``parallel_to_aec``) |
| Agents | ``rollout_0`` ... ``rollout_{G-1}``, G = ``group_size`` |
| Observation space | per agent, the member env's ``Text`` (the next user message) |
| Action space | per agent, the member env's ``Text`` (the model's whole reply; any string) |
| State | ``state()``: every member's game state as text |

Every agent plays its own copy of the same ``ragen/*`` env. ``reset(seed=s)`` starts all of
them from the initial state of seed ``s``; each answers independently and leaves ``agents``
when its episode ends (its last step still reports it in every returned dict). This is a
GRPO / StarPO group as a standard multi-agent object::

    from ragen_envs.multiagent import parallel_env

    env = parallel_env("ragen/FrozenLake-v0", group_size=8, shared_noise=True)
    observations, infos = env.reset(seed=123)
    while env.agents:
        actions = {agent: policy(observations[agent]) for agent in env.agents}
        observations, rewards, terminations, truncations, infos = env.step(actions)

## Arguments

``parallel_env(env_id, group_size=8, shared_noise=True, render_mode=None, **env_kwargs)``:

- ``env_id``: a registered ``ragen/*`` id; ``env_kwargs`` go to ``gym.make`` for every member.
- ``shared_noise=True``: every member draws slips / bandit payouts from the same stream
  (common random numbers), so identical actions give identical outcomes and the spread of
  rewards inside the group comes from the policy alone. ``False``: member i draws from
  ``ragen_envs.vector.member_noise_seed(s, i)``, the rule ``make_vec`` uses.
- ``render_mode``: None or ``"ansi"`` (``render()`` returns ``state()``).

``reset(seed=None, options=None)``: with a seed, the group plays that seed; without one it
draws the next layout seed from a generator seeded by the last seeded reset (so a seeded group
reproduces its whole sequence of episodes, and all members always share the layout).
``options={"noise_seed": k}`` draws the noise from ``k`` instead of the seed's own stream
(member i: ``member_noise_seed(k, i)`` without shared noise); other option keys are ignored,
as PettingZoo's checkers pass arbitrary options. A seeded reset also seeds each agent's
action and observation space with ``s + i``.

Importing this module registers every ``ragen/*`` id in PettingZoo's parallel registry:
``pettingzoo.make("parallel", "ragen/Sokoban-v0", group_size=4)``.

PettingZoo's AEC ``api_test`` assumes numpy observations and cannot check text ones; the
Parallel checkers (``parallel_api_test``, ``parallel_seed_test``) pass.

## Version History

* ragen_group_v0: initial release (protocol 1.0).
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

try:
    import pettingzoo
    from pettingzoo import ParallelEnv
    from pettingzoo.utils.conversions import parallel_to_aec
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        'ragen_envs.multiagent needs PettingZoo: pip install "ragen-envs[pz]" (pettingzoo>=1.27)'
    ) from exc

from .envs.base import TextGameEnv
from .registration import ENV_SPECS
from .vector import member_noise_seed

__all__ = ["GroupRollout", "parallel_env", "env"]

_MAX_SEED = 2**32 - 1


def _check_seed(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value <= _MAX_SEED:
        raise ValueError(f"{name} must be an integer in [0, 2**32) or None, got {value!r}")
    return int(value)


def _make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` without Gymnasium's "out of date, consider upgrading" notice: an id kept on
    purpose beside a newer version (``ragen/FrozenLake-v0`` and ``ragen/LargeSokoban-v0``, the
    paper's games, beside -v1, the newest reference's) is not deprecated, and a group would repeat the notice per member."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is out of date", category=DeprecationWarning)
        return gym.make(env_id, **kwargs)


class GroupRollout(ParallelEnv[str, str, str]):
    """``group_size`` independent plays of one initial state; see the module docstring."""

    metadata = {"name": "ragen_group_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(
        self,
        env_id: str,
        group_size: int = 8,
        shared_noise: bool = True,
        render_mode: str | None = None,
        **env_kwargs: Any,
    ) -> None:
        if not isinstance(env_id, str) or not env_id:
            raise ValueError(f"env_id must be a registered ragen/* id, got {env_id!r}")
        if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
            raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
        if not isinstance(shared_noise, bool):
            raise ValueError(f"shared_noise must be True or False, got {shared_noise!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.env_id = env_id
        self.group_size = group_size
        self.shared_noise = shared_noise
        self.render_mode = render_mode
        first = _make(env_id, **env_kwargs)
        if not isinstance(first.unwrapped, TextGameEnv):
            first.close()
            raise ValueError(
                f"parallel_env needs a ragen/* text env, but {env_id!r} makes {type(first.unwrapped).__name__}"
            )
        self.members: list[gym.Env] = [first] + [_make(env_id, **env_kwargs) for _ in range(group_size - 1)]
        self.possible_agents: list[str] = [f"rollout_{i}" for i in range(group_size)]
        self.agents: list[str] = []
        self._index = {agent: i for i, agent in enumerate(self.possible_agents)}
        # One space object per agent, built once: PettingZoo requires identity-stable spaces
        # and seeds each agent's space on its own.
        self._observation_spaces = {a: m.observation_space for a, m in zip(self.possible_agents, self.members)}
        self._action_spaces = {a: m.action_space for a, m in zip(self.possible_agents, self.members)}
        self._seed_rng: np.random.Generator | None = None
        self.episode_seed: int | None = None
        self._started = False

    # ------------------------------------------------------------------ spaces
    def _check_agent(self, agent: Any) -> str:
        if not isinstance(agent, str) or agent not in self._index:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        return agent

    def observation_space(self, agent: str) -> gym.spaces.Space:
        """The agent's observation space (the same object on every call)."""
        return self._observation_spaces[self._check_agent(agent)]

    def action_space(self, agent: str) -> gym.spaces.Space:
        """The agent's action space (the same object on every call)."""
        return self._action_spaces[self._check_agent(agent)]

    # ------------------------------------------------------------------ API
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        """Start every agent from the initial state of one layout seed.

        Returns ``(observations, infos)``, one entry per agent; ``agents`` is full again.
        """
        if options is not None and not isinstance(options, dict):
            raise ValueError(f"options must be a dict or None, got {type(options).__name__}")
        if seed is not None:
            seed = _check_seed("seed", seed)
            self._seed_rng = seeding.np_random(seed)[0]
            episode_seed = seed
            for i, agent in enumerate(self.possible_agents):
                self._action_spaces[agent].seed(seed + i)
                self._observation_spaces[agent].seed(seed + i)
        else:
            if self._seed_rng is None:
                self._seed_rng = seeding.np_random()[0]
            episode_seed = int(self._seed_rng.integers(0, _MAX_SEED))
        noise_seed = (options or {}).get("noise_seed")
        if noise_seed is not None:
            noise_seed = _check_seed("options['noise_seed']", noise_seed)
        self.episode_seed = episode_seed
        observations, infos = {}, {}
        for i, (agent, member) in enumerate(zip(self.possible_agents, self.members)):
            member_options = None
            if self.shared_noise and noise_seed is not None:
                member_options = {"noise_seed": noise_seed}
            elif not self.shared_noise:
                base = episode_seed if noise_seed is None else noise_seed
                member_options = {"noise_seed": member_noise_seed(base, i)}
            observations[agent], infos[agent] = member.reset(seed=episode_seed, options=member_options)
        self.agents = list(self.possible_agents)
        self._started = True
        return observations, infos

    def step(
        self, actions: dict[str, str]
    ) -> tuple[dict[str, str], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        """One turn for every live agent: ``actions`` maps each live agent to its reply.

        Returns ``(observations, rewards, terminations, truncations, infos)`` keyed by the
        agents that were live; those whose episode ended leave ``agents``.
        """
        if not self.agents:
            raise RuntimeError("no live agents (the episodes have ended or never started): call reset() before step()")
        if not isinstance(actions, dict):
            raise ValueError(f"actions must be a dict {{agent: reply}}, got {type(actions).__name__}")
        missing = [a for a in self.agents if a not in actions]
        extra = [a for a in actions if a not in self.agents]
        if missing or extra:
            raise ValueError(
                f"actions must give one reply for each live agent {self.agents}; "
                f"missing {missing}, not live {extra}"
            )
        bad = {a: type(r).__name__ for a, r in actions.items() if not isinstance(r, str)}
        if bad:
            raise TypeError(f"each action must be the reply text (str), got {bad}")
        observations, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for agent in self.agents:
            member = self.members[self._index[agent]]
            obs, reward, terminated, truncated, info = member.step(actions[agent])
            observations[agent], rewards[agent], infos[agent] = obs, reward, info
            terminations[agent], truncations[agent] = terminated, truncated
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos

    def state(self) -> str:
        """Every member's current game state, labelled by agent (the ``ansi`` render)."""
        if not self._started:
            raise RuntimeError("call reset() before state()")
        return "\n\n".join(
            f"{agent}:\n{member.unwrapped.state_text()}" for agent, member in zip(self.possible_agents, self.members)
        )

    def render(self) -> str | None:
        """``state()`` with ``render_mode="ansi"``; None otherwise."""
        if self.render_mode == "ansi":
            return self.state()
        return None

    def close(self) -> None:
        for member in self.members:
            member.close()


def parallel_env(
    env_id: str, group_size: int = 8, shared_noise: bool = True, render_mode: str | None = None, **env_kwargs: Any
) -> GroupRollout:
    """A :class:`GroupRollout`: ``group_size`` agents playing one ``reset(seed=...)`` state."""
    return GroupRollout(env_id, group_size=group_size, shared_noise=shared_noise, render_mode=render_mode, **env_kwargs)


def env(
    env_id: str, group_size: int = 8, shared_noise: bool = True, render_mode: str | None = None, **env_kwargs: Any
):
    """The AEC view of :func:`parallel_env` (``pettingzoo.utils.parallel_to_aec``)."""
    return parallel_to_aec(parallel_env(env_id, group_size, shared_noise, render_mode, **env_kwargs))


def _register_with_pettingzoo() -> None:
    """Add every ``ragen/*`` id to PettingZoo's parallel registry (pettingzoo >= 1.27)."""
    registry = getattr(pettingzoo, "parallel_registry", None)
    register = getattr(pettingzoo, "register", None)
    if registry is None or register is None:
        return
    for spec in ENV_SPECS:
        if spec.id not in registry:
            register("parallel", spec.id, entry_point=f"{__name__}:parallel_env", kwargs={"env_id": spec.id})


_register_with_pettingzoo()
