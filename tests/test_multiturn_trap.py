"""labs/multiturn_trap.py (issue 21 item 2) and its settings in labs/_labs_common.py: the pure
helpers, and a smoke run."""

from __future__ import annotations

import json
import os

import pytest
from bench_loader import load_lab, load_lab_common

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def mt():
    return load_lab("multiturn_trap.py", "multiturn_trap_lab")


@pytest.fixture(scope="module")
def common():
    return load_lab_common()


def test_band_is_mean_min_max_on_shared_steps(mt):
    a = ([0, 10, 20], [0.2, 0.4, 0.6])
    b = ([0, 10], [0.4, 0.0])
    steps, mean, lo, hi = mt.band([a, b])
    assert steps == [0, 10]
    assert mean == pytest.approx([0.3, 0.2]) and lo == [0.2, 0.0] and hi == [0.4, 0.4]
    assert mt.band([]) == ([], [], [], [])


def test_curve_skips_missing_and_nan_values(mt):
    rows = [{"step": 0, "eval/success": 0.5}, {"step": 1}, {"step": 2, "eval/success": float("nan")},
            {"step": 3, "eval/success": 1}]
    assert mt.curve(rows, "eval/success") == ([0, 3], [0.5, 1.0])


def test_random_replies_name_one_to_k_actions(common):
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the envs)
    from ragen_envs.protocol import parse_answer

    env = gym.make("ragen/Sokoban-v0", think=False, max_actions_per_turn=2)
    env.reset(seed=1)
    names = list(env.unwrapped.action_names())
    reply = common.random_reply_fn(3, seed=0)
    counts = set()
    for _ in range(200):
        text = reply(env, None)
        parsed = parse_answer(text, names, False, 5)
        assert parsed.actions and all(a in names for a in parsed.actions)
        counts.add(len(parsed.actions))
    assert counts == {1, 2}  # capped by the env's max_actions_per_turn
    one, two = common.random_reply_fn(3, seed=7), common.random_reply_fn(3, seed=7)
    assert [one(env, None) for _ in range(5)] == [two(env, None) for _ in range(5)]  # its own seeded stream
    with pytest.raises(ValueError, match="max_actions"):
        common.random_reply_fn(0, seed=0)


def test_per_seed_tests_pair_by_seed(mt):
    res = {"v": [{"spec": {"seed": 0}, "final_success": [True, True, False, False]},
                 {"spec": {"seed": 1}, "final_success": [False, False]}],
           "s": [{"spec": {"seed": 0}, "final_success": [True, False, True, True]}]}
    out = mt.per_seed_tests(res, "v", "s")
    assert list(out) == [0]  # seed 1 has no StarPO-S run
    e = out[0]
    assert (e["v"], e["s"], e["only_base"], e["only_other"]) == (0.5, 0.75, 1, 2)
    assert e["mcnemar_p"] == pytest.approx(1.0)  # 2 * (1 + 3) / 8 = 1


def test_settings_for_applies_changes_and_refuses_unknown(common):
    s = common.mt_settings_for("sokoban", rl={"actor_lr": 1e-3}, env_kwargs={"max_turns": 3}, prior={"max_actions": 2})
    assert s["rl"]["actor_lr"] == 1e-3 and s["env_kwargs"] == {"think": False, "max_turns": 3}
    assert s["prior"]["max_actions"] == 2 and common.MT_SETTINGS["sokoban"]["rl"]["actor_lr"] == 2e-4  # a copy
    assert common.mt_settings_for("sokoban-free-noop")["env_kwargs"]["format_penalty"] == 0.0
    assert "format_penalty" not in common.mt_settings_for("sokoban")["env_kwargs"]
    assert common.mt_settings_for("frozenlake", smoke=True)["rl"]["steps"] == common.MT_SMOKE_CHANGES["rl"]["steps"]
    with pytest.raises(ValueError, match="unknown setting"):
        common.mt_settings_for("nope")


