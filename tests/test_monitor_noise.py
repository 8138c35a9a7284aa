"""The noise-aware drop test of the success signals (ragen_envs/starpo/monitor.py) on
hand-computed numbers, its use inside EchoTrapMonitor, and its config validation."""

import math

import pytest

from ragen_envs.starpo.config import make_config
from ragen_envs.starpo.diagnostics import EchoTrapMonitor, replay_monitor
from ragen_envs.starpo.monitor import drop_z, effective_count, significant_drop, window_stat


def test_effective_count_by_hand():
    # equal counts: the sum; 5 steps of 32 episodes = 160
    assert effective_count([32] * 5) == pytest.approx(160.0)
    # unequal: w^2 / sum(1/n) = 4 / (1/10 + 1/40) = 4 / 0.125 = 32 (less than 10 + 40)
    assert effective_count([10, 40]) == pytest.approx(32.0)
    assert window_stat([0.1, 0.3], [10, 40]) == (pytest.approx(0.2), pytest.approx(32.0))


def test_drop_z_by_hand():
    # b = 0.2, m = 0.05, 160 episodes each: pooled p = 0.125,
    # var = 0.125 * 0.875 * (2 / 160) = 0.0013671875, sd = 0.0369755, z = 0.15 / sd = 4.0567
    assert drop_z(0.2, 160, 0.05, 160) == pytest.approx(4.0567, abs=1e-4)
    # b = 0.2, m = 0.12: pooled 0.16, var = 0.16 * 0.84 * 0.0125 = 0.00168, z = 0.08 / 0.040988 = 1.9518
    assert drop_z(0.2, 160, 0.12, 160) == pytest.approx(1.9518, abs=1e-4)
    # unequal counts: b = 0.5 of 100, m = 0.3 of 50: pooled (50 + 15) / 150 = 0.43333,
    # var = 0.43333 * 0.56667 * (0.01 + 0.02) = 0.0073667, z = 0.2 / 0.085830 = 2.3302
    assert drop_z(0.5, 100, 0.3, 50) == pytest.approx(2.3302, abs=1e-4)
    # no spread: equal rates give 0; a rise gives a negative z
    assert drop_z(1.0, 10, 1.0, 10) == 0.0 and drop_z(0.0, 10, 0.0, 10) == 0.0
    assert drop_z(0.1, 100, 0.3, 100) < 0


def test_significant_drop_needs_the_ratio_and_k_standard_errors():
    # 0.12 < 0.8 x 0.2 = 0.16, but z = 1.95: a ratio-only rule (k = 0) fires, k = 2 does not
    assert significant_drop(0.2, 160, 0.12, 160, ratio=0.8, k=0)
    assert not significant_drop(0.2, 160, 0.12, 160, ratio=0.8, k=2)
    # 0.05: z = 4.06 > 3 and below 0.8 x 0.2; not below 0.2 x 0.2 = 0.04
    assert significant_drop(0.2, 160, 0.05, 160, ratio=0.8, k=3)
    assert not significant_drop(0.2, 160, 0.05, 160, ratio=0.8, k=4.1)
    assert not significant_drop(0.2, 160, 0.05, 160, ratio=0.2, k=0)
    # the same fall at 10x the episodes is 10x the variance's inverse: z = 4.0567 * sqrt(10) = 12.83
    assert significant_drop(0.2, 1600, 0.12, 1600, ratio=0.8, k=6)
    assert not significant_drop(0.0, 160, 0.0, 160, ratio=0.8, k=0)  # a best of 0 never falls


def test_noise_test_refuses_bad_input():
    with pytest.raises(ValueError, match="rates but"):
        window_stat([0.1, 0.2], [10])
    with pytest.raises(ValueError, match="counts must be"):
        effective_count([10, 0])
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        window_stat([1.5], [10])
    with pytest.raises(ValueError, match="best must be"):
        drop_z(-0.1, 10, 0.1, 10)
    with pytest.raises(ValueError, match="n_current"):
        drop_z(0.2, 10, 0.1, math.inf)
    with pytest.raises(ValueError, match="k must be"):
        significant_drop(0.2, 10, 0.1, 10, ratio=0.8, k=-1)
    with pytest.raises(ValueError, match="ratio must be"):
        significant_drop(0.2, 10, 0.1, 10, ratio=0, k=1)


