"""Where the reference episodes (../shared/fixtures) are, for the instance-parity tests.

Looked up in $RAGEN_FIXTURES, then ``<repo>/../shared/fixtures`` (how CI lays it out), then
``/work/shared/fixtures``. Missing fixtures skip the parity tests locally, but fail under CI
(``CI`` set), where a silent skip would hide a broken parity check.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

_NAME = "ragen_reference_episodes.json"


def fixtures_path() -> Path | None:
    candidates = [Path(os.environ["RAGEN_FIXTURES"])] if os.environ.get("RAGEN_FIXTURES") else []
    candidates += [
        Path(__file__).resolve().parents[2] / "shared" / "fixtures" / _NAME,
        Path("/work/shared/fixtures") / _NAME,
    ]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None and os.environ.get("CI"):
        raise FileNotFoundError(f"reference fixtures not found (looked in {[str(c) for c in candidates]})")
    return found


@lru_cache(maxsize=1)
def load_fixtures() -> dict | None:
    path = fixtures_path()
    return None if path is None else json.loads(path.read_text(encoding="utf-8"))
