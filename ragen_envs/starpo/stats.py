"""Small statistics for comparing two policies on the same evaluation episodes.

Two models evaluated on the same seeds with the same sampling stream give *paired*
outcomes; the discordant pairs carry the whole difference. :func:`mcnemar_exact` is the
exact (binomial, sign-test) McNemar test on them; :func:`paired_counts` tallies them;
:func:`bootstrap_diff_ci` is a percentile bootstrap of the mean paired difference;
:func:`sign_flip_p` tests per-item mean differences (e.g. a seed's success averaged over
several sampling streams), the unit being the item, not the episode.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["paired_counts", "mcnemar_exact", "bootstrap_diff_ci", "sign_flip_p"]


def paired_counts(a: Sequence[bool], b: Sequence[bool]) -> dict[str, int]:
    """Tally paired binary outcomes: ``both``, ``only_a``, ``only_b``, ``neither``."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}")
    out = {"both": 0, "only_a": 0, "only_b": 0, "neither": 0}
    for x, y in zip(a, b):
        out["both" if x and y else "only_a" if x else "only_b" if y else "neither"] += 1
    return out


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value (the sign test on the discordant pairs).

    With n = only_a + only_b discordant pairs and k = min(only_a, only_b), under H0 each
    discordant pair favours either side with probability 1/2:
    p = min(1, 2 · Σ_{i<=k} C(n, i) / 2^n); p = 1 when n = 0.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError(f"counts must be >= 0, got {only_a} and {only_b}")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    # log-space sum: exact enough for n in the thousands
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2) for i in range(k + 1)]
    top = max(logs)
    tail = math.exp(top) * sum(math.exp(x - top) for x in logs)
    return min(1.0, 2.0 * tail)


def bootstrap_diff_ci(a: Sequence[float], b: Sequence[float], *, strata: Sequence[int] | None = None,
                      resamples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(b - a) over paired items.

    Pairs are resampled with replacement (inside each stratum when ``strata`` is given, e.g.
    the training seed, so every resample keeps each seed's share); ``seed`` seeds a private
    generator.
    """
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.shape != b_arr.shape or a_arr.ndim != 1 or len(a_arr) == 0:
        raise ValueError(f"need two equal-length non-empty sequences, got {a_arr.shape} and {b_arr.shape}")
    diff = b_arr - a_arr
    groups = np.zeros(len(diff), dtype=int) if strata is None else np.asarray(strata)
    rng = np.random.default_rng(seed)
    means = np.zeros(resamples)
    for g in np.unique(groups):
        d = diff[groups == g]
        idx = rng.integers(0, len(d), size=(resamples, len(d)))
        means += d[idx].sum(axis=1)
    means /= len(diff)
    alpha = (1.0 - level) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def sign_flip_p(diffs: Sequence[float], *, resamples: int = 100_000, seed: int = 0, exact_up_to: int = 20) -> float:
    """Two-sided paired randomization (sign-flip) p-value of H0: each item's difference is
    as likely to be -d as +d.

    With D = |Σ d_i| over the n items with d_i != 0: p = #{s in {-1,+1}^n : |Σ s_i d_i| >= D} / 2^n,
    enumerated when n <= ``exact_up_to``; otherwise (1 + #{r : |Σ s_ri d_i| >= D}) / (1 + R)
    over ``resamples`` R sign vectors from a generator seeded with ``seed``. For ±1 differences
    (one sampling stream of binary outcomes) it is the exact McNemar p-value. p = 1 when every
    difference is 0.
    """
    d = np.asarray(diffs, dtype=float)
    if d.ndim != 1 or not np.all(np.isfinite(d)):
        raise ValueError(f"diffs must be a 1-D sequence of finite numbers, got shape {d.shape}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    d = d[d != 0]
    n = len(d)
    if n == 0:
        return 1.0
    observed = abs(d.sum()) * (1 - 1e-12)  # ties count as "at least as extreme" despite rounding
    if n <= exact_up_to:  # every pattern, 2^16 at a time (bounded memory)
        hits = 0
        for start in range(0, 2**n, 2**16):
            codes = np.arange(start, min(2**n, start + 2**16), dtype=np.int64)
            signs = 1 - 2 * ((codes[:, None] >> np.arange(n)) & 1)
            hits += int(np.sum(np.abs(signs @ d) >= observed))
        return hits / 2**n
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, resamples, 10_000):
        m = min(10_000, resamples - start)
        signs = rng.integers(0, 2, size=(m, n)) * 2 - 1
        hits += int(np.sum(np.abs(signs @ d) >= observed))
    return (1 + hits) / (1 + resamples)
