"""labs/template_collapse.py (issue 45 item 4): the MI-warning rule, the lead, the settings'
checks, and a smoke run of the whole command."""

from __future__ import annotations

import json
import os

import pytest
from bench_loader import load_lab

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tc():
    return load_lab("template_collapse.py", "template_collapse_lab")


def test_mi_warning_is_first_run_of_consecutive_values_below_fraction_of_first(tc):
    steps = [0, 2, 4, 6, 8, 10]
    # first = 0.4, threshold 0.2: below at steps 4 (0.1), 8 (0.15), 10 (0.19); 6 (0.3) breaks the first run
    values = [0.4, 0.25, 0.1, 0.3, 0.15, 0.19]
    assert tc.mi_warning_step(steps, values, 0.5, 1) == 4
    assert tc.mi_warning_step(steps, values, 0.5, 2) == 8
    assert tc.mi_warning_step(steps, values, 0.5, 3) is None  # only two in a row at the end
    assert tc.mi_warning_step(steps, values, 0.8, 1) == 2  # threshold 0.32: 0.25 < 0.32
    # a threshold equal to the value is not below it: 0.5 x 0.4 = 0.2
    assert tc.mi_warning_step([0, 1], [0.4, 0.2], 0.5, 1) is None
    # baseline 2: reference (0.4 + 0.25) / 2 = 0.325, threshold 0.1625; from the third value on: 0.1 at step 4
    assert tc.mi_warning_step(steps, values, 0.5, 1, baseline=2) == 4
    assert tc.mi_warning_step(steps, values, 0.5, 2, baseline=2) is None  # 0.15, 0.19: 0.19 >= 0.1625
    assert tc.mi_warning_step(steps, values, 0.6, 2, baseline=2) == 8  # threshold 0.195


def test_mi_warning_needs_a_positive_reference_and_two_points(tc):
    assert tc.mi_warning_step([0, 1, 2], [0.0, -1.0, -1.0], 0.5, 1) is None
    assert tc.mi_warning_step([0, 1, 2], [-0.1, -1.0, -1.0], 0.5, 1) is None
    assert tc.mi_warning_step([0], [0.3], 0.5, 1) is None
    assert tc.mi_warning_step([], [], 0.5, 1) is None
    with pytest.raises(ValueError, match="same|steps"):
        tc.mi_warning_step([0, 1], [0.3], 0.5, 1)
    with pytest.raises(ValueError, match="consecutive"):
        tc.mi_warning_step([0, 1], [0.3, 0.0], 0.5, 0)
    with pytest.raises(ValueError, match="baseline"):
        tc.mi_warning_step([0, 1], [0.3, 0.0], 0.5, 1, baseline=0)
    assert tc.mi_warning_step([0, 1], [0.3, 0.0], 0.5, 1, baseline=2) is None  # nothing after the reference


def test_lead_is_collapse_minus_warning(tc):
    assert tc.lead(20, 12) == 8
    assert tc.lead(10, 14) == -4  # the warning came late
    assert tc.lead(None, 3) is None and tc.lead(7, None) is None


def test_summarize_marks_collapse_and_warning(tc):
    """A run whose success climbs then falls to 0 from step 12, with an MI that halves from step 4."""
    rows = []
    for t in range(24):
        row = {"step": t, "rollout/success": 0.0 if t >= 12 else 0.5}
        if t % 2 == 0:
            row[tc.MI_KEY] = 0.4 if t < 4 else 0.1
            row[tc.RETRIEVAL_KEY] = 0.3 if t < 4 else 0.0
        if t % 5 == 0:
            row["eval/success"] = 0.5 if t < 12 else 0.0
        rows.append(row)
    s = tc.summarize(rows, tc.settings_for(warning={"baseline": 1}))
    # 5-step trailing mean of success: 0.5 to step 11, 0.4 at 12, 0.3 at 13, 0.2 at 14 < 0.25 = half the peak
    assert s["collapse_step"] == 14
    assert s["mi_warning_step"] == 4 and s["lead"] == 10
    assert s["mi_estimate"]["steps"] == list(range(0, 24, 2))
    assert s["rollout_success"]["values"][:2] == [0.5, 0.5]
    assert s["eval_success"]["steps"] == [0, 5, 10, 15, 20]
    assert s["eval_collapse_step"] == 15 and s["eval_lead"] == 11


