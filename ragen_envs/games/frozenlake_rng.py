"""numpy's ``Generator(PCG64(SeedSequence(seed)))`` draws for the FrozenLake map, in plain Python.

The map sampler (:func:`ragen_envs.games.frozenlake.map_rows`) needs a fresh generator per
reset and only ~20 draws from it; building numpy's SeedSequence, PCG64 and Generator costs
more than the draws and, measured, slows the text turns that follow the reset (numpy's code
evicts the turn's from the CPU caches). This module computes the same numbers with Python
ints. Every formula is numpy's (``numpy/random/bit_generator.pyx``: SeedSequence;
``numpy/random/src/pcg64``: PCG64 XSL-RR 128/64; ``distributions.c``: ``next_double``,
Lemire's bounded integers), and ``tests/test_frozenlake_rng.py`` checks the outputs against
numpy itself.
"""

from __future__ import annotations

__all__ = ["MapRandom"]

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_M128 = (1 << 128) - 1
# SeedSequence's hash constants (O'Neill's seed_seq_fe), pool size 4.
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R = 0xCA01F9DD, 0x4973F715
_POOL_SIZE = 4
# PCG's default 128-bit LCG multiplier.
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_TO_DOUBLE = 1.0 / 9007199254740992.0  # 2**-53


def _entropy_words(seed: int) -> list[int]:
    """A non-negative int as 32-bit words, least significant first (``[0]`` for 0)."""
    words = []
    while True:
        words.append(seed & _M32)
        seed >>= 32
        if not seed:
            return words


def seed_pool(seed: int) -> list[int]:
    """``SeedSequence(seed).pool``: the 4 uint32 words mixed from the entropy.

    ``hashmix(v) = ((v ^ h) * (h := h * MULT_A)) ^ (>> 16)`` with ``h`` starting at INIT_A;
    ``mix(x, y) = (MIX_MULT_L * x - MIX_MULT_R * y) ^ (>> 16)``; all mod 2**32. The pool
    takes ``hashmix`` of each of the first 4 words (0 past the end), then every pool word is
    mixed into every other, then the remaining entropy words into every pool word.
    """
    entropy = _entropy_words(seed)
    h = _INIT_A

    def hashmix(value: int) -> int:
        nonlocal h
        value ^= h
        h = (h * _MULT_A) & _M32
        value = (value * h) & _M32
        return value ^ (value >> 16)

    def mix(x: int, y: int) -> int:
        result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & _M32
        return result ^ (result >> 16)

    pool = [hashmix(entropy[i] if i < len(entropy) else 0) for i in range(_POOL_SIZE)]
    for src in range(_POOL_SIZE):
        for dst in range(_POOL_SIZE):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for word in entropy[_POOL_SIZE:]:
        for dst in range(_POOL_SIZE):
            pool[dst] = mix(pool[dst], hashmix(word))
    return pool


def generate_state64(pool: list[int], n_words: int) -> list[int]:
    """``SeedSequence.generate_state(n_words, np.uint64)``: ``2 * n_words`` uint32 words, each
    ``((pool[i % 4] ^ h) * (h := h * MULT_B)) ^ (>> 16)`` (``h`` from INIT_B), paired
    little-endian (low word first) into uint64."""
    h = _INIT_B
    words = []
    for i in range(2 * n_words):
        value = pool[i % _POOL_SIZE] ^ h
        h = (h * _MULT_B) & _M32
        value = (value * h) & _M32
        words.append(value ^ (value >> 16))
    return [words[2 * i] | (words[2 * i + 1] << 32) for i in range(n_words)]


class MapRandom:
    """The draws of ``numpy.random.Generator(PCG64(SeedSequence(seed)))`` that the map uses.

    PCG64 seeding: ``s0, s1, i0, i1 = generate_state(4)``; ``initstate = s0 << 64 | s1``,
    ``inc = (i0 << 64 | i1) << 1 | 1``; ``state = 0``, one LCG step, ``state += initstate``,
    one step. A step is ``state = state * MULT + inc (mod 2**128)``; an output first steps,
    then returns ``rotr64(hi ^ lo, state >> 122)``.

    * :meth:`random` is ``Generator.random()``: ``(x >> 11) * 2**-53`` of one 64-bit output.
    * :meth:`below` is ``Generator.integers(k)`` (``2 <= k < 2**32``): Lemire's method on
      32-bit outputs, ``m = u32 * k``, drawn again while ``m mod 2**32 < (2**32 - k) mod k``,
      value ``m >> 32``. A 32-bit output is the low half of a fresh 64-bit output; the high
      half is kept for the next one (PCG64's ``has_uint32``; 64-bit outputs leave it alone).
    """

    __slots__ = ("_state", "_inc", "_half")

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed}")
        s0, s1, i0, i1 = generate_state64(seed_pool(seed), 4)
        self._inc = (((i0 << 64) | i1) << 1 | 1) & _M128
        state = self._inc  # 0 * MULT + inc
        state = (state + ((s0 << 64) | s1)) & _M128
        self._state = (state * _PCG_MULT + self._inc) & _M128
        self._half: int | None = None

    def next64(self) -> int:
        self._state = state = (self._state * _PCG_MULT + self._inc) & _M128
        value = ((state >> 64) ^ state) & _M64
        rot = state >> 122
        return ((value >> rot) | (value << (64 - rot))) & _M64

    def random(self) -> float:
        return (self.next64() >> 11) * _TO_DOUBLE

    def _next32(self) -> int:
        half = self._half
        if half is not None:
            self._half = None
            return half
        value = self.next64()
        self._half = value >> 32
        return value & _M32

    def below(self, k: int) -> int:
        m = self._next32() * k
        if (m & _M32) < k:  # only then can it fall under the threshold (< k)
            threshold = ((1 << 32) - k) % k
            while (m & _M32) < threshold:
                m = self._next32() * k
        return m >> 32
