"""Type checks of the env constructors' keywords: one rule for every source.

Keywords reach an env from ``gym.make``, config files, dataset rows, a model folder's saved
settings and OpenEnv clients, often through JSON or YAML, where ``"false"`` is a string and a
string is truthy. So a boolean keyword takes a boolean only (Python's or numpy's), an integer
keyword any integer (Python's or numpy's, never a bool) and a number keyword any finite real
(never a bool); anything else is refused with one line naming the keyword.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np

__all__ = ["check_bool", "check_int", "check_number"]


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a bool when it is one (``True``/``False``, ``np.True_``/``np.False_``);
    else ValueError (``"false"``, ``0`` and ``None`` are not booleans)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name} must be true or false (a boolean), got {value!r}")


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int when it is an integer (Python or numpy, not a bool) in
    ``[low, high]`` (an open end when None); else ValueError."""
    ok = isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))
    if ok and (low is None or value >= low) and (high is None or value <= high):
        return int(value)
    raise ValueError(f"{name} must be an integer{_range(low, high)}, got {value!r}")


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None,
                 low_open: bool = False) -> float:
    """``value`` as a float when it is a finite real (Python or numpy, not a bool) in
    ``[low, high]`` (``(low, high]`` with ``low_open``); else ValueError."""
    ok = isinstance(value, Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    if ok and (low is None or (value > low if low_open else value >= low)) and (high is None or value <= high):
        return float(value)
    where = _range(low, high, low_open)
    raise ValueError(f"{name} must be a finite number{where}, got {value!r}")


def _range(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}]"
    if low is not None:
        return f" {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f" <= {high:g}"
    return ""
