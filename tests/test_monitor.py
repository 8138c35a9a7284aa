"""The collapse label, the redesigned EchoTrapMonitor and the corpus analysis, on hand-made
numbers and on metric traces recorded from the corpus (tests/fixtures/monitor_traces.json:
a collapsing development run and a development run that converges on the solved task;
written by ``labs/_labs_common.py``'s :func:`write_fixture`)."""

import json
import sys
from pathlib import Path

import pytest

from ragen_envs.starpo.diagnostics import EchoTrapMonitor, MONITOR_SIGNALS, collapse_label, replay_monitor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "labs"))
import _labs_common as ma  # noqa: E402  (the labs' monitor analysis)

FIXTURE = Path(__file__).parent / "fixtures" / "monitor_traces.json"


# ----------------------------------------------------------------------------- the label
def test_collapse_label_worked_by_hand():
    steps = [0, 2, 4, 6, 8, 10]
    # running best 0.6 from step 2; 0.25 x 0.6 = 0.15; 0.14 at step 6 and everything after is below
    assert collapse_label(steps, [0.5, 0.6, 0.3, 0.14, 0.1, 0.05]) == 6
    # a dip that recovers is no collapse; the lasting fall after the new best 0.7 (threshold 0.175) is
    assert collapse_label(steps, [0.5, 0.6, 0.1, 0.7, 0.1, 0.1]) == 8
    # one low final evaluation is not a lasting fall (min_evals = 2) ...
    assert collapse_label([0, 2, 4, 6], [0.5, 0.5, 0.5, 0.05]) is None
    # ... unless asked for
    assert collapse_label([0, 2, 4, 6], [0.5, 0.5, 0.5, 0.05], min_evals=1) == 6
    assert collapse_label(steps, [0.0] * 6) is None and collapse_label([], []) is None
    # the threshold is exclusive: exactly a quarter of the best is not below it
    assert collapse_label([0, 1, 2], [0.8, 0.2, 0.2]) is None
    assert collapse_label([0, 1, 2], [0.8, 0.2, 0.2], fraction=0.3) == 1


def test_collapse_label_refuses_bad_input():
    with pytest.raises(ValueError, match="steps but"):
        collapse_label([0, 1], [0.5])
    with pytest.raises(ValueError, match="fraction"):
        collapse_label([0], [0.5], fraction=0)
    with pytest.raises(ValueError, match="min_evals"):
        collapse_label([0], [0.5], min_evals=0)


# ----------------------------------------------------------------------------- the monitor
def _row(step, success, std=0.1, ret=0.2, grad=1.0, **probe):
    return {"step": step, "rollout/success": success, "rollout/in_group_std": std, "rollout/return_mean": ret,
            "actor/grad_norm": grad, **probe}


def test_success_drop_fires_once_below_the_ratio_of_its_best_trailing_mean():
    mon = EchoTrapMonitor(std_ratio=None, spike_factor=None, diversity_ratio=None, success_ratio=0.75,
                          success_window=2, alarm=("success_drop",))
    fired = {}
    # trailing means (window 2): -, 0.5, 0.5, 0.45, 0.35, 0.3, 0.3 ; best 0.5, 0.75 x 0.5 = 0.375
    for step, s in enumerate([0.5, 0.5, 0.5, 0.4, 0.3, 0.3, 0.3]):
        for e in mon.observe(_row(step, s)):
            fired.setdefault(e.split(":")[0], []).append(step)
            assert "echo_action='rollback'" in e and mon.is_alarm(e)
    assert fired == {"success_drop": [4]}


def test_variance_and_diversity_falls_are_quiet_while_the_policy_improves():
    """A run that solves the task loses its in-group std and some diversity: no warning."""
    mon = EchoTrapMonitor(std_ratio=0.5, diversity_ratio=0.8, success_ratio=0.75, window=3, success_window=3,
                          entropy_ratio=0.9)
    events = []
    for step in range(12):
        success = min(0.5 + 0.05 * step, 1.0)
        probe = {"probe/distinct_ngrams": 0.9 - 0.05 * step, "probe/entropy": 2.0 - 0.1 * step}
        events += mon.observe(_row(step, success, std=0.2 / (step + 1), **probe))
    assert events == []
    # the same falls while success declines do warn
    mon = EchoTrapMonitor(std_ratio=0.5, diversity_ratio=0.8, success_ratio=None, window=3, success_window=3,
                          entropy_ratio=0.9)
    names = []
    for step in range(12):
        probe = {"probe/distinct_ngrams": 0.9 - 0.05 * step, "probe/entropy": 2.0 - 0.1 * step}
        names += [e.split(":")[0] for e in mon.observe(_row(step, 0.5 - 0.03 * step, std=0.2 / (step + 1), **probe))]
    assert sorted(names) == ["echo_trap", "entropy_drop", "reward_std_collapse"]