def test_settings_are_checked_and_copied(tc):
    s = tc.settings_for(rl={"steps": 7}, warning={"fraction": 0.3})
    assert s["rl"]["steps"] == 7 and s["warning"]["fraction"] == 0.3
    assert tc.SETTINGS["rl"]["steps"] == 60 and tc.SETTINGS["warning"]["fraction"] == 0.5  # a copy
    assert s["rl"]["collapse_detection"]["multi_turn_enabled"] is True
    assert tc.settings_for(smoke=True)["rl"]["steps"] == tc.SMOKE_CHANGES["rl"]["steps"]
    assert tc.settings_for()["warning"]["baseline"] == 2
    assert tc.settings_for(env_kwargs={"format_penalty": -0.1})["env_kwargs"] == {"think": True, "max_turns": 4,
                                                                               "format_penalty": -0.1}
    with pytest.raises(ValueError, match="think"):
        tc.settings_for(env_kwargs={"think": False})
    for bad in ({"fraction": 1.5}, {"consecutive": 0}, {"baseline": 0}, {"key": "rollout/success"}):
        with pytest.raises(ValueError, match="warning"):
            tc.settings_for(warning=bad)


def test_bad_input_fails_with_one_line(tc, tmp_path, capsys):
    assert tc.main(["--out", str(tmp_path / "x"), "--set", "nope=1", "--smoke"]) == 2
    assert tc.main(["--out", str(tmp_path / "x"), "--prior", str(tmp_path / "none")]) == 2
    assert tc.main(["--out", str(tmp_path / "x"), "--smoke", "--warning-set", "fraction=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)
    assert not (tmp_path / "x" / "prior").exists()


def test_smoke_run_writes_series_and_figure(tc, tmp_path, capsys):
    """Tiny sizes, a few steps, the three variants, one seed: the whole command, then again (reused)."""
    assert tc.main(["--smoke", "--out", str(tmp_path), "--seeds", "0"]) == 0
    data = json.loads((tmp_path / "template_collapse.json").read_text())
    assert (tmp_path / "template_collapse.png").stat().st_size > 10_000
    assert data["variants"] == ["vanilla", "starpo-s", "ragen2"]
    steps = tc.SMOKE_CHANGES["rl"]["steps"]
    for r in data["runs"]:
        assert r["rollout_success"]["steps"] == list(range(steps))
        assert len(r["mi_estimate"]["steps"]) == len(r["mi_estimate"]["values"])
        assert len(r["retrieval_above_chance"]["steps"]) == len(r["mi_estimate"]["steps"])
        for key in ("collapse_step", "eval_collapse_step", "mi_warning_step", "lead"):
            assert key in r
    assert all(len(r["mi_estimate"]["steps"]) >= 2 for r in data["runs"])  # the collapse metrics ran
    cfg = {v: json.loads((tmp_path / "runs" / v / "seed0" / "config.json").read_text()) for v in data["variants"]}
    assert cfg["vanilla"]["filter_mode"] == "none" and cfg["starpo-s"]["keep_ratio"] == 0.25
    assert cfg["ragen2"]["rollout_filter_strategy"] == "top_p" and cfg["ragen2"]["rollout_filter_value"] == 0.9
    assert all(c["advantage"] == "grpo" and c["collapse_detection"]["multi_turn_enabled"] for c in cfg.values())
    assert "MI-warning step" in capsys.readouterr().out
    assert tc.main(["--smoke", "--out", str(tmp_path), "--seeds", "0"]) == 0
    assert "3 runs (3 already done)" in capsys.readouterr().out
    # a finished run is never reused under other training settings
    assert tc.main(["--smoke", "--out", str(tmp_path), "--seeds", "0", "--set", "actor_lr=1e-3"]) == 2
    assert "trained with other settings" in capsys.readouterr().err
