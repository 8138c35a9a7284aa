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

And what may come out of a file or a request we did not write: :func:`loads_untrusted` parses
JSON text and turns every way it can fail (not JSON, not UTF-8, an integer beyond Python's
4,300-digit conversion limit, nesting deeper than the recursion limit, optionally NaN) into
one :class:`UntrustedJSONError` with a short message, so a reader skips or refuses one line
instead of dying with a traceback.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

__all__ = ["REPLACEMENT_CHAR", "safe_text", "json_safe", "UntrustedJSONError", "loads_untrusted"]

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


class UntrustedJSONError(ValueError):
    """JSON text that :func:`loads_untrusted` will not return a value for; ``str()`` is one
    short line (no part of the input beyond a position), for the caller to prefix with the
    file, line or field it came from. ``reason`` says which rule it broke: ``"syntax"`` (not
    JSON), ``"encoding"`` (not UTF-8/16/32), ``"digits"`` (an integer too long to convert),
    ``"depth"`` (nested too deeply) or ``"non-finite"`` (NaN, Infinity, a number that
    overflows; only with ``allow_nan=False``)."""

    def __init__(self, message: str, reason: str = "syntax") -> None:
        super().__init__(message)
        self.reason = reason


def _refuse_constant(name: str) -> Any:
    raise UntrustedJSONError(f"non-finite number {name} (not JSON)", "non-finite")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses to inf without any NaN/Infinity constant
        raise UntrustedJSONError(f"non-finite number {text[:20]}{'...' if len(text) > 20 else ''} (out of range)",
                                 "non-finite")
    return value


def loads_untrusted(text: str | bytes | bytearray, *, allow_nan: bool = True) -> Any:
    """``json.loads(text)`` for text from outside the process (files, request bodies, flags).

    Every failure is one :class:`UntrustedJSONError` (a ValueError): invalid JSON, bytes that
    are not UTF-8/16/32, an integer of more than ``sys.get_int_max_str_digits()`` digits
    (``json`` raises a bare ValueError there), nesting deeper than the interpreter's
    recursion limit (a RecursionError). With ``allow_nan=False`` the constants ``NaN``,
    ``Infinity``, ``-Infinity`` and numbers that overflow to infinity are refused too.
    """
    hooks: dict[str, Any] = {} if allow_nan else {"parse_constant": _refuse_constant, "parse_float": _finite_float}
    try:
        return json.loads(text, **hooks)
    except UntrustedJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise UntrustedJSONError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", "syntax") from None
    except UnicodeDecodeError as exc:
        raise UntrustedJSONError(f"not UTF-8 text: byte {exc.object[exc.start:exc.start + 1]!r} at {exc.start}",
                                 "encoding") from None
    except RecursionError:
        raise UntrustedJSONError("nested too deeply", "depth") from None
    except ValueError as exc:  # int(): "Exceeds the limit (4300 digits) for integer string conversion ..."
        if "integer string conversion" in str(exc):
            import sys

            raise UntrustedJSONError(f"an integer of more than {sys.get_int_max_str_digits()} digits", "digits") from None
        raise UntrustedJSONError(f"not valid JSON: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}",
                                 "syntax") from None