def _rows(successes, episodes=32, fmt=0.0):
    return [{"step": t, "rollout/success": s, "rollout/format_error": fmt, "rollout/in_group_std": 0.5,
             "rollout/return_mean": s, "actor/grad_norm": 1.0, "rollout/episodes": episodes}
            for t, s in enumerate(successes)]


OFF = {"std_ratio": None, "spike_factor": None, "diversity_ratio": None, "valid_success_ratio": None}


def test_monitor_success_drop_with_k_waits_for_a_fall_beyond_noise():
    # window 2 over 32 episodes a step: N_eff = 64. Means: -, .2, .2, .15, .1, .05, 0
    xs = [0.2, 0.2, 0.2, 0.1, 0.1, 0.0, 0.0]
    # ratio only (k = 0): 0.15 < 0.8 x 0.2 at step 3
    assert replay_monitor(_rows(xs), **OFF, success_ratio=0.8, success_window=2, alarm=("success_drop",))["alarm"] == 3
    # z at the means 0.15 / 0.1 / 0.05 / 0 against 0.2 (N = 64 each):
    # 0.15: pooled .175, sd = sqrt(.175 * .825 * 2/64) = 0.06717, z = 0.744
    # 0.10: pooled .15,  sd = 0.06313, z = 1.584; 0.05: pooled .125, sd = 0.05846, z = 2.566
    # 0.00: pooled .10,  sd = 0.05303, z = 3.771
    kw = dict(OFF, success_ratio=0.8, success_window=2, alarm=("success_drop",))
    assert replay_monitor(_rows(xs), **kw, success_k=1.0)["alarm"] == 4
    assert replay_monitor(_rows(xs), **kw, success_k=2.0)["alarm"] == 5
    assert replay_monitor(_rows(xs), **kw, success_k=3.0)["alarm"] == 6
    assert replay_monitor(_rows(xs), **kw, success_k=4.0)["alarm"] is None
    # with 10x the episodes the same curve is 3.16x the z: k = 2 fires at 0.15 (z = 2.35)
    assert replay_monitor(_rows(xs, episodes=320), **kw, success_k=2.0)["alarm"] == 3


def test_monitor_valid_success_uses_the_well_formed_episodes():
    # valid success = success / (1 - fmt); with half the replies malformed the count is halved:
    # 32 episodes a step x 0.5 = 16 well-formed; window 2: N = 32
    xs = [0.1, 0.1, 0.1, 0.05, 0.05, 0.0, 0.0]  # valid: 0.2, 0.2, 0.2, 0.1, 0.1, 0, 0 (as above)
    kw = dict(OFF, valid_success_ratio=0.8, success_window=2, alarm=("valid_success_drop",), valid_success_k=2.0)
    # at N = 32 the z values are those above / sqrt(2): 0.53, 1.12, 1.81, 2.67 -> k = 2 fires at step 6
    assert replay_monitor(_rows(xs, fmt=0.5), **kw)["alarm"] == 6
    assert replay_monitor(_rows([2 * x for x in xs], fmt=0.0, episodes=16), **kw)["alarm"] == 6


def test_monitor_needs_the_episode_count_for_k():
    rows = [{k: v for k, v in r.items() if k != "rollout/episodes"} for r in _rows([0.2, 0.2, 0.2, 0.0, 0.0])]
    kw = dict(OFF, success_ratio=0.8, success_window=2, alarm=("success_drop",), success_k=2.0)
    with pytest.raises(ValueError, match="rollout/episodes"):
        replay_monitor(rows, **kw)
    # given as a constructor default it is used: N = 64, means .2 .2 .1 0: z = 1.58 at step 3, 3.77 at 4
    assert replay_monitor(rows, **kw, episodes=32)["alarm"] == 4
    # k = 0 needs no count
    assert replay_monitor(rows, **dict(kw, success_k=0.0))["alarm"] == 3


