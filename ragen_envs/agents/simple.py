"""Agents that need no model: the expert (exact solvers) and a seeded random policy."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np

from ..protocol import format_answer
from .base import Agent, Messages

__all__ = ["ExpertAgent", "RandomAgent"]


def _text_env(env: gym.Env | None, kind: str):
    if env is None:
        raise ValueError(f"the {kind} agent reads the environment it plays: pass env=... to make_agent")
    base = env.unwrapped
    if not hasattr(base, "action_names") or not hasattr(base, "budget"):
        raise ValueError(f"the {kind} agent needs a ragen_envs environment, got {type(base).__name__}")
    return base


class ExpertAgent(Agent):
    """Plays the env's optimal actions: Sokoban's BFS plan, FrozenLake's exact open-loop
    turn plan, the Bandit's higher-expected-value arm, Lights Out's GF(2) solution, the 2x2
    cube's breadth-first distance table, a two-move expectimax for 2048,
    Countdown's exhaustive search, Sudoku's exact solver. It reads the state from ``env``,
    not from the messages, and answers in the protocol format."""

    name = "expert"

    def __init__(self, env: gym.Env | None) -> None:
        self.env = _text_env(env, "expert")

    def act(self, messages: Messages) -> str:
        actions = self.env._expert_reply_actions()
        return format_answer(actions, "I follow the optimal plan.", self.env.think)


class RandomAgent(Agent):
    """Sends 1..max_actions_per_turn uniformly random action names per turn, well formed.
    Free-text envs (``action_names()`` is None) get the env's ``random_answer(rng)`` when it
    has one (Countdown: the numbers joined by random operators; Sudoku: a random ``R,C,N``), else random entries of its
    ``available_actions()`` (WebShop).

    Seeded: two agents with the same ``seed`` give the same replies for the same calls.
    """

    name = "random"

    def __init__(self, env: gym.Env | None, seed: int = 0) -> None:
        self.env = _text_env(env, "random")
        self.rng = np.random.default_rng(seed)

    def act(self, messages: Messages) -> str:
        names = self.env.action_names()
        count = int(self.rng.integers(1, self.env.budget.max_actions_per_turn + 1))
        if names is None and hasattr(self.env, "random_answer"):
            actions = [self.env.random_answer(self.rng) for _ in range(count)]
        elif names is None:  # free-text actions (WebShop): pick from the env's current list
            actions = [self._free_text_action(messages) for _ in range(count)]
        else:
            names = list(names)
            actions = [names[int(i)] for i in self.rng.integers(0, len(names), size=count)]
        return format_answer(actions, "I pick at random.", self.env.think)

    def _free_text_action(self, messages: Messages) -> str:
        """A uniformly random entry of ``env.available_actions()``; a ``<content>`` slot is
        filled with 1-3 random words of the latest observation."""
        if not hasattr(self.env, "available_actions"):
            raise ValueError(f"{type(self.env).__name__} has free-text actions but no available_actions() to pick from")
        choices = list(self.env.available_actions()) or ["search[<content>]"]
        action = choices[int(self.rng.integers(0, len(choices)))]
        if "<content>" in action:
            text = messages[-1]["content"] if messages else ""
            words = [w for w in re.findall(r"[A-Za-z]{3,}", text)] or ["item"]
            picks = self.rng.integers(0, len(words), size=int(self.rng.integers(1, 4)))
            action = action.replace("<content>", " ".join(words[int(i)].lower() for i in picks))
        return action
