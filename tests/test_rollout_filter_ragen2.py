"""RAGEN-2's rollout filter (ragen_envs/starpo/rollout_filter.py), its config fields and its
place in the trainer.

The fixture tests/fixtures/ragen2_rollout_filter.json holds 240 random cases run through the
reference's own filter (mll-lab-nu/RAGEN@20daedc, ``build_rollout_filter(...).filter(batch)``;
scores and kept groups read where it selects): every metric, strategy, filter type, top-p mode,
include_zero and eps, on binary, Sokoban-like and Gaussian returns with whole zero-variance
groups, per-token entropies with a loss mask, response masks.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")

from ragen_envs.starpo import rollout_filter as RF  # noqa: E402
from ragen_envs.starpo.config import PRESETS, StarPOConfig, make_config  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "ragen2_rollout_filter.json"
CASES = json.loads(FIXTURE.read_text())["cases"]


def _scores(case) -> torch.Tensor:
    G, N = case["num_groups"], case["group_size"]
    metric = case["metric"]
    if metric.startswith("reward"):
        return RF.group_scores(metric, rewards=torch.tensor(case["rewards"]).view(G, N))
    mask = torch.tensor(case["mask"], dtype=torch.float32)
    if metric == "length":
        return RF.group_scores(metric, lengths=mask.sum(-1).view(G, N))
    ent = RF.trajectory_mean_entropy(torch.tensor(case["entropys"], dtype=torch.float32), mask)
    return RF.group_scores(metric, entropies=ent.view(G, N))


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_fixture_covers_every_option():
    seen = {key: Counter(c[key] for c in CASES) for key in ("strategy", "metric", "filter_type", "include_zero",
                                                             "top_p_prob_mode")}
    assert set(seen["strategy"]) == set(RF.STRATEGIES) and set(seen["metric"]) == set(RF.METRICS)
    assert set(seen["filter_type"]) == set(RF.FILTER_TYPES) and set(seen["include_zero"]) == {True, False}
    assert set(seen["top_p_prob_mode"]) == set(RF.TOP_P_MODES)
    assert sum(not c["expected"]["kept"] for c in CASES) >= 5  # the "keep nothing" outcomes are in it


@pytest.mark.parametrize("i", range(len(CASES)))
def test_matches_the_reference_on_recorded_cases(i):
    case = CASES[i]
    exp = case["expected"]
    scores = _scores(case)
    # float32 arithmetic as the reference's: the scores agree bit for bit
    assert all(_same(float(a), b) for a, b in zip(scores, exp["scores"])), (scores.tolist(), exp["scores"])
    kept = RF.select_groups(scores, case["strategy"], case["value"], case["filter_type"], case["include_zero"],
                            case["top_p_prob_mode"], case["selection_eps"])
    if exp["boundary_tie"]:
        # equal scores on both sides of the cut: torch decides which one the reference keeps,
        # we keep the lower index; the kept scores are the same either way
        assert sorted(float(scores[g]) for g in kept) == sorted(exp["scores"][g] for g in exp["kept"])
    else:
        assert list(kept) == exp["kept"]
    # the reference keeps its ratio as a float32 tensor
    assert len(kept) / case["num_groups"] == pytest.approx(exp["kept_ratio"], rel=1e-7)
    assert RF.filter_loss_scale(len(kept), case["num_groups"], "linear") == pytest.approx(exp["kept_ratio"])
    assert RF.filter_loss_scale(len(kept), case["num_groups"], "sqrt") == pytest.approx(exp["kept_ratio"] ** 0.5)


# ----------------------------------------------------------------------------- by hand
def test_linear_top_p_by_hand():
    # scores 0.5, 0, 0.4, 0.1 (sum 1.0), p = 0.9, eps 0.01: T = 0.89; best first 0.5 (< T),
    # + 0.4 = 0.9 >= T: keep groups 0 and 2
    assert RF.select_groups([0.5, 0.0, 0.4, 0.1], "top_p", 0.9) == (0, 2)
    # p = 0.95: T = 0.94; 0.5 + 0.4 + 0.1 = 1.0 >= T: the three non-zero groups (the 0 stops the walk)
    assert RF.select_groups([0.5, 0.0, 0.4, 0.1], "top_p", 0.95) == (0, 2, 3)
    # eps 0, a sum landing exactly on T: 0.5·(0.1 + 0.2 + 0.3) = 0.3 in float32 is the float32 0.3
    # the walk adds first, so 0.3 alone reaches T: keep group 2 only
    assert RF.select_groups([0.1, 0.2, 0.3], "top_p", 0.5, selection_eps=0.0) == (2,)
    # every group zero-variance: sum 0, T = -0.01, the empty walk already "reaches" it: keep nothing
    assert RF.select_groups([0.0, 0.0, 0.0], "top_p", 0.9) == ()
    # negative mass (reward metric): T = 0.9·(-1.0) - 0.01 < 0, again nothing is kept
    assert RF.select_groups([-0.5, -0.5], "top_p", 0.9) == ()
    # a positive score that cannot reach T because a negative one lowers nothing but stops the walk:
    # scores 1, -0.5 (sum 0.5), T = 0.44: 1 >= T after one step -> keep group 0
    assert RF.select_groups([1.0, -0.5], "top_p", 0.9) == (0,)
    # smallest: ascending walk; scores 0.1, 0.7, 0.2 (sum 1.0), p = 0.25: T = 0.24; 0.1, +0.2 = 0.3 >= T
    assert RF.select_groups([0.1, 0.7, 0.2], "top_p", 0.25, "smallest") == (0, 2)
    # value >= 1: no filter (only include_zero=False drops the zeros)
    assert RF.select_groups([0.0, 0.3], "top_p", 1.0) == (0, 1)
    assert RF.select_groups([0.0, 0.3], "top_p", 1.0, include_zero=False) == (1,)


def test_softmax_top_p_by_hand():
    # softmax([2, 0, 0]) = e² / (e² + 2) = 0.7870, 0.1065, 0.1065; p = 0.5: the first cumulative
    # value >= 0.5 is at position 0 -> k = 1; p = 0.8: 0.787 < 0.8 <= 0.8935 -> k = 2
    assert RF.select_groups([2.0, 0.0, 0.0], "top_p", 0.5, top_p_prob_mode="softmax") == (0,)
    assert len(RF.select_groups([2.0, 0.0, 0.0], "top_p", 0.8, top_p_prob_mode="softmax")) == 2
    # smallest ranks by softmax(-score): group 1 first
    assert RF.select_groups([2.0, 0.0, 1.0], "top_p", 0.5, "smallest", top_p_prob_mode="softmax") == (1,)


def test_top_k_min_p_by_hand():
    s = [0.3, 0.9, 0.0, 0.6]
    assert RF.select_groups(s, "top_k", 0.5) == (1, 3)  # int(0.5·4) = 2 best
    assert RF.select_groups(s, "top_k", 0.1) == (1,)  # int(0.4) = 0, at least one
    assert RF.select_groups(s, "top_k", 0.5, "smallest") == (0, 2)
    assert RF.select_groups(s, "top_k", 0.5, "smallest", include_zero=False) == (0, 3)
    # a fraction of *all* groups, truncated with Python's float product: 0.29·100 = 28.999999999999996 -> 28
    assert len(RF.select_groups([float(g) for g in range(1, 101)], "top_k", 0.29)) == 28
    assert RF.select_groups(s, "top_k_abs", 3.7) == (0, 1, 3)  # int(3.7) = 3
    assert RF.select_groups(s, "top_k_abs", 9) == (0, 1, 2, 3)  # capped at the groups there are
    # min_p largest: score >= 0.6·0.9 = 0.54 -> 0.9 and 0.6
    assert RF.select_groups(s, "min_p", 0.6) == (1, 3)
    # min_p smallest (zeros dropped): min 0.3, bound 0.3 / 0.5 = 0.6 -> 0.3 and 0.6
    assert RF.select_groups(s, "min_p", 0.5, "smallest", include_zero=False) == (0, 3)
    assert RF.select_groups([0.0, 0.0], "min_p", 0.5, include_zero=False) == ()


def test_group_scores_by_hand():
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    # sample std of (1, 0, 1, 0): sqrt(4·0.25 / 3) = 0.57735
    assert RF.group_scores("reward_variance", rewards=r).tolist() == pytest.approx([0.57735, 0.0], abs=1e-5)
    assert RF.group_scores("reward", rewards=r).tolist() == [0.5, 1.0]
    assert RF.group_scores("reward_sum", rewards=r).tolist() == [2.0, 4.0]
    assert RF.group_scores("length", lengths=torch.tensor([[3.0, 5.0]])).tolist() == [4.0]
    ent = RF.trajectory_mean_entropy(torch.tensor([[1.0, 2.0, 9.0], [4.0, 4.0, 4.0]]),
                                     torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert ent.tolist() == [1.5, 0.0]  # (1 + 2) / 2; no policy token: 0
    with pytest.raises(ValueError, match="needs entropies"):
        RF.group_scores("entropy", rewards=r)


def test_loss_scale_and_empty_streak():
    assert RF.filter_loss_scale(2, 8, "none") == 1.0
    assert RF.filter_loss_scale(2, 8, "linear") == 0.25
    assert RF.filter_loss_scale(2, 8, "sqrt") == 0.5
    assert RF.filter_loss_scale(0, 8, "sqrt") == 0.0
    streak = 0
    for kept in (0, 0, 3, 0):
        streak = RF.empty_streak(streak, kept)
    assert streak == 1  # the kept step reset it
    assert RF.empty_streak(4, 0) == 5


# ----------------------------------------------------------------------------- config
def test_preset_ragen2_is_the_recommended_setting():
    cfg = make_config("ragen2")
    assert (cfg.rollout_filter_strategy, cfg.rollout_filter_value, cfg.rollout_filter_top_p_prob_mode,
            cfg.rollout_filter_metric, cfg.rollout_filter_type, cfg.rollout_filter_selection_eps,
            cfg.rollout_filter_empty_stop_steps, cfg.filter_loss_scaling) == (
        "top_p", 0.9, "linear", "reward_variance", "largest", 0.01, 5, "none")
    assert cfg.rollout_filter_include_zero is False
    assert "ragen2" in PRESETS
    assert StarPOConfig().rollout_filter_strategy is None  # the StarPO-S filter stays the default


@pytest.mark.parametrize("kwargs,message", [
    ({"rollout_filter_strategy": "top_q"}, "rollout_filter_strategy must be null or one of"),
    ({"rollout_filter_metric": "reward_std"}, "rollout_filter_metric must be one of"),
    ({"rollout_filter_type": "biggest"}, "rollout_filter_type must be one of"),
    ({"rollout_filter_top_p_prob_mode": "cubic"}, "rollout_filter_top_p_prob_mode must be one of"),
    ({"filter_loss_scaling": "log"}, "filter_loss_scaling must be one of"),
    ({"rollout_filter_value": -1.0}, "rollout_filter_value must be a finite number >= 0"),
    ({"rollout_filter_value": "0.9"}, "rollout_filter_value must be a finite number >= 0"),
    ({"rollout_filter_strategy": "top_p", "rollout_filter_value": 0.0}, "rollout_filter_value must be > 0"),
    ({"rollout_filter_strategy": "min_p", "rollout_filter_value": 2.0}, "must be in \\(0, 1\\] for min_p"),
    ({"rollout_filter_selection_eps": float("nan")}, "rollout_filter_selection_eps must be a finite number"),
    ({"rollout_filter_empty_stop_steps": -1}, "rollout_filter_empty_stop_steps must be an integer >= 0"),
    ({"rollout_filter_include_zero": "no"}, "rollout_filter_include_zero must be true or false"),
    ({"rollout_filter_strategy": "top_p", "filter_mode": "none"}, "filter_mode='none' belongs to the StarPO-S filter"),
    ({"rollout_filter_strategy": "top_k", "keep_ratio": 0.5}, "keep_ratio=0.5 belongs to the StarPO-S filter"),
    ({"rollout_filter_strategy": "top_p", "explore_groups": 2}, "explore_groups=2 belongs"),
])
def test_config_refuses_bad_values_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        StarPOConfig(**kwargs)
    assert "\n" not in str(err.value)


def test_cli_error_is_one_line(capsys):
    from ragen_envs.cli import main

    assert main(["train", "ragen/Bandit-v0", "--preset", "ragen2", "--set", "filter_mode=none", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragen train: error:") and "filter_mode='none' belongs to the StarPO-S filter" in err
    assert "\n" not in err


# ----------------------------------------------------------------------------- the trainer
TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64}
SMALL = dict(env_id="ragen/Bandit-v0", num_groups=4, group_size=4, max_new_tokens=8, eval_every=0, probe_every=0,
             mini_batch_size=16, micro_batch_size=8, tiny_model=TINY, log_samples=0, plots=False, save_every=0,
             save_rollouts=True)


def _rollouts(out_dir: Path) -> dict[int, list[dict]]:
    """rollouts.jsonl by step, each step's rows in (group, member) order."""
    by_step: dict[int, list] = {}
    for line in (out_dir / "rollouts.jsonl").read_text().splitlines():
        r = json.loads(line)
        by_step.setdefault(r["step"], []).append(r)
    return {k: sorted(v, key=lambda r: (r["group"], r["member"])) for k, v in by_step.items()}


