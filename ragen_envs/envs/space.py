"""The observation space of every env: any Unicode text up to a length, exact in shared memory.

Gymnasium's ``Text`` has two gaps for protocol text. Its charset must be listed character by
character (an echoed page or a renamed action may hold any character), and its shared-memory
reader (``AsyncVectorEnv``'s default) returns a tuple of strings decoded once, when the
vector env is built, so every later observation reads back as that first, empty buffer
(65,536 ``'0'`` characters). :class:`UnicodeText` holds every string of Unicode scalar
values (every code point but the surrogates U+D800..U+DFFF) of at most ``max_length``
characters, and registers its own create / write / read with
``gymnasium.vector.utils.shared_memory`` (``functools.singledispatch`` on the space type):
the buffer holds code points and a length, and the reader is a live view that decodes at
each ``reset`` / ``step``.
"""

from __future__ import annotations

import copy
import functools
import multiprocessing as mp
from collections.abc import Sequence
from ctypes import c_int32
from multiprocessing.sharedctypes import SynchronizedArray
from types import ModuleType
from typing import Any, Iterator

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

__all__ = ["CharsetText", "UnicodeText", "SharedTexts", "NUM_SCALAR_VALUES"]

_SURROGATES = 0xD800, 0xE000  # [start, stop): not scalar values, cannot be encoded
NUM_SCALAR_VALUES = 0x110000 - (_SURROGATES[1] - _SURROGATES[0])  # 1,112,064


def _char(index: int) -> str:
    return chr(index if index < _SURROGATES[0] else index + (_SURROGATES[1] - _SURROGATES[0]))


def _index(char: str) -> int:
    code = ord(char)
    if _SURROGATES[0] <= code < _SURROGATES[1]:
        raise KeyError(f"U+{code:04X} is a surrogate, not a Unicode scalar value")
    return code if code < _SURROGATES[0] else code - (_SURROGATES[1] - _SURROGATES[0])


def _code_points(text: str) -> np.ndarray:
    """``text`` as int32 code points; ValueError when it holds a lone surrogate."""
    try:
        return np.frombuffer(text.encode("utf-32-le"), dtype="<i4")
    except UnicodeEncodeError as e:
        raise ValueError(f"the text holds a lone surrogate (U+{ord(text[e.start]):04X} at {e.start})") from None


def _text(codes: np.ndarray) -> str:
    return codes.astype("<i4", copy=False).tobytes().decode("utf-32-le")


@functools.cache
def _all_scalar_values() -> str:
    """Every scalar value in index order as one string (4.4 MB), built once per process:
    Gymnasium's vector envs read ``characters[0]`` once per sub-env, 7 ms a build."""
    return _text(np.concatenate([np.arange(_SURROGATES[0]), np.arange(_SURROGATES[1], 0x110000)]))


class _ScalarValues:
    """The character set: every Unicode scalar value (a set without 1.1 M stored strings)."""

    def __contains__(self, char: object) -> bool:
        return isinstance(char, str) and len(char) == 1 and not _SURROGATES[0] <= ord(char) < _SURROGATES[1]

    def __len__(self) -> int:
        return NUM_SCALAR_VALUES

    def __iter__(self) -> Iterator[str]:
        return (_char(i) for i in range(NUM_SCALAR_VALUES))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ScalarValues)

    def __hash__(self) -> int:
        return hash(_ScalarValues)

    def __repr__(self) -> str:
        return "<all Unicode scalar values>"


class _ScalarValueList(Sequence):
    """The characters in index order: index i is U+i below the surrogates, U+(i+0x800) above."""

    def __len__(self) -> int:
        return NUM_SCALAR_VALUES

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return tuple(_char(k) for k in range(*i.indices(NUM_SCALAR_VALUES)))
        i = int(i)
        if i < 0:
            i += NUM_SCALAR_VALUES
        if not 0 <= i < NUM_SCALAR_VALUES:
            raise IndexError(f"character index {i} out of range")
        return _char(i)


class CharsetText(Text):
    """Gymnasium's ``Text`` (same constructor, contents, samples and repr) whose copies share
    the character tables.

    Gymnasium's vector envs deep-copy a sub-env's spaces once per sub-env
    (``batch_space``: a ``Tuple`` of copies); for a ``Text`` over the protocol's 101-character
    ``CHARSET`` that copied the character set, list, index and string every time (~0.1 ms a
    copy, half of building a 256-env vector env). Those tables are never written after
    ``__init__``, so a copy shares them; only the random generator is copied, so every copy
    still samples on its own (seeding one leaves the others alone).
    """

    def __deepcopy__(self, memo: dict) -> "CharsetText":
        clone = copy.copy(self)  # a new object with the same attributes (the tables shared)
        memo[id(self)] = clone
        clone._np_random = copy.deepcopy(self._np_random, memo)
        return clone


