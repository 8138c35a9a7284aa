"""BENCHMARKS.md holds results, not a diary (issue 46 item 3): its first screen is one table of every
headline measure (what, ours, the peer or goal, the ratio, the command, the date, the machine), each row
linking to a section of its own; every section gives its command; the file stays short, because superseded
runs move verbatim to dated files under benchmarks/results/, and every such file it names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEXT = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
# HTML comments hold the template for new measures; they are not sections
BODY = re.sub(r"<!--.*?-->", "", TEXT, flags=re.S)
COLUMNS = ["measure", "ours", "peer or goal", "ratio", "command", "date", "machine"]
MAX_LINES = 720  # 37 measures on 2026-12-07 (712 lines): one short section each, not a second diary


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'.

    >>> slug("RAGEN-2 ids and rollout filter")
    'ragen-2-ids-and-rollout-filter'
    """
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def cells(line: str) -> list[str]:
    """The cells of a markdown table row, '|' inside backticks kept: '| a | `x | y` |' -> ['a', '`x | y`']."""
    out, cell, code = [], "", False
    for ch in line.strip()[1:-1]:
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            out.append(cell.strip())
            cell = ""
        else:
            cell += ch
    return out + [cell.strip()]


def sections() -> dict[str, str]:
    """'###' heading -> its text up to the next heading of any level."""
    parts = re.split(r"^(#{1,3} .*)$", BODY, flags=re.M)
    return {parts[i][4:].strip(): parts[i + 1] for i in range(1, len(parts), 2) if parts[i].startswith("### ")}


def headline_rows() -> list[list[str]]:
    lines = BODY.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(cells(line))
    assert table[0] == COLUMNS, f"the first table's columns are {table[0]}, not {COLUMNS}"
    assert set("".join(table[1])) <= set("-: "), "the second line of the table is its separator"
    return table[2:]


def test_slug_and_cells_on_hand_cases():
    assert slug("Eval with an hf agent") == "eval-with-an-hf-agent"
    assert slug("Export, redaction and digests") == "export-redaction-and-digests"
    assert cells("| a | `x | y` | [b](#c) |") == ["a", "`x | y`", "[b](#c)"]


def test_the_first_screen_is_the_headline_table():
    before_table = BODY.split("\n|", 1)[0]
    assert "## Headline results" in before_table
    assert "### " not in before_table and len(before_table.splitlines()) <= 15
    assert len(headline_rows()) >= 20


def test_every_row_has_a_command_a_date_a_machine_and_links_its_section():
    anchors = {slug(h) for h in re.findall(r"^#{1,3} (.*)$", BODY, flags=re.M)}
    for row in headline_rows():
        assert len(row) == len(COLUMNS), row
        what = dict(zip(COLUMNS, row))
        links = re.findall(r"\]\(#([^)]+)\)", what["measure"])
        assert links and links[0] in anchors, f"row {what['measure']!r} links no existing section"
        assert re.fullmatch(r"`[^`]+`", what["command"]), f"row {what['measure']!r}: command {what['command']!r}"
        assert re.fullmatch(r"20\d\d-\d\d-\d\d", what["date"]), f"row {what['measure']!r}: date {what['date']!r}"
        assert what["machine"] and what["ours"], row


def test_every_section_has_a_row_and_a_command_block():
    linked = set(re.findall(r"\]\(#([^)]+)\)", "\n".join(" ".join(r[:1]) for r in headline_rows())))
    found = sections()
    assert len(found) >= 20
    for heading, text in found.items():
        assert slug(heading) in linked, f"section {heading!r} has no row in the headline table"
        assert re.search(r"^```(bash)?\n.+?^```", text, flags=re.M | re.S), f"section {heading!r} has no command block"


def test_the_file_stays_short():
    assert len(TEXT.splitlines()) <= MAX_LINES


def test_no_old_section_numbers_and_no_diary_headings():
    assert not re.search(r"^#+ \d", BODY, flags=re.M), "numbered sections (§N) are the old diary's"
    assert "§" not in BODY


def test_every_results_file_and_link_it_names_exists():
    named = set(re.findall(r"benchmarks/results/[\w.\-{},]+", BODY))
    assert any(re.search(r"/20\d\d-\d\d-\d\d-", n) for n in named)
    for name in named:
        name = name.rstrip(".,")
        if "{" in name:  # benchmarks/results/issue14_echo_trap{,_keep}.png
            head, alts, tail = re.match(r"(.*)\{(.*)\}(.*)", name).groups()
            paths = [head + a + tail for a in alts.split(",")]
        else:
            paths = [name]
        for path in paths:
            assert (ROOT / path).exists(), f"BENCHMARKS.md names {path}, which does not exist"
    for target in re.findall(r"\]\(([^)#\s]+)", BODY):
        assert target.startswith("http") or (ROOT / target).exists(), target


def test_every_moved_history_file_says_where_the_current_figure_is():
    moved = sorted((ROOT / "benchmarks" / "results").glob("20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]-*.md"))
    assert moved
    index = (ROOT / "benchmarks" / "results" / "README.md").read_text(encoding="utf-8")
    anchors = {slug(h) for h in re.findall(r"^#{1,3} (.*)$", BODY, flags=re.M)}
    for path in moved:
        head = path.read_text(encoding="utf-8")[:1500]
        pointers = re.findall(r"\(\.\./\.\./BENCHMARKS\.md#([^)]+)\)", head)
        assert pointers and pointers[0] in anchors, f"{path.name} points at no section of BENCHMARKS.md"
        assert f"]({path.name})" in index, f"benchmarks/results/README.md does not list {path.name}"


@pytest.mark.parametrize("script", sorted(set(re.findall(r"python (\S+\.py)", BODY))))
def test_every_script_a_command_runs_exists(script):
    path = ROOT / script
    if script.startswith("labs/") and not path.exists():  # the lab scripts move from benchmarks/ to labs/
        path = ROOT / "benchmarks" / Path(script).name
    assert path.exists(), script


def test_every_anchor_and_history_file_named_elsewhere_exists():
    """Docs, code, tests and scripts cite a BENCHMARKS.md anchor or a dated history file, never an old § number."""
    anchors = {slug(h) for h in re.findall(r"^#{1,3} (.*)$", BODY, flags=re.M)}
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("ragen_envs", "tests", "benchmarks", "labs", "scripts"):
        files += sorted((ROOT / folder).rglob("*.py"))
    cited = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        for anchor in re.findall(r"BENCHMARKS\.md\)?#([\w\-]+)", text):
            cited += 1
            assert anchor in anchors, f"{path.relative_to(ROOT)} cites BENCHMARKS.md#{anchor}, no such section"
        for name in re.findall(r"benchmarks/results/(20\d\d-\d\d-\d\d-[\w\-]+\.md)", text):
            cited += 1
            assert (ROOT / "benchmarks" / "results" / name).exists(), f"{path.relative_to(ROOT)} cites {name}"
        assert not re.search(r"BENCHMARKS(\.md)?`? §?\d", text), f"{path.relative_to(ROOT)} cites an old § number"
    assert cited >= 20
