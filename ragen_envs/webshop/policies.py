"""Scripted WebShop policies: the oracle (the env's expert) and the rule baseline.

- :func:`oracle_action` knows the goal and the search engine. It searches the goal's query
  and attributes, pages to the goal product when the remaining budget allows, otherwise goes
  back and searches the product's exact title, then clicks the goal's option values and buys.
  On the mini catalog every goal can be bought with score 1.0 this way.
- :func:`heuristic_action` is upstream's rule baseline (search the instruction, click the
  first result, buy) over the listed actions; the agent that reads it from the chat
  messages, like a model would, is :class:`ragen_envs.agents.webshop.HeuristicAgent` (agents
  sit above the envs, so this module imports none of them).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .engine import Session
from .pages import PRODUCT_WINDOW

__all__ = ["oracle_action", "primary_query", "heuristic_action"]

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