class UnicodeText(Text):
    """Strings of ``min_length`` to ``max_length`` Unicode scalar values (no surrogates).

    ``character_set`` / ``character_list`` / ``character_index`` describe all 1,112,064 scalar
    values (index = code point, less 0x800 above the surrogates), so Gymnasium's flatten,
    unflatten and batching work unchanged; :meth:`sample` draws code points uniformly.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None) -> None:
        super().__init__(max_length, min_length=min_length, charset="", seed=seed)

    @property
    def character_set(self) -> _ScalarValues:  # type: ignore[override]
        return _ScalarValues()

    @property
    def character_list(self) -> _ScalarValueList:  # type: ignore[override]
        return _ScalarValueList()

    def character_index(self, char: str) -> np.int32:
        return np.int32(_index(char))

    @property
    def characters(self) -> str:
        """All scalar values as one string (4.4 MB, built on the first call, then shared)."""
        return _all_scalar_values()

    def contains(self, x: Any) -> bool:
        if not isinstance(x, str) or not self.min_length <= len(x) <= self.max_length:
            return False
        if x.isascii():
            return True
        try:
            x.encode("utf-32-le")
        except UnicodeEncodeError:
            return False
        return True

    def sample(self, mask=None, probability=None) -> str:
        """A random length in ``[min_length, max_length]`` (or ``mask[0]``), code points drawn
        uniformly (or by ``probability[1]`` / ``mask[1]`` over the 1,112,064 indices)."""
        if mask is not None and probability is not None:
            raise ValueError("give only one of mask and probability")
        given = mask if mask is not None else probability
        length, weights = (None, None) if given is None else self._validate_mask(
            given, np.int8 if mask is not None else np.float64, "mask" if mask is not None else "probability")
        if length is None:
            length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        if weights is None:
            indices = self.np_random.integers(0, NUM_SCALAR_VALUES, size=length)
        elif not np.any(weights):
            if self.min_length:
                raise ValueError("the mask allows no character but min_length > 0")
            return ""
        else:
            indices = self.np_random.choice(NUM_SCALAR_VALUES, size=length, p=weights / np.sum(weights))
        codes = indices + np.where(indices >= _SURROGATES[0], _SURROGATES[1] - _SURROGATES[0], 0)
        return _text(codes)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, UnicodeText) and self.min_length == other.min_length
                and self.max_length == other.max_length)

    def __hash__(self) -> int:
        return hash((UnicodeText, self.min_length, self.max_length))


# ---------------------------------------------------------------------- shared memory
# Layout per sub-env: one int32 length, then max_length int32 code points.


@create_shared_memory.register(UnicodeText)
def _create(space: UnicodeText, n: int = 1, ctx: ModuleType = mp) -> SynchronizedArray:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


def _rows(space: UnicodeText, shared_memory: SynchronizedArray) -> np.ndarray:
    return np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(-1, space.max_length + 1)


@write_to_shared_memory.register(UnicodeText)
def _write(space: UnicodeText, index: int, value: str, shared_memory: SynchronizedArray[c_int32]) -> None:
    if not isinstance(value, str):
        raise TypeError(f"an observation of {space} must be a str, got {type(value).__name__}")
    if not space.min_length <= len(value) <= space.max_length:
        raise ValueError(f"an observation of {len(value)} characters does not fit {space}")
    row = _rows(space, shared_memory)[index]
    row[1:1 + len(value)] = _code_points(value)
    row[0] = len(value)


class SharedTexts(Sequence):
    """The sub-envs' current texts in shared memory, decoded on each access.

    ``AsyncVectorEnv`` reads this once and returns ``deepcopy`` of it (``copy=True``, the
    default): a tuple of ``str``. With ``copy=False`` it returns this live view itself.
    """

    def __init__(self, space: UnicodeText, shared_memory: SynchronizedArray, n: int) -> None:
        self._space, self._memory, self._n = space, shared_memory, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return tuple(self[k] for k in range(*i.indices(self._n)))
        rows = _rows(self._space, self._memory)
        row = rows[range(self._n)[i]]
        return _text(row[1:1 + row[0]])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(UnicodeText)
def _read(space: UnicodeText, shared_memory: SynchronizedArray, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)
