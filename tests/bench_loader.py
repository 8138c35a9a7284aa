"""Load a script under ``benchmarks/`` or ``labs/`` as a module (they are scripts, not a
package), for the tests of their analysis functions; :func:`load_lab_common` loads the labs'
shared helpers (``labs/_labs_common.py``), the module the lab scripts import."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
LABS = ROOT / "labs"


def _load(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_benchmark(filename: str, module_name: str) -> ModuleType:
    return _load(BENCHMARKS / filename, module_name)


def load_lab(filename: str, module_name: str) -> ModuleType:
    return _load(LABS / filename, module_name)


def load_lab_common() -> ModuleType:
    """``labs/_labs_common.py`` under its own name, so that the labs loaded here share it (and
    spawned training processes find it: the folder goes on ``sys.path``, as a lab puts it)."""
    if str(LABS) not in sys.path:
        sys.path.insert(0, str(LABS))
    import _labs_common

    return _labs_common
