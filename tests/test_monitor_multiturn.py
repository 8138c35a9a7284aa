"""The default Echo Trap warning on recorded multi-turn Sokoban traces (no training).

tests/fixtures/monitor_traces_multiturn.json: runs of the multi-turn corpus
(``benchmarks/monitor_corpus.py --task sokoban``, 32 episodes a step, success 5-25 %),
trimmed to the monitor's inputs and the evaluation curve, written by
``benchmarks/monitor_noise.py --fixture``. Collapsing traces end a few evaluations after
their collapse; healthy traces are whole runs. The ratio-only default of §13c fired on
noise at 32 episodes a step (BENCHMARKS §13d); the noise-aware default must not.
"""

import json
import sys
from pathlib import Path

import pytest

from ragen_envs.starpo.diagnostics import replay_monitor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import monitor_analysis as ma  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "monitor_traces_multiturn.json"
TRACES = json.loads(FIXTURE.read_text())
HEALTHY = sorted(n for n, t in TRACES.items() if t["collapse_step"] is None)
COLLAPSING = sorted(n for n, t in TRACES.items() if t["collapse_step"] is not None)


def test_the_fixture_holds_both_kinds_with_episode_counts():
    assert len(HEALTHY) >= 2 and len(COLLAPSING) >= 2
    for t in TRACES.values():
        assert all(r["rollout/episodes"] == 32 for r in t["rows"])


@pytest.mark.parametrize("name", sorted(TRACES))
def test_traces_are_labelled_as_recorded(name):
    t = TRACES[name]
    assert ma.label_run(t["rows"])["collapse_step"] == t["collapse_step"]


@pytest.mark.parametrize("name", HEALTHY)
def test_default_warning_is_quiet_on_healthy_multiturn_runs(name):
    assert replay_monitor(TRACES[name]["rows"])["alarm"] is None


@pytest.mark.parametrize("name", COLLAPSING)
def test_default_warning_comes_before_the_multiturn_collapse(name):
    t = TRACES[name]
    alarm = replay_monitor(t["rows"])["alarm"]
    assert alarm is not None and alarm < t["collapse_step"]


@pytest.mark.parametrize("name", HEALTHY)
def test_the_old_ratio_only_rule_fires_on_the_same_healthy_runs(name):
    """What the noise term buys: at 32 episodes a step the §13c rule (valid success, 0.8,
    k = 0) alarms on these healthy runs."""
    kw = {"valid_success_ratio": 0.8, "valid_success_k": 0.0, "success_ratio": None, "success_window": 5,
          "alarm": ("valid_success_drop",)}
    assert replay_monitor(TRACES[name]["rows"], **kw)["alarm"] is not None
