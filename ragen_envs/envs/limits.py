"""Bounds on the constructor keywords that arrive from outside the code: a client's OpenEnv
reset, ``--env-kwarg`` of the CLI commands, ``env_kwargs`` of config files and of a model's
saved protocol settings. One table, used everywhere such keywords arrive.

The envs themselves accept any value their game can run (a 60 x 60 Sokoban room with 20
boxes is a valid request, it just takes hours to generate); these bounds say what a server or
a command takes without the operator asking for more. Every keyword of every registered env is
in exactly one of three groups (a test checks this):

- :data:`DEFAULT_BOUNDS`: numbers (for ``dim_room``, each side) that must lie in ``[low,
  high]``; the operator widens one with ``--kwarg-limit NAME=HIGH`` or ``NAME=LOW..HIGH``;
- :data:`BOUNDED_BY_THE_ENV`: booleans, names from a fixed set (the gate checks those of
  :data:`CHOICE_KWARGS` itself), short fixed-size symbol tables,
  each refused by the env itself when out of its range;
- :data:`OPERATOR_ONLY`: keywords that open windows, read files or reach other hosts; a server
  never takes them from a client (commands take them from their operator).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .checks import check_bool

__all__ = ["DEFAULT_BOUNDS", "BOUNDED_BY_THE_ENV", "BOOLEAN_KWARGS", "CHOICE_KWARGS", "OPERATOR_ONLY", "accepted_kwargs", "check_env_kwargs",
           "parse_kwarg_limits", "bounds_text", "known_env_ids", "closest", "check_env_id", "validate_env_kwargs"]

DEFAULT_BOUNDS: dict[str, tuple[float, float]] = {
    # the episode budget (every env)
    "max_turns": (1, 100),
    "max_actions": (1, 1000),
    "max_actions_per_turn": (1, 100),
    "max_episode_steps": (1, 1000),
    "max_tokens": (1, 32768),
    "format_penalty": (-100.0, 100.0),
    # Sokoban: generation time grows steeply with the room and the boxes (16 x 16 with 4 boxes: < 1 s)
    "dim_room": (4, 16),
    "num_boxes": (1, 4),
    "search_depth": (1, 1000),
    # FrozenLake: maps are drawn until one has a path; few frozen cells make that rare
    "size": (2, 32),
    "p": (0.5, 1.0),
    "success_rate": (0.0, 1.0),
    # Bandit
    "low_payout": (-1000.0, 1000.0),
    "high_payout": (-1000.0, 1000.0),
    "high_prob": (0.0, 1.0),
    "low_name": (1, 64),  # characters
    "high_name": (1, 64),
    # envs on main after 51a9044 (Sokoban POMDP, LightsOut, Countdown): bounded here so they merge bounded
    "window": (1, 16),
    "scramble_depth": (0, 1000),
    "success_reward": (-100.0, 100.0),
    "score": (-100.0, 100.0),
    "format_score": (-100.0, 100.0),
    # 2048 (size: FrozenLake's bound above; the env itself takes at most 8)
    "two_prob": (0.0, 1.0),
    "invalid_move_reward": (-100.0, 100.0),
    "target_tile": (2, 1 << 20),
    # Sudoku (size: FrozenLake's bound above; the env itself takes 4 or 9)
    "placement_reward": (-100.0, 100.0),
    "completion_bonus": (-100.0, 100.0),
    "max_steps": (1, 1000),
    # WebShop
    "num_goals": (1, 100_000),
    "timeout": (0.001, 300.0),
    "retries": (0, 20),
}
_LENGTHS = {"low_name", "high_name"}  # bounds on len(value), not on the value

BOUNDED_BY_THE_ENV = frozenset({"think", "turn_limit_terminates", "prompt_style", "disable_env_checker", "symbols",
                                "legend_symbols", "slippery", "split", "tips", "permute_goals", "strict_search",
                                "show_position", "shaped_reward", "use_all_numbers", "seed",
                                "reference_b_turn", "log_reward", "observation_format", "difficulty", "instruction_style",
                                "frame_style"})
# names from a fixed set that the gate checks itself (one line with the closest choice), the
# same set for every env that takes them
CHOICE_KWARGS: dict[str, tuple[str, ...]] = {
    "observation_format": ("grid", "coord", "grid_coord"),
    "instruction_style": ("paper", "ragen2"),
    "frame_style": ("default", "reference"),
}
OPERATOR_ONLY = frozenset({"render_mode", "backend", "base_url", "backend_kwargs", "catalog"})
# the booleans among BOUNDED_BY_THE_ENV: true or false only (JSON / YAML ``"false"`` is a truthy string)
BOOLEAN_KWARGS = frozenset({"think", "turn_limit_terminates", "disable_env_checker", "slippery", "tips", "permute_goals",
                            "strict_search", "show_position", "shaped_reward", "use_all_numbers",
                            "reference_b_turn", "log_reward"})


def _number(value: Any) -> float | None:
    """``value`` as a number, or None when it is none (the env refuses it with its own message)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if not isinstance(value, int) else value
    if isinstance(value, str) and len(value) <= 40:  # the envs accept "6" for a room side
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def check_env_kwargs(kwargs: Mapping[str, Any], bounds: Mapping[str, tuple[float, float]] | None = None) -> None:
    """Raise ``ValueError`` (one line naming the keyword, its bound and the flag that widens
    it) when a keyword of ``kwargs`` lies outside ``bounds`` (default :data:`DEFAULT_BOUNDS`)."""
    table = DEFAULT_BOUNDS if bounds is None else bounds
    for name, value in kwargs.items():
        if name not in table:
            continue
        low, high = table[name]
        if name in _LENGTHS:
            values = [len(value)] if isinstance(value, str) else []
        elif name == "dim_room":
            try:
                values = [_number(v) for v in value] if not isinstance(value, (str, bytes)) and len(value) <= 2 else []
            except TypeError:
                values = []
        else:
            values = [_number(value)]
        for v in values:
            if v is None:
                continue  # not a number: the env says what it wants
            if isinstance(v, float) and math.isnan(v) or not low <= v <= high:
                what = "the length of " + name if name in _LENGTHS else ("each side of dim_room" if name == "dim_room"
                                                                         else name)
                shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
                flag = f"{name}=HIGH" if v == v and v > high else f"{name}=LOW..{_fmt(high)}"
                raise ValueError(f"{name}={shown}: {what} must be in [{_fmt(low)}, {_fmt(high)}] "
                                 f"(the operator widens it: --kwarg-limit {flag})")


