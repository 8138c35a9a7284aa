"""Noise-aware drop tests for the Echo Trap monitor's success signals (docs/monitor.md).

A ratio-only rule ("the windowed mean is below r x its best") is set in units of the
level, but the noise of a windowed success rate is set by the number of episodes behind
it: at 5-20 % success and 32 episodes a step (multi-turn Sokoban, BENCHMARKS.md#collapse-monitor) the
5-step mean's standard error (~0.04-0.07) is larger than a fifth of its best, so a
ratio of 0.8 fires on noise alone. The rule here also asks the drop to be larger than k
standard errors of the difference: a one-sided two-proportion z test.

Pure functions of numbers; ``EchoTrapMonitor`` (diagnostics.py) keeps the windows.
"""

from __future__ import annotations

import math
from typing import Sequence

# The rule labs/monitor_noise.py chose on the development runs of both corpora (Bandit and
# multi-turn Sokoban, benchmarks/results/2026-12-03-monitor-multiturn-trap.md §13c/§13d)
# by §13c's rule (no development false alarm, then the
# most collapses warned, then the largest lead): the raw rollout success, 5-step windows, below a
# quarter of its best AND 5 standard errors below it. Not the trainer's default (it warned none of
# the Bandit development collapses, which the default warns); pass it as config.monitor for a
# sparse multi-turn task: ``--set monitor=multiturn`` (config.monitor = "multiturn" expands to it).
MULTITURN_MONITOR = {"success_ratio": 0.25, "success_k": 5.0, "success_window": 5, "valid_success_ratio": None,
                     "alarm": ("success_drop",)}


def _check_counts(rates: Sequence[float], counts: Sequence[float]) -> None:
    if len(rates) != len(counts):
        raise ValueError(f"{len(rates)} rates but {len(counts)} counts")
    if not rates:
        raise ValueError("need at least one step in the window")
    for p, n in zip(rates, counts):
        if not (isinstance(n, (int, float)) and math.isfinite(n) and n > 0):
            raise ValueError(f"episode counts must be finite numbers > 0, got {n!r}")
        if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
            raise ValueError(f"success rates must lie in [0, 1], got {p!r}")


def effective_count(counts: Sequence[float]) -> float:
    """The number of episodes behind the unweighted mean of w per-step rates.

    With m = (1/w) Σ p_i and step i's rate from n_i episodes at a common success
    probability p, Var(m) = (1/w²) Σ p(1-p)/n_i = p(1-p) / N_eff, so

        N_eff = w² / Σ_i (1/n_i)

    (the sum of the n_i when they are equal; smaller when they differ).
    """
    if not counts:
        raise ValueError("need at least one step in the window")
    for n in counts:
        if not (isinstance(n, (int, float)) and math.isfinite(n) and n > 0):
            raise ValueError(f"episode counts must be finite numbers > 0, got {n!r}")
    w = len(counts)
    return w * w / sum(1.0 / n for n in counts)


def window_stat(rates: Sequence[float], counts: Sequence[float]) -> tuple[float, float]:
    """(m, N_eff) of one window: the unweighted mean m = (1/w) Σ p_i of the per-step
    success rates and its :func:`effective_count` N_eff = w² / Σ 1/n_i."""
    _check_counts(rates, counts)
    return sum(rates) / len(rates), effective_count(counts)


def drop_z(best: float, n_best: float, current: float, n_current: float) -> float:
    """The one-sided two-proportion z statistic of a fall from ``best`` to ``current``.

    With b from N_b episodes and m from N_m, pooled p = (b N_b + m N_m) / (N_b + N_m):

        z = (b - m) / sqrt(p (1 - p) (1/N_b + 1/N_m))

    (+inf when b > m and p(1 - p) = 0, which cannot happen for 0 <= m < b <= 1; 0 when b <= m
    and the pooled variance is 0). Large z: the fall is unlikely under one common rate.
    The best window is the largest of many, so under no change z is biased upwards: the
    threshold k is chosen on recorded runs, not read off a normal table.
    """
    for name, v in (("best", best), ("current", current)):
        if not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
            raise ValueError(f"{name} must be a rate in [0, 1], got {v!r}")
    for name, n in (("n_best", n_best), ("n_current", n_current)):
        if not (isinstance(n, (int, float)) and math.isfinite(n) and n > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {n!r}")
    pooled = (best * n_best + current * n_current) / (n_best + n_current)
    var = pooled * (1.0 - pooled) * (1.0 / n_best + 1.0 / n_current)
    diff = best - current
    if var <= 0.0:
        return math.inf if diff > 0 else 0.0
    return diff / math.sqrt(var)


def significant_drop(best: float, n_best: float, current: float, n_current: float, ratio: float,
                     k: float) -> bool:
    """Whether ``current`` fell from ``best`` by a fraction AND by more than noise:

        current < ratio · best   and   drop_z(best, n_best, current, n_current) > k

    k = 0 keeps only the ratio (any fall below it counts); a larger k asks the fall to be
    k standard errors of the difference (a one-sided two-proportion test at level
    1 - Φ(k) for a fixed, not a selected, best).
    """
    if not (isinstance(ratio, (int, float)) and 0 < ratio < math.inf):
        raise ValueError(f"ratio must be a positive number, got {ratio!r}")
    if not (isinstance(k, (int, float)) and 0 <= k < math.inf):
        raise ValueError(f"k must be a number >= 0, got {k!r}")
    if not (best > 0 and current < ratio * best):
        return False
    return drop_z(best, n_best, current, n_current) > k