def test_bad_input_fails_with_one_line(mt, tmp_path, capsys):
    assert mt.main(["--out", str(tmp_path / "x"), "--set", "nope=1", "--smoke"]) == 2
    assert mt.main(["--out", str(tmp_path / "x"), "--prior", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert not (tmp_path / "x" / "prior").exists()


def test_smoke_run_writes_figure_and_json(mt, common, tmp_path):
    """Tiny sizes, a few steps, both variants, one seed: the whole command."""
    assert mt.main(["--smoke", "--out", str(tmp_path), "--seeds", "0"]) == 0  # the default: sokoban-free-noop
    data = json.loads((tmp_path / "multiturn_trap.json").read_text())
    assert (tmp_path / "multiturn_trap.png").stat().st_size > 10_000
    assert data["variants"] == ["starpo-grpo", "starpo-s-grpo"]
    assert [r["variant"] for r in data["runs"]] == data["variants"]
    vs = data["final"]["starpo-s-grpo"]["vs_base"]
    n = common.MT_SMOKE_CHANGES["rl"]["eval_episodes"]
    assert vs["both"] + vs["neither"] + vs["only_a"] + vs["only_b"] == n
    assert list(data["per_seed"]["starpo-s-grpo vs starpo-grpo"]) == ["0"]
    cfg_v = json.loads((tmp_path / "runs" / "starpo-grpo" / "seed0" / "config.json").read_text())
    cfg_s = json.loads((tmp_path / "runs" / "starpo-s-grpo" / "seed0" / "config.json").read_text())
    assert (cfg_v["filter_mode"], cfg_v["kl_coef"], cfg_s["filter_mode"], cfg_s["keep_ratio"]) == ("none", 0.001, "top_p", 0.25)
    assert cfg_v["env_kwargs"] == cfg_s["env_kwargs"] == {"think": False, "max_turns": 4, "format_penalty": 0.0}


def test_free_noop_setting_makes_a_turn_without_a_move_free(common):
    """The premise of ``sokoban-free-noop``: a malformed reply pays 0, a move 0.1 less."""
    import gymnasium as gym

    import ragen_envs  # noqa: F401

    env = gym.make("ragen/Sokoban-v0", **common.MT_SETTINGS["sokoban-free-noop"]["env_kwargs"])
    env.reset(seed=1)
    _, noop, *_ = env.step("<answer></answer>")
    _, move, *_ = env.step("<answer>Up</answer>")
    assert (noop, move) == (0.0, pytest.approx(-0.1))
    env = gym.make("ragen/Sokoban-v0", **common.MT_SETTINGS["sokoban"]["env_kwargs"])
    env.reset(seed=1)
    assert env.step("<answer></answer>")[1] == pytest.approx(-0.1)  # the default format penalty


def test_run_marks_label_the_evaluation_curve_and_replay_the_multiturn_rule(mt):
    from ragen_envs.starpo.diagnostics import replay_monitor
    from ragen_envs.starpo.monitor import MULTITURN_MONITOR

    # eval 0.2, 0.25, 0.05, 0.0, 0.0 at steps 0-40: best 0.25, a quarter 0.0625; below it for good
    # from step 20 (3 evaluations) -> collapse 20. Rollout success 0.25 for 20 steps, then 0.
    rows = [{"step": t, "rollout/in_group_std": 1.0, "rollout/return_mean": 0.0, "rollout/episodes": 128,
             "rollout/success": 0.25 if t < 20 else 0.0} for t in range(41)]
    for t, e in zip((0, 10, 20, 30, 40), (0.2, 0.25, 0.05, 0.0, 0.0)):
        rows[t]["eval/success"] = e
    m = mt.run_marks(rows)
    assert m["eval_curve"] == [0.2, 0.25, 0.05, 0.0, 0.0] and m["eval_peak"] == 0.25
    assert m["eval_collapse_step"] == 20
    assert m["multiturn_warning"] == replay_monitor(rows, **MULTITURN_MONITOR)["alarm"]
    # 5-step windows of 128 episodes, best 0.25 (N 640): at step 22 the window 18-22 has mean
    # 0.1 > 0.25 / 4; at step 23 (19-23) 0.05 < 0.0625, pooled p 0.15, sd sqrt(.15 * .85 * 2 / 640)
    # = 0.01996, z = 0.2 / 0.01996 = 10.0 > 5 -> the warning at 23
    assert m["multiturn_warning"] == 23
    flat = [dict(r, **{"rollout/success": 0.25}) for r in rows]
    for r in flat:
        r.pop("eval/success", None)
    assert mt.run_marks(flat) == {"eval_curve": [], "eval_peak": None, "eval_collapse_step": None,
                                  "multiturn_warning": None}
