"""RAGEN-2's collapse metrics and gradient report by reward-variance bucket, as pure functions.

Template collapse (RAGEN-2, "Reasoning Collapse in Agentic RL"): the reasoning Z stays diverse
for each input X (H(Z|X) looks healthy) but no longer depends on X (low I(X;Z)). The reference
(mll-lab-nu/RAGEN 20daedc, ``ragen/trainer/collapse_metrics.py``) estimates both from one
*cross-scoring matrix*: every sampled reasoning z_i scored by the policy under every prompt
x_j of the sample,

    L[i, j] = log p(z_i | x_j)            (summed over z_i's tokens: ``seq``)
    l[i, j] = L[i, j] / max(|z_i|, 1)     (per token)

with X = the prompt up to and including ``<think>`` and Z = the reasoning between the think
tags (tags and special tokens removed, stripped). Column j = one prompt; ``own[i]`` = the
column of z_i's own prompt. Everything below is computed in float64 from those matrices;
the metric names are the reference's (``collapse/...``, re-prefixed per sampling strategy by
:func:`prefix_metrics`).

The gradient report (``gradient_reporter.py`` + ``RolloutFilter.split_into_buckets``): the
kept groups are split by their in-group reward std into buckets (:func:`variance_buckets`),
and for each bucket the gradient norm of each loss component (task, entropy, KL) is measured
without an optimiser step; :func:`bucket_report` names and normalises the numbers.

Nothing here touches a model; ``trainer.py`` builds the matrices and the gradients.
"""

from __future__ import annotations

import math
import re
from typing import Any, Hashable, Sequence

import numpy as np

__all__ = [
    "should_compute", "reasoning_text", "prompt_columns", "log_prob_stats", "mi_estimate", "retrieval_accuracy",
    "reasoning_entropy", "marginal_std", "ema_update", "mi_zscore", "collapse_metrics", "prefix_metrics",
    "first_turn_rows", "trajectory_uniform_pairs", "variance_buckets", "bucket_report", "BUCKET_MODES",
    "COLLAPSE_KEYS", "FIXED_RV_EDGES",
]

COLLAPSE_KEYS = {"compute_freq", "micro_batch_size", "first_turn_enabled", "multi_turn_enabled", "num_samples",
                 "std_eps", "ema_decay"}
"""the keys of the ``collapse_detection`` config field (the reference's ``collapse_detection`` group)"""
BUCKET_MODES = ("quantile", "fixed_rv")
FIXED_RV_EDGES = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
"""fixed_rv buckets: [0, 1), [1, 2), [2, 3), [3, 4), [4, 5), [5, inf) of the group's reward std"""
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def should_compute(step: int, compute_freq: int) -> bool:
    """The reference's schedule on its 1-based ``global_steps`` s: s == 1, then every s with
    s % compute_freq == 0 (never s == 0). Our trainer's step k (0-based) is s = k + 1."""
    s = step + 1
    return s == 1 or (s > 1 and s % compute_freq == 0)


def reasoning_text(response: str, special_tokens: Sequence[str] = ()) -> str:
    """Z of one reply: the text of its first ``<think>...</think>`` (none: ""), with each
    special token string removed, stripped. ``response`` is the reply as the env got it (the
    forced ``<think>`` prefix included)."""
    m = _THINK.search(response)
    text = m.group(1) if m else ""
    for tok in special_tokens:
        if tok:
            text = text.replace(tok, "")
    return text.strip()


def prompt_columns(group_ids: Sequence[int], prompts: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]], list[int]]:
    """Columns of the cross-scoring matrix: one per distinct group id, in increasing id order
    (``np.unique``); returns (each row's column ``own[i]``, each column's prompt, each
    column's group id). A group's prompt is its first row's; another row of the group with a
    different prompt is an error (ValueError), as in the reference."""
    if len(group_ids) != len(prompts):
        raise ValueError(f"{len(group_ids)} group ids but {len(prompts)} prompts")
    gids = sorted({int(g) for g in group_ids})
    col = {g: j for j, g in enumerate(gids)}
    first: dict[int, list[int]] = {}
    for i, (g, p) in enumerate(zip(group_ids, prompts)):
        p = [int(t) for t in p]
        if int(g) not in first:
            first[int(g)] = p
        elif first[int(g)] != p:
            raise ValueError(f"prompt mismatch within group {int(g)} (row {i})")
    return [col[int(g)] for g in group_ids], [first[g] for g in gids], gids


