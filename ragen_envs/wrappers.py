"""Gymnasium wrappers for the ``ragen/*`` environments.

:class:`VocabularyWrapper` redraws any grid env with other symbols (and, optionally, other
action names): the SokobanNewVocab generalisation test for every grid env::

    import gymnasium as gym
    import ragen_envs
    from ragen_envs.wrappers import VocabularyWrapper

    env = VocabularyWrapper(gym.make("ragen/FrozenLake-v0"), seed=7, rename_actions=True)
    obs, info = env.reset(seed=123)        # legend, grid, action list and parser all changed
    print(env.symbol_map, env.action_map)  # the drawn vocabulary (canonical -> shown)

It records its constructor arguments (``gymnasium.utils.RecordConstructorArgs``), so
``env.spec`` carries it as an additional wrapper and ``gym.make(env.spec)`` rebuilds the
same vocabulary.
"""

from __future__ import annotations

import string
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from .envs.base import TextGameEnv

__all__ = ["VocabularyWrapper", "SYMBOL_POOL", "ACTION_WORD_POOL", "COMPASS_ACTIONS"]

# The characters a seeded vocabulary draws grid symbols from: letters, digits and the
# punctuation that cannot be read as markup or structure. Left out: whitespace, quotes and
# the backtick, the backslash, ``< >`` (the answer tags), ``|`` (the action separator) and
# brackets (they read as grouping); "√" is left to the default vocabularies.
SYMBOL_POOL = string.ascii_uppercase + string.ascii_lowercase + string.digits + "!#$%&*+-./:;=?@^_~"

# Made-up action words for ``rename_actions=True``: they mean nothing, so a drawn name never
# hints at (or contradicts) the direction it stands for.
ACTION_WORD_POOL = (
    "Blick", "Brax", "Clov", "Dorn", "Drim", "Fesk", "Fonk", "Glim", "Grom", "Hulp", "Jarn",
    "Kesp", "Lorb", "Mivv", "Narp", "Pell", "Quib", "Rusk", "Sorn", "Tave", "Vosk", "Wemb",
    "Yarl", "Zeph",
)  # fmt: skip

# A meaningful renaming for the grid envs' moves: ``VocabularyWrapper(env, actions=COMPASS_ACTIONS)``.
COMPASS_ACTIONS = {"Up": "North", "Down": "South", "Left": "West", "Right": "East"}


def _grid_env(env: gym.Env) -> TextGameEnv:
    base = env.unwrapped
    if not isinstance(base, TextGameEnv):
        raise ValueError(f"VocabularyWrapper needs a ragen_envs environment, got {type(base).__name__}")
    if not base._legend():
        raise ValueError(
            f"VocabularyWrapper remaps grid symbols, and {type(base).__name__} has no grid legend; "
            "use it on a grid env such as ragen/Sokoban-v0 or ragen/FrozenLake-v0"
        )
    return base