def _rows(out_dir: Path) -> list[dict]:
    from ragen_envs.starpo.diagnostics import read_metrics

    return [r for r in read_metrics(out_dir / "metrics.jsonl") if "final" not in r]


def test_ragen2_preset_on_a_batch_without_signal(tmp_path):
    """The tiny untrained policy earns the same format penalty on every rollout: every group's
    return std is 0, and linear top-p (like the reference) keeps nothing, so no update runs."""
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = make_config("ragen2", out_dir=str(tmp_path), steps=2, **SMALL)
    StarPOTrainer(cfg, log=lambda _m: None).train()
    rows = _rows(tmp_path)
    for step, rollouts in _rollouts(tmp_path).items():
        returns = torch.tensor([r["episode"]["return"] for r in rollouts], dtype=torch.float64).view(4, 4)
        expected = RF.select_groups(RF.group_scores("reward_variance", rewards=returns), "top_p", 0.9, include_zero=False)
        assert tuple(sorted({r["group"] for r in rollouts if r["kept"]})) == expected
        assert rows[step]["rollout/kept_fraction"] == len(expected) / 4
    assert [r["rollout/empty_filter_steps"] for r in rows] == [1, 2] and all(r["skipped_update"] for r in rows)


def test_trainer_updates_on_the_groups_the_filter_keeps(tmp_path, monkeypatch):
    """Scores with a known answer (linear top-p 0.9 of 0.5, 0, 0.4, 0.1 keeps groups 0 and 2):
    the update trains on those two groups, and filter_loss_scaling=linear scales by 2 / 4."""
    from ragen_envs.starpo.trainer import StarPOTrainer

    monkeypatch.setattr(RF, "group_scores", lambda metric, **_: torch.tensor([0.5, 0.0, 0.4, 0.1]))
    scales = []
    real_scale = RF.filter_loss_scale
    monkeypatch.setattr(RF, "filter_loss_scale", lambda *a: scales.append((a, real_scale(*a))) or real_scale(*a))
    cfg = make_config("ragen2", out_dir=str(tmp_path), steps=1, filter_loss_scaling="linear", **SMALL)
    StarPOTrainer(cfg, log=lambda _m: None).train()
    (row,) = _rows(tmp_path)
    kept = {r["group"] for r in _rollouts(tmp_path)[0] if r["kept"]}
    assert kept == {0, 2} and row["update/trajectories"] == 8 and row["rollout/kept_fraction"] == 0.5
    assert scales == [((2, 4, "linear"), 0.5)]
    assert row["rollout/filter_score_kept"] == pytest.approx(0.45) and row["rollout/empty_filter_steps"] == 0


