# A frozen copy of ragen_envs/integrations/__init__.py before issue 23 (json_part on the
# OpenEnv turn path): the reference tests/test_turn_equivalence.py compares against. Do not edit.
"""The environments inside other RL stacks: an OpenEnv server, a TRL rollout function, a
verl agent loop. Each module needs its own extra (``openenv``, ``trl``; verl has its own
venv, ``make verl-venv``) and imports it only when used; see ``docs/integrations.md``.

All three keep the protocol exactly: the env's own prompt text and system prompt, the env's
parser and format penalty (the reply goes to ``env.step`` unchanged), and groups that share
one initial state (same layout seed, same noise seed).
"""

from __future__ import annotations

import math
from typing import Any

from ragen_envs.protocol.jsonsafe import safe_text

__all__ = ["json_part"]


def json_part(value: Any) -> Any:
    """The JSON-representable part of ``value`` (for a server's answer, which must always
    encode): dicts keep string keys with representable values, lists / tuples keep
    representable items, numpy scalars become Python numbers, strings follow the protocol's
    rule (surrogates -> U+FFFD, :func:`ragen_envs.protocol.jsonsafe.safe_text`); non-finite
    floats and everything else (objects, bytes, sets) are dropped, where
    :func:`ragen_envs.protocol.jsonsafe.json_safe` would refuse a record; a top-level value
    with no JSON form gives None."""
    out = _safe(value)
    return None if out is _DROP else out


class _Drop:
    __slots__ = ()


_DROP = _Drop()


def _safe(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _DROP
    item = getattr(value, "item", None)  # numpy scalars / 0-d arrays
    if callable(item) and getattr(value, "shape", None) == ():
        return _safe(item())
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                s = _safe(v)
                if s is not _DROP:
                    out[safe_text(k)] = s
        return out
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        seq = value.tolist() if hasattr(value, "tolist") else value
        if not isinstance(seq, list):
            return _safe(seq)
        out = [_safe(v) for v in seq]
        return [v for v in out if v is not _DROP]
    return _DROP