def test_monitor_noise_state_round_trips():
    mon = EchoTrapMonitor(**OFF, success_ratio=0.8, success_window=2, success_k=2.0)
    for r in _rows([0.2, 0.2, 0.2]):
        mon.observe(r)
    other = EchoTrapMonitor(**OFF, success_ratio=0.8, success_window=2, success_k=2.0)
    other.load_state(mon.state())
    assert other.state() == mon.state()
    # a checkpoint from before the counts existed loads with unknown counts
    old = {k: v for k, v in mon.state().items() if k not in ("success_n", "valid_n", "best_success_n", "best_valid_n")}
    other.load_state(old)
    assert other.success_n == [None] * 3


def test_monitor_refuses_bad_noise_settings():
    with pytest.raises(ValueError, match="success_k"):
        EchoTrapMonitor(success_k=-1)
    with pytest.raises(ValueError, match="valid_success_k"):
        EchoTrapMonitor(valid_success_k="2")
    with pytest.raises(ValueError, match="episodes"):
        EchoTrapMonitor(episodes=0)
    for bad in ({"success_k": -0.5}, {"valid_success_k": True}, {"episodes": 0}, {"episodes": 2.5}):
        with pytest.raises(ValueError, match="monitor"):
            make_config("starpo-s", monitor=bad)
    make_config("starpo-s", monitor={"valid_success_k": 2.5, "episodes": 32})


# ----------------------------------------------------------------------------- the choice (labs/monitor_noise.py)
def _noise_module():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "labs"))
    import monitor_noise

    return monitor_noise


def _run(successes, collapse, episodes=32):
    return {"rows": _rows(successes, episodes=episodes), "label": {"collapse_step": collapse}}


def test_choose_takes_no_false_alarm_then_most_warned_then_lead():
    mn = _noise_module()
    # a healthy run that dips by noise (0.25 -> 0.1 for 2 steps) and a run that falls to 0 for good
    healthy = _run([0.25, 0.25, 0.25, 0.25, 0.1, 0.1, 0.25, 0.25, 0.25, 0.25], None)
    falling = _run([0.25, 0.25, 0.25, 0.25, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0], 9)
    runs = [healthy, falling]
    table = mn.first_fires(runs, {"window": (2,), "ratio": (0.8,), "k": (0.0, 3.0, 4.0)})
    cands = [{"signal": "success_drop", "window": 2, "ratio": 0.8, "k": k} for k in (0.0, 3.0, 4.0)]
    # window 2, N = 64: the dip's mean 0.1 vs 0.25 has z = 0.15 / sqrt(.175 * .825 * 2/64) = 2.23 (k = 0 alarms the
    # healthy run); the fall's means 0.05 (z = 0.2 / 0.0631 = 3.17 at step 5) and 0 (z = 0.25 / 0.0585 = 4.28 at step 6)
    got = mn.choose_rule(runs, [0, 1], table, cands)
    assert got["rule"] == {"signal": "success_drop", "window": 2, "ratio": 0.8, "k": 3.0}
    assert got["dev"]["warned"] == 1 and got["dev"]["leads"] == [4] and got["dev"]["false_alarms"] == 0
    # k = 4 warns one step later (lead 3): the larger lead wins; with only k = 0, nothing qualifies
    assert mn.choose_rule(runs, [0, 1], table, cands[:1]) is None
    assert mn.choose_rule(runs, [0, 1], table, cands[2:])["dev"]["leads"] == [3]
    # the choice on a subset sees only those runs: the falling run alone takes k = 0 (lead 5)
    assert mn.choose_rule(runs, [1], table, cands)["rule"]["k"] == 0.0
    # grid order: per signal the largest k and smallest ratio first
    g = mn.grid(("success_drop",))
    assert g[0][3] == max(mn.GRID["k"]) and g[0][2] == min(mn.GRID["ratio"]) and g[-1][3] == 0.0


