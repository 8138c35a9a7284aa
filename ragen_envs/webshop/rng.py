"""A tiny deterministic generator (SplitMix64) for the mini catalog.

Python's ``random`` only promises a stable ``random()`` stream across versions, not stable
``shuffle``/``sample``/``choice``; the shipped catalog must regenerate byte for byte on any
Python, so catalog, prices and goal order draw from this generator instead.
"""

from __future__ import annotations

from typing import MutableSequence, Sequence, TypeVar

__all__ = ["SplitMix64"]

T = TypeVar("T")
_MASK = (1 << 64) - 1


class SplitMix64:
    """SplitMix64 (Steele, Lea and Flood 2014): 64-bit state, one add and two multiplies per draw."""

    def __init__(self, seed: int) -> None:
        self.state = int(seed) & _MASK

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def random(self) -> float:
        """Uniform in [0, 1) with 53 random bits."""
        return (self.next_u64() >> 11) * (1.0 / (1 << 53))

    def below(self, n: int) -> int:
        """Uniform integer in [0, n) (rejection sampling: no modulo bias)."""
        if n <= 0:
            raise ValueError(f"n must be positive, got {n}")
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            x = self.next_u64()
            if x < limit:
                return x % n

    def randint(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi] (both ends included)."""
        return lo + self.below(hi - lo + 1)

    def uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * self.random()

    def chance(self, p: float) -> bool:
        return self.random() < p

    def choice(self, items: Sequence[T]) -> T:
        return items[self.below(len(items))]

    def shuffle(self, items: MutableSequence[T]) -> None:
        """Fisher-Yates, in place."""
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        """``k`` distinct items in draw order (a partial Fisher-Yates)."""
        if not 0 <= k <= len(items):
            raise ValueError(f"cannot sample {k} of {len(items)} items")
        pool = list(items)
        for i in range(k):
            j = i + self.below(len(pool) - i)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]
