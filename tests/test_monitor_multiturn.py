"""The default Echo Trap warning on recorded multi-turn Sokoban traces (no training).

tests/fixtures/monitor_traces_multiturn.json: runs of the multi-turn corpus
(``labs/monitor_corpus.py --task sokoban``, 32 episodes a step, success 5-25 %),
trimmed to the monitor's inputs and the evaluation curve, written by
``labs/monitor_noise.py --fixture``. Collapsing traces end a few evaluations after
their collapse; healthy traces are whole runs (the corpus of 2026-12-03). The ratio-only
default (BENCHMARKS.md#collapse-monitor) fires at step 5-6 on every one of them (noise at 32 episodes a step,
benchmarks/results/2026-12-03-monitor-multiturn-trap.md §13d); the noise-aware
rule chosen on both corpora's development runs (``MULTITURN_MONITOR``) stays quiet on the
healthy runs, warns vanilla StarPO's collapse before it and StarPO-S's slow decline only
after the label's collapse step (docs/monitor.md: what it does not catch). The share of
well-formed episodes (``well_formed_drop``, off by default) falls 5-12 steps before either
collapse, and as early in the default-penalty run that recovers: why it is not a default.
"""

import json
import sys
from pathlib import Path

import pytest

from ragen_envs.starpo.diagnostics import replay_monitor
from ragen_envs.starpo.monitor import MULTITURN_MONITOR

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "labs"))
import _labs_common as ma  # noqa: E402  (the labs' monitor analysis)

FIXTURE = Path(__file__).parent / "fixtures" / "monitor_traces_multiturn.json"
TRACES = json.loads(FIXTURE.read_text())
HEALTHY = sorted(n for n, t in TRACES.items() if t["collapse_step"] is None)
COLLAPSING = sorted(n for n, t in TRACES.items() if t["collapse_step"] is not None)


def test_the_fixture_holds_both_kinds_with_episode_counts():
    assert len(HEALTHY) >= 2 and len(COLLAPSING) >= 2
    for t in TRACES.values():
        assert all(r["rollout/episodes"] == 32 for r in t["rows"])
        assert all(0.0 <= r["rollout/well_formed_episodes"] <= 1.0 for r in t["rows"] if "rollout/episodes" in r)


@pytest.mark.parametrize("name", sorted(TRACES))
def test_traces_are_labelled_as_recorded(name):
    t = TRACES[name]
    assert ma.label_run(t["rows"])["collapse_step"] == t["collapse_step"]


def _alarm(name, **kw):
    return replay_monitor(TRACES[name]["rows"], **kw)["alarm"]


@pytest.mark.parametrize("name", HEALTHY)
def test_noise_aware_rule_is_quiet_on_healthy_multiturn_runs(name):
    assert _alarm(name, **MULTITURN_MONITOR) is None


def test_noise_aware_rule_warns_the_fast_collapse_before_it():
    t = TRACES["vanilla_noop"]
    alarm = _alarm("vanilla_noop", **MULTITURN_MONITOR)
    assert alarm is not None and alarm < t["collapse_step"]


def test_noise_aware_rule_sees_the_slow_decline_only_after_the_collapse_step():
    """StarPO-S's decline is slower (eval 0.34 at step 5, 0.19 at 20, 0.09 at 25, 0 from 30;
    rollout success sinks over ~20 steps): a fall to a quarter of the best, 5 standard errors
    deep, is reached only after the label's collapse."""
    t = TRACES["starpo_s_noop"]
    alarm = _alarm("starpo_s_noop", **MULTITURN_MONITOR)
    assert alarm is not None and alarm >= t["collapse_step"]


@pytest.mark.parametrize("name", sorted(TRACES))
def test_the_ratio_only_default_fires_on_noise_in_every_multiturn_run(name):
    """What the noise term buys: the trainer's default (valid success, 0.8 of its best, k = 0),
    chosen on Bandit, alarms within the first 10 steps of every trace, healthy ones included."""
    alarm = _alarm(name, episodes=32)
    assert alarm is not None and alarm < 10
    # the noise term on the same rule can only delay an alarm (a stricter test at every step)
    later = _alarm(name, valid_success_k=3.0)
    assert later is None or later >= alarm


WELL_FORMED = {"success_ratio": None, "valid_success_ratio": None, "well_formed_ratio": 0.5, "well_formed_k": 3.0,
               "success_window": 3, "alarm": ("well_formed_drop",)}


@pytest.mark.parametrize("name", COLLAPSING)
def test_well_formed_share_falls_five_steps_before_each_noop_collapse(name):
    alarm = _alarm(name, **WELL_FORMED)
    assert alarm is not None and alarm <= TRACES[name]["collapse_step"] - 5


def test_well_formed_share_also_falls_in_the_default_penalty_run_that_recovers():
    """A near-collapse the evaluation label calls healthy: the well-formed share falls from 0.72
    (step 10) to 0.09 (step 20) as it does before a collapse, then climbs back to 0.66 (step 95)
    while the evaluation stays at 6-22 %; the signal cannot tell the two apart, so it stays off
    in the defaults."""
    assert TRACES["default_penalty"]["collapse_step"] is None
    assert _alarm("default_penalty", **WELL_FORMED) is not None
    assert _alarm("ppo_noop", **WELL_FORMED) is None
