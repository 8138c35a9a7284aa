"""tests/verifiers runs in .venv-verifiers (`make test-verifiers`; RAGEN_VERIFIERS_TESTS=1).

verifiers imports the PyPI package ``renderers`` (Prime's chat renderers); this repository's
root holds our own ``renderers`` (pygame drawing). ``python -m pytest`` from the root puts the
root first on ``sys.path``, where ours would shadow theirs and ``import verifiers.v1`` fails.
In this venv ragen_envs comes from the editable install (its finder runs after site-packages,
so Prime's ``renderers`` wins), so the root is taken off the path before anything imports
verifiers. The vf-eval subprocesses run in a temporary directory and are not affected.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != ROOT]
mod = sys.modules.get("renderers")
if mod is not None and Path(getattr(mod, "__file__", "") or "").resolve().is_relative_to(ROOT):
    for name in [n for n in sys.modules if n == "renderers" or n.startswith("renderers.")]:
        del sys.modules[name]
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