def test_mi_drop_needs_a_positive_first_probe():
    mon = EchoTrapMonitor(std_ratio=None, spike_factor=None, diversity_ratio=None, success_ratio=None, mi_ratio=0.5,
                          alarm=("mi_drop",))
    assert mon.observe(_row(0, 0.5, **{"probe/distinct_ngrams": 0.9, "probe/mi": 0.4})) == []
    assert mon.observe(_row(1, 0.5, **{"probe/distinct_ngrams": 0.9, "probe/mi": 0.3})) == []
    assert [e.split(":")[0] for e in mon.observe(_row(2, 0.4, **{"probe/distinct_ngrams": 0.9, "probe/mi": 0.1}))] == ["mi_drop"]
    flat = EchoTrapMonitor(mi_ratio=0.5)
    flat.observe(_row(0, 0.5, **{"probe/distinct_ngrams": 0.9, "probe/mi": 0.0}))
    assert flat.observe(_row(1, 0.4, **{"probe/distinct_ngrams": 0.9, "probe/mi": -0.1})) == []


def test_state_round_trip_resumes_as_if_never_stopped_and_reads_old_checkpoints():
    rows = [_row(k, 0.6 - 0.04 * k, std=0.2 - 0.01 * k, grad=1.0 + (k == 9) * 9,
                 **({"probe/distinct_ngrams": 0.9 - 0.03 * k, "probe/mi": 0.2 - 0.01 * k} if k % 2 == 0 else {}))
            for k in range(14)]
    kw = {"std_ratio": 0.6, "diversity_ratio": 0.8, "mi_ratio": 0.7, "window": 4}
    straight = EchoTrapMonitor(**kw)
    expected = [straight.observe(r) for r in rows]
    first = EchoTrapMonitor(**kw)
    got = [first.observe(r) for r in rows[:7]]
    second = EchoTrapMonitor(**kw)
    second.load_state(json.loads(json.dumps(first.state())))
    got += [second.observe(r) for r in rows[7:]]
    assert got == expected and any(expected)
    old = {"stds": [0.1], "returns": [0.2], "grads": [1.0], "first_probe": None, "active": []}  # before the redesign
    mon = EchoTrapMonitor()
    mon.load_state(old)
    assert mon.successes == [] and mon.first_mi is None


def test_unknown_alarm_signal_is_a_one_line_error():
    with pytest.raises(ValueError, match="unknown monitor signal"):
        EchoTrapMonitor(alarm=("nope",))
    assert set(MONITOR_SIGNALS) >= {"success_drop", "mi_drop", "entropy_drop"}


# ----------------------------------------------------------------------------- the analysis
def _run(successes, collapse):
    rows = [_row(k, s) for k, s in enumerate(successes)]
    return {"rows": rows, "label": {"collapse_step": collapse}}


def test_score_runs_counts_warnings_leads_late_and_false_alarms():
    kw = ma.signal_kwargs("success_drop", 0.75)
    kw["success_window"] = 1
    runs = [_run([0.5, 0.5, 0.3, 0.1, 0.1], collapse=4),   # alarm at 2 (0.3 < 0.375): lead 2
            _run([0.5, 0.5, 0.5, 0.5, 0.3], collapse=3),   # alarm at 4: late
            _run([0.5, 0.6, 0.7, 0.8, 0.9], collapse=None),  # rising: quiet
            _run([0.5, 0.5, 0.2, 0.5, 0.5], collapse=None)]  # a dip: false alarm
    s = ma.score_runs(runs, kw)
    assert (s["collapsing"], s["warned"], s["late"], s["leads"]) == (2, 1, 1, [2])
    assert (s["healthy"], s["false_alarms"], s["first_alarm"]) == (2, 1, [2, 4, None, 2])


