"""The environments inside other RL stacks: an OpenEnv server, TRL (a rollout function or an
environment factory of tool calls), a verl agent loop, SkyRL-gym's and GEM's registries. Each
module needs its own extra (``openenv``, ``trl``, ``skyrl``, ``gem``; verl has its own venv,
``make verl-venv``) and imports it only when used; see ``docs/integrations.md``.

All keep the protocol exactly: the env's own prompt text and system prompt, the env's
parser and format penalty (the reply goes to ``env.step`` unchanged), and groups that share
one initial state (same layout seed, same noise seed).
"""

from __future__ import annotations

import math
from typing import Any

from ..protocol.jsonsafe import safe_text

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


_isfinite = math.isfinite


def _safe(value: Any) -> Any:
    # Exact builtin types first (an env's info is made of them; this is every turn of a
    # server): one type() test each instead of the isinstance / getattr ladder below, which
    # stays the rule for everything else (subclasses, numpy scalars and arrays, objects).
    t = type(value)
    if t is str:
        return safe_text(value)
    if t is int or t is bool or value is None:
        return value
    if t is float:
        return value if _isfinite(value) else _DROP
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str and not isinstance(k, str):
                continue
            tv = type(v)
            if tv is str:
                s = v if v.isascii() else safe_text(v)
            elif tv is int or tv is bool or v is None:
                s = v
            elif tv is float:
                if not _isfinite(v):
                    continue
                s = v
            else:
                s = _safe(v)
                if s is _DROP:
                    continue
            out[k if type(k) is str and k.isascii() else safe_text(k)] = s
        return out
    if t is list or t is tuple:
        out = []
        for v in value:
            tv = type(v)
            if tv is str:
                out.append(v if v.isascii() else safe_text(v))
            elif tv is int or tv is bool or v is None:
                out.append(v)
            else:
                s = _safe(v)
                if s is not _DROP:
                    out.append(s)
        return out
    return _safe_general(value)


def _safe_general(value: Any) -> Any:
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
                    out[k if type(k) is str and k.isascii() else safe_text(k)] = s
        return out
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        seq = value.tolist() if hasattr(value, "tolist") else value
        if not isinstance(seq, (list, tuple)):  # a tuple is a sequence (it used to recurse forever)
            return _safe(seq)
        out = [_safe(v) for v in seq]
        return [v for v in out if v is not _DROP]
    return _DROP