def parse_kwarg_limits(pairs: list[str] | None) -> dict[str, tuple[float, float]]:
    """``["max_turns=500", "p=0.1..1"]`` -> :data:`DEFAULT_BOUNDS` with those bounds replaced
    (``NAME=HIGH`` keeps the default low end). ``ValueError`` on anything else."""
    out = dict(DEFAULT_BOUNDS)
    for pair in pairs or []:
        name, sep, spec = pair.partition("=")
        if not sep or name not in DEFAULT_BOUNDS:
            raise ValueError(f"--kwarg-limit expects NAME=HIGH or NAME=LOW..HIGH with NAME one of "
                             f"{', '.join(sorted(DEFAULT_BOUNDS))}; got {pair!r}")
        low_text, dots, high_text = spec.partition("..")
        try:
            low = float(low_text) if dots else out[name][0]
            high = float(high_text if dots else spec)
        except ValueError:
            raise ValueError(f"--kwarg-limit {pair!r}: the bounds must be numbers") from None
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise ValueError(f"--kwarg-limit {pair!r}: need finite LOW <= HIGH")
        out[name] = (low, high)
    return out


def bounds_text(bounds: Mapping[str, tuple[float, float]] | None = None) -> str:
    """``max_turns 1..100, ...``: the table for help texts and startup lines."""
    table = DEFAULT_BOUNDS if bounds is None else bounds
    return ", ".join(f"{k} {_fmt(lo)}..{_fmt(hi)}" for k, (lo, hi) in table.items())


# gym.make's own keywords, accepted for every id
_MAKE_KWARGS = frozenset({"render_mode", "max_episode_steps", "disable_env_checker"})


def accepted_kwargs(env_id: str) -> frozenset[str]:
    """The constructor keywords of ``env_id``'s class (its ``__init__`` and, through
    ``**kwargs``, its bases') plus gym.make's own."""
    import inspect

    import gymnasium as gym
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


def known_env_ids() -> list[str]:
    """The registered ``ragen/*`` ids, in registration order."""
    import gymnasium as gym  # the ids are registered by ``import ragen_envs``, this package's parent

    return [k for k in gym.registry if k.startswith("ragen/")]