def test_entropy_metric_scores_with_the_actor(tmp_path):
    """rollout_filter_metric=entropy: the rollouts' mean token entropy under the actor ranks the
    groups (top_k 0.5 of 4: the two highest)."""
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = make_config("ragen2", out_dir=str(tmp_path), steps=1, rollout_filter_metric="entropy",
                      rollout_filter_strategy="top_k", rollout_filter_value=0.5, **SMALL)
    # a twin trainer (same seed: the same first rollouts) scores them before any update
    twin = StarPOTrainer(make_config("ragen2", **{**cfg.to_dict(), "out_dir": str(tmp_path / "twin")}), log=lambda _m: None)
    ent = twin._mean_entropies(twin.rollout(cfg.train_seed_start)).view(4, 4)
    assert torch.all(ent > 0)
    StarPOTrainer(cfg, log=lambda _m: None).train()
    (row,) = _rows(tmp_path)
    kept = sorted({r["group"] for r in _rollouts(tmp_path)[0] if r["kept"]})
    assert kept == list(RF.select_groups(ent.mean(-1), "top_k", 0.5))
    assert row["rollout/filter_score_kept"] >= row["rollout/filter_score"] and row["update/trajectories"] == 8
def test_trainer_stops_after_empty_stop_steps(tmp_path, monkeypatch):
    from ragen_envs.starpo.trainer import StarPOTrainer

    monkeypatch.setattr(RF, "select_groups", lambda *a, **k: ())  # a filter that never keeps anything
    cfg = make_config("ragen2", out_dir=str(tmp_path), steps=5, rollout_filter_empty_stop_steps=2,
                      **{**SMALL, "save_rollouts": False})
    trainer = StarPOTrainer(cfg, log=lambda _m: None)
    trainer.train()
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == [0, 1] and all(r["skipped_update"] for r in rows)
    assert [r["rollout/empty_filter_steps"] for r in rows] == [1, 2]
    assert "kept no group for 2 consecutive steps" in trainer.stopped_reason