def test_choose_threshold_takes_the_most_warnings_without_a_false_alarm():
    runs = [_run([0.5] * 5 + [0.3] * 5 + [0.05] * 5, collapse=12),
            _run([0.5] * 15, collapse=None), _run([0.5] * 7 + [0.4] * 8, collapse=None)]
    c = ma.choose_threshold("success_drop", runs, grid=(0.5, 0.7, 0.9))
    # 0.9 alarms on the healthy 0.5 -> 0.4 run; 0.7 and 0.5 both warn; 0.7 warns earlier (larger lead)
    assert c["value"] == 0.7 and c["dev"]["warned"] == 1 and c["dev"]["false_alarms"] == 0
    assert ma.choose_threshold("success_drop", runs[1:], grid=(0.5,))["value"] is None


def test_probe_cost_is_the_median_ratio_to_the_training_step():
    rows = [{"time/probe": 1.0, "time/probe_score": 0.5, "time/rollout": 3.0, "time/update": 1.0},
            {"time/rollout": 3.0, "time/update": 1.0},
            {"time/probe": 2.0, "time/probe_score": 0.5, "time/rollout": 2.0, "time/update": 2.0},
            {"time/probe": 3.0, "time/probe_score": 2.0, "time/rollout": 1.0, "time/update": 1.0}]
    c = ma.probe_cost(rows)
    assert c == {"probe_over_step": 0.5, "score_over_step": 0.125, "n": 3}
    assert ma.probe_cost([{"time/rollout": 1.0}]) is None


def test_label_run_reads_the_evaluation_curve():
    rows = [{"step": 0, "eval/success": 0.5}, {"step": 1}, {"step": 2, "eval/success": 0.1},
            {"step": 4, "eval/success": 0.05, "final": True}]
    lab = ma.label_run(rows)
    assert lab["collapse_step"] == 2 and lab["eval_steps"] == [0, 2, 4] and lab["eval_grid"] == 2


# ----------------------------------------------------------------------------- recorded traces
@pytest.fixture(scope="module")
def traces():
    return json.loads(FIXTURE.read_text())


def test_recorded_traces_are_labelled_as_recorded(traces):
    for t in traces.values():
        assert ma.label_run(t["rows"])["collapse_step"] == t["collapse_step"]


def test_default_monitor_warns_ahead_of_the_recorded_collapse(traces):
    t = traces["collapsing"]
    alarm = replay_monitor(t["rows"])["alarm"]
    assert alarm is not None and alarm < t["collapse_step"]


def test_default_monitor_is_quiet_on_the_recorded_converging_run(traces):
    t = traces["converging"]
    assert t["collapse_step"] is None
    assert replay_monitor(t["rows"])["alarm"] is None


@pytest.mark.parametrize("monitor, words", [
    ({"valid_success_ratio": "x"}, "valid_success_ratio must be a positive number"),
    ({"mi_ratio": -0.5}, "mi_ratio must be a positive number"),
    ({"success_window": 0}, "success_window must be an integer >= 1"),
    ({"alarm": "valid_success_drop"}, "alarm must be a list of signal names"),
    ({"alarm": ["well_formed_dropp"]}, "unknown signal 'well_formed_dropp'; choose from success_drop"),
])
def test_bad_monitor_settings_are_refused_in_one_line(monitor, words):
    from ragen_envs.starpo.config import make_config

    with pytest.raises(ValueError, match=words):
        make_config("starpo-s", env_id="ragen/Bandit-v0", monitor=monitor)


def test_monitor_multiturn_names_the_noise_aware_rule():
    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.diagnostics import EchoTrapMonitor
    from ragen_envs.starpo.monitor import MULTITURN_MONITOR

    cfg = make_config("starpo-s", env_id="ragen/Sokoban-v0", monitor="multiturn")
    assert cfg.monitor == {"success_ratio": 0.25, "success_k": 5.0, "success_window": 5, "valid_success_ratio": None,
                           "alarm": ["success_drop"]}
    # the expanded keywords build the same monitor as the constant
    assert EchoTrapMonitor(**cfg.monitor).alarm == EchoTrapMonitor(**MULTITURN_MONITOR).alarm
    with pytest.raises(ValueError, match='monitor must be "multiturn" or a dict'):
        make_config("starpo-s", monitor="multi-turn")


def test_the_corpus_command_analysing_no_runs_says_so_in_one_line(tmp_path, capsys):
    import monitor_corpus

    assert monitor_corpus.main(["--out", str(tmp_path / "none"), "--analyze-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --analyze-only: no finished run under")