def closest(name: str, choices: "list[str] | frozenset[str]") -> str | None:
    """The choice ``name`` most likely meant (a typo, another case, another version), or None."""
    import difflib

    choices = sorted(choices)
    folded = {c.lower(): c for c in choices}
    if isinstance(name, str) and name.lower() in folded:
        return folded[name.lower()]
    hits = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.6)
    return hits[0] if hits else None


def _did_you_mean(name: Any, choices) -> str:
    hit = closest(name, choices)
    return f" (did you mean {hit!r}?)" if hit else ""


def check_env_id(env_id: Any, source: str | None = None) -> str:
    """``env_id`` when it is a registered ``ragen/*`` id; else ValueError naming the closest one."""
    known = known_env_ids()
    if isinstance(env_id, str) and env_id in known:
        return env_id
    shown = repr(env_id) if len(repr(env_id)) <= 80 else repr(env_id)[:77] + "..."
    return _fail(f"{source + ': ' if source else ''}unknown environment {shown}{_did_you_mean(env_id, known) if isinstance(env_id, str) else ''}; "
                 f"known: {', '.join(known)} (see `ragen list`)")


def _fail(message: str):
    raise ValueError(message)


def validate_env_kwargs(env_id: str, kwargs: Any, *, source: str, operator: bool = False,
                        bounds: Mapping[str, tuple[float, float]] | None = None) -> dict[str, Any]:
    """The one gate for constructor keywords that arrive from outside the code: a copy of
    ``kwargs`` when every keyword is fit for ``gym.make(env_id, **kwargs)``, else ValueError
    with one line that names ``source`` (e.g. ``"--env-kwarg"``, ``"dataset row 3"``,
    ``"runs/x/model/ragen_protocol.json"``), the keyword and what is wrong.

    Checked, in order: ``env_id`` is registered; ``kwargs`` is a mapping of string keys; every
    key is a keyword of ``env_id`` (an unknown one is named with the closest valid one);
    :data:`OPERATOR_ONLY` keys only when ``operator`` is true (the command line of the person
    running the process: files and clients never open windows, read files or reach other hosts
    through it); :data:`CHOICE_KWARGS` are one of their names; :data:`BOOLEAN_KWARGS` are booleans; numbers lie within ``bounds`` (default
    :data:`DEFAULT_BOUNDS`). The constructors check the rest of each value's type
    (``ragen_envs.envs.checks``), so ``gym.make`` refuses the same values. numpy scalars come
    back as Python's.
    """
    check_env_id(env_id, source)
    at = f"{source}: " if source else ""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        _fail(f"{at}env kwargs must be an object of KEY: VALUE, got {type(kwargs).__name__}")
    bad_keys = [k for k in kwargs if not isinstance(k, str)]
    if bad_keys:
        _fail(f"{at}env kwarg names must be strings, got {bad_keys[0]!r}")
    accepted = accepted_kwargs(env_id)
    allowed = accepted if operator else accepted - OPERATOR_ONLY
    for name in kwargs:
        if name in OPERATOR_ONLY and not operator and name in accepted:
            _fail(f"{at}{name} is an operator-only setting, never taken from a file or a client "
                  f"(the operator gives it on the command line: --env-kwarg {name}=...)")
        if name not in allowed:
            _fail(f"{at}unknown keyword {name!r} for {env_id}{_did_you_mean(name, allowed)}; "
                  f"accepted: {', '.join(sorted(allowed))}")
    for name in CHOICE_KWARGS.keys() & kwargs.keys():
        choices, value = CHOICE_KWARGS[name], kwargs[name]
        if not isinstance(value, str) or value not in choices:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            hint = _did_you_mean(value, choices) if isinstance(value, str) else ""
            _fail(f"{at}{name} must be one of {', '.join(choices)}, got {shown}{hint}")
    for name in BOOLEAN_KWARGS.intersection(kwargs):
        try:
            check_bool(name, kwargs[name])
        except ValueError as exc:
            _fail(f"{at}{exc}")
    try:
        check_env_kwargs(kwargs, bounds)
    except ValueError as exc:
        _fail(f"{at}{exc}")
    return {name: _plain(value) for name, value in kwargs.items()}


def _plain(value: Any) -> Any:
    """numpy scalars (also inside a list or tuple, e.g. ``dim_room``) as Python's, so the kwargs
    encode as JSON and compare equal to the same values read back."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value
