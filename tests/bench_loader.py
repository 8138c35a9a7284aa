"""Load a script under ``benchmarks/`` as a module (they are scripts, not a package), for the
tests of their analysis functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(filename: str, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
