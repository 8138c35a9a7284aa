"""Policies behind one interface, built from the spec strings the CLI takes.

``make_agent("expert", env=env)`` and ``make_agent("random", env=env, seed=0)`` now;
``openai:MODEL`` and ``hf:PATH`` arrive with the evaluation work.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from .base import Agent, Messages
from .simple import ExpertAgent, RandomAgent

__all__ = ["Agent", "ExpertAgent", "Messages", "RandomAgent", "make_agent", "AGENT_KINDS"]

AGENT_KINDS = ("expert", "random")


def make_agent(spec: str, env: gym.Env | None = None, **kwargs: Any) -> Agent:
    """Build an agent from a spec string (``expert``, ``random``)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"agent spec must be a non-empty string, got {spec!r}")
    kind, _, arg = spec.partition(":")
    if kind == "expert" and not arg:
        return ExpertAgent(env, **kwargs)
    if kind == "random" and not arg:
        return RandomAgent(env, **kwargs)
    raise ValueError(f"unknown agent spec {spec!r}; known: {', '.join(AGENT_KINDS)}")