@pytest.mark.slow  # a tiny training run: ~1 min on the shared 2-core machine
def test_trainer_rows_carry_the_episode_count_the_noise_test_needs(tmp_path):
    """Two tiny training steps with the noise-aware rule on: every training row logs
    rollout/episodes = P x N, and the monitor runs on them (no missing-count error)."""
    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.diagnostics import read_metrics
    from ragen_envs.starpo.trainer import StarPOTrainer

    model = build_tiny_checkpoint(tmp_path / "model0", hidden_size=32, num_layers=1, intermediate_size=64)
    cfg = make_config("starpo", out_dir=str(tmp_path / "run"), model=str(model), save_every=0, steps=2, num_groups=2,
                      group_size=3, max_new_tokens=8, eval_every=0, probe_every=0, mini_batch_size=6,
                      micro_batch_size=6, log_samples=0, plots=False,
                      monitor={"success_ratio": 0.9, "success_k": 1.0, "success_window": 1, "valid_success_k": 1.0,
                               "alarm": ["success_drop"]})
    StarPOTrainer(cfg, log=lambda _m: None).train()
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "rollout/in_group_std" in r]
    assert len(rows) == 2 and all(r["rollout/episodes"] == 6 for r in rows)


def _traj(formats, success):
    from ragen_envs.protocol.episode import Episode, Turn
    from ragen_envs.starpo.rollout import Trajectory

    turns = [Turn("obs", "reply", 0.0, {"format_ok": ok}) for ok in formats]
    if turns:
        turns[-1].info["success"] = success
    return Trajectory(group=0, member=0, episode=Episode("ragen/Sokoban-v0", 0, turns=turns, terminated=success))


def test_rollout_metrics_count_well_formed_episodes_by_hand():
    from ragen_envs.starpo.trainer import rollout_metrics

    # 4 episodes: [ok, ok] success, [ok, bad] success, [ok] failure, [bad, bad, ok] failure.
    # Well-formed episodes (every reply ok): the 1st and the 3rd -> share 2/4, success 1/2.
    # The turn proxy: format_error 3/8, success 2/4 -> 0.5 / (1 - 3/8) = 0.8 (what the old
    # monitor read); the per-episode rate stays in [0, 1] by construction.
    trajs = [_traj([True, True], True), _traj([True, False], True), _traj([True], False),
             _traj([False, False, True], False)]
    m = rollout_metrics(trajs)
    assert m["rollout/well_formed_episodes"] == 0.5 and m["rollout/well_formed_success"] == 0.5
    assert m["rollout/format_error"] == 3 / 8 and m["rollout/success"] == 0.5
    # no well-formed episode: share 0, success 0 (the monitor skips such a step)
    m = rollout_metrics([_traj([False], False), _traj([True, False], True)])
    assert m["rollout/well_formed_episodes"] == 0.0 and m["rollout/well_formed_success"] == 0.0
    # multi-turn successes with malformed turns: the turn proxy exceeds 1, the episode count does not
    m = rollout_metrics([_traj([True, False, False], True), _traj([False, True, True], True)])
    assert m["rollout/success"] / (1 - m["rollout/format_error"]) > 1
    assert m["rollout/well_formed_success"] == 0.0 and m["rollout/well_formed_episodes"] == 0.0


def test_monitor_prefers_the_per_episode_well_formed_count():
    # the same valid-success series as test_monitor_valid_success_uses_the_well_formed_episodes,
    # given per episode: 32 episodes, half of them well formed -> N = 16 a step, 32 a window;
    # format_error and success say something else (a multi-turn batch), which must be ignored
    valid = [0.2, 0.2, 0.2, 0.1, 0.1, 0.0, 0.0]
    rows = _rows([0.9] * len(valid), fmt=0.1)
    for r, v in zip(rows, valid):
        r["rollout/well_formed_episodes"], r["rollout/well_formed_success"] = 0.5, v
    kw = dict(OFF, valid_success_ratio=0.8, success_window=2, alarm=("valid_success_drop",), valid_success_k=2.0)
    assert replay_monitor(rows, **kw)["alarm"] == 6
    # a step without any well-formed episode is skipped, not read as a success of 0
    gap = [dict(r) for r in rows[:3]] + [dict(rows[0], step=3, **{"rollout/well_formed_episodes": 0.0,
                                                                   "rollout/well_formed_success": 0.0})]
    assert replay_monitor(gap, **kw)["alarm"] is None


