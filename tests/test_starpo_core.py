"""The StarPO math (ragen_envs/starpo/core.py): the paper's worked examples as exact tests,
plus properties of GAE, whitening, the filter and the token-mean aggregation."""

from __future__ import annotations

import math
import os

import pytest

# Idle OpenMP threads sleep instead of spinning (only effective if torch is not loaded yet):
# on a shared CPU, spinning threads of several torch processes slow each other down ~10x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ragen_envs.starpo.core import (  # noqa: E402
    bilevel_gae_advantages,
    clipped_surrogate,
    compute_advantages,
    entropy_from_logits,
    explained_variance,
    gae_advantages,
    grpo_advantages,
    group_std,
    kl_estimate,
    masked_mean,
    masked_whiten,
    policy_loss,
    uncertainty_filter,
    value_loss,
)

# paper-notes §6: four groups of four binary returns
GROUPS = torch.tensor([[1.0, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [1, 0, 0, 0]])


# ----------------------------------------------------------------------------- worked examples
def test_group_std_worked_example_population():
    std = group_std(GROUPS, unbiased=False)
    assert std.tolist()[:3] == [0.0, 0.0, 0.5]
    assert std[3].item() == pytest.approx(0.4330127, abs=1e-6)
    assert GROUPS.mean(1).tolist() == [1.0, 0.0, 0.5, 0.25]


def test_group_std_unbiased_is_sample_std():
    assert group_std(GROUPS)[2].item() == pytest.approx(math.sqrt(1 / 3))  # (1,0,1,0): var 1/3 with n-1


def test_filter_top_25_percent_keeps_group_c_with_successes_and_failures():
    for unbiased in (True, False):
        res = uncertainty_filter(GROUPS, "top_p", keep_ratio=0.25, unbiased=unbiased)
        assert res.kept == (2,)
    res = uncertainty_filter(GROUPS, "top_p", keep_ratio=0.25, unbiased=False)
    assert res.metrics["kept_fraction"] == 0.25
    assert res.metrics["in_group_std_kept"] == pytest.approx(0.5)
    assert res.metrics["in_group_std"] == pytest.approx((0.5 + 0.4330127) / 4, abs=1e-6)
    assert res.metrics["zero_std_fraction"] == 0.5


def test_grpo_on_group_c_population_std():
    adv = grpo_advantages(GROUPS[2], 4, eps=1e-6, unbiased=False)
    assert adv.tolist() == pytest.approx([1, -1, 1, -1], abs=1e-5)


def test_grpo_unbiased_and_zero_variance_groups():
    adv = grpo_advantages(GROUPS.reshape(-1), 4)  # unbiased + 1e-6, the reference's choice
    assert adv[:8].tolist() == [0.0] * 8  # constant groups: 0, no division by ~0
    s = math.sqrt(1 / 3)
    assert adv[8:12].tolist() == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6)] * 2)
    assert adv[12].item() == pytest.approx(0.75 / (0.5 + 1e-6))  # (1,0,0,0): sample std 0.5


def test_gae_worked_example():
    adv, ret = gae_advantages(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.4, 0.6]]), torch.ones(1, 2))
    assert adv[0].tolist() == pytest.approx([0.6, 0.4])  # delta_0 = 0.2, delta_1 = 0.4
    assert ret[0].tolist() == pytest.approx([1.0, 1.0])


def test_clip_higher_worked_example():
    ratio = torch.tensor(0.28 / 0.20)
    assert ratio.item() == pytest.approx(1.4)
    assert clipped_surrogate(ratio, torch.tensor(0.6), 0.2, 0.2).item() == pytest.approx(0.72)
    assert clipped_surrogate(ratio, torch.tensor(0.6), 0.2, 0.28).item() == pytest.approx(0.768)
    # between 1.2 and 1.28 symmetric PPO is clipped, Clip-Higher still follows the ratio
    assert clipped_surrogate(torch.tensor(1.25), torch.tensor(1.0), 0.2, 0.2).item() == pytest.approx(1.2)
    assert clipped_surrogate(torch.tensor(1.25), torch.tensor(1.0), 0.2, 0.28).item() == pytest.approx(1.25)


