"""What may go into ``info`` and every record: JSON that encodes as UTF-8 (``docs/protocol.md`` §6).

The rule, for env ``info`` and every episode record ``ragen eval`` writes (the trainer's
``metrics.jsonl`` holds measurements and writes a NaN as ``null`` instead):

- **Strings**: every UTF-16 surrogate code point (U+D800..U+DFFF, which UTF-8 cannot encode
  and a reply can still hold, e.g. from a ``\\ud800`` JSON escape) is replaced by U+FFFD.
  Environments apply it to the reply before parsing, so ``info`` never holds one; the eval
  store applies it to every record it writes.
- **Numbers**: non-finite floats (NaN, +-inf) are refused, never mapped: a record holding one
  is not written (the eval harness records that episode in ``errors.jsonl``), and a remote
  backend answering one raises its server error.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

__all__ = ["REPLACEMENT_CHAR", "safe_text", "json_safe"]

REPLACEMENT_CHAR = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """``text`` with each surrogate code point replaced by U+FFFD (linear time; ASCII and
    already-safe text is returned as is)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT_CHAR, text)


def json_safe(value: Any, redact: Callable[[str], str] | None = None, _path: str = "$") -> Any:
    """A copy of ``value`` (dicts, lists, tuples, scalars) that follows the rule above.

    Every string, dict keys included, goes through ``redact`` (e.g. an agent's API-key
    redaction) and then :func:`safe_text`. Raises ValueError naming the place of a non-finite
    float. Other values are returned unchanged (the JSON encoder decides about them).
    """
    if isinstance(value, str):
        if redact is not None:
            value = redact(value)
        return safe_text(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite number {value!r} at {_path}")
        return value
    if isinstance(value, dict):
        return {json_safe(k, redact) if isinstance(k, str) else k: json_safe(v, redact, f"{_path}.{k}")
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, redact, f"{_path}[{i}]") for i, v in enumerate(value)]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return json_safe(item(), redact, _path)
    return value
