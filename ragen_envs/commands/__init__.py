"""Subcommands of the ``ragen`` CLI (see ``ragen_envs/cli.py``)."""

from __future__ import annotations

import gymnasium as gym

from ..cli import CLIError

__all__ = ["make_env_or_fail", "parse_env_kwargs", "add_kwarg_limit_flag", "kwarg_bounds_or_fail",
           "check_env_kwargs_or_fail", "validate_env_kwargs_or_fail"]


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


def validate_env_kwargs_or_fail(env_id: str, kwargs: dict | None, bounds: dict | None = None, *,
                                source: str = "--env-kwarg", operator: bool = True) -> dict:
    """:func:`ragen_envs.envs.limits.validate_env_kwargs` as a one-line CLIError: the one gate
    for env kwargs whatever their source (the command line and ``--config`` files are the
    operator's; dataset rows and model folders are not, see docs/protocol.md)."""
    from ..envs.limits import validate_env_kwargs

    try:
        return validate_env_kwargs(env_id, kwargs, source=source, operator=operator, bounds=bounds)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def make_env_or_fail(env_id: str, bounds: dict | None = None, *, source: str = "--env-kwarg", operator: bool = True,
                     **kwargs) -> gym.Env:
    """``gym.make`` for a ``ragen/*`` id, turning unknown ids (with the closest one named),
    kwargs that :func:`validate_env_kwargs_or_fail` refuses (outside ``bounds``: the default
    bounds of ``ragen_envs.envs.limits`` when None) and values the env refuses into a CLIError."""
    validate_env_kwargs_or_fail(env_id, kwargs, bounds, source=source, operator=operator)
    try:
        return gym.make(env_id, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CLIError(f"{source}: {exc}" if kwargs else str(exc)) from None


def parse_env_kwargs(pairs: list[str] | None, flag: str = "--env-kwarg") -> dict:
    """``["max_turns=3", "think=false"]`` -> ``{"max_turns": 3, "think": False}`` (JSON values,
    bare strings allowed); ``flag`` names the option in the error for a pair without ``=``."""
    import json

    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CLIError(f"{flag} expects KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value.lower() if value.lower() in ("true", "false", "null") else value)
        except (ValueError, RecursionError):  # not JSON (or a 5,000-digit number): the bare string
            out[key] = value
    return out