def test_negative_advantage_lower_bound_and_dual_clip():
    f = clipped_surrogate(torch.tensor(0.6), torch.tensor(-0.4), 0.2, 0.28)
    assert f.item() == pytest.approx(-0.32)  # min(0.6 * -0.4, 0.8 * -0.4)
    # dual clip: a huge ratio with A < 0 is bounded by c * A
    assert clipped_surrogate(torch.tensor(10.0), torch.tensor(-1.0), dual_clip=3.0).item() == pytest.approx(-3.0)
    assert clipped_surrogate(torch.tensor(10.0), torch.tensor(-1.0), dual_clip=None).item() == pytest.approx(-10.0)
    with pytest.raises(ValueError, match="dual_clip"):
        clipped_surrogate(torch.tensor(1.0), torch.tensor(1.0), dual_clip=0.5)


# ----------------------------------------------------------------------------- losses
def test_policy_loss_metrics_and_ratio_clamp():
    logp = torch.log(torch.tensor([[0.28, 0.5, 0.1]]))
    old = torch.log(torch.tensor([[0.20, 0.5, 0.5]]))
    adv = torch.tensor([[0.6, 1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    loss, m = policy_loss(logp, old, adv, mask, 0.2, 0.28)
    expected = -(0.768 + 1.0 + (-0.8)) / 3  # ratio 0.2 < 0.8 with A < 0 -> 0.8 * A
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert m["pg_clipfrac_high"] == pytest.approx(1 / 3)
    assert m["pg_clipfrac_low"] == pytest.approx(1 / 3)
    huge, _ = policy_loss(torch.tensor([[100.0]]), torch.tensor([[0.0]]), torch.tensor([[-1.0]]), torch.ones(1, 1), dual_clip=None)
    assert math.isfinite(huge.item())  # log-ratio clamped at 20


def test_token_mean_uses_the_global_token_count():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(6, 9, generator=g) * 0.1
    old = logp + torch.randn(6, 9, generator=g) * 0.1
    adv = torch.randn(6, 9, generator=g)
    mask = (torch.rand(6, 9, generator=g) > 0.4).float()
    full, _ = policy_loss(logp, old, adv, mask)
    n = mask.sum()
    parts = sum(policy_loss(logp[i : i + 2], old[i : i + 2], adv[i : i + 2], mask[i : i + 2], num_tokens=n)[0] for i in (0, 2, 4))
    assert parts.item() == pytest.approx(full.item(), abs=1e-6)
    # a per-micro-batch mean would weight short micro-batches up: not what we do
    local = sum(policy_loss(logp[i : i + 2], old[i : i + 2], adv[i : i + 2], mask[i : i + 2])[0] for i in (0, 2, 4)) / 3
    assert abs(local.item() - full.item()) > 1e-6


def test_value_loss_clipping():
    v, old, ret = torch.tensor([[2.0, 0.1]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    loss, m = value_loss(v, old, ret, torch.ones(1, 2), clip=0.5)
    # token 0: max((2-0)^2, (0.5-0)^2) = 4; token 1: max((0.1-1)^2, (0.1-1)^2) = 0.81
    assert loss.item() == pytest.approx(0.5 * (4 + 0.81) / 2)
    loss2, _ = value_loss(torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.ones(1, 1), clip=0.5)
    assert loss2.item() == pytest.approx(0.5 * 0.25)  # the clipped prediction 0.5 is the worse one
    assert m["vf_clipfrac"] == 0.0
    _, m2 = value_loss(torch.tensor([[0.0, 0.3]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 5.0]]), torch.ones(1, 2),
                       clip=0.5)
    assert m2["vf_clipfrac"] == 0.5  # token 0: clipped branch (0.25 > 0); token 1 inside the band
    # inside the band V_clip = V_old + (V - V_old) differs from V by rounding only: not "clipped"
    v, old = torch.tensor([[0.1226789802312851]]), torch.tensor([[-0.005308201070874929]])
    assert float(old + torch.clamp(v - old, -0.5, 0.5)) < float(v)  # float32 rounding: V_clip != V
    _, m3 = value_loss(v, old, torch.tensor([[10.0]]), torch.ones(1, 1), clip=0.5)
    assert m3["vf_clipfrac"] == 0.0


def test_kl_estimators_and_entropy():
    logp, ref = torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.0, -1.0, -3.0])
    assert kl_estimate(logp, ref, "k1").tolist() == pytest.approx([0.0, -1.0, 2.5])
    k3 = kl_estimate(logp, ref, "k3")
    assert k3[0].item() == 0.0 and bool((k3 >= 0).all())
    d = -3.0 + 0.5
    assert k3[2].item() == pytest.approx(math.exp(d) - d - 1)
    with pytest.raises(ValueError, match="k1"):
        kl_estimate(logp, ref, "k9")
    assert entropy_from_logits(torch.zeros(3, 7)).tolist() == pytest.approx([math.log(7)] * 3)
    assert entropy_from_logits(torch.tensor([[100.0, 0.0, 0.0]])).item() == pytest.approx(0.0, abs=1e-6)


def test_masked_whiten_and_mean():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = masked_whiten(x, mask)
    assert w[0, :3].tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-4)  # Bessel: var = 1
    assert w[0, 3].item() == 0.0
    assert masked_mean(x, mask).item() == pytest.approx(2.0)
    assert masked_mean(x, mask, num_tokens=6).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 2"):
        masked_whiten(x, torch.tensor([[1.0, 0, 0, 0]]))


def test_explained_variance():
    r = torch.tensor([[1.0, 2.0, 3.0]])
    assert explained_variance(r, r, torch.ones(1, 3)) == pytest.approx(1.0)
    assert explained_variance(torch.zeros(1, 3), r, torch.ones(1, 3)) == pytest.approx(0.0)
    # equal returns: no variance to explain (float32 rounding must not give -1e12)
    same = torch.full((1, 7), -0.1) + torch.tensor([[1e-9] * 7])
    assert math.isnan(explained_variance(torch.randn(1, 7), same, torch.ones(1, 7)))


# ----------------------------------------------------------------------------- GAE properties
@st.composite
def _trajectory(draw):
    n = draw(st.integers(2, 12))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    mask[-1] = True
    rewards = [draw(st.floats(-2, 2, allow_nan=False)) if m else 0.0 for m in mask]
    values = [draw(st.floats(-2, 2, allow_nan=False)) for _ in range(n)]
    inserts = draw(st.lists(st.integers(0, n), max_size=4))
    return mask, rewards, values, inserts


@settings(max_examples=60, deadline=None)
@given(_trajectory())
def test_inserting_observation_tokens_changes_no_advantage(traj):
    """With gamma = lambda = 1, masked-out tokens (observations) anywhere change nothing."""
    mask, rewards, values, inserts = traj
    adv, ret = gae_advantages(torch.tensor([rewards]), torch.tensor([values]), torch.tensor([mask], dtype=torch.float32))
    m2, r2, v2 = list(mask), list(rewards), list(values)
    for pos in sorted(inserts, reverse=True):
        m2.insert(pos, False)
        r2.insert(pos, 0.0)
        v2.insert(pos, 123.0)  # whatever the critic says there
    adv2, ret2 = gae_advantages(torch.tensor([r2]), torch.tensor([v2]), torch.tensor([m2], dtype=torch.float32))
    keep = torch.tensor(m2)
    assert adv2[0][keep].tolist() == pytest.approx(adv[0][torch.tensor(mask)].tolist(), abs=1e-5)
    # gamma = lambda = 1: A_t = (sum of rewards from t on) - V_t
    for t, m in enumerate(mask):
        if m:
            assert adv[0, t].item() == pytest.approx(sum(rewards[t:]) - values[t], abs=1e-4)


@settings(max_examples=40, deadline=None)
@given(_trajectory(), st.floats(0.5, 1.0), st.floats(0.5, 1.0))
def test_gae_vectorised_equals_reference_loop(traj, gamma, lam):
    mask, rewards, values, _ = traj
    adv, _ = gae_advantages(torch.tensor([rewards]), torch.tensor([values]), torch.tensor([mask], dtype=torch.float32), gamma, lam)
    idx = [t for t, m in enumerate(mask) if m]
    expected, running, next_v = {}, 0.0, 0.0
    for t in reversed(idx):  # the obvious loop over sampled tokens only
        delta = rewards[t] + gamma * next_v - values[t]
        running = delta + gamma * lam * running
        expected[t], next_v = running, values[t]
    assert [adv[0, t].item() for t in idx] == pytest.approx([expected[t] for t in idx], abs=1e-4)


def test_bilevel_gae_equals_gae_when_all_discounts_are_one_and_survives_zero_rewards():
    g = torch.Generator().manual_seed(1)
    values = torch.randn(3, 10, generator=g)
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 0, 1, 1, 0], [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.float32)
    ends = torch.zeros(3, 10, dtype=torch.bool)
    ends[0, [2, 7]] = True
    ends[1, [5, 8]] = True
    ends[2, [9]] = True
    rewards = torch.zeros(3, 10)
    rewards[0, 2], rewards[0, 7] = 0.0, 1.5  # a zero-reward turn: still a turn end
    rewards[1, 5], rewards[1, 8] = -0.1, 0.0  # a zero-return trajectory end (the reference crashed)
    rewards[2, 9] = 0.0
    a1, r1 = bilevel_gae_advantages(rewards, values, mask, ends, gamma=1.0, lam=1.0, gamma_high=1.0)
    a2, r2 = gae_advantages(rewards, values, mask, 1.0, 1.0)
    assert torch.allclose(a1, a2, atol=1e-5) and torch.allclose(r1, r2, atol=1e-5)


