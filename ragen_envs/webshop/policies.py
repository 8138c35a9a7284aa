"""Scripted WebShop policies: the oracle (the env's expert) and the rule baseline.

- :func:`oracle_action` knows the goal and the search engine. It searches the goal's query
  and attributes, pages to the goal product when the remaining budget allows, otherwise goes
  back and searches the product's exact title, then clicks the goal's option values and buys.
  On the mini catalog every goal can be bought with score 1.0 this way.
- :class:`HeuristicAgent` is upstream's rule baseline (search the instruction, click the
  first result, buy). It reads only the chat messages, like a model would.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from ..agents.base import Agent, Messages
from ..protocol import format_answer
from .engine import Session
from .pages import PRODUCT_WINDOW

__all__ = ["oracle_action", "primary_query", "HeuristicAgent", "heuristic_action"]

_NAV = ("back to search", "< prev", "next >")


def primary_query(goal: Mapping) -> str:
    """The oracle's first search: the goal's product query and its attributes."""
    return " ".join([goal["query"], *goal["attributes"]]).lower()


def _needed_options(session: Session) -> list[str]:
    goal_options = session.goal["goal_options"]
    if not isinstance(goal_options, dict):
        return []  # human goals: free-text options cannot be clicked by name
    return [v for k, v in goal_options.items() if session.options.get(k) != v and v in session.clickables]


def oracle_action(session: Session, actions_left: int) -> str:
    """The oracle's next action for ``session`` with ``actions_left`` actions to spend."""
    goal = session.goal
    target = goal["asin"]
    pt = session.page_type
    n_opts = len(goal["goal_options"]) if isinstance(goal["goal_options"], dict) else 0
    if pt == "search":
        query = primary_query(goal)
        if query in session.searches:
            query = goal["name"].lower()
        return f"search[{query}]"
    if pt == "results":
        hits = [p["asin"] for p in session.data.search(session.keywords or [])]
        if target.lower() in session.clickables:
            return f"click[{target.lower()}]"
        if target in hits:
            pages_ahead = hits.index(target) // PRODUCT_WINDOW + 1 - session.page
            # next > (pages_ahead times), click, options, buy  vs  back, search, click, options, buy
            if pages_ahead > 0 and pages_ahead + 2 + n_opts <= max(actions_left, 4 + n_opts):
                return "click[next >]"
        return "click[back to search]"
    if pt == "item":
        if session.asin != target:
            return "click[< prev]"
        needed = _needed_options(session)
        if needed and actions_left > 1:
            return f"click[{needed[0]}]"
        return "click[buy now]"
    if pt == "item_sub":
        return "click[< prev]"
    return "click[back to search]"  # done page: nothing left to do


# ------------------------------------------------------------------ rule baseline
_ACTIONS = re.compile(r"search\[<content>\]|click\[[^\]]*\]")
# the reset state is "Instruction: <text>." + tips ("We must buy ...") or, with tips off, the list
_INSTRUCTION = re.compile(r"State:\nInstruction: (.*?)\.(?:We must buy|\n You must choose)", re.DOTALL)


def heuristic_action(instruction: str, actions: Sequence[str]) -> str:
    """Search the instruction, click the first product, buy now."""
    if "search[<content>]" in actions:
        return f"search[{instruction}]"
    if "click[buy now]" in actions:
        return "click[buy now]"
    products = [a for a in actions if a.startswith("click[") and a[6:-1] not in _NAV]
    if products:  # a results page (item pages offer buy now, handled above)
        return products[0]
    if "click[< prev]" in actions:
        return "click[< prev]"
    return "click[back to search]"


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