def log_prob_stats(logp: np.ndarray, own: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(matched, marginal) of an (R, N) cross-scoring matrix:

        matched_i  = logp[i, own_i]                               = log p(z_i | x_i)
        marginal_i = logsumexp_j logp[i, j] − log N               = log (1/N) Σ_j p(z_i | x_j)

    the marginal under the uniform mixture of the N prompts (the batch's empirical p(x))."""
    logp = np.asarray(logp, dtype=np.float64)
    R, N = logp.shape
    m = logp.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(logp - m).sum(axis=1, keepdims=True)))[:, 0]
    return logp[np.arange(R), np.asarray(own, dtype=np.int64)], lse - math.log(N)


def mi_estimate(matched: np.ndarray, marginal: np.ndarray, n_prompts: int) -> dict[str, float]:
    """Î(X;Z) = mean_i matched_i − mean_i marginal_i (nats), and its upper bound log N: with N
    equally likely prompts I(X;Z) <= H(X) = log N, and so is every row's term (logsumexp_j
    >= the own column), while the estimate can go below 0 (a reply likelier under other
    prompts than under its own)."""
    a, b = float(np.mean(matched)), float(np.mean(marginal))
    return {"collapse/mi_estimate": a - b, "collapse/mi_upper_bound": math.log(n_prompts),
            "collapse/matched_log_prob_mean": a, "collapse/marginal_log_prob_mean": b}


def retrieval_accuracy(logp: np.ndarray, own: Sequence[int], signatures: Sequence[Hashable] | None = None) -> dict[str, float]:
    """How often a reply "retrieves" its own prompt: the argmax column of its row.

    Without ``signatures`` (one per column): acc = mean_i 1[argmax_j logp[i, j] = own_i], chance
    1/N; acc@k = mean_i 1[own_i among the k best columns], chance k/N, for k in 2, 4, 8 (k
    capped at min(8, N)). With ``signatures``, columns with equal signatures (identical prompt
    texts) count as the same answer: chance = mean_i c(own_i)/N with c the number of columns
    sharing own_i's signature, and chance@k = min(1, chance x k). ``above_chance`` = acc −
    chance. Ties go to the first column (argmax, and a stable sort for the top k; the
    reference's torch.topk orders tied columns in no documented way)."""
    logp = np.asarray(logp, dtype=np.float64)
    R, N = logp.shape
    own = np.asarray(own, dtype=np.int64)
    k_max = min(8, N)
    order = np.argsort(-logp, axis=1, kind="stable")[:, :k_max]
    pred = np.argmax(logp, axis=1)
    out: dict[str, float] = {}
    if signatures is None:
        sig = np.arange(N)
    else:
        if len(signatures) != N:
            raise ValueError(f"{len(signatures)} signatures for {N} columns")
        ids: dict[Hashable, int] = {}
        sig = np.array([ids.setdefault(s, len(ids)) for s in signatures], dtype=np.int64)
    true = sig[own]
    acc = float(np.mean(sig[pred] == true))
    chance = 1.0 / N if signatures is None else float(np.mean(np.bincount(sig)[true] / N))
    for k in (2, 4, 8):
        k_eff = min(k, k_max)
        hit = (sig[order[:, :k_eff]] == true[:, None]).any(axis=1)
        ck = k_eff / N if signatures is None else min(1.0, chance * k_eff)
        out[f"collapse/retrieval_accuracy@{k}"] = float(np.mean(hit))
        out[f"collapse/retrieval_chance_level@{k}"] = ck
        out[f"collapse/retrieval_above_chance@{k}"] = float(np.mean(hit)) - ck
    out.update({"collapse/retrieval_accuracy": acc, "collapse/retrieval_chance_level": chance,
                "collapse/retrieval_above_chance": acc - chance})
    return out


def reasoning_entropy(matched: np.ndarray, marginal: np.ndarray, matched_seq: np.ndarray,
                      marginal_seq: np.ndarray) -> dict[str, float]:
    """Monte Carlo entropies from the sampled replies: H(Z|X) ≈ −mean_i matched_i and
    H(Z) ≈ −mean_i marginal_i (so H(Z) = H(Z|X) + Î(X;Z)); per token from the per-token
    matrix, ``_seq_`` per reply from the summed one (nats)."""
    return {"collapse/conditional_entropy_est": -float(np.mean(matched)),
            "collapse/reasoning_entropy_est": -float(np.mean(marginal)),
            "collapse/conditional_entropy_seq_est": -float(np.mean(matched_seq)),
            "collapse/reasoning_entropy_seq_est": -float(np.mean(marginal_seq))}


