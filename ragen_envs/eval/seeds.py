"""Seed sets as ranges: how ``config.json`` stores the seeds of a run.

``--seeds 0..10000000`` is ten million seeds; a JSON list of them is 129 MB (in
``config.json`` and again in ``summary.json``). A seed set is stored instead as the text the
CLI reads: sorted, disjoint, inclusive ranges joined by commas, a range of one seed written
as the seed (``"1,5..7,123..378"``). Readers also accept the old form, a JSON list of ints.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

__all__ = ["seed_ranges", "format_seed_ranges", "merge_seed_ranges", "count_seeds"]

Ranges = list[tuple[int, int]]


def _merge(intervals: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted disjoint inclusive ranges covering ``intervals`` (adjacent ranges joined)."""
    out: Ranges = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _check(seed: Any) -> int:
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"a seed must be an integer >= 0, got {seed!r}")
    return seed


def seed_ranges(value: Any) -> Ranges:
    """The ranges of a stored seed set: the range text (``"1,5..7"``), or the old JSON list
    of ints. ValueError for anything else."""
    if isinstance(value, str):
        intervals = []
        for part in value.split(","):
            lo, sep, hi = part.strip().partition("..")
            try:
                a, b = int(lo), int(hi) if sep else int(lo)
            except ValueError:
                raise ValueError(f"cannot read the seed range {part!r} (expected A or A..B)") from None
            if _check(a) > _check(b):
                raise ValueError(f"the seed range {part!r} is empty")
            intervals.append((a, b))
        return _merge(intervals) if value.strip() else []
    if isinstance(value, (list, tuple)):
        return _merge((_check(s), s) for s in value)
    raise ValueError(f"seeds must be a range text such as '1,5..7' or a list of seeds, got {type(value).__name__}")


def _int_ranges(seeds: list) -> Ranges:
    """Ranges of a list of ints >= 0, vectorised (ten million seeds in about a second)."""
    if not all(type(s) is int for s in seeds):  # noqa: E721 - bools and floats are not seeds
        return _merge((_check(s), s) for s in seeds)
    try:
        arr = np.sort(np.asarray(seeds, dtype=np.int64))  # (np.unique hashes: far slower here)
    except OverflowError:  # beyond int64: one by one
        return _merge((_check(s), s) for s in seeds)
    if not arr.size:
        return []
    arr = arr[np.concatenate(([True], np.diff(arr) != 0))]
    _check(int(arr[0]))
    cuts = np.flatnonzero(np.diff(arr) != 1)
    starts = np.concatenate(([0], cuts + 1))
    ends = np.concatenate((cuts, [arr.size - 1]))
    return [(int(arr[a]), int(arr[b])) for a, b in zip(starts, ends)]


def format_seed_ranges(seeds: Iterable[int] | Ranges) -> str:
    """The range text of ``seeds`` (ints, or ``(lo, hi)`` ranges): ``[1, 5, 6, 7]`` ->
    ``"1,5..7"``; ``""`` for no seeds."""
    items = list(seeds)
    intervals = _merge(items) if items and isinstance(items[0], tuple) else _int_ranges(items)
    return ",".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in intervals)


def merge_seed_ranges(*values: Any) -> str:
    """The union of stored seed sets (range texts or lists), as range text."""
    return format_seed_ranges(_merge(r for value in values for r in seed_ranges(value)))


def count_seeds(value: Any) -> int:
    """How many seeds a stored seed set holds."""
    return sum(hi - lo + 1 for lo, hi in seed_ranges(value))