def _check_mapping(name: str, value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping {{old: new}} or None, got {type(value).__name__}")
    return dict(value)


class VocabularyWrapper(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Draw a grid env with other symbols and, optionally, other action names.

    The legend, the grid, the action list, the instruction's example actions and the answer
    parser all follow (``TextGameEnv.set_vocabulary``); the old action names become invalid.
    The game, the rewards and the seeds are unchanged. The vocabulary is (re)applied at every
    :meth:`reset`, so the wrapper holds it even if something else changed the env's. It
    lives on the unwrapped env: ``env.unwrapped.set_vocabulary(None, None)`` restores the
    default one.

    Args:
        env: a ``ragen/*`` grid env (Sokoban, LargeSokoban, SokobanNewVocab, FrozenLake).
        symbols: ``{legend symbol: new single character}``; unmapped symbols stay.
        actions: ``{action name: new name}``; unmapped actions stay.
        seed: draw the vocabulary with ``np.random.default_rng(seed)``: every legend symbol
            not given in ``symbols`` gets a distinct character of :data:`SYMBOL_POOL` that
            the env does not already use; with ``rename_actions``, every action not given in
            ``actions`` gets a distinct word of :data:`ACTION_WORD_POOL`. Deterministic: the
            same env and seed always give the same vocabulary.
        rename_actions: also draw action names (needs ``seed``).

    Attributes:
        symbol_map: ``{canonical symbol: shown symbol}`` for every legend symbol.
        action_map: ``{canonical action: shown name}`` for every action.
    """

    def __init__(
        self,
        env: gym.Env,
        symbols: Mapping[str, str] | None = None,
        actions: Mapping[str, str] | None = None,
        seed: int | None = None,
        rename_actions: bool = False,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, symbols=symbols, actions=actions, seed=seed, rename_actions=rename_actions
        )
        gym.Wrapper.__init__(self, env)
        base = _grid_env(env)
        symbols = _check_mapping("symbols", symbols)
        actions = _check_mapping("actions", actions)
        if not isinstance(rename_actions, bool):
            raise ValueError(f"rename_actions must be True or False, got {rename_actions!r}")
        if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"seed must be an integer >= 0 or None, got {seed!r}")
        if rename_actions and seed is None:
            raise ValueError("rename_actions=True draws action names from the seed: pass seed=...")
        if seed is None and not symbols and not actions:
            raise ValueError("VocabularyWrapper needs symbols=..., actions=... or seed=... (nothing to remap)")

        legend = list(base._legend())
        names = list(base._action_names())
        symbols = dict(symbols or {})
        actions = dict(actions or {})
        if seed is not None:
            rng = np.random.default_rng(int(seed))
            symbols = {**self._draw_symbols(rng, base, legend, symbols), **symbols}
            if rename_actions:
                actions = {**self._draw_actions(rng, base, names, actions), **actions}
        # set_vocabulary validates everything (unknown keys, duplicates, bad characters).
        base.set_vocabulary(symbols, actions or None)
        self.symbol_map: dict[str, str] = {s: symbols.get(s, s) for s in legend}
        self.action_map: dict[str, str] = {n: actions.get(n, n) for n in names}

    @staticmethod
    def _draw_symbols(
        rng: np.random.Generator, base: TextGameEnv, legend: list[str], given: dict[str, str]
    ) -> dict[str, str]:
        todo = [s for s in legend if s not in given]
        taken = set(legend) | set(base.legend() or ()) | set(given.values())
        pool = [c for c in SYMBOL_POOL if c not in taken]
        if len(pool) < len(todo):  # only with huge legends: allow the env's own symbols back
            pool = [c for c in SYMBOL_POOL if c not in set(given.values())]
        picks = rng.choice(len(pool), size=len(todo), replace=False)
        return {s: pool[int(i)] for s, i in zip(todo, picks)}

    @staticmethod
    def _draw_actions(
        rng: np.random.Generator, base: TextGameEnv, names: list[str], given: dict[str, str]
    ) -> dict[str, str]:
        todo = [n for n in names if n not in given]
        taken = {n.lower() for n in names} | {n.lower() for n in base.action_names() or ()}
        taken |= {n.lower() for n in given.values() if isinstance(n, str)}
        pool = [w for w in ACTION_WORD_POOL if w.lower() not in taken]
        if len(pool) < len(todo):
            raise ValueError(
                f"{type(base).__name__} has {len(names)} actions, more than the {len(pool)} free words "
                "of ACTION_WORD_POOL; pass actions=... explicitly"
            )
        picks = rng.choice(len(pool), size=len(todo), replace=False)
        return {n: pool[int(i)] for n, i in zip(todo, picks)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Reset the env in this wrapper's vocabulary."""
        renamed = {n: new for n, new in self.action_map.items() if new != n}
        self.env.unwrapped.set_vocabulary(self.symbol_map, renamed or None)
        return self.env.reset(seed=seed, options=options)