def test_bilevel_gae_turn_level_discount():
    # two turns of one token each: V = (0, 0), rewards (0, 1), gamma_high 0.5
    a, _ = bilevel_gae_advantages(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2), torch.ones(1, 2),
                                  torch.tensor([[True, True]]), gamma=1.0, lam=1.0, gamma_high=0.5)
    assert a[0].tolist() == pytest.approx([0.5, 1.0])


def test_registry_dispatch_and_unknown_name():
    rewards = torch.zeros(4, 3)
    rewards[:, 2] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    mask = torch.ones(4, 3)
    adv, _ = compute_advantages("grpo", token_rewards=rewards, values=torch.zeros(4, 3), mask=mask, turn_ends=mask.bool(),
                                group_size=4, gamma=1.0, lam=1.0, gamma_high=0.95, eps=1e-6)
    assert adv[:, 0].tolist() == pytest.approx([0.866, -0.866, 0.866, -0.866], abs=1e-3)
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        compute_advantages("ppo2", token_rewards=rewards)


# ----------------------------------------------------------------------------- the filter
def test_filter_ties_go_to_the_lower_group_index():
    r = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # groups 0, 2, 3 tie
    assert uncertainty_filter(r, "top_p", keep_ratio=0.5).kept == (0, 2)
    assert uncertainty_filter(r, "top_p", keep_ratio=0.25).kept == (0,)
    assert uncertainty_filter(r, "top_p", keep_ratio=0.01).kept == (0,)  # at least one group


