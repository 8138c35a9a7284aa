"""Episode metrics with the reference's definitions, and confidence intervals."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from ..protocol import Episode

__all__ = ["wilson_interval", "episode_metrics", "summarize"]


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    centre = (p + z²/2n) / (1 + z²/n), half-width = z / (1 + z²/n) · sqrt(p(1-p)/n + z²/4n²),
    with p = successes / n. Returns (0, 1) for n = 0. z defaults to the 95 % quantile.
    """
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _turn_mean(episode: Episode, key: str) -> float:
    """The reference's per-trajectory metric: sum over turns of float(info[key]) / turns."""
    if not episode.turns:
        return 0.0
    return sum(float(t.info.get(key, 0.0)) for t in episode.turns) / len(episode.turns)


def episode_metrics(episode: Episode) -> dict[str, float]:
    """Per-episode numbers that :func:`summarize` averages."""
    turns = len(episode.turns)
    return {
        "success": float(episode.success),
        "return": episode.total_reward,
        "turns": float(turns),
        "actions": float(episode.num_actions),
        "action_is_effective": _turn_mean(episode, "action_is_effective"),
        "action_is_valid": _turn_mean(episode, "action_is_valid"),
        "format_error": sum(not t.info.get("format_ok", False) for t in episode.turns) / max(turns, 1),
    }


def summarize(episodes: Iterable[Episode]) -> dict[str, float | int | list[float]]:
    """Means over episodes, success count, rate and its 95 % Wilson interval."""
    rows = [episode_metrics(e) for e in episodes]
    n = len(rows)
    if n == 0:
        return {"episodes": 0}
    keys: Sequence[str] = list(rows[0])
    out: dict[str, float | int | list[float]] = {"episodes": n}
    for key in keys:
        out[f"mean_{key}"] = sum(r[key] for r in rows) / n
    successes = int(sum(r["success"] for r in rows))
    out["successes"] = successes
    out["success_rate"] = successes / n
    out["success_ci95"] = list(wilson_interval(successes, n))
    return out