# ----------------------------------------------------------------------------- advantages
ADV_CASES = json.loads((Path(__file__).parent / "fixtures" / "ragen2_advantages.json").read_text())["cases"]


def _adv_inputs(case):
    mask = torch.tensor(case["mask"])
    rewards = torch.zeros_like(mask)
    rewards[:, -1] = torch.tensor(case["returns"])
    return rewards, mask


@pytest.mark.parametrize("i", range(len(ADV_CASES)))
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_and_drgrpo_match_the_reference(i, norm):
    from ragen_envs.starpo.core import compute_advantages, length_weighted_advantages

    case = ADV_CASES[i]
    rewards, mask = _adv_inputs(case)
    adv, _ = compute_advantages("grpo", token_rewards=rewards, values=torch.zeros_like(mask), mask=mask,
                                turn_ends=None, group_size=case["group_size"], gamma=1.0, lam=1.0, gamma_high=1.0,
                                eps=1e-6, norm_by_std=norm)
    key = "grpo" if norm else "drgrpo"
    torch.testing.assert_close(adv, torch.tensor(case["expected"][key]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(length_weighted_advantages(adv, mask),
                               torch.tensor(case["expected"][key + "_length_weighted"]), rtol=1e-5, atol=1e-5)


def test_drgrpo_and_length_weight_by_hand():
    from ragen_envs.starpo.core import drgrpo_advantages, length_weighted_advantages

    # returns 1, 0, 0, 1 | 2, 2, 2, 2: group means 0.5 and 2 -> ±0.5 and 0 (no division by the std 0.577)
    assert drgrpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0]), 4).tolist() == [
        0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    # replies of 2 and 6 tokens (mean 4): relative lengths 0.5 and 1.5 -> advantages x2 and x2/3
    adv = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [-3.0] * 6])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [1.0] * 6])
    out = length_weighted_advantages(adv, mask)
    assert out[0, :2].tolist() == pytest.approx([2.0, 2.0], rel=1e-5) and out[1].tolist() == pytest.approx([-2.0] * 6, rel=1e-5)