def test_filter_ratios_dapo_none_and_exploration_quota():
    r = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [5.0, 5.0], [0.0, 3.0], [0.0, 0.1], [0.0, 0.0], [0.0, 0.0]])
    assert uncertainty_filter(r, "top_p", keep_ratio=0.25).kept == (1, 4)
    assert uncertainty_filter(r, "top_p", keep_ratio=0.5).kept == (0, 1, 4, 5)  # std 3 > .71 > .07 > 0 (group 0 first of the ties)
    assert uncertainty_filter(r, "top_p", keep_ratio=0.75).kept == (0, 1, 2, 3, 4, 5)  # 6 groups, ties by index
    assert uncertainty_filter(r, "nonzero").kept == (1, 4, 5)
    assert uncertainty_filter(r, "none").kept == tuple(range(8))
    success = r >= 1.0
    res = uncertainty_filter(r, "top_p", keep_ratio=0.25, explore_groups=2, success=success)
    assert res.kept == (0, 1, 4, 5)  # + two all-fail groups: group 5 (largest std among them), then group 0
    with pytest.raises(ValueError, match="success"):
        uncertainty_filter(r, explore_groups=1)
    with pytest.raises(ValueError, match="keep_ratio"):
        uncertainty_filter(r, keep_ratio=0.0)
    with pytest.raises(ValueError, match="mode"):
        uncertainty_filter(r, mode="best")


