"""The bundled reference scores (issue 46.2): the paper's published success rates and our
expert / random baselines in ``ragen_envs/eval/reference_scores.json``, the tables of
``docs/reference-scores.md`` rendered from it, ``scripts/reference_scores.py --check``, and
``ragen eval --compare paper|expert|random|reference``."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragen_envs
from ragen_envs.eval import format_compare_table
from ragen_envs.eval.reference import (
    REFERENCE_NAMES, ReferenceScoresError, load_reference, markdown_blocks, paper_success, reference_runs,
    replace_blocks, validate_reference,
)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reference-scores.md"
RAGEN = [sys.executable, "-c", "import sys; from ragen_envs.cli import main; sys.exit(main())"]


# ---------------------------------------------------------------------------- the file
def test_the_bundled_file_loads_validates_and_is_package_data():
    data = load_reference()
    assert data["schema_version"] == 1 and data["paper"]["arxiv"].startswith("2504.20073v2")
    pyproject = (ROOT / "pyproject.toml").read_text()
    package_data = pyproject[pyproject.index("[tool.setuptools.package-data]"):].split("\n\n")[0]
    assert '"ragen_envs.eval" = ["reference_scores.json"]' in package_data  # installed with the package


@pytest.mark.parametrize("text, value", [("27.73", 0.2773), ("100.00", 1.0), ("23", 0.23), ("0", 0.0), ("2.34", 0.0234)])
def test_a_published_percentage_reads_as_a_fraction(text, value):
    assert paper_success(text) == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("text", ["27,73", "-1", "100.01", "1e2", "", " 27.73", "2.3.4", 27.73])
def test_a_published_percentage_must_be_plain_decimal_text(text):
    with pytest.raises(ReferenceScoresError):
        paper_success(text)


def _table(data, source):
    (table,) = [t for t in data["paper_tables"] if t["source"] == source]
    return {r["label"]: r["values"] for r in table["rows"]}


def test_the_paper_numbers_are_the_published_ones():
    # copied by hand from the paper (Tables 3 and 5, Appendix G; /work/shared/paper-notes.md §7)
    data = load_reference()
    assert _table(data, "Table 5") == {
        "GPT-4o (zero-shot)": ["27.73", "26.56"], "Qwen2.5-72B (zero-shot)": ["19.53", "23.83"],
        "0.5B trained, 4 responses/prompt": ["20.70", "21.48"]}
    assert _table(data, "Table 3") == {
        "Bandit → Bandit": ["100.00", "81.25"], "Bandit → Bandit-Rev": ["67.58", "56.25"],
        "Sokoban → FrozenLake": ["19.92", "19.53"], "Sokoban → LargeSokoban": ["2.34", "2.73"],
        "Sokoban → Sokoban": ["21.48", "20.73"], "Sokoban → SokobanNewVocab": ["18.75", "26.17"]}
    assert _table(data, "Appendix G") == {"SFT (BFS expert trajectories)": ["74.6", "23"], "StarPO-S": ["20.3", "21.8"]}
    assert _table(data, "Table 1")["4"] == ["20.70", "25.39", "21.48"]
    assert _table(data, "Table 2")["6"] == ["33.59", "31.64", "6.64", "18.36"]
    sources = [t["source"] for t in data["paper_tables"]]
    assert sources == ["Table 1", "Table 2", "Table 3", "Table 5", "Appendix G"]


def _broken(path, value):
    data = copy.deepcopy(load_reference())
    *keys, last = path
    node = data
    for k in keys:
        node = node[k]
    node[last] = value
    return data


@pytest.mark.parametrize("path, value, needle", [
    (("paper_tables", 3, "rows", 0, "values", 0), "27.7 3", "decimal text"),
    (("paper_tables", 3, "rows", 0, "values"), ["27.73"], "values for 2 columns"),
    (("paper_columns", 0, "success", "ragen/Sokoban-v0"), "27.74", "not a number of Table 5"),
    (("paper_columns", 0, "source"), "Table 9", "no table's"),
    (("paper_env_ids", "Sokoban"), "Sokoban-v0", "not a ragen/ id"),
    (("baselines", "agents", "expert", "ragen/Sokoban-v0", "successes"), 257, "bad counts"),
    (("baselines", "agents", "random", "ragen/Sokoban-v0", "success_rate"), 0.5, "is not"),
    (("baselines", "agents", "random", "ragen/Sokoban-v0", "success_ci95"), [0.0, 0.1], "does not hold"),
    (("baselines", "agents", "oracle"), {}, "not one of"),
    (("schema_version",), 2, "schema_version"),
    (("baselines", "no_expert"), {"ragen/Sokoban-v0": "none"}, "both has expert numbers"),
])
def test_validation_names_what_is_wrong(path, value, needle):
    with pytest.raises(ReferenceScoresError, match=needle):
        validate_reference(_broken(path, value))


def test_every_registered_id_has_expert_and_random_numbers_on_the_256_seeds():
    base = load_reference()["baselines"]
    agents, no_expert = base["agents"], base.get("no_expert", {})
    assert not no_expert  # every id of today has an expert
    for agent in ("expert", "random"):
        missing = [s.id for s in ragen_envs.ENV_SPECS if s.id not in agents.get(agent, {})
                   and not (agent == "expert" and s.id in no_expert)]
        assert not missing, f"no {agent} numbers for {missing}: run python scripts/reference_scores.py --ids {' '.join(missing)}"
        assert {e["episodes"] for e in agents[agent].values()} == {256}
    assert agents["expert"]["ragen/Sokoban-v0"]["success_rate"] == 1.0  # BFS solves every 6x6 room in 10 moves
    assert agents["expert"]["ragen/Bandit-v0"]["success_rate"] == 1.0


# ---------------------------------------------------------------------------- the doc
def test_the_doc_tables_are_the_json_rendered():
    doc = DOC.read_text(encoding="utf-8")
    assert replace_blocks(doc, markdown_blocks(load_reference())) == doc, \
        "docs/reference-scores.md is stale: run python scripts/reference_scores.py --doc-only"
    assert "| Bandit → Bandit-Rev | 67.58 | 56.25 |" in doc  # a published number, in the page as printed


def test_the_doc_maps_every_paper_env_name_to_the_json_id():
    rows = [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    for name, env_id in load_reference()["paper_env_ids"].items():
        assert any(name in row.split("|")[1].replace(",", " ").split() and f"`{env_id}`" in row for row in rows), name


def test_replace_blocks_fills_between_markers_and_needs_them():
    doc = "a\n<!-- BEGIN generated:x -->\nold\n<!-- END generated:x -->\nb\n"
    assert replace_blocks(doc, {"x": "new"}) == "a\n<!-- BEGIN generated:x -->\nnew\n<!-- END generated:x -->\nb\n"
    with pytest.raises(ReferenceScoresError, match="generated:y"):
        replace_blocks(doc, {"y": "new"})


# ---------------------------------------------------------------------------- --compare
def test_reference_runs_keep_only_the_asked_ids_and_published_text():
    runs = dict(reference_runs("paper", ["ragen/Sokoban-v0", "ragen/Countdown-v0"]))
    assert list(runs) == ["paper GPT-4o 0-shot (T5)", "paper Qwen2.5-72B 0-shot (T5)", "paper 0.5B trained (T5)",
                          "paper 0.5B StarPO-S, Bandit/Sokoban-trained (T3)"]
    gpt = runs["paper GPT-4o 0-shot (T5)"]["envs"]
    assert list(gpt) == ["ragen/Sokoban-v0"] and gpt["ragen/Sokoban-v0"]["published"] == "27.73"
    assert gpt["ragen/Sokoban-v0"]["success_rate"] == pytest.approx(0.2773)
    assert reference_runs("paper", ["ragen/Countdown-v0"]) == []  # the paper has no Countdown
    labels = [label for label, _ in reference_runs("reference", ["ragen/Bandit-v0"])]
    assert labels == ["paper 0.5B StarPO-S, Bandit/Sokoban-trained (T3)", "expert (reference)", "random (reference)"]
    with pytest.raises(KeyError):
        reference_runs("papers")
    assert set(REFERENCE_NAMES) == {"paper", "expert", "random", "reference"}


def test_the_compare_table_prints_a_published_number_as_printed():
    (label, paper), = reference_runs("paper", ["ragen/Bandit-v0"])
    run = {"agent": "me", "envs": {"ragen/Bandit-v0": {"episodes": 4, "success_rate": 0.5, "success_ci95": [0.15, 0.85]}}}
    rows = format_compare_table([run, paper], ["me", label]).splitlines()
    assert rows[2].split()[:5] == ["ragen/Bandit-v0", "50.0", "[15-85]", "n=4", "100.00"]
    assert rows[2].endswith("+50.0")  # 100.00 % published - 50.0 % this run


def _ragen(*args):
    return subprocess.run([*RAGEN, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_eval_compare_paper_and_a_run_dir_side_by_side(tmp_path):
    first = _ragen("eval", "ragen/Sokoban-v0", "--agent", "random", "--seeds", "4", "--out", tmp_path / "rnd",
                   "--quiet", "--report-frames", "0")
    assert first.returncode == 0, first.stderr
    result = _ragen("eval", "ragen/Bandit-v0", "ragen/Sokoban-v0", "--agent", "expert", "--seeds", "4",
                    "--out", tmp_path / "exp", "--quiet", "--report-frames", "0",
                    "--compare", "paper", "--compare", tmp_path / "rnd", "--compare", "random")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "paper GPT-4o 0-shot (T5)" in line)  # the comparison header
    assert "random (reference)" in lines[at] and "expert" in lines[at]
    rows = {line.split()[0]: line for line in lines[at + 2:at + 4]}
    ours = load_reference()["baselines"]["agents"]["random"]["ragen/Sokoban-v0"]
    sokoban = rows["ragen/Sokoban-v0"]
    assert "100.0 [51-100] n=4" in sokoban and "27.73" in sokoban and "19.53" in sokoban  # run, GPT-4o, Qwen-72B
    assert sokoban.count("n=4") == 2 and rows["ragen/Bandit-v0"].count("n=4") == 1  # the run dir's column too
    assert f"{100 * ours['success_rate']:.1f} [" in sokoban and "n=256" in sokoban  # our random on 256 seeds
    assert "100.00" in rows["ragen/Bandit-v0"] and "27.73" not in rows["ragen/Bandit-v0"]
    page = (tmp_path / "exp" / "report.html").read_text()
    assert '<table id="compare-table">' in page and ">27.73</td>" in page and "(published)" in page
    assert "random (reference)" in page


def test_eval_compare_unknown_name_is_one_line(tmp_path):
    result = _ragen("eval", "ragen/Bandit-v0", "--agent", "expert", "--seeds", "2", "--out", tmp_path / "a",
                    "--compare", "papers")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--compare papers" in lines[0] and "paper, expert, random, reference" in lines[0]
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------- the script
def _script():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import reference_scores
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return reference_scores


def test_script_check_replays_and_flags_a_changed_count(tmp_path, monkeypatch, capsys):
    script = _script()
    data = json.loads(script.JSON_PATH.read_text())
    stored = data["baselines"]["agents"]["random"]["ragen/Bandit-v0"]
    k = stored["successes"]
    assert script.main(["--check", "--ids", "ragen/Bandit-v0", "--agents", "random"]) == 0
    assert f"{k}/256 now, {k}/256 stored" in capsys.readouterr().out
    stored["successes"] += 1
    stored["success_rate"] = stored["successes"] / stored["episodes"]
    stored["success_ci95"] = [0.0, 1.0]
    path = tmp_path / "reference_scores.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(script, "JSON_PATH", path)
    assert script.main(["--check", "--ids", "ragen/Bandit-v0", "--agents", "random"]) == 1
    assert "DIFFERS" in capsys.readouterr().out
    assert script.main(["--check", "--ids", "ragen/Nope-v0"]) == 2


def test_eval_compare_reference_notes_non_default_settings(tmp_path):
    result = _ragen("eval", "ragen/Bandit-v0", "--agent", "expert", "--seeds", "2", "--out", tmp_path / "a",
                    "--quiet", "--report-frames", "0", "--no-think", "--compare", "expert")
    assert result.returncode == 0, result.stderr
    assert "note: the reference numbers are for each id's default settings; this run sets think=False" in result.stderr
    assert "expert (reference)" in result.stdout


def test_script_records_an_id_without_expert_and_the_doc_says_so(tmp_path, monkeypatch):
    from ragen_envs.envs.bandit import BanditEnv

    script = _script()
    assert script.expert_missing("ragen/Bandit-v0") is None
    def no_expert(self):
        raise NotImplementedError("none yet")

    monkeypatch.setattr(BanditEnv, "expert_actions", no_expert)
    assert script.expert_missing("ragen/Bandit-v0") == "none yet"
    json_path, doc_path = tmp_path / "reference_scores.json", tmp_path / "reference-scores.md"
    json_path.write_text(script.JSON_PATH.read_text())
    doc_path.write_text(script.DOC_PATH.read_text())
    monkeypatch.setattr(script, "JSON_PATH", json_path)
    monkeypatch.setattr(script, "DOC_PATH", doc_path)
    assert script.main(["--ids", "ragen/Bandit-v0", "--agents", "expert", "--runs", str(tmp_path / "runs")]) == 0
    data = load_reference(json_path.read_text())
    assert data["baselines"]["no_expert"] == {"ragen/Bandit-v0": "none yet"}
    assert "ragen/Bandit-v0" not in data["baselines"]["agents"]["expert"]
    assert "| `ragen/Bandit-v0` | expert | – | – | – | – | – | no expert: none yet |" in doc_path.read_text()
    assert not (tmp_path / "runs").exists()  # nothing was played


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.sampled_from([s.id for s in ragen_envs.ENV_SPECS] + ["ragen/Unknown-v9"]), unique=True),
       name=st.sampled_from(sorted(REFERENCE_NAMES)))
def test_reference_runs_hold_only_asked_ids_and_never_an_empty_column(ids, name):
    data = load_reference()
    published = {c["label"]: c["success"] for c in data["paper_columns"]}
    for label, summary in reference_runs(name, ids, data):
        assert summary["envs"] and set(summary["envs"]) <= set(ids) and summary["agent"] == label
        for env_id, e in summary["envs"].items():
            if label in published:
                assert e["published"] == published[label][env_id] and e["success_ci95"] is None
                assert e["success_rate"] == paper_success(e["published"])
            else:
                assert e == data["baselines"]["agents"][summary["reference"]][env_id]
