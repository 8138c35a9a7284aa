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
    # a game's own SFT settings (FrozenLake-v1 learns its grounded claims late), under --prior-set and --smoke
    assert tc.settings_for(env_id="ragen/FrozenLake-v1")["prior"]["steps"] == 3000
    assert tc.settings_for(env_id="ragen/Sokoban-v0")["prior"]["steps"] == tc.SETTINGS["prior"]["steps"] == 1000
    assert tc.settings_for(env_id="ragen/FrozenLake-v1", prior={"steps": 50})["prior"]["steps"] == 50
    assert tc.settings_for(prior={"lr": 1e-3, "curriculum_turns": 1})["prior"]["lr"] == 1e-3  # a float, a run_sft keyword
    assert tc.settings_for(smoke=True, env_id="ragen/FrozenLake-v1")["prior"]["steps"] == tc.SMOKE_CHANGES["prior"]["steps"]
    for bad in ({"fraction": 1.5}, {"consecutive": 0}, {"baseline": 0}, {"key": "rollout/success"}):
        with pytest.raises(ValueError, match="warning"):
            tc.settings_for(warning=bad)


def test_bad_input_fails_with_one_line(tc, tmp_path, capsys):
    assert tc.main(["--out", str(tmp_path / "x"), "--set", "nope=1", "--smoke"]) == 2
    assert tc.main(["--out", str(tmp_path / "x"), "--prior", str(tmp_path / "none")]) == 2
    assert tc.main(["--out", str(tmp_path / "x"), "--smoke", "--warning-set", "fraction=2"]) == 2
    assert tc.main(["--out", str(tmp_path / "x"), "--smoke", "--prior-set", "steps=abc"]) == 2
    assert tc.main(["--out", str(tmp_path / "x"), "--smoke", "--prior-set", "steps=1.5"]) == 2
    assert tc.main(["--out", str(tmp_path / "x"), "--smoke", "--prior-set", "bogus=1"]) == 2
    assert tc.main(["--out", str(tmp_path / "x"), "--smoke", "--prior-set", "seed=3"]) == 2  # the lab's own
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 7 and all(line.startswith("error: ") for line in err)
    assert "steps: must be an integer >= 0, got 'abc'" in err[3] and "not an SFT setting" in err[5]
    assert not (tmp_path / "x" / "prior").exists()


def test_smoke_run_writes_series_and_figure(tc, tmp_path, capsys):
    """Tiny sizes, a few steps, the three variants, one seed: the whole command, then again (reused)."""
    assert tc.main(["--smoke", "--out", str(tmp_path), "--seeds", "0"]) == 0
    data = json.loads((tmp_path / "template_collapse.json").read_text())
    assert (tmp_path / "template_collapse.png").stat().st_size > 10_000
    table = (tmp_path / "template_collapse_signals.md").read_text().splitlines()
    n = 2 + len(tc.SIGNAL_KEYS) * 12
    assert table[0].startswith("| signal |") and table[n] == ""
    # then the trainer's own rules: the default and MULTITURN_MONITOR at least (a dev pick when one qualifies)
    rules = table[n + 1:]
    assert rules[0].startswith("| trainer rule |") and len(rules) == 2 + len(data["monitor_rules"]) >= 4
    assert [r["rule"] for r in data["monitor_rules"][:2]] == ["trainer default", "MULTITURN_MONITOR"]
    assert data["claims_chance"]["own"] == 1.0 and all(r["kind"] for r in data["runs"])
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


def test_claims_chance_is_one_on_the_own_state_and_lower_on_another(tc):
    """The expert's grounded claims all hold on the state they describe; stepped on the next
    seed's state only some do (chance); deterministic (no draw of its own)."""
    kw = {"think": True, "max_turns": 4}
    a = tc.claims_chance("ragen/Sokoban-v0", kw, episodes=40)
    assert a["own"] == 1.0 and 0.05 < a["mismatched"] < 0.6
    assert tc.claims_chance("ragen/Sokoban-v0", kw, episodes=40) == a
    assert tc.claims_chance("ragen/FrozenLake-v0", kw, episodes=40)["own"] == 1.0
    with pytest.raises(ValueError, match="episodes"):
        tc.claims_chance("ragen/Sokoban-v0", kw, episodes=1)


