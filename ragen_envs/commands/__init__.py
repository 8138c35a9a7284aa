"""Subcommands of the ``ragen`` CLI (see ``ragen_envs/cli.py``)."""

from __future__ import annotations

import gymnasium as gym

from ..cli import CLIError

__all__ = ["make_env_or_fail", "parse_env_kwargs"]


def make_env_or_fail(env_id: str, **kwargs) -> gym.Env:
    """``gym.make`` for a ``ragen/*`` id, turning unknown ids and bad kwargs into a CLIError."""
    import ragen_envs

    known = [s.id for s in ragen_envs.ENV_SPECS]
    if env_id not in known:
        raise CLIError(f"unknown environment {env_id!r}; known: {', '.join(known)} (see `ragen list`)")
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
