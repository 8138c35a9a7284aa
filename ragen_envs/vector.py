"""Vector environments of groups: G copies of each initial state, for GRPO / StarPO groups."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["make_vec", "GroupSeeding", "member_noise_seed", "episode_seed"]


def member_noise_seed(seed: int, member: int) -> int:
    """The noise seed of group member ``member`` when a group does not share noise.

    ``SeedSequence([seed, member])``'s first 32-bit word: independent of the layout seed's
    own stream and of PYTHONHASHSEED.
    """
    return int(np.random.SeedSequence([int(seed), int(member)]).generate_state(1)[0])


def episode_seed(base: int, k: int) -> int:
    """The layout seed of the k-th unseeded reset after ``reset(seed=base)``.

    ``SeedSequence([base, k, 1])``'s first 32-bit word. Every member of a group got the same
    ``base``, so their k-th episodes share a layout even when autoreset restarts members at
    different times.
    """
    return int(np.random.SeedSequence([int(base), int(k), 1]).generate_state(1)[0])


class GroupSeeding(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """A group member.

    * Unseeded resets (including Gymnasium's autoreset) use :func:`episode_seed` of the last
      seeded reset, so all members of a group play the same sequence of initial states.
    * ``shared_noise=False``: slips / payouts come from :func:`member_noise_seed` (seed,
      member) instead of the seed's own stream; an explicit ``options["noise_seed"] = k``
      becomes ``member_noise_seed(k, member)``.
    """

    def __init__(self, env: gym.Env, member: int, shared_noise: bool = True) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, member=member, shared_noise=shared_noise)
        gym.Wrapper.__init__(self, env)
        self.member = member
        self.shared_noise = shared_noise
        self._base: int | None = None
        self._count = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._base, self._count = int(seed), 0
        elif self._base is not None:
            self._count += 1
            seed = episode_seed(self._base, self._count)
        if seed is not None and not self.shared_noise:
            options = dict(options or {})
            noise = options.get("noise_seed")
            options["noise_seed"] = member_noise_seed(seed if noise is None else noise, self.member)
        return self.env.reset(seed=seed, options=options)


class _GroupSeeds(gym.vector.VectorWrapper):
    """Maps ``reset(seed=s)`` to ``[s]*G + [s+1]*G + ...``: group g plays seed s + g."""

    def __init__(self, env: gym.vector.VectorEnv, group_size: int) -> None:
        super().__init__(env)
        self.group_size = group_size

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        if isinstance(seed, (int, np.integer)):
            seed = [int(seed) + i // self.group_size for i in range(self.num_envs)]
        return self.env.reset(seed=seed, options=options)


def make_vec(
    env_id: str,
    num_envs: int,
    group_size: int = 1,
    vectorization_mode: str = "sync",
    shared_noise: bool = True,
    vector_kwargs: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs // group_size`` groups of ``group_size`` copies.

    ``reset(seed=s)`` gives every member of group g the initial state of seed ``s + g``
    (a list of seeds is passed through unchanged); later unseeded resets and autoresets give
    the members of a group the same sequence of layouts (:func:`episode_seed`). ``shared_noise=True``: members share the
    seed's noise stream (common random numbers); False: member i draws from
    :func:`member_noise_seed`. ``vectorization_mode="async"`` takes Gymnasium's
    ``vector_kwargs`` (shared memory on by default: exact, see ``ragen_envs.envs.space``).

    Every id's Gymnasium ``vector_entry_point`` is this function:
    ``gym.make_vec(id, n, vectorization_mode="vector_entry_point", group_size=G)`` (and
    ``gym.make_vec(id, n)``, whose default mode is the entry point when one is registered).
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    if not isinstance(group_size, int) or group_size < 1 or num_envs % group_size:
        raise ValueError(f"group_size must be a positive divisor of num_envs={num_envs}, got {group_size!r}")
    if vectorization_mode not in ("sync", "async"):
        raise ValueError(f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}")
    vector_kwargs = dict(vector_kwargs or {})

    def thunk(member: int):
        def make() -> gym.Env:
            return GroupSeeding(gym.make(env_id, **env_kwargs), member, shared_noise)

        return make

    fns = [thunk(i % group_size) for i in range(num_envs)]
    cls = gym.vector.SyncVectorEnv if vectorization_mode == "sync" else gym.vector.AsyncVectorEnv
    return _GroupSeeds(cls(fns, **vector_kwargs), group_size)


# ---------------------------------------------------------------------- Gymnasium vector entry points
# ``register(..., vector_entry_point="ragen_envs.vector:make_vec_Sokoban_v0")``: a string keeps
# every EnvSpec JSON-serialisable; Gymnasium calls it as ``creator(num_envs=n, **kwargs)`` with
# the id's registered kwargs and the user's, which ``make_vec`` hands to ``gym.make(id)``.
# The names come from ``registration.vector_entry_point_name``.


def __getattr__(attr: str):
    from .registration import ENV_SPECS, vector_entry_point_name

    for spec in ENV_SPECS:
        if vector_entry_point_name(spec.id) == attr:
            def creator(num_envs: int = 1, **kwargs: Any) -> gym.vector.VectorEnv:
                return make_vec(spec.id, num_envs, **kwargs)

            creator.__name__ = creator.__qualname__ = attr
            creator.__doc__ = f"``make_vec({spec.id!r}, num_envs, **kwargs)``: the id's Gymnasium vector entry point."
            return creator
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
