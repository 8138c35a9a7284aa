"""labs/monitor_replay.py: a named rule replayed on run directories and scored
against the collapse label (recorded multi-turn traces, no training)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "labs"))
import monitor_replay as mr  # noqa: E402

TRACES = json.loads((Path(__file__).parent / "fixtures" / "monitor_traces_multiturn.json").read_text())


def _write_runs(root: Path) -> Path:
    for i, name in enumerate(sorted(TRACES)):
        d = root / name / f"seed{i}"
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRACES[name]["rows"]))
    return root


def test_replay_scores_the_multiturn_rule_like_the_fixture_tests(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_runs(tmp_path / "runs")
    assert mr.main(["runs", "--rule", "multiturn", "--since", "2", "--out", "rep.json"]) == 0
    rep = json.loads((tmp_path / "rep.json").read_text())
    by = {Path(r["run"]).parent.name: r for r in rep["runs"]}
    assert {n: by[n]["label"]["collapse_step"] for n in by} == {n: t["collapse_step"] for n, t in TRACES.items()}
    # the fixture's pinned facts: quiet on both healthy runs, warns vanilla before its collapse,
    # StarPO-S's slow decline only after it
    assert by["default_penalty"]["alarm"] is None and by["ppo_noop"]["alarm"] is None
    assert by["vanilla_noop"]["alarm"] < TRACES["vanilla_noop"]["collapse_step"]
    assert by["starpo_s_noop"]["alarm"] >= TRACES["starpo_s_noop"]["collapse_step"]
    s = rep["scores"]["all runs"]
    assert (s["collapsing"], s["warned"], s["late"], s["healthy"], s["false_alarms"]) == (2, 1, 1, 2, 0)
    assert s["leads"] == [TRACES["vanilla_noop"]["collapse_step"] - by["vanilla_noop"]["alarm"]]
    # seeds >= 2: sorted names default_penalty 0, ppo_noop 1, starpo_s_noop 2, vanilla_noop 3
    later = rep["scores"]["seed >= 2"]
    assert (later["collapsing"], later["healthy"]) == (2, 0)
    assert "all runs: 1/2 collapses warned before the label" in capsys.readouterr().out


def test_the_trainer_default_fires_on_every_trace(tmp_path):
    runs = mr.replay(mr.find_runs([_write_runs(tmp_path)]), mr.rule_kwargs("default"))
    assert all(r["alarm"] is not None and r["alarm"] < 10 for r in runs)


@pytest.mark.parametrize("argv, words", [
    (["--rule", "nope"], "--rule must be default, multiturn or a JSON object"),
    (["--rule", '{"success_ratioo": 1}'], "success_ratioo"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, words):
    root = _write_runs(tmp_path / "runs")
    assert mr.main([str(root)] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0]


def test_a_folder_without_runs_is_refused(tmp_path, capsys):
    assert mr.main([str(tmp_path)]) == 2
    assert "no metrics.jsonl under" in capsys.readouterr().err
    assert mr.main([str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_seed_of_reads_the_innermost_seed_folder():
    assert mr.seed_of(Path("runs/seed9/starpo-grpo/seed12")) == 12
    assert mr.seed_of(Path("runs/seedling/x")) is None


def test_an_unwritable_out_is_one_line_after_the_scores_are_printed(tmp_path, capsys):
    root = _write_runs(tmp_path / "runs")
    (tmp_path / "file").write_text("x")
    assert mr.main([str(root), "--out", str(tmp_path / "file" / "rep.json")]) == 2
    cap = capsys.readouterr()
    assert "all runs: 1/2 collapses warned" in cap.out  # the result is on screen, not lost
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write")
