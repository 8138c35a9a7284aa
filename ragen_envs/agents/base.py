"""The agent interface: a policy maps chat messages to a reply string."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

__all__ = ["Agent", "Messages"]

Messages = list[dict[str, str]]


class Agent(ABC):
    """A policy over chat messages.

    ``act`` gets the whole conversation so far (system, user, assistant, ..., the latest user
    observation last) and returns the reply text. ``aact`` is the asynchronous variant;
    agents that wait on I/O override it, cheap agents inherit this one.
    """

    name: str = "agent"

    @abstractmethod
    def act(self, messages: Messages) -> str:
        """Reply to the conversation ``messages``."""

    async def aact(self, messages: Messages) -> str:
        return await asyncio.to_thread(self.act, messages)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
