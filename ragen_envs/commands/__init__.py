"""Subcommands of the ``ragen`` CLI (see ``ragen_envs/cli.py``)."""

from __future__ import annotations

import gymnasium as gym

from ..cli import CLIError

__all__ = ["make_env_or_fail", "parse_env_kwargs", "add_kwarg_limit_flag", "kwarg_bounds_or_fail",
           "check_env_kwargs_or_fail"]


def add_kwarg_limit_flag(parser) -> None:
    """``--kwarg-limit NAME=HIGH`` (or ``NAME=LOW..HIGH``), repeatable: widen a bound of
    ``ragen_envs.envs.limits`` for the env kwargs this command takes."""
    from ..envs.limits import bounds_text

    parser.add_argument("--kwarg-limit", action="append", metavar="NAME=HIGH",
                        help="widen the bound on an env kwarg (NAME=HIGH or NAME=LOW..HIGH), repeatable; "
                             f"defaults: {bounds_text()}".replace("%", "%%"))


def kwarg_bounds_or_fail(pairs: list[str] | None) -> dict:
    """The bounds table with ``--kwarg-limit`` applied; a CLIError on a bad flag."""
    from ..envs.limits import parse_kwarg_limits

    try:
        return parse_kwarg_limits(pairs)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def check_env_kwargs_or_fail(kwargs: dict, bounds: dict | None = None) -> None:
    """:func:`ragen_envs.envs.limits.check_env_kwargs` as a one-line CLIError."""
    from ..envs.limits import check_env_kwargs

    try:
        check_env_kwargs(kwargs, bounds)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def make_env_or_fail(env_id: str, bounds: dict | None = None, **kwargs) -> gym.Env:
    """``gym.make`` for a ``ragen/*`` id, turning unknown ids, kwargs outside ``bounds`` (the
    default bounds of ``ragen_envs.envs.limits`` when None) and bad kwargs into a CLIError."""
    import ragen_envs

    known = [s.id for s in ragen_envs.ENV_SPECS]
    if env_id not in known:
        raise CLIError(f"unknown environment {env_id!r}; known: {', '.join(known)} (see `ragen list`)")
    check_env_kwargs_or_fail(kwargs, bounds)
    try:
        return gym.make(env_id, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None


def parse_env_kwargs(pairs: list[str] | None) -> dict:
    """``["max_turns=3", "think=false"]`` -> ``{"max_turns": 3, "think": False}`` (JSON values,
    bare strings allowed)."""
    import json

    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CLIError(f"--env-kwarg expects KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value.lower() if value.lower() in ("true", "false", "null") else value)
        except json.JSONDecodeError:
            out[key] = value
    return out
