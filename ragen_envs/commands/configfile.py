"""``--config FILE.yaml|.json`` and ``--print-config`` of ``ragen train`` / ``ragen sft``.

A config file is a mapping of config fields (``StarPOConfig`` / ``SFTConfig``, plus the
command's ``preset`` / ``profile``); ``--print-config`` writes the complete resolved config
in the same form, so its output loads back with ``--config``. Precedence, low to high: the
dataclass defaults, the size profile, the preset, the file, the command-line flags, ``--set``.
An unknown field is a one-line error that names the closest known one.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Iterable

from ..cli import CLIError
from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted

__all__ = ["load_config_file", "check_fields", "coerce_numbers", "dump_config", "suggest"]


def suggest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name (difflib), or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_fields(data: dict[str, Any], known: Iterable[str], where: str) -> None:
    """A :class:`CLIError` for the first unknown key of ``data``, with a suggestion."""
    known = sorted(known)
    for key in data:
        if key not in known:
            raise CLIError(f"unknown config field {key!r} in {where}{suggest(str(key), known)}")


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping in a ``.yaml`` / ``.yml`` / ``.json`` file (a one-line error otherwise:
    not UTF-8, not valid, an integer beyond Python's 4,300 digits, nesting too deep, NaN in JSON)."""
    path = Path(path)
    if not path.is_file():
        raise CLIError(f"--config {path}: no such file")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise CLIError(f"--config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CLIError(f"--config {path}: not UTF-8 text (byte {exc.object[exc.start:exc.start + 1]!r} at {exc.start})") from None
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            data = loads_untrusted(text, allow_nan=False)
        except UntrustedJSONError as exc:
            raise CLIError(f"--config {path}: invalid JSON ({exc})") from None
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise CLIError('--config FILE.yaml needs PyYAML: pip install "ragen-envs[train]" (or use a .json file)') from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CLIError(f"--config {path}: invalid YAML ({' '.join(str(exc).split())})") from None
        except RecursionError:
            raise CLIError(f"--config {path}: invalid YAML (nested too deeply)") from None
        except ValueError as exc:  # int() of a number beyond 4,300 digits, a date out of range
            raise CLIError(f"--config {path}: invalid YAML ({str(exc).split(':')[0][:120]})") from None
    else:
        raise CLIError(f"--config {path}: expected a .yaml, .yml or .json file")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CLIError(f"--config {path}: expected a mapping of config fields, got {type(data).__name__}")
    return data


def _accepts_float(annotation: Any) -> bool:
    if isinstance(annotation, str):  # from __future__ import annotations
        return "float" in annotation.replace(" ", "").split("|")
    if annotation is float:
        return True
    return float in typing.get_args(annotation) if isinstance(annotation, (types.UnionType, typing._GenericAlias)) else False


def coerce_numbers(cls, data: dict[str, Any]) -> dict[str, Any]:
    """Numeric strings of float fields become floats: YAML 1.1 reads ``1e-5`` (no dot) as a
    string, and a config file should not have to write ``1.0e-5``."""
    floats = {f.name for f in dataclasses.fields(cls) if _accepts_float(f.type)}
    out = dict(data)
    for key, value in data.items():
        if key in floats and isinstance(value, str):
            try:
                out[key] = float(value)
            except ValueError:
                pass  # left for the config's own validation to name
    return out


def dump_config(data: dict[str, Any], header: Iterable[str] = ()) -> str:
    """YAML text of ``data`` (field order kept), ``# `` comment lines first."""
    import yaml

    lines = "".join(f"# {line}\n" for line in header)
    return lines + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