@pytest.mark.parametrize("kwargs,message", [
    ({"norm_adv_by_std_in_grpo": False}, "norm_adv_by_std_in_grpo=False applies to advantage=grpo, not gae"),
    ({"grpo_advantage_length_weight": True, "advantage": "bilevel_gae", "reward_placement": "turn"},
     "grpo_advantage_length_weight=True applies to advantage=grpo"),
    ({"advantage": "grpo", "norm_adv_by_std_in_grpo": 0}, "norm_adv_by_std_in_grpo must be true or false"),
])
def test_advantage_options_refuse_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StarPOConfig(**kwargs)


def test_trainer_passes_the_advantage_options(tmp_path, monkeypatch):
    from ragen_envs.starpo import core
    from ragen_envs.starpo import trainer as T

    calls = []
    real_grpo = core.ADVANTAGE_ESTIMATORS["grpo"]
    monkeypatch.setitem(core.ADVANTAGE_ESTIMATORS, "grpo", lambda **kw: calls.append(kw["norm_by_std"]) or real_grpo(**kw))
    weighted = []
    monkeypatch.setattr(T, "length_weighted_advantages", lambda a, m: weighted.append(tuple(a.shape)) or a)
    cfg = make_config("grpo", out_dir=str(tmp_path), steps=1, norm_adv_by_std_in_grpo=False,
                      grpo_advantage_length_weight=True, **{**SMALL, "save_rollouts": False})
    T.StarPOTrainer(cfg, log=lambda _m: None).train()
    (row,) = _rows(tmp_path)
    assert row["update/trajectories"] == 4  # the top-25 % filter kept one group of 4
    assert calls == [False] and len(weighted) == 1 and weighted[0][0] == 4


