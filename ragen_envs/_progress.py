"""A dependency-free progress line on stderr (updates in place on a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``with Progress(total, "label") as bar: bar.update(1, note="...")``."""

    def __init__(self, total: int, label: str = "", stream: TextIO | None = None, min_interval: float = 0.2):
        self.total, self.label = total, label
        self.stream = stream or sys.stderr
        self.done = 0
        self.start = time.monotonic()
        self._last = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_interval = min_interval if self._tty else 5.0

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.min_interval or self.done >= self.total:
            self._last = now
            self._draw(note, now)

    def _draw(self, note: str, now: float) -> None:
        elapsed = now - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        text = f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s eta {eta:5.1f}s {note}"
        self.stream.write(("\r" + text + "\033[K") if self._tty else text + "\n")
        self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()