def marginal_std(marginal: np.ndarray) -> float:
    """σ = the population std (divide by R) of the R marginals log p_mix(z_i)."""
    return float(np.std(np.asarray(marginal, dtype=np.float64)))


def ema_update(previous: float | None, current: float, decay: float) -> float:
    """The cross-step EMA of σ: the first value as is, then decay x previous + (1 − decay) x current."""
    return current if previous is None else decay * previous + (1.0 - decay) * current


def mi_zscore(matched: np.ndarray, marginal: np.ndarray, std: float, eps: float) -> float:
    """z = mean_i (matched_i − marginal_i) / (σ + eps) = Î(X;Z) / (σ + eps): the MI in units of
    the spread of the marginals (σ this step's, or its EMA)."""
    return float(np.mean((np.asarray(matched) - np.asarray(marginal)) / (std + eps)))


def collapse_metrics(token_logp: np.ndarray, seq_logp: np.ndarray, own: Sequence[int],
                     signatures: Sequence[Hashable] | None, ema: dict[str, float], key: str = "default",
                     std_eps: float = 1e-3, ema_decay: float = 0.9) -> dict[str, float]:
    """All ``collapse/*`` metrics of one sample of (x, z) pairs, from its per-token and summed
    cross-scoring matrices (both R x N): the MI estimate and bound (:func:`mi_estimate`),
    ``mi_seq_estimate`` (the same from the summed matrix), retrieval (:func:`retrieval_accuracy`),
    entropies (:func:`reasoning_entropy`), σ of the marginals, the z-scores with this step's σ
    and with its EMA. ``ema`` holds the EMA state across calls (``key`` and ``key + "/seq"``;
    updated in place). Fewer than 2 columns: {} (nothing to compare)."""
    token_logp = np.asarray(token_logp, dtype=np.float64)
    seq_logp = np.asarray(seq_logp, dtype=np.float64)
    if token_logp.ndim != 2 or token_logp.shape != seq_logp.shape or token_logp.shape[0] != len(own):
        raise ValueError("token_logp and seq_logp must be (rows, prompts) matrices with one own column per row")
    N = token_logp.shape[1]
    if N < 2:
        return {}
    matched, marginal = log_prob_stats(token_logp, own)
    matched_s, marginal_s = log_prob_stats(seq_logp, own)
    out = mi_estimate(matched, marginal, N)
    out["collapse/mi_seq_estimate"] = float(np.mean(matched_s - marginal_s))
    out.update(retrieval_accuracy(token_logp, own, signatures))
    out.update(reasoning_entropy(matched, marginal, matched_s, marginal_s))
    sd, sd_s = marginal_std(marginal), marginal_std(marginal_s)
    out["collapse/marginal_std"], out["collapse/marginal_std_seq"] = sd, sd_s
    out["collapse/mi_zscore"] = mi_zscore(matched, marginal, sd, std_eps)
    out["collapse/mi_zscore_seq"] = mi_zscore(matched_s, marginal_s, sd_s, std_eps)
    ema[key] = e = ema_update(ema.get(key), sd, ema_decay)
    ema[key + "/seq"] = e_s = ema_update(ema.get(key + "/seq"), sd_s, ema_decay)
    out["collapse/marginal_std_ema"], out["collapse/marginal_std_ema_seq"] = e, e_s
    out["collapse/mi_zscore_ema"] = mi_zscore(matched, marginal, e, std_eps)
    out["collapse/mi_zscore_ema_seq"] = mi_zscore(matched_s, marginal_s, e_s, std_eps)
    return out


def prefix_metrics(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    """``collapse/name`` -> ``prefix/name`` (any other key: ``prefix/key``)."""
    return {f"{prefix}/{k.split('/', 1)[1] if k.startswith('collapse/') else k}": v for k, v in metrics.items()}


def first_turn_rows(reasoning_lengths: Sequence[int], num_samples: int | None, rng: np.random.RandomState) -> list[int]:
    """The first-turn sample: the rows whose reasoning is not empty; when ``num_samples`` is
    smaller than their count, ``rng.choice(valid, num_samples, replace=False)`` of them (the
    reference draws the same from numpy's global generator; a ``RandomState`` with the same
    seed gives the same rows)."""
    valid = [i for i, n in enumerate(reasoning_lengths) if n > 0]
    if num_samples is not None and num_samples < len(valid):
        return [int(i) for i in rng.choice(valid, num_samples, replace=False)]
    return valid


def trajectory_uniform_pairs(turn_counts: Sequence[int], num_samples: int | None,
                             rng: np.random.RandomState) -> list[tuple[int, int]]:
    """Trajectory-uniform (trajectory, turn) pairs, P(m, t) = 1/M x 1/T_m: min(num_samples,
    Σ T_m) draws (all = Σ T_m) of m = rng.randint(M) then t = rng.randint(T_m), with
    replacement; a draw landing on a trajectory with no valid turn is dropped (so fewer pairs
    may come back). ``turn_counts[m]`` = T_m, the turns of trajectory m with a non-empty reasoning."""
    M = len(turn_counts)
    if M == 0:
        return []
    total = int(sum(turn_counts))
    n = total if num_samples is None else min(num_samples, total)
    pairs = []
    for _ in range(n):
        m = int(rng.randint(M))
        if turn_counts[m] > 0:
            pairs.append((m, int(rng.randint(turn_counts[m]))))
    return pairs


def variance_buckets(group_std: Sequence[float], num_buckets: int = 6, mode: str = "quantile") -> dict[str, list[int]]:
    """The reward-variance buckets of G groups (positions into ``group_std``), ``all`` first.

    ``quantile``: the groups sorted by std (ascending, stable), cut into n = min(num_buckets, G)
    buckets of ⌊G/n⌋ groups, the remainder going to the last: ``bucket_1`` has the lowest
    reward variance. ``fixed_rv``: ``bucket_i`` = groups with std in FIXED_RV_EDGES' i-th
    interval. Empty buckets are left out. (Equal stds keep their given order; the reference's
    torch.argsort is not stable, so ties on a bucket edge may be cut differently there.)"""
    if mode not in BUCKET_MODES:
        raise ValueError(f"bucket mode must be one of {', '.join(BUCKET_MODES)}, got {mode!r}")
    std = np.asarray(group_std, dtype=np.float64)
    G = len(std)
    out: dict[str, list[int]] = {"all": list(range(G))} if G else {}
    if mode == "fixed_rv":
        for i, low in enumerate(FIXED_RV_EDGES):
            high = FIXED_RV_EDGES[i + 1] if i + 1 < len(FIXED_RV_EDGES) else math.inf
            members = [g for g in range(G) if low <= std[g] < high]
            if members:
                out[f"bucket_{i + 1}"] = members
        return out
    n = min(num_buckets, G)
    if n == 0:
        return out
    order = [int(g) for g in np.argsort(std, kind="stable")]
    per, extra = divmod(G, n)
    start = 0
    for i in range(n):
        size = per + (extra if i == n - 1 else 0)
        out[f"bucket_{i + 1}"] = order[start : start + size]
        start += size
    return out


def bucket_report(bucket: str, sample_count: int, total_samples: int, sample_reward_std: Sequence[float],
                  group_reward_std: Sequence[float], num_tokens: float, grad_norms: dict[str, float],
                  losses: dict[str, float], prefix: str = "grad_norm") -> dict[str, Any]:
    """One bucket's metrics under ``prefix/bucket/``: sample_count, sample_pct (of the
    analysed batch), reward_std_mean (mean of the bucket's group stds), reward_std_min / max
    (over its samples), group_rv_count; for each component c of ``grad_norms`` the norm ‖∇c‖,
    ``per_sample/c`` = ‖∇c‖ / sample_count and ``per_token/c`` = ‖∇c‖ / num_tokens (its
    reply tokens; left out when 0); ``loss/c`` for each of ``losses``."""
    p = f"{prefix}/{bucket}"
    out: dict[str, Any] = {f"{p}/sample_count": sample_count}
    if total_samples > 0:
        out[f"{p}/sample_pct"] = sample_count / total_samples
    out[f"{p}/reward_std_mean"] = float(np.mean(group_reward_std))
    out[f"{p}/reward_std_min"] = float(np.min(sample_reward_std))
    out[f"{p}/reward_std_max"] = float(np.max(sample_reward_std))
    out[f"{p}/group_rv_count"] = len(group_reward_std)
    for c, v in grad_norms.items():
        out[f"{p}/{c}"] = v
        if sample_count > 0:
            out[f"{p}/per_sample/{c}"] = v / sample_count
        if num_tokens > 0:
            out[f"{p}/per_token/{c}"] = v / num_tokens
    for c, v in losses.items():
        out[f"{p}/loss/{c}"] = v
    return out