def test_grounding_fall_step_is_the_collapse_of_the_rate_above_chance(tc):
    steps = list(range(12))
    # above chance 0.25: 0.6 for six steps, then 0.05; 5-step trailing means of g: peak 0.6 (steps 4, 5),
    # step 6 (0.6*4+0.05)/5 = 0.49, step 7 0.38, step 8 0.27 < 0.3 = half the peak, and below to the end
    values = [0.85] * 6 + [0.30] * 6
    assert tc.grounding_fall_step(steps, values, chance=0.25) == 8
    # never grounded: the first five steps' mean above chance (0.05) is under the 0.2 margin
    assert tc.grounding_fall_step(steps, [0.30] * 12, chance=0.25) is None
    assert tc.grounding_fall_step(steps, values, chance=0.25, margin=0.7) is None
    assert tc.grounding_fall_step(steps, [0.85] * 12, chance=0.25) is None  # stays grounded
    assert tc.grounding_fall_step([], [], chance=0.25) is None
    with pytest.raises(ValueError, match="steps"):
        tc.grounding_fall_step([0, 1], [0.5], chance=0.25)


def test_collapse_kind(tc):
    assert tc.collapse_kind(None, 5, [0.1]) == "healthy"
    assert tc.collapse_kind(20, None, [0.9, 0.3]) == "no think"
    assert tc.collapse_kind(20, 12, [0.9, 0.8]) == "template"
    assert tc.collapse_kind(20, None, [0.9, 0.8]) == "answer side"


def _run(split, collapse, mi):
    """A labelled run whose MI is measured at steps 0, 2, 4, ..."""
    return {"split": split, "label": {"collapse_step": collapse},
            "rows": [{"step": 2 * i, tc_mi_key: v} for i, v in enumerate(mi)]}


tc_mi_key = "collapse_trajectory_sample/mi_estimate"


def test_score_signals_warns_before_the_label_and_picks_on_dev_only(tc):
    # baseline = mean of the first two values (0.4); MI falls to 0.1 from step 4 on the collapsing runs
    falls = [0.4, 0.4, 0.1, 0.1, 0.1, 0.1]
    flat = [0.4, 0.4, 0.35, 0.3, 0.38, 0.4]
    runs = [_run("dev", 10, falls), _run("dev", None, flat), _run("heldout", 12, falls), _run("heldout", None, flat),
            _run("heldout", None, falls)]
    table = tc.score_signals(runs, chance=0.25, grid={"fraction": (0.5, 0.9), "consecutive": (1, 2)})
    rows = {(r["signal"], r["fraction"], r["consecutive"]): r for r in table if r["signal"] == "mi"}
    r = rows[("mi", 0.5, 2)]  # below 0.2 at steps 4 and 6: alarm at 4
    assert r["dev"]["warned"] == 1 and r["dev"]["median_lead"] == 6 and r["dev"]["false_alarms"] == 0
    assert r["heldout"]["warned"] == 1 and r["heldout"]["median_lead"] == 8 and r["heldout"]["false_alarms"] == 1
    assert rows[("mi", 0.9, 1)]["dev"]["false_alarms"] == 1  # 0.35 < 0.36 on the flat run
    chosen = [r for r in table if r.get("chosen")]
    assert [(r["signal"], r["fraction"], r["consecutive"]) for r in chosen] == [("mi", 0.5, 1)]  # first in grid order
    # signals without data score nothing and are never chosen
    assert all(r["dev"]["warned"] == 0 for r in table if r["signal"] != "mi")


