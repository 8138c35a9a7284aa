"""The interface every WebShop source implements: :class:`WebShopBackend` and :class:`StepResult`.

A backend runs one shopping session at a time: :meth:`~WebShopBackend.reset` to a goal
index, :meth:`~WebShopBackend.act` with an action string, read the page. The concrete
backends (:mod:`.backends` ``mini``, :mod:`.remote`, :mod:`.inprocess`) import this module;
it imports none of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from .goals import split_ranges
from .pages import PageView

__all__ = ["WebShopBackend", "StepResult"]


@dataclass(frozen=True)
class StepResult:
    """What one action did: the new page, the reward (int ``0`` for a no-op, ``0.0`` for a
    page change, the score on purchase), whether the purchase happened, and the verbose
    reward breakdown (None before a purchase or when the backend cannot tell)."""

    page: PageView
    reward: float | int
    done: bool
    breakdown: dict[str, Any] | None


class WebShopBackend(ABC):
    """One WebShop session at a time behind a small interface."""

    name: str = ""

    @abstractmethod
    def num_goals(self) -> int:
        """How many goals the backend indexes (0..num_goals-1)."""

    def split_ranges(self) -> dict[str, tuple[int, int]]:
        """``{split: (start, stop)}`` goal-index ranges (see :func:`..goals.split_ranges`)."""
        return split_ranges(self.num_goals())

    @abstractmethod
    def reset(self, goal_index: int) -> PageView:
        """Start a session on goal ``goal_index``; returns the search page."""

    @abstractmethod
    def act(self, action: str) -> StepResult:
        """Run one action string (``search[...]`` / ``click[...]``, upstream grammar)."""

    @abstractmethod
    def page(self) -> PageView:
        """The current page."""

    @abstractmethod
    def instruction_text(self) -> str:
        """Upstream ``get_instruction_text()``: ``"Instruction: " + text``."""

    def close(self) -> None:
        """Release the session (idempotent)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """``backend``, ``catalog_id``, ``search_impl``, ``reward_impl``, ``num_goals``, ``splits``."""

    def expert_action(self, actions_left: int) -> str:
        """The oracle's next action; only backends that know the goal can answer."""
        raise NotImplementedError(
            f"the WebShop expert needs to see the goal and the search engine; the {self.name!r} backend "
            "does not expose them (use backend='mini')"
        )
