"""A time budget and cancel flags for the long computations of the games (level generation),
set by whoever runs them: a server that must not let one client's reset run for minutes.

``with work_budget(10.0, client_gone):`` around a call makes every :func:`check_budget`
inside it, on the same thread, raise :class:`WorkCancelled` once 10 s have passed or the
event is set. Generators call :func:`check_budget` every few thousand steps; outside a
budget it costs one attribute lookup and never raises, so results do not depend on it.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

__all__ = ["WorkCancelled", "work_budget", "check_budget"]

_local = threading.local()


class WorkCancelled(RuntimeError):
    """The computation ran past its time budget or was cancelled."""


@contextmanager
def work_budget(seconds: float | None = None, *cancel: threading.Event | None) -> Iterator[None]:
    """Bound the work done on this thread inside the block (nested budgets: the inner one)."""
    deadline = None if seconds is None else time.monotonic() + float(seconds)
    previous = getattr(_local, "budget", None)
    _local.budget = (deadline, seconds, tuple(e for e in cancel if e is not None))
    try:
        yield
    finally:
        _local.budget = previous


def check_budget() -> None:
    """Raise :class:`WorkCancelled` if this thread's budget is spent or cancelled."""
    budget = getattr(_local, "budget", None)
    if budget is None:
        return
    deadline, seconds, events = budget
    if any(e.is_set() for e in events):
        raise WorkCancelled("cancelled")
    if deadline is not None and time.monotonic() > deadline:
        raise WorkCancelled(f"ran past its time budget of {seconds:g} s")