def test_loss_weights_token_mean_and_seq_mean_token_mean_by_hand():
    from ragen_envs.starpo.core import loss_weights

    mask = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])  # 1 and 3 tokens
    assert torch.allclose(loss_weights(mask, "token-mean"), mask / 4)
    w = loss_weights(mask, "seq-mean-token-mean")
    assert torch.allclose(w, torch.tensor([[0.5, 0, 0, 0], [1 / 6, 1 / 6, 1 / 6, 0]]))
    # global counts: this piece is half of a mini-batch of 8 tokens / 4 trajectories
    assert torch.allclose(loss_weights(mask, "token-mean", num_tokens=8), mask / 8)
    assert torch.allclose(loss_weights(mask, "seq-mean-token-mean", num_seqs=4), w / 2)
    x = torch.tensor([[2.0, 9.0, 9.0, 9.0], [1.0, 4.0, 7.0, 9.0]])
    # token-mean (2 + 1 + 4 + 7) / 4 = 3.5; seq-mean: (2 + (1 + 4 + 7) / 3) / 2 = 3.0
    assert float((loss_weights(mask, "token-mean") * x).sum()) == pytest.approx(3.5)
    assert float((loss_weights(mask, "seq-mean-token-mean") * x).sum()) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="loss aggregation"):
        loss_weights(mask, "sum")


def test_filter_variants_top_k_min_p_snr_by_hand():
    # stds (n-1): g0 sqrt(1/3) = 0.577 (mean 0.5), g1 0 (mean 1), g2 1.0 (mean 0.5),
    # g3 sqrt(4/3) = 1.155 (mean 11): the largest spread, but on a large mean
    r = torch.tensor([[1.0, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 2], [10, 12, 10, 12]])
    assert uncertainty_filter(r, "top_p", 0.25).kept == (3,)
    assert uncertainty_filter(r, "top_k", top_k=2).kept == (2, 3)
    assert uncertainty_filter(r, "top_k", top_k=9).kept == (0, 1, 2, 3)  # k capped at G
    # min_p: threshold 0.6 x 1.155 = 0.69 keeps g2, g3; 0.4 x 1.155 = 0.46 adds g0
    assert uncertainty_filter(r, "min_p", min_p=0.6).kept == (2, 3)
    assert uncertainty_filter(r, "min_p", min_p=0.4).kept == (0, 2, 3)
    # snr: S = U / (|mu| + U): g0 0.577 / 1.077 = 0.536, g2 1 / 1.5 = 0.667, g3 1.155 / 12.155 = 0.095
    assert uncertainty_filter(r, "snr", 0.25).kept == (2,)
    assert uncertainty_filter(r, "snr", 0.5).kept == (0, 2)
    assert uncertainty_filter(r, "snr", 1.0).kept == (0, 2, 3)  # never the zero-std g1
    flat = torch.ones(3, 4)
    assert uncertainty_filter(flat, "min_p").kept == () and uncertainty_filter(flat, "snr").kept == ()
    with pytest.raises(ValueError, match="top_k"):
        uncertainty_filter(r, "top_k", top_k=0)
    with pytest.raises(ValueError, match="min_p"):
        uncertainty_filter(r, "min_p", min_p=1.5)


