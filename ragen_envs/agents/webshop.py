"""Upstream WebShop's rule baseline as an agent over the chat messages of ``ragen/WebShop-v0``.

The rule itself (:func:`ragen_envs.webshop.policies.heuristic_action`) lives with the WebShop
engine; this module only reads the instruction and the action list from the messages, as a
model would, and answers in the protocol's format.
"""

from __future__ import annotations

import re

from ..protocol import format_answer
from ..webshop.policies import heuristic_action
from .base import Agent, Messages

__all__ = ["HeuristicAgent"]

_ACTIONS = re.compile(r"search\[<content>\]|click\[[^\]]*\]")
# the reset state is "Instruction: <text>." + tips ("We must buy ...") or, with tips off, the list
_INSTRUCTION = re.compile(r"State:\nInstruction: (.*?)\.(?:We must buy|\n You must choose)", re.DOTALL)


class HeuristicAgent(Agent):
    """Upstream's rule baseline over the chat messages of ``ragen/WebShop-v0``: it reads the
    instruction from the first observation and the action list from the latest one."""

    name = "webshop-heuristic"

    def __init__(self, think: bool = True) -> None:
        self.think = think

    def act(self, messages: Messages) -> str:
        users = [m["content"] for m in messages if m["role"] == "user"]
        if not users:
            raise ValueError("the heuristic agent needs at least one user message")
        found = _INSTRUCTION.search(users[0])
        instruction = found.group(1) if found else ""
        latest = users[-1]
        tail = latest.rsplit("You must choose from these actions:", 1)
        actions = _ACTIONS.findall(tail[1]) if len(tail) == 2 else []
        return format_answer([heuristic_action(instruction, actions)], "I follow the rule baseline.", self.think)