def test_meets_bar(tc):
    ok = {"collapsing": 9, "warned": 8, "median_lead": 5, "healthy": 12, "false_alarms": 1}
    assert tc.meets_bar(ok) and tc.bar_shares(ok)
    small = {"collapsing": 2, "warned": 2, "median_lead": 6.5, "healthy": 4, "false_alarms": 0}
    assert tc.bar_shares(small) and not tc.meets_bar(small)  # the shares, on too few runs to show them
    assert not tc.meets_bar({**ok, "warned": 7})
    assert not tc.meets_bar({**ok, "median_lead": 4})
    assert not tc.meets_bar({**ok, "false_alarms": 2})
    assert not tc.meets_bar({**ok, "collapsing": 0, "warned": 0})


def test_well_formed_signal_reads_one_minus_the_format_error(tc):
    # well-formed share 0.9, 0.9, then 0.3 from step 2: below 0.5 x 0.9 = 0.45 at step 2
    rows = [{"step": t, tc.FORMAT_KEY: e} for t, e in enumerate([0.1, 0.1, 0.7, 0.7, 0.7])]
    assert tc.signal_alarm(rows, tc.FORMAT_KEY, 0.5, 2, offset=-1.0, sign=-1.0) == 2
    runs = [{"split": "dev", "label": {"collapse_step": 4}, "rows": rows}]
    row = next(r for r in tc.score_signals(runs, chance=0.25, grid={"fraction": (0.5,), "consecutive": (2,)})
               if r["signal"] == "well_formed")
    assert row["dev"]["warned"] == 1 and row["dev"]["leads"] == [2]


def _monitored(split, collapse, success):
    """A labelled run with the rows the trainer's monitor reads: 32 episodes a step, all well formed."""
    return {"split": split, "label": {"collapse_step": collapse},
            "rows": [{"step": t, "rollout/success": s, "rollout/in_group_std": 0.4, "rollout/return_mean": s,
                      "rollout/episodes": 32, "rollout/well_formed_episodes": 1.0, "rollout/well_formed_success": s,
                      "rollout/format_error": 0.0, "actor/grad_norm": 1.0} for t, s in enumerate(success)]}


def test_score_monitor_rules_replays_the_trainers_rules(tc):
    # MULTITURN_MONITOR (success_drop 0.25, window 5, k 5): the 5-step mean of 0.8, ..., 0.8, 0, 0, ...
    # (0 from step 10) is 0.64, 0.48, 0.32, 0.16 at steps 10-13: first below 0.25 x 0.8 = 0.2 at step 13,
    # where it is (0.8 - 0.16) / sqrt(0.8 x 0.2 / 160) = 20 standard errors below its best (>= 5)
    falls = [0.8] * 10 + [0.0] * 20
    flat = [0.5] * 30
    runs = [_monitored("dev", 20, falls), _monitored("dev", None, flat), _monitored("heldout", 18, falls),
            _monitored("heldout", None, flat)]
    table = tc.score_monitor_rules(runs)
    rows = {r["rule"]: r for r in table}
    mt = rows["MULTITURN_MONITOR"]
    assert mt["dev"]["leads"] == [7] and mt["dev"]["false_alarms"] == 0
    assert mt["heldout"]["leads"] == [5] and mt["heldout"]["false_alarms"] == 0
    assert "trainer default" in rows
    picks = [r for r in table if r["chosen"]]
    assert len(picks) == 1 and picks[0]["rule"].startswith("dev pick: ")
    # the pick's monitor setting, replayed as the trainer would run it, gives the pick's own alarms
    from ragen_envs.starpo.diagnostics import replay_monitor

    alarms = [replay_monitor(r["rows"], **picks[0]["kwargs"])["alarm"] for r in runs]
    assert [20 - alarms[0], 18 - alarms[2]] == [picks[0]["dev"]["leads"][0], picks[0]["heldout"]["leads"][0]]
    assert alarms[1] is None and alarms[3] is None
    md = tc.monitor_rules_markdown(table)
    assert md[2].startswith("| trainer default |") and len(md) == 2 + len(table)
