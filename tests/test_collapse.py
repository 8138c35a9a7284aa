"""RAGEN-2's collapse metrics and gradient report (ragen_envs/starpo/collapse.py): hand-computed
cases, and the reference's own numbers on recorded random inputs.

tests/fixtures/ragen2/collapse.json.gz was made by record_collapse.py beside it, which runs
mll-lab-nu/RAGEN@20daedc's CollapseDetector._compute_metrics_for_pairs (its cross-scoring forward
replaced by recorded per-token and summed matrices, three successive calls so the EMA carries),
_sample_trajectory_uniform (numpy's global generator seeded), RolloutFilter.split_into_buckets
and gradient_reporter._run_gradient_pass (an actor returning recorded metrics).
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_envs.starpo import collapse as C

FIXTURE = json.loads(gzip.decompress((Path(__file__).parent / "fixtures" / "ragen2" / "collapse.json.gz").read_bytes()))


def _close(a: float, b: float, tol: float = 2e-5) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


# ---------------------------------------------------------------- hand-computed cases
def test_log_prob_stats_by_hand():
    # two replies, two prompts: p(z0|x0) = 1/2, p(z0|x1) = 1/4 -> mixture 3/8
    L = np.log([[0.5, 0.25], [0.1, 0.1]])
    matched, marginal = C.log_prob_stats(L, [0, 1])
    assert np.allclose(matched, np.log([0.5, 0.1]))
    assert np.allclose(marginal, np.log([0.375, 0.1]))


def test_mi_estimate_and_bound_by_hand():
    L = np.log([[0.5, 0.25], [0.1, 0.1]])
    m = C.mi_estimate(*C.log_prob_stats(L, [0, 1]), n_prompts=2)
    # I = mean(log(0.5/0.375), log(0.1/0.1)) = log(4/3) / 2
    assert _close(m["collapse/mi_estimate"], math.log(4 / 3) / 2, 1e-12)
    assert m["collapse/mi_upper_bound"] == math.log(2)
    # a perfectly separating policy on N prompts reaches the bound log N
    N = 5
    L = np.where(np.eye(N, dtype=bool), 0.0, -1e6)
    assert _close(C.mi_estimate(*C.log_prob_stats(L, range(N)), N)["collapse/mi_estimate"], math.log(N), 1e-9)
    # template collapse: every prompt gives each reply the same probability -> 0
    L = np.tile(np.array([[-3.0], [-1.0], [-2.0]]), (1, 4))
    assert _close(C.mi_estimate(*C.log_prob_stats(L, [0, 1, 2]), 4)["collapse/mi_estimate"], 0.0, 1e-12)


def test_entropies_by_hand():
    L = np.log([[0.5, 0.25], [0.1, 0.1]])
    matched, marginal = C.log_prob_stats(L, [0, 1])
    e = C.reasoning_entropy(matched, marginal, 2 * matched, 2 * marginal)
    assert _close(e["collapse/conditional_entropy_est"], -(math.log(0.5) + math.log(0.1)) / 2, 1e-12)
    assert _close(e["collapse/reasoning_entropy_est"], -(math.log(0.375) + math.log(0.1)) / 2, 1e-12)
    # H(Z) = H(Z|X) + I(X;Z)
    mi = C.mi_estimate(matched, marginal, 2)["collapse/mi_estimate"]
    assert _close(e["collapse/reasoning_entropy_est"], e["collapse/conditional_entropy_est"] + mi, 1e-12)
    assert _close(e["collapse/conditional_entropy_seq_est"], 2 * e["collapse/conditional_entropy_est"], 1e-12)


def test_retrieval_by_hand():
    L = np.array([[-1.0, -2.0, -3.0],   # own 0: top-1 hit
                  [-1.0, -2.0, -3.0],   # own 1: top-2 hit
                  [-1.0, -2.0, -3.0],   # own 2: miss at 1 and 2, hit at 3 columns
                  [-5.0, -4.0, -0.5]])  # own 2: hit
    r = C.retrieval_accuracy(L, [0, 1, 2, 2])
    assert r["collapse/retrieval_accuracy"] == 0.5
    assert r["collapse/retrieval_chance_level"] == 1 / 3
    assert _close(r["collapse/retrieval_above_chance"], 0.5 - 1 / 3, 1e-12)
    assert r["collapse/retrieval_accuracy@2"] == 0.75 and r["collapse/retrieval_chance_level@2"] == 2 / 3
    # k capped at N = 3: every reply retrieved, chance 1
    assert r["collapse/retrieval_accuracy@8"] == 1.0 and r["collapse/retrieval_chance_level@8"] == 1.0
    # columns 0 and 1 are the same prompt text: predicting either is right for both
    s = C.retrieval_accuracy(L, [0, 1, 2, 2], signatures=["a", "a", "b"])
    assert s["collapse/retrieval_accuracy"] == 0.75
    # chance: rows own 0, 1 -> 2/3 each; rows own 2 -> 1/3 each
    assert _close(s["collapse/retrieval_chance_level"], 0.5, 1e-12)
    assert s["collapse/retrieval_chance_level@2"] == pytest.approx(1.0)  # min(1, 0.5 x 2)


def test_zscore_and_ema_by_hand():
    matched = np.array([0.0, -1.0, -2.0])
    marginal = np.array([-1.0, -1.0, -4.0])  # differences 1, 0, 2 -> mean 1
    sd = C.marginal_std(marginal)
    assert _close(sd, math.sqrt(2.0), 1e-12)  # population std of (-1, -1, -4): mean -2, var (1+1+4)/3
    assert _close(C.mi_zscore(matched, marginal, sd, 0.0), 1 / math.sqrt(2.0), 1e-12)
    assert C.ema_update(None, 4.0, 0.9) == 4.0
    assert _close(C.ema_update(4.0, 2.0, 0.9), 3.8, 1e-12)


def test_collapse_metrics_keeps_ema_across_calls_and_needs_two_prompts():
    ema: dict = {}
    L = np.log([[0.5, 0.25], [0.1, 0.1]])
    first = C.collapse_metrics(L, 3 * L, [0, 1], None, ema, key="k")
    second = C.collapse_metrics(L + [[0.0, -1.0], [0.0, 0.0]], 3 * L, [0, 1], None, ema, key="k", ema_decay=0.5)
    assert first["collapse/marginal_std_ema"] == first["collapse/marginal_std"]
    assert _close(second["collapse/marginal_std_ema"],
                  0.5 * first["collapse/marginal_std"] + 0.5 * second["collapse/marginal_std"], 1e-12)
    assert set(ema) == {"k", "k/seq"}
    assert C.collapse_metrics(np.zeros((3, 1)), np.zeros((3, 1)), [0, 0, 0], None, {}) == {}


def test_schedule_is_the_references_on_one_based_steps():
    # reference global_steps 1, 5, 10, ... = our steps 0, 4, 9, ...
    assert [k for k in range(12) if C.should_compute(k, 5)] == [0, 4, 9]
    assert [k for k in range(4) if C.should_compute(k, 1)] == [0, 1, 2, 3]


def test_reasoning_text_and_columns():
    assert C.reasoning_text("<think> go left <|im_end|></think><answer>Left</answer>", ["<|im_end|>"]) == "go left"
    assert C.reasoning_text("<think>no closing tag <answer>Left</answer>") == ""
    own, prompts, gids = C.prompt_columns([9, 2, 9], [[1, 2], [3], [1, 2]])
    assert own == [1, 0, 1] and prompts == [[3], [1, 2]] and gids == [2, 9]
    with pytest.raises(ValueError, match="prompt mismatch within group 9"):
        C.prompt_columns([9, 9], [[1], [2]])


def test_sampling_by_hand():
    assert C.first_turn_rows([0, 3, 1, 0], None, np.random.RandomState(0)) == [1, 2]
    rows = C.first_turn_rows([1, 1, 1, 1, 1], 2, np.random.RandomState(0))
    assert len(rows) == 2 and len(set(rows)) == 2
    assert C.trajectory_uniform_pairs([], None, np.random.RandomState(0)) == []
    pairs = C.trajectory_uniform_pairs([0, 2], None, np.random.RandomState(1))
    assert all(m == 1 and 0 <= t < 2 for m, t in pairs) and len(pairs) <= 2


def test_buckets_by_hand():
    std = [0.3, 0.0, 2.5, 0.1, 0.7, 5.0, 1.0]
    b = C.variance_buckets(std, 3, "quantile")
    # sorted: 1 (0.0), 3 (0.1), 0 (0.3), 4 (0.7), 6 (1.0), 2 (2.5), 5 (5.0); 7 // 3 = 2, remainder 1 to the last
    assert b == {"all": list(range(7)), "bucket_1": [1, 3], "bucket_2": [0, 4], "bucket_3": [6, 2, 5]}
    assert C.variance_buckets([0.1, 0.2], 6, "quantile") == {"all": [0, 1], "bucket_1": [0], "bucket_2": [1]}
    f = C.variance_buckets(std, 6, "fixed_rv")
    assert f == {"all": list(range(7)), "bucket_1": [0, 1, 3, 4], "bucket_2": [6], "bucket_3": [2], "bucket_6": [5]}
    with pytest.raises(ValueError, match="bucket mode"):
        C.variance_buckets(std, 6, "equal")


def test_bucket_report_by_hand():
    r = C.bucket_report("bucket_1", 4, 16, [0.5, 0.5, 1.5, 1.5], [0.5, 1.5], 20.0,
                        {"task": 2.0, "entropy": 0.1}, {"policy": -0.3, "total": -0.2})
    assert r["grad_norm/bucket_1/sample_pct"] == 0.25
    assert r["grad_norm/bucket_1/reward_std_mean"] == 1.0 and r["grad_norm/bucket_1/reward_std_max"] == 1.5
    assert r["grad_norm/bucket_1/per_sample/task"] == 0.5 and r["grad_norm/bucket_1/per_token/task"] == 0.1
    assert r["grad_norm/bucket_1/loss/policy"] == -0.3 and r["grad_norm/bucket_1/group_rv_count"] == 2
    assert "grad_norm/bucket_1/per_token/task" not in C.bucket_report("bucket_1", 4, 16, [0.5], [0.5], 0, {"task": 1.0}, {})


@st.composite
def _matrices(draw):
    rows, cols = draw(st.integers(1, 6)), draw(st.integers(2, 6))
    vals = st.floats(-50.0, 0.0, allow_nan=False)
    L = np.array(draw(st.lists(st.lists(vals, min_size=cols, max_size=cols), min_size=rows, max_size=rows)))
    own = draw(st.lists(st.integers(0, cols - 1), min_size=rows, max_size=rows))
    return L, own


@settings(max_examples=60, deadline=None)
@given(_matrices())
def test_properties(case):
    L, own = case
    N = L.shape[1]
    m = C.collapse_metrics(L, 3 * L, own, None, {})
    assert m["collapse/mi_estimate"] <= math.log(N) + 1e-9  # every row's log ratio is <= log N
    assert m["collapse/reasoning_entropy_est"] == pytest.approx(
        m["collapse/conditional_entropy_est"] + m["collapse/mi_estimate"], abs=1e-9)
    accs = [m["collapse/retrieval_accuracy"]] + [m[f"collapse/retrieval_accuracy@{k}"] for k in (2, 4, 8)]
    assert all(0 <= a <= 1 for a in accs) and accs == sorted(accs)
    # the same prompt in every column: nothing to retrieve, chance 1
    same = C.retrieval_accuracy(L, own, signatures=["x"] * N)
    assert same["collapse/retrieval_accuracy"] == 1.0 and same["collapse/retrieval_chance_level"] == pytest.approx(1.0)


# ---------------------------------------------------------------- the reference's numbers
@pytest.mark.parametrize("i", range(len(FIXTURE["collapse"])))
def test_collapse_metrics_match_the_reference(i):
    case = FIXTURE["collapse"][i]
    own, prompts, _ = C.prompt_columns(case["group_ids"], case["prompt_ids"])
    sigs = [tuple(p) for p in prompts]
    ema: dict = {}
    for call, expected in zip(case["calls"], case["expected"]):
        # the reference's matrices are float32
        tok = np.asarray(call["token_mean"], dtype=np.float32)
        seq = np.asarray(call["seq_sum"], dtype=np.float32)
        got = C.collapse_metrics(tok, seq, own, sigs, ema, key="k", std_eps=case["std_eps"], ema_decay=case["ema_decay"])
        assert set(got) == set(expected)
        for key, v in expected.items():
            # the z-scores divide by a spread that can be ~1e-4 in the collapsed cases (float32 there)
            tol = 2e-3 if "zscore" in key else 2e-5
            assert _close(got[key], v, tol), (key, got[key], v)


def test_fixture_covers_duplicate_prompts_and_collapse():
    cases = FIXTURE["collapse"]
    assert any(len({tuple(p) for p in c["prompt_ids"]}) < len(set(c["group_ids"])) for c in cases)
    assert any(c["expected"][0]["collapse/mi_estimate"] < 1e-3 for c in cases)
    assert any(c["expected"][0]["collapse/retrieval_accuracy"] > 0.5 for c in cases)
    # no ties inside a row: torch.topk orders tied columns in no documented way
    for c in cases:
        for call in c["calls"]:
            assert all(len(set(row)) == len(row) for row in call["token_mean"])


def test_ties_go_to_the_first_column():
    L = np.array([[-1.0, -1.0, -1.0]])
    assert C.retrieval_accuracy(L, [0])["collapse/retrieval_accuracy"] == 1.0
    assert C.retrieval_accuracy(L, [1])["collapse/retrieval_accuracy"] == 0.0
    assert C.retrieval_accuracy(L, [1])["collapse/retrieval_accuracy@2"] == 1.0
    assert C.retrieval_accuracy(L, [2])["collapse/retrieval_accuracy@2"] == 0.0


@pytest.mark.parametrize("i", range(len(FIXTURE["trajectory_sampling"])))
def test_trajectory_uniform_pairs_match_the_reference(i):
    case = FIXTURE["trajectory_sampling"][i]
    pairs = C.trajectory_uniform_pairs(case["turn_counts"], case["num_samples"], np.random.RandomState(case["seed"]))
    assert [list(p) for p in pairs] == case["pairs"]


@pytest.mark.parametrize("i", range(len(FIXTURE["buckets"])))
def test_buckets_and_report_match_the_reference(i):
    case = FIXTURE["buckets"][i]
    std = np.asarray(case["group_reward_std"], dtype=np.float32)
    N = case["group_size"]
    # the reference's groups in increasing group-id order (torch.unique)
    order = np.argsort(case["group_ids"])
    buckets = C.variance_buckets(std[order], case["bucket_count"], case["mode"])
    assert list(buckets) == list(case["buckets"])
    rows_of = {pos: [int(order[pos]) * N + j for j in range(N)] for pos in range(len(order))}
    mask = np.asarray(case["response_mask"])
    expected = case["expected"]
    got: dict = {}
    for name, groups in buckets.items():
        rec = case["buckets"][name]
        rows = sorted(r for g in groups for r in rows_of[g])
        assert rows == rec["rows"]
        gstd = [float(std[order[g]]) for g in groups]
        assert sorted(gstd) == pytest.approx(sorted(rec["reward_std_values"]))
        m = case["actor_metrics"][name]
        norms = {k.split("/", 2)[2]: float(np.mean(v)) for k, v in m.items() if k.startswith("actor/grad_norm/")}
        losses = {k.split("/", 2)[2]: float(np.mean(v)) for k, v in m.items() if k.startswith("actor/loss/")}
        got.update(C.bucket_report(name, len(rows), len(std) * N, [float(std[r // N]) for r in rows], gstd,
                                   float(mask[rows].sum()), norms, losses))
    assert set(got) == set(expected)
    for key, v in expected.items():
        assert _close(got[key], v, 1e-6), (key, got[key], v)
