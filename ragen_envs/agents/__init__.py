"""Policies behind one interface, built from the spec strings the CLI takes.

=================  ===========================================================================
spec               agent
=================  ===========================================================================
``expert``         the exact solvers (needs ``env=``)
``random``         uniformly random well-formed answers (needs ``env=``; ``seed=``)
``openai:MODEL``   any OpenAI-compatible chat endpoint through the official async client
                   (``base_url=``, ``api_key_env=``, ``temperature=``, ...; the ``api`` extra)
``hf:PATH``        a local transformers causal LM with batched generation (the ``train`` extra)
=================  ===========================================================================

Model agents also offer ``areply(messages, think=...) -> Reply``: the text handed to the env
plus the raw reply, token usage and latency, which the evaluator records per turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from .base import Agent, Messages
from .simple import ExpertAgent, RandomAgent

__all__ = [
    "AGENT_KINDS",
    "THINK_PREFIX_MODES",
    "Agent",
    "AgentFatalError",
    "AgentRequestError",
    "ExpertAgent",
    "Messages",
    "RandomAgent",
    "Reply",
    "complete_reply",
    "make_agent",
]

AGENT_KINDS = ("expert", "random", "openai:MODEL", "hf:PATH")
THINK_PREFIX_MODES = ("auto", "always", "never")


@dataclass
class Reply:
    """One model reply as the evaluator records it.

    ``text`` is what is sent to ``env.step`` (the raw reply, completed by
    :func:`complete_reply`); ``raw`` is the model's text exactly as received. ``usage`` holds
    ``prompt_tokens`` / ``completion_tokens`` / ``total_tokens`` (None when unknown) and
    ``usage_source`` says who counted them (``"api"`` or ``"tokenizer"``).
    """

    text: str
    raw: str
    usage: dict[str, int] | None = None
    usage_source: str | None = None
    latency_s: float = 0.0
    attempts: int = 1
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The per-turn record stored in ``Episode.meta["turns"]``."""
        out = {
            "raw_response": self.raw,
            "usage": self.usage,
            "usage_source": self.usage_source,
            "latency_s": round(self.latency_s, 6),
            "attempts": self.attempts,
            "finish_reason": self.finish_reason,
        }
        out.update(self.extra)
        return out


class AgentRequestError(RuntimeError):
    """A request that could not be completed (retries exhausted, or rejected as invalid).

    The evaluator records the episode as an *error*, apart from the model's failures.
    """


class AgentFatalError(RuntimeError):
    """A failure that every further request would repeat (bad key, unknown model): stop the run."""


def complete_reply(text: str, think: bool = True, mode: str = "auto") -> str:
    """Put back the opening tag a reference prompt forces before the reply.

    The reference's training prompt ends with ``<think>`` (``<answer>`` with think off), so
    its parser prepends that tag to every reply; its API evaluation does the same to replies
    that never saw the forced tag. ``mode``:

    - ``"auto"`` (default): prepend the tag only when the reply does not already contain it,
      so a model that writes ``<think>...`` itself is parsed as written and a reply that
      starts mid-thought (``...</think><answer>..``) still parses;
    - ``"always"``: always prepend (the reference's API evaluation);
    - ``"never"``: send the reply unchanged.
    """
    if mode not in THINK_PREFIX_MODES:
        raise ValueError(f"think prefix mode must be one of {THINK_PREFIX_MODES}, got {mode!r}")
    tag = "<think>" if think else "<answer>"
    if mode == "always" or (mode == "auto" and tag not in text):
        return tag + text
    return text


def make_agent(spec: str, env: gym.Env | None = None, **kwargs: Any) -> Agent:
    """Build an agent from a spec string (``expert``, ``random``, ``openai:MODEL``, ``hf:PATH``).

    ``kwargs`` go to the agent's constructor; ``env`` is read by ``expert`` and ``random``, and
    gives the model agents their default think mode.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"agent spec must be a non-empty string, got {spec!r}")
    kind, sep, arg = spec.partition(":")
    if kind == "expert" and not sep:
        return ExpertAgent(env, **kwargs)
    if kind == "random" and not sep:
        return RandomAgent(env, **kwargs)
    if kind in ("openai", "hf") and sep:
        if not arg:
            raise ValueError(f"agent spec {spec!r} needs a {'model name' if kind == 'openai' else 'path'} after '{kind}:'")
        if env is not None and "think" not in kwargs:
            kwargs["think"] = bool(getattr(env.unwrapped, "think", True))
        if kind == "openai":
            from .openai_agent import OpenAIAgent

            return OpenAIAgent(arg, **kwargs)
        from .hf import HFAgent

        return HFAgent(arg, **kwargs)
    raise ValueError(f"unknown agent spec {spec!r}; known: {', '.join(AGENT_KINDS)}")
