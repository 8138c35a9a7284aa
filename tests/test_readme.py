"""The README is a front page (issue 46): short, no figures that go stale, every registered id in
its table with a picture that is the renderer's current frame, and every link and image there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401  (registers the ids)

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

sys.path.insert(0, str(ROOT / "scripts"))
from env_pictures import picture_name  # noqa: E402


def test_the_readme_is_a_front_page_of_at_most_120_lines():
    assert len(README.splitlines()) <= 120


@pytest.mark.parametrize(
    "pattern, what",
    [
        (r"\b20\d\d-\d\d-\d\d\b", "a date"),
        (r"\b\d+(\.\d+)?\s*(min|minutes|s|seconds|ms|hours?)\b", "a timing"),
        (r"\b\d[\d,]*\s+(passed|tests)\b", "a test count"),
        (r"EPYC|Xeon|AVX|Ryzen|Core i\d", "a CPU model"),
        (r"§\d", "a BENCHMARKS section number (they move; link the file)"),
    ],
)
def test_the_readme_carries_no_figure_that_goes_stale(pattern, what):
    hits = [line for line in README.splitlines() if re.search(pattern, line)]
    assert not hits, f"README.md holds {what}: {hits}"


def _table_ids() -> dict[str, str]:
    """id -> the picture path of its row in the environment table."""
    rows = re.findall(r'^\| <img src="([^"]+)"[^|]*\| `(ragen/[^`]+)` \|', README, flags=re.M)
    return {env_id: src for src, env_id in rows}


def test_every_registered_id_has_a_row_with_its_own_picture():
    registered = [env_id for env_id in gym.registry if env_id.startswith("ragen/")]
    table = _table_ids()
    assert sorted(table) == sorted(registered)
    for env_id, src in table.items():
        assert src == f"docs/img/{picture_name(env_id)}", env_id


def test_the_pictures_are_the_renderers_current_frames():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "env_pictures.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_every_link_and_image_of_the_readme_exists():
    targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", README) + re.findall(r'<img src="([^"]+)"', README)
    assert targets
    missing = [t for t in targets if not t.startswith(("http://", "https://")) and not (ROOT / t).exists()]
    assert not missing, missing
