"""Loss-mask helpers (plain Python, no torch)."""

from __future__ import annotations

from typing import Iterable

__all__ = ["mask_spans"]


def mask_spans(mask: Iterable[int]) -> list[tuple[int, int]]:
    """``[(start, end_exclusive), ...]`` of the runs of non-zero entries: each reply's tokens in
    a token-in/token-out sequence. ``mask_spans([0, 1, 1, 0, 1]) == [(1, 3), (4, 5)]``."""
    spans, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans
