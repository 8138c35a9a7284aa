"""Episode metrics with the reference's definitions, and confidence intervals.

Per episode (``docs/protocol.md`` §6, the reference's §2.8): ``action_is_effective`` and
``action_is_valid`` are averaged over the episode's turns (a turn where nothing ran counts
as 0); ``format_error`` is the fraction of turns whose reply was not well formed. Then every
number is averaged over episodes. Token counts come from ``episode.meta["turns"]`` (what a
model agent recorded) and are summed over the turns of an episode, like the reference's
``response_length``.

Reasoning checks (``info["reasoning"]``, ``docs/protocol.md`` §6): per episode the mean turn
``score``, the fraction of turns whose ``actions_agree`` and the summed ``claims`` /
``claims_true``; :func:`summarize` pools them over all turns of all episodes, like the
trainer's ``rollout_metrics``. Only turns that carry a ``reasoning`` dict count: episodes
recorded without it give None, never zeros. Checks an agent does not produce are None too:
when no reply of the episodes (for :func:`episode_metrics`, of the episode) has a think text
(scripted agents, ``think=False``), there is nothing to check, and the tables show ``–``.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from ..protocol import Episode

__all__ = ["wilson_interval", "episode_metrics", "episode_usage", "summarize", "cost_usd"]


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


# Per-episode reasoning keys; summarize pools them over turns instead of averaging episodes.
REASONING_KEYS = ("reasoning_turns", "reasoning_score", "actions_agree", "claims", "claims_true")


def _has_think(episode: Episode) -> bool:
    """Whether any reply of ``episode`` wrote a think text (the reasoning checks read it); a
    turn whose info does not record the think text (hand-built records) counts as one."""
    return any("think" not in t.info or str(t.info["think"] or "").strip() for t in episode.turns)


def _reasoning_totals(episode: Episode) -> tuple[int, float, int, int, int]:
    """``(turns with a reasoning dict, Σ score, Σ actions_agree, Σ claims, Σ claims_true)``."""
    n, score, agree, claims, true = 0, 0.0, 0, 0, 0
    for t in episode.turns:
        r = t.info.get("reasoning")
        if not isinstance(r, dict):
            continue
        n += 1
        score += float(r.get("score") or 0.0)
        agree += bool(r.get("actions_agree"))
        claims += int(r.get("claims") or 0)
        true += int(r.get("claims_true") or 0)
    return n, score, agree, claims, true


def episode_metrics(episode: Episode) -> dict[str, float | None]:
    """Per-episode numbers that :func:`summarize` averages (the reasoning ones it pools).

    ``reasoning_score`` (mean turn score), ``actions_agree`` (fraction of turns), ``claims``
    and ``claims_true`` (sums) cover the ``reasoning_turns`` turns whose info has a
    ``reasoning`` dict; all None when no turn has one.
    """
    turns = len(episode.turns)
    n, score, agree, claims, true = _reasoning_totals(episode) if _has_think(episode) else (0, 0.0, 0, 0, 0)
    return {
        "success": float(episode.success),
        "return": episode.total_reward,
        "turns": float(turns),
        "actions": float(episode.num_actions),
        "action_is_effective": _turn_mean(episode, "action_is_effective"),
        "action_is_valid": _turn_mean(episode, "action_is_valid"),
        "format_error": sum(not t.info.get("format_ok", False) for t in episode.turns) / max(turns, 1),
        "reasoning_turns": float(n),
        "reasoning_score": score / n if n else None,
        "actions_agree": agree / n if n else None,
        "claims": float(claims) if n else None,
        "claims_true": float(true) if n else None,
    }


def episode_usage(episode: Episode) -> dict[str, float | int | None]:
    """Token counts and latency summed over the turns a model agent recorded.

    ``counted_turns`` says how many turns had a completion-token count (an API may omit
    ``usage``); the sums cover those turns only.
    """
    records = episode.meta.get("turns") or []
    out: dict[str, float | int | None] = {
        "counted_turns": 0, "prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0, "requests": 0,
        "source": None,
    }
    sources = set()
    for rec in records:
        out["requests"] += int(rec.get("attempts") or 1)
        out["latency_s"] += float(rec.get("latency_s") or 0.0)
        usage = rec.get("usage") or {}
        if isinstance(usage.get("completion_tokens"), int):
            out["counted_turns"] += 1
            out["completion_tokens"] += usage["completion_tokens"]
            out["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
            sources.add(rec.get("usage_source") or "api")
    out["source"] = sources.pop() if len(sources) == 1 else ("mixed" if sources else None)
    return out


def cost_usd(prompt_tokens: int, completion_tokens: int, prices: Sequence[float] | None) -> float | None:
    """Dollars for the tokens at ``prices = (USD per 1M prompt tokens, USD per 1M completion tokens)``."""
    if prices is None:
        return None
    return prompt_tokens * float(prices[0]) / 1e6 + completion_tokens * float(prices[1]) / 1e6


def summarize(episodes: Iterable[Episode], prices: Sequence[float] | None = None) -> dict[str, float | int | list[float] | None | str]:
    """Means over episodes, success count, rate and its 95 % Wilson interval.

    When the episodes carry token usage (model agents), also: ``mean_response_tokens`` (the
    reference's ``response_length``: completion tokens per episode, summed over its turns),
    ``mean_response_tokens_per_turn``, token totals, ``mean_latency_s`` per request and, with
    ``prices``, ``cost_usd``.

    Reasoning checks, pooled over every turn with a ``reasoning`` dict (None when none has
    one, or when no reply has a think text): ``reasoning_score`` (mean turn score), ``actions_agree`` (fraction of turns),
    ``claims``, ``claims_true`` (sums) and ``claims_true_rate`` = Σclaims_true / Σclaims
    (None when no claims were made).
    """
    episodes = list(episodes)
    rows = [episode_metrics(e) for e in episodes]
    n = len(rows)
    if n == 0:
        return {"episodes": 0}
    keys: Sequence[str] = [k for k in rows[0] if k not in REASONING_KEYS]
    out: dict[str, float | int | list[float] | None | str] = {"episodes": n}
    for key in keys:
        out[f"mean_{key}"] = sum(r[key] for r in rows) / n
    r_turns, r_score, r_agree, r_claims, r_true = (sum(col) for col in zip(*(_reasoning_totals(e) for e in episodes)))
    if not any(_has_think(e) for e in episodes):  # a check the agent does not produce: None, not 0
        r_turns = r_score = r_agree = r_claims = r_true = 0
    out["reasoning_turns"] = r_turns
    out["reasoning_score"] = r_score / r_turns if r_turns else None
    out["actions_agree"] = r_agree / r_turns if r_turns else None
    out["claims"] = r_claims if r_turns else None
    out["claims_true"] = r_true if r_turns else None
    out["claims_true_rate"] = r_true / r_claims if r_claims else None
    successes = int(sum(r["success"] for r in rows))
    out["successes"] = successes
    out["success_rate"] = successes / n
    out["success_ci95"] = list(wilson_interval(successes, n))
    usages = [episode_usage(e) for e in episodes if e.meta.get("turns")]
    if usages:
        counted = [u for u in usages if u["counted_turns"]]
        turns = sum(u["counted_turns"] for u in counted)
        prompt = sum(u["prompt_tokens"] for u in counted)
        completion = sum(u["completion_tokens"] for u in counted)
        requests = sum(u["requests"] for u in usages)
        n_turns = sum(len(e.turns) for e in episodes if e.meta.get("turns"))
        sources = {u["source"] for u in counted}
        out["mean_response_tokens"] = completion / len(counted) if counted else None
        out["mean_response_tokens_per_turn"] = completion / turns if turns else None
        out["token_count_source"] = sources.pop() if len(sources) == 1 else ("mixed" if sources else None)
        out["turns_with_token_counts"] = turns
        out["prompt_tokens"] = prompt
        out["completion_tokens"] = completion
        out["total_tokens"] = prompt + completion
        out["requests"] = requests
        out["mean_latency_s"] = sum(u["latency_s"] for u in usages) / n_turns if n_turns else None
        out["cost_usd"] = cost_usd(prompt, completion, prices)
    return out