def test_filter_documented_differences_from_the_reference():
    """docs/training.md, "Differences from the reference trainer": k = max(1, int(r·G + 1e-9))."""
    r3 = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 2.0]])  # stds 0.71, 0, 1.41
    assert int(0.25 * 3) == 0  # the reference's count: no group, no update
    assert uncertainty_filter(r3, "top_p", 0.25).kept == (2,)  # ours: the most uncertain one
    assert 0.29 * 100 < 29 and int(0.29 * 100) == 28  # the reference keeps 28 of 100
    r100 = torch.arange(200, dtype=torch.float64).view(100, 2) ** 1.5  # 100 distinct stds
    assert len(uncertainty_filter(r100, "top_p", 0.29).kept) == 29


def test_policy_loss_metrics_documented_differences_from_verl():
    from ragen_envs.starpo.core import loss_weights, policy_loss

    # approx_kl_old: the raw log-ratio (verl clamps it at +-20 like the loss does)
    lp = torch.tensor([[-30.0, -1.0]])
    old = torch.tensor([[-1.0, -1.0]])
    mask = torch.ones(1, 2)
    _, m = policy_loss(lp, old, torch.ones(1, 2), mask, log_ratio_clamp=20.0)
    assert m["approx_kl_old"] == pytest.approx((29.0 + 0.0) / 2)  # clamped it would be 10.0
    # seq-mean-token-mean: clip fractions weighted like the loss, per trajectory
    mask = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])  # 1 and 3 tokens
    lp = torch.tensor([[0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # row 0's token: ratio e^0.5 > 1.28
    old = torch.zeros(2, 4)
    adv = torch.ones(2, 4)
    w = loss_weights(mask, "seq-mean-token-mean")
    _, m = policy_loss(lp, old, adv, w, num_tokens=1.0)
    assert m["pg_clipfrac_high"] == pytest.approx(0.5)  # trajectory 0 is all clipped: 1/2
    _, m_tok = policy_loss(lp, old, adv, mask)
    assert m_tok["pg_clipfrac_high"] == pytest.approx(0.25)  # per token (verl): 1 of 4


def test_score_dtype_keeps_float64_and_computes_the_rest_in_float32():
    from ragen_envs.starpo.core import loss_weights, score_dtype

    assert score_dtype(torch.float64) == torch.float64
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.bool, torch.long):
        assert score_dtype(dt) == torch.float32
    # a float64 mask keeps float64 weights: 1/3 is not rounded to float32's 0.33333334
    mask = torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)
    for mode in ("token-mean", "seq-mean-token-mean"):
        w = loss_weights(mask, mode)
        assert w.dtype == torch.float64 and float(w[0, 0]) == 1 / 3
    assert loss_weights(mask, "token-mean", num_tokens=6).dtype == torch.float64
    assert loss_weights(mask.bool(), "token-mean").dtype == torch.float32


def test_policy_loss_with_sequence_weights_is_the_mean_of_per_sequence_losses():
    from ragen_envs.starpo.core import loss_weights

    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    lp, old, adv = (torch.randn(2, 5, generator=g) * 0.3 for _ in range(3))
    whole, _ = policy_loss(lp, old, adv, loss_weights(mask, "seq-mean-token-mean"), num_tokens=1.0)
    per_seq = [policy_loss(lp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1])[0] for i in range(2)]
    assert float(whole) == pytest.approx(float(sum(per_seq) / 2), rel=1e-6)
    tok, _ = policy_loss(lp, old, adv, loss_weights(mask, "token-mean"), num_tokens=1.0)
    assert float(tok) == pytest.approx(float(policy_loss(lp, old, adv, mask)[0]), rel=1e-6)