def _formed_rows(shares, episodes=32, per_episode=True):
    rows = _rows([0.1] * len(shares), episodes=episodes)
    for r, share in zip(rows, shares):
        if per_episode:
            r["rollout/well_formed_episodes"], r["rollout/well_formed_success"] = share, 0.1
        else:
            r["rollout/format_error"] = 1.0 - share
    return rows


def test_monitor_well_formed_drop_by_hand():
    # window 2, 32 episodes a step: N_eff = 64. Window means from step 1: .8 .8 .7 .5 .3
    shares = [0.8, 0.8, 0.8, 0.6, 0.4, 0.2]
    kw = dict(OFF, well_formed_ratio=0.9, success_window=2, alarm=("well_formed_drop",))
    # ratio only: 0.7 < 0.9 x 0.8 = 0.72 at step 3
    assert replay_monitor(_formed_rows(shares), **kw)["alarm"] == 3
    # z of 0.7 vs 0.8: pooled .75, sd = sqrt(.75 * .25 * 2/64) = 0.07655, z = 1.306
    # 0.5: pooled .65, sd = sqrt(.65 * .35 / 32) = 0.08432, z = 3.558
    # 0.3: pooled .55, sd = sqrt(.55 * .45 / 32) = 0.08795, z = 5.685
    assert replay_monitor(_formed_rows(shares), **kw, well_formed_k=1.0)["alarm"] == 3
    assert replay_monitor(_formed_rows(shares), **kw, well_formed_k=2.0)["alarm"] == 4
    assert replay_monitor(_formed_rows(shares), **kw, well_formed_k=4.0)["alarm"] == 5
    assert replay_monitor(_formed_rows(shares), **kw, well_formed_k=6.0)["alarm"] is None
    # rows without the per-episode share fall back to the share of well-formed turns
    assert replay_monitor(_formed_rows(shares, per_episode=False), **kw, well_formed_k=2.0)["alarm"] == 4
    # off by default: the trainer's default monitor never raises it
    assert replay_monitor(_formed_rows(shares), **OFF)["well_formed_drop"] is None
    # its message names the signal and both levels
    mon = EchoTrapMonitor(**kw, well_formed_k=2.0)
    events = [e for r in _formed_rows(shares) for e in mon.observe(r)]
    assert events[0].startswith("well_formed_drop: well-formed episodes (mean of 2 steps) 0.500 < 0.9 x its best 0.800")
    assert mon.is_alarm(events[0]) and "roll back" in events[0]


def test_monitor_well_formed_state_round_trips_and_settings_are_checked():
    mon = EchoTrapMonitor(**OFF, well_formed_ratio=0.5, success_window=2, well_formed_k=2.0)
    for r in _formed_rows([0.8, 0.7, 0.6]):
        mon.observe(r)
    other = EchoTrapMonitor(**OFF, well_formed_ratio=0.5, success_window=2, well_formed_k=2.0)
    other.load_state(mon.state())
    assert other.state() == mon.state() and other.best_formed == pytest.approx(0.75)
    # a checkpoint from before the signal loads with the signal started afresh
    other.load_state({k: v for k, v in mon.state().items() if "formed" not in k})
    assert other.formed == [] and other.best_formed is None
    with pytest.raises(ValueError, match="well_formed_k"):
        EchoTrapMonitor(well_formed_k=-0.5)
    with pytest.raises(ValueError, match="well_formed_ratio"):
        make_config("starpo-s", env_id="ragen/Sokoban-v0", model="m", monitor={"well_formed_ratio": 0})
    with pytest.raises(ValueError, match="well_formed_k"):
        make_config("starpo-s", env_id="ragen/Sokoban-v0", model="m", monitor={"well_formed_k": -1})
    cfg = make_config("starpo-s", env_id="ragen/Sokoban-v0", model="m", monitor={"well_formed_ratio": 0.5, "well_formed_k": 3})
    assert cfg.monitor["well_formed_k"] == 3


