"""Paired statistics of ragen_envs.starpo.stats and the demo's paired comparison."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from ragen_envs.starpo.stats import bootstrap_diff_ci, mcnemar_exact, paired_counts, sign_flip_p


def _exact_sign_test(a: int, b: int) -> float:
    """Integer arithmetic: min(1, 2 * sum_{i<=min} C(n, i) / 2^n)."""
    n = a + b
    tail = Fraction(sum(comb(n, i) for i in range(min(a, b) + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def test_mcnemar_exact_hand_values():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 1024)  # 0.021484375
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact(9, 14) == mcnemar_exact(14, 9)


@pytest.mark.parametrize("a,b", [(9, 14), (12, 30), (40, 71), (300, 360), (0, 1)])
def test_mcnemar_exact_matches_integer_arithmetic(a, b):
    assert mcnemar_exact(a, b) == pytest.approx(_exact_sign_test(a, b), rel=1e-9)


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def test_paired_counts_and_length_check():
    a = [True, True, False, False, True]
    b = [True, False, True, False, True]
    assert paired_counts(a, b) == {"both": 2, "only_a": 1, "only_b": 1, "neither": 1}
    with pytest.raises(ValueError):
        paired_counts([True], [True, False])


def test_bootstrap_diff_ci_brackets_the_difference_and_is_seeded():
    a = [i % 3 == 0 for i in range(300)]
    b = [i % 2 == 0 for i in range(300)]
    diff = (sum(b) - sum(a)) / 300
    lo, hi = bootstrap_diff_ci(a, b, seed=1)
    assert lo < diff < hi and hi - lo < 0.2
    assert bootstrap_diff_ci(a, b, seed=1) == (lo, hi)
    assert bootstrap_diff_ci(a, a) == (0.0, 0.0)
    strata = [i // 100 for i in range(300)]
    slo, shi = bootstrap_diff_ci(a, b, strata=strata, seed=1)
    assert slo < diff < shi
    with pytest.raises(ValueError):
        bootstrap_diff_ci([1.0], [1.0, 0.0])


def test_demo_paired_comparison():
    from ragen_envs.starpo.demo import paired_comparison

    sft = [True] * 150 + [False] * 106
    rl = [True] * 140 + [False] * 10 + [True] * 30 + [False] * 76
    out = paired_comparison(sft, rl)
    assert (out["both"], out["only_sft"], out["only_starpo_s"], out["neither"]) == (140, 10, 30, 76)
    assert out["mcnemar_p"] == pytest.approx(_exact_sign_test(10, 30))
    assert out["mcnemar_p"] < 0.05


def test_sign_flip_p_hand_values():
    assert sign_flip_p([1, 1, 1]) == pytest.approx(2 / 8)  # only all + and all - reach |sum| 3
    assert sign_flip_p([1, 1, 1, 1, 1, 0, 0]) == pytest.approx(2 / 32)  # zeros carry no sign
    # +-1 +-0.5 +-0.5: sums 2, 1, 1, 0, 0, -1, -1, -2; six of eight have |sum| >= 1
    assert sign_flip_p([1, 0.5, -0.5]) == pytest.approx(6 / 8)
    assert sign_flip_p([0, 0]) == 1.0 and sign_flip_p([]) == 1.0


@pytest.mark.parametrize("a,b", [(1, 9), (0, 6), (5, 5), (7, 12)])
def test_sign_flip_p_of_one_binary_stream_is_mcnemar(a, b):
    assert sign_flip_p([-1] * a + [1] * b + [0] * 30) == pytest.approx(mcnemar_exact(a, b))


def test_sign_flip_p_monte_carlo_is_seeded_and_near_the_exact_value():
    d = [1.0] * 12 + [-1.0] * 5 + [0.5] * 4  # 21 items: above exact_up_to
    mc = sign_flip_p(d, resamples=40_000, seed=3)
    assert mc == sign_flip_p(d, resamples=40_000, seed=3)
    assert mc == pytest.approx(sign_flip_p(d, exact_up_to=21), abs=0.01)
    assert sign_flip_p([1.0] * 30, resamples=999) == pytest.approx(1 / 1000)  # 2 of 2^30 patterns: none drawn
    with pytest.raises(ValueError, match="finite"):
        sign_flip_p([1.0, float("nan")])
