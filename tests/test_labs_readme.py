"""labs/README.md lists every lab with its command, and the docs name only scripts that exist
(issue 46.4: the experiments moved from benchmarks/ to labs/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "labs" / "README.md"


def lab_scripts() -> list[str]:
    return sorted(p.name for p in (ROOT / "labs").glob("*.py") if not p.name.startswith("_"))


def test_every_lab_has_an_entry_with_its_command():
    text = README.read_text(encoding="utf-8")
    sections = re.split(r"(?m)^## ", text)[1:]
    named = {m.group(1): s for s in sections for m in [re.search(r"`(\w+\.py)`\n", s.split("\n", 1)[0] + "\n")] if m}
    assert sorted(named) == lab_scripts()
    for name, section in named.items():
        assert f"python labs/{name}" in section, name
        assert "Runtime:" in section and "Output:" in section, name


def test_the_docs_name_only_scripts_that_exist():
    """Every ``benchmarks/X.py`` / ``labs/X.py`` / ``scripts/X.py`` the docs mention is there
    (BENCHMARKS.md, a record of past runs, and benchmarks/results/ are left as written)."""
    docs = [ROOT / "README.md", README, *sorted((ROOT / "docs").glob("*.md"))]
    missing = sorted({(doc.name, ref) for doc in docs
                      for ref in re.findall(r"\b((?:benchmarks|labs|scripts)/\w+\.py)\b", doc.read_text(encoding="utf-8"))
                      if not (ROOT / ref).exists()})
    assert missing == []