def test_union_of_a_success_rule_and_well_formed_drop_by_hand():
    mn = _noise_module()
    assert mn.union_alarms([3, None, None, 7], [5, 4, None, 2]) == [3, 4, None, 2]
    # run a: success falls (0.25 -> 0), the format holds; run b: the format falls, success holds;
    # run c: healthy. Window 2, 32 episodes a step.
    a = _run([0.25, 0.25, 0.25, 0.25, 0.1, 0.0, 0.0, 0.0], 7)
    b = {"rows": _formed_rows([0.8, 0.8, 0.8, 0.8, 0.6, 0.4, 0.2, 0.2]), "label": {"collapse_step": 7}}
    for r in b["rows"]:
        r["rollout/success"] = r["rollout/return_mean"] = 0.25
    for r in a["rows"]:
        r["rollout/well_formed_episodes"], r["rollout/well_formed_success"] = 0.8, 0.25
    c = _run([0.25] * 8, None)
    for r in c["rows"]:
        r["rollout/well_formed_episodes"], r["rollout/well_formed_success"] = 0.8, 0.25
    runs = [a, b, c]
    small = {"window": (2,), "ratio": (0.8,), "k": (0.0, 2.0, 3.0)}
    table = mn.first_fires(runs, small)
    # success_drop w=2 ratio 0.8 k=3: a's means 0.05 (z 3.17) at step 5 -> 5; b and c: never
    assert table[("success_drop", 2, 0.8, 3.0)] == [5, None, None]
    # well_formed_drop w=2 ratio 0.8 k=2: b's means .7 (z 1.31), .5 (z 3.56) -> step 5; a, c: never
    assert table[("well_formed_drop", 2, 0.8, 2.0)] == [None, 5, None]
    union = {"window": 2, "parts": [{"signal": "success_drop", "ratio": 0.8, "k": 3.0},
                                    {"signal": "well_formed_drop", "ratio": 0.8, "k": 2.0}]}
    assert mn.rule_alarms(union, table, [0, 1, 2]) == [5, 5, None]
    kw = mn.rule_kwargs(union)
    assert kw["success_ratio"] == 0.8 and kw["well_formed_k"] == 2.0 and kw["alarm"] == ("success_drop", "well_formed_drop")
    from ragen_envs.starpo.diagnostics import replay_monitor

    assert [replay_monitor(r["rows"], **kw)["alarm"] for r in runs] == [5, 5, None]
    # the choice: a single rule warns one of the two collapses at best; the union warns both
    got = mn.choose_rule(runs, [0, 1, 2], table, mn.union_candidates(small))
    assert "parts" in got["rule"] and got["dev"]["warned"] == 2 and got["dev"]["false_alarms"] == 0
    assert "OR" in mn.rule_name(got["rule"])


def test_figure_rows_read_the_per_episode_metrics_and_clip_the_old_stand_in():
    ma = _noise_module().common  # the labs' shared helpers, as monitor_noise.py imports them
    # the trainer's per-episode metrics are taken as they are
    row = {"rollout/success": 0.3, "rollout/format_error": 0.5, "rollout/well_formed_episodes": 0.25,
           "rollout/well_formed_success": 0.75}
    got = ma.with_valid(row)
    assert got["rollout/valid_success"] == 0.75 and got["rollout/formed"] == 0.25
    # older rows: success / (1 - turn format error), 0.3 / 0.6 = 0.5, share 0.6
    old = ma.with_valid({"rollout/success": 0.3, "rollout/format_error": 0.4})
    assert old["rollout/valid_success"] == pytest.approx(0.5) and old["rollout/formed"] == pytest.approx(0.6)
    # with several turns a success can come with mostly malformed turns: 0.3 / 0.2 = 1.5 -> 1
    assert ma.with_valid({"rollout/success": 0.3, "rollout/format_error": 0.8})["rollout/valid_success"] == 1.0
    # nothing to compute from: the row unchanged
    assert ma.with_valid({"rollout/success": 0.3, "rollout/format_error": 1.0}) == {"rollout/success": 0.3,
                                                                                    "rollout/format_error": 1.0}
