"""The Echo Trap lab (labs/echo_trap.py; its runner and analysis in labs/_labs_common.py): the
analysis functions, and a smoke run."""

from __future__ import annotations

import json
import os

import pytest
from bench_loader import load_lab, load_lab_common

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
pytest.importorskip("torch")

@pytest.fixture(scope="module")
def lab():
    return load_lab_common()


@pytest.fixture(scope="module")
def script():
    return load_lab("echo_trap.py", "echo_trap_lab")


def test_smooth_is_a_trailing_mean(lab):
    assert lab.smooth([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]
    assert lab.smooth([], 3) == []


def test_collapse_step_finds_the_lasting_fall_after_the_peak(lab):
    steps = list(range(12))
    # rises to 1, then falls to 0 for good from step 7 on
    values = [0.5, 0.6, 0.8, 1.0, 1.0, 1.0, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0]
    col = lab.collapse_step(steps, values, window=1, fraction=0.5)
    assert col == 7
    # a dip that recovers is not a collapse
    dip = [0.5, 1.0, 1.0, 0.1, 0.1, 1.0, 1.0, 1.0]
    assert lab.collapse_step(list(range(8)), dip, window=1, fraction=0.5) is None
    # smoothing delays the detection: a 3-step mean crosses 0.5 at step 8
    assert lab.collapse_step(steps, values, window=3, fraction=0.5) == 8
    assert lab.collapse_step([0, 1], [0.0, 0.0]) is None
    with pytest.raises(ValueError):
        lab.collapse_step([0, 1], [1.0])


def test_first_events_per_kind(lab):
    rows = [{"step": 0, "events": []}, {"step": 3, "events": ["grad_norm_spike: x"]},
            {"step": 5, "events": ["grad_norm_spike: y", "reward_std_collapse: z"]}]
    assert lab.first_events(rows) == {"reward_std_collapse": 5, "grad_norm_spike": 3, "echo_trap": None}


def test_run_specs_and_unknown_variant(lab):
    specs = lab.run_specs(["starpo-ppo", "starpo-s-grpo"], [0, 1], keep_sweep=True)
    assert [(s["variant"], s["seed"]) for s in specs[:4]] == [("starpo-ppo", 0), ("starpo-ppo", 1),
                                                              ("starpo-s-grpo", 0), ("starpo-s-grpo", 1)]
    assert [s["overrides"]["keep_ratio"] for s in specs[4:] if s["seed"] == 0] == [0.25, 0.5, 0.75, 1.0]
    with pytest.raises(ValueError, match="unknown variant"):
        lab.run_specs(["nope"], [0], keep_sweep=False)


def test_ragen2_sweep_specs_use_the_reference_filter(lab):
    """--ragen2-sweep: StarPO-S under the ragen2 preset, one run per (p, seed), named by p."""
    specs = lab.run_specs(["starpo-s-grpo-ragen2"], [0, 1], keep_sweep=False, sweep_advantage="grpo",
                          ragen2_sweep=[0.25, 0.9, 1.0])
    assert [(s["variant"], s["seed"], s["preset"]) for s in specs[:2]] == [("starpo-s-grpo-ragen2", 0, "ragen2"),
                                                                          ("starpo-s-grpo-ragen2", 1, "ragen2")]
    assert [(s["variant"], s["overrides"]) for s in specs[2:] if s["seed"] == 1] == [
        ("ragen2-p25", {"rollout_filter_value": 0.25, "advantage": "grpo"}),
        ("ragen2-p90", {"rollout_filter_value": 0.9, "advantage": "grpo"}),
        ("ragen2-p100", {"rollout_filter_value": 1.0, "advantage": "grpo"})]
    assert all(s["preset"] == "ragen2" for s in specs)


def test_ragen2_setting_reaches_the_trainer_config(script, tmp_path):
    """--smoke: the ragen2 variant and a --ragen2-sweep run train with RAGEN-2's filter (not the
    top-25 %), StarPO-S's loss otherwise; the run equal to the variant (p = 0.9) is not repeated."""
    out = tmp_path / "lab"
    assert script.main(["--smoke", "--out", str(out), "--variants", "starpo-s-grpo-ragen2", "--seeds", "0",
                        "--ragen2-sweep", "0.5", "0.9", "--sweep-advantage", "grpo"]) == 0
    cfg = json.loads((out / "runs" / "starpo-s-grpo-ragen2" / "seed0" / "config.json").read_text())
    assert (cfg["rollout_filter_strategy"], cfg["rollout_filter_value"], cfg["rollout_filter_top_p_prob_mode"],
            cfg["rollout_filter_metric"], cfg["rollout_filter_include_zero"]) == ("top_p", 0.9, "linear",
                                                                                 "reward_variance", False)
    assert (cfg["advantage"], cfg["kl_coef"], cfg["clip_high"]) == ("grpo", 0.0, 0.28)
    swept = json.loads((out / "runs" / "ragen2-p50" / "seed0" / "config.json").read_text())
    assert (swept["rollout_filter_strategy"], swept["rollout_filter_value"], swept["advantage"]) == ("top_p", 0.5, "grpo")
    assert not (out / "runs" / "ragen2-p90").exists()  # = starpo-s-grpo-ragen2, reused
    data = json.loads((out / "echo_trap.json").read_text())
    assert data["variants"] == ["starpo-s-grpo-ragen2", "ragen2-p50", "ragen2-p90"]
    assert all(0.0 <= r["kept_fraction_mean"] <= 1.0 for r in data["runs"])
    rows = [json.loads(line) for line in (out / "runs" / "ragen2-p50" / "seed0" / "metrics.jsonl").read_text().splitlines()]
    assert any("rollout/empty_filter_steps" in r for r in rows)  # the reference's filter ran, not uncertainty_filter


def test_bad_ragen2_sweep_value_fails_before_training(script, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        script.main(["--out", str(tmp_path / "x"), "--ragen2-sweep", "0.5", "1.5"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("--ragen2-sweep values must be in (0, 1], got 1.5")
    assert not (tmp_path / "x").exists()


def test_compare_pairs_by_seed(lab):
    res = {"a": [{"spec": {"seed": 0}, "final_success": [True, False, False, False]}],
           "b": [{"spec": {"seed": 0}, "final_success": [True, True, True, False]}]}
    out = lab.compare(res, "a")
    assert out["a"]["success"] == 0.25 and out["b"]["success"] == 0.75
    vs = out["b"]["vs_base"]
    assert (vs["only_a"], vs["only_b"], vs["both"], vs["neither"]) == (0, 2, 1, 1)
    assert vs["mcnemar_p"] == pytest.approx(0.5) and vs["diff"] == pytest.approx(0.5)


def test_smoke_run_writes_json_and_png(lab, tmp_path):
    """A few steps at tiny sizes, both variants, one seed: the whole pipeline."""
    report = lab.run_lab(tmp_path, lab.BANDIT_SMOKE, ["starpo-ppo", "starpo-s-ppo"], [0], log=lambda *_: None)
    data = json.loads((tmp_path / "echo_trap.json").read_text())
    assert (tmp_path / "echo_trap.png").stat().st_size > 10_000
    assert data["variants"] == ["starpo-ppo", "starpo-s-ppo"] == report["variants"]
    assert len(data["runs"]) == 2
    for run in data["runs"]:
        assert 0.0 <= run["final_success"] <= 1.0
    # vanilla keeps the KL loss and a symmetric clip, StarPO-S drops the KL and clips higher
    cfg_v = json.loads((tmp_path / "runs" / "starpo-ppo" / "seed0" / "config.json").read_text())
    cfg_s = json.loads((tmp_path / "runs" / "starpo-s-ppo" / "seed0" / "config.json").read_text())
    assert (cfg_v["kl_coef"], cfg_v["clip_high"], cfg_v["filter_mode"]) == (0.001, 0.2, "none")
    assert (cfg_s["kl_coef"], cfg_s["clip_high"], cfg_s["filter_mode"], cfg_s["keep_ratio"]) == (0.0, 0.28, "top_p", 0.25)
    # the probe's cross-scoring (probes.py) ran through the trainer: MI proxy, H(Z|X) and its cost
    probe_rows = [json.loads(line) for line in (tmp_path / "runs" / "starpo-ppo" / "seed0" / "metrics.jsonl").read_text().splitlines()
                  if "probe/mi" in line]
    assert probe_rows and all(r["probe/distinct_prompts"] >= 1 and r["time/probe"] >= r["time/probe_score"] > 0
                              and r["probe/h_z_given_x"] > 0 for r in probe_rows)
    n = lab.BANDIT_SMOKE["rl"]["eval_episodes"]
    assert data["final"]["starpo-s-ppo"]["vs_base"]["both"] + data["final"]["starpo-s-ppo"]["vs_base"]["neither"] \
        + data["final"]["starpo-s-ppo"]["vs_base"]["only_a"] + data["final"]["starpo-s-ppo"]["vs_base"]["only_b"] == n


def test_replay_monitor_warns_on_a_std_fall_with_loose_thresholds(lab):
    """In-group std falls from 0.2 to 0.08 with a flat return: the default monitor (10 %)
    stays quiet, the sensitive one (50 %) warns once the 3-step mean is below 0.1. With a
    rising return neither warns (changed with the monitor's redesign, docs/monitor.md: a
    std that falls while the policy improves is a solved task, not a trap; the old gate,
    "the return has not fallen", warned here)."""
    rows = [{"step": i, "rollout/in_group_std": 0.2 if i < 10 else 0.08, "rollout/return_mean": 0.1,
             "actor/grad_norm": 1.0} for i in range(20)]
    assert lab.replay_paper_monitor(rows, 0.1, 5.0, 0.5)["reward_std_collapse"] is None
    assert lab.replay_paper_monitor(rows, **lab.SENSITIVE_MONITOR)["reward_std_collapse"] == 12
    rising = [{**r, "rollout/return_mean": 0.1 + 0.001 * r["step"]} for r in rows]
    assert lab.replay_paper_monitor(rising, **lab.SENSITIVE_MONITOR)["reward_std_collapse"] is None


def test_baseline_of_pairs_each_cure_with_its_vanilla(lab):
    names = ["starpo-grpo", "starpo-s-grpo", "starpo-ppo", "starpo-s-ppo", "keep-50"]
    assert lab.baseline_of("starpo-s-ppo", names) == "starpo-ppo"
    assert lab.baseline_of("starpo-s-grpo", names) == "starpo-grpo"
    assert lab.baseline_of("keep-50", names, "grpo") == "starpo-grpo"
    assert lab.baseline_of("keep-50", ["starpo-s-ppo", "keep-50"], "gae") == "starpo-s-ppo"  # no vanilla: the first
    # RAGEN-2's filter: against the same vanilla StarPO as ours
    names += ["starpo-s-grpo-ragen2", "starpo-s-ppo-ragen2", "ragen2-p50"]
    assert lab.baseline_of("starpo-s-grpo-ragen2", names) == "starpo-grpo"
    assert lab.baseline_of("starpo-s-ppo-ragen2", names) == "starpo-ppo"
    assert lab.baseline_of("ragen2-p50", names, "grpo") == "starpo-grpo"


def test_bad_settings_fail_with_one_line_before_training(script, tmp_path, capsys):
    assert script.main(["--out", str(tmp_path / "x"), "--set", "nope=1"]) == 2
    assert script.main(["--out", str(tmp_path / "x"), "--set", "keep_ratio=2"]) == 2
    assert script.main(["--out", str(tmp_path / "x"), "--prior", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)
    assert not (tmp_path / "x" / "prior").exists()