def test_seq_mean_token_sum_weights():
    from ragen_envs.starpo.core import loss_weights

    # two rows with 1 and 3 tokens: each token weighs 1/2 (the 2 trajectories), the weights sum to 2
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert loss_weights(mask, "seq-mean-token-sum").tolist() == [[0.5, 0.0, 0.0], [0.5, 0.5, 0.5]]
    # = verl's definition, mean over rows of Σ_t x·mask, on random numbers
    g = torch.Generator().manual_seed(0)
    x, m = torch.randn(5, 7, generator=g), (torch.rand(5, 7, generator=g) < 0.6).float()
    m[:, 0] = 1.0
    assert float((loss_weights(m, "seq-mean-token-sum") * x).sum()) == pytest.approx(float((x * m).sum(-1).mean()))
    # split into two micro-batches with the mini-batch's count: the parts add up
    parts = sum(float((loss_weights(m[r], "seq-mean-token-sum", num_seqs=5) * x[r]).sum()) for r in ([0, 1], [2, 3, 4]))
    assert parts == pytest.approx(float((x * m).sum(-1).mean()))


def test_seq_mean_token_sum_trains_and_logs_per_token_values(tmp_path):
    from ragen_envs.starpo.trainer import StarPOTrainer

    rows = {}
    for agg in ("token-mean", "seq-mean-token-sum"):
        cfg = make_config("grpo", out_dir=str(tmp_path / agg), steps=1, loss_agg=agg, **{**SMALL, "save_rollouts": False})
        trainer = StarPOTrainer(cfg, log=lambda _m: None)
        rows[agg] = trainer.train_step()
    a, b = rows["token-mean"], rows["seq-mean-token-sum"]
    # the same rollouts and the same first policy: the per-token entropy and clip fractions agree
    assert b["actor/entropy"] == pytest.approx(a["actor/entropy"], rel=1e-5)
    assert 0 <= b["actor/pg_clipfrac_high"] <= 1 and b["actor/pg_clipfrac_high"] == pytest.approx(a["actor/pg_clipfrac_high"])


def test_the_empty_filter_streak_goes_on_across_a_resume(tmp_path, monkeypatch):
    """Stopped after 1 empty step and resumed, the run stops at the same step as an uninterrupted
    one: the streak is in the checkpoint (it restarted from 0 before)."""
    from ragen_envs.starpo.trainer import StarPOTrainer

    monkeypatch.setattr(RF, "select_groups", lambda *a, **k: ())
    cfg = make_config("ragen2", out_dir=str(tmp_path), steps=1, rollout_filter_empty_stop_steps=2,
                      **{**SMALL, "save_rollouts": False, "save_every": 1})
    StarPOTrainer(cfg, log=lambda _m: None).train()
    resumed = StarPOTrainer(make_config("ragen2", **{**cfg.to_dict(), "steps": 5}), resume=True, log=lambda _m: None)
    assert resumed.empty_filter_steps == 1
    resumed.train()
    rows = _rows(tmp_path)
    assert [r["rollout/empty_filter_steps"] for r in rows] == [1, 2]
    assert "kept no group for 2 consecutive steps" in resumed.stopped_reason


def test_the_references_field_names_carry_over():
    from ragen_envs.starpo.config import rename_reference_fields

    assert rename_reference_fields({"loss_agg_mode": "seq-mean-token-sum", "steps": 3}) == {
        "loss_agg": "seq-mean-token-sum", "steps": 3}
    with pytest.raises(ValueError, match="not both"):
        rename_reference_fields({"loss_agg_mode": "token-mean", "loss_agg": "token-mean"})


def test_cli_takes_loss_agg_mode_under_the_references_name(capsys, tmp_path):
    from ragen_envs.cli import main

    assert main(["train", "ragen/Bandit-v0", "--set", "loss_agg_mode=seq-mean-token-mean", "--print-config"]) == 0
    assert "loss_agg: seq-mean-token-mean" in capsys.readouterr().out
    config = tmp_path / "run.yaml"
    config.write_text("loss_agg_mode: seq-mean-token-sum\nloss_agg: token-mean\n")
    assert main(["train", "ragen/Bandit-v0", "--config", str(config), "--print-config"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give one of them, not both" in err[0]
