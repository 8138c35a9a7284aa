"""RAGEN-2's rollout filter ("SNR-adaptive filtering"), rule for rule.

The reference (mll-lab-nu/RAGEN at 20daedc, ``ragen/trainer/rollout_filter.py`` and the
filter / loss-scaling / early-stop parts of ``agent_trainer.py``) filters whole groups (the
rollouts of one initial state) before the update in three steps, each a pure function here:

1. :func:`group_scores` — one score per group from a *metric* of its rollouts;
2. :func:`select_groups` — which groups a *strategy* keeps given the scores;
3. :func:`filter_loss_scale` — the factor the kept batch's advantages are multiplied by, and
   :func:`empty_streak` — the count of consecutive steps that kept nothing (the run stops when
   it reaches ``rollout_filter_empty_stop_steps``).

Numbers follow the reference's float32 arithmetic (its scores are float32 tensors), so that
boundary cases (a cumulative sum that just reaches its threshold) fall the same way; the
recorded fixture ``tests/fixtures/ragen2_rollout_filter.json`` pins them. The one thing left
open is which of several *equally* scored groups a cut keeps: the reference leaves that to
``torch.sort`` / ``topk``; here ties go to the lower group index.

This is separate from StarPO-S's :func:`~.core.uncertainty_filter` (``filter_mode`` /
``keep_ratio``), which the trainer uses unless ``rollout_filter_strategy`` is set.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

__all__ = [
    "STRATEGIES",
    "METRICS",
    "FILTER_TYPES",
    "TOP_P_MODES",
    "LOSS_SCALINGS",
    "trajectory_mean_entropy",
    "group_scores",
    "select_groups",
    "filter_loss_scale",
    "empty_streak",
]

STRATEGIES = ("top_p", "top_k", "top_k_abs", "min_p")
METRICS = ("reward_variance", "reward", "reward_sum", "entropy", "entropy_variance", "length")
FILTER_TYPES = ("largest", "smallest")
TOP_P_MODES = ("linear", "softmax")
LOSS_SCALINGS = ("none", "linear", "sqrt")

_ZERO = 1e-10  # |score| <= this counts as zero (include_zero=False drops such groups)


def trajectory_mean_entropy(token_entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-rollout mean token entropy (B,) of (B, T) token entropies over the policy's tokens:
    Σ_t H_bt·m_bt / max(Σ_t m_bt, 1) (a rollout with no sampled token scores 0)."""
    mask = mask.to(token_entropy.dtype)
    return (token_entropy * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def group_scores(metric: str, rewards: torch.Tensor | None = None, entropies: torch.Tensor | None = None,
                 lengths: torch.Tensor | None = None) -> torch.Tensor:
    """One float32 score per group from (G, N) per-rollout numbers (row g = group g's N rollouts):

    - ``reward_variance``: the sample std (n - 1) of the rollouts' returns — despite the name,
      the reference ranks by the standard deviation, not the variance;
    - ``reward``: their mean; ``reward_sum``: their sum;
    - ``entropy`` / ``entropy_variance``: mean / sample std of the rollouts' mean token entropy
      (:func:`trajectory_mean_entropy`), ``entropies``;
    - ``length``: the mean number of policy tokens per rollout, ``lengths``.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown rollout filter metric {metric!r}; choose one of {', '.join(METRICS)}")
    source = {"reward": rewards, "entropy": entropies, "length": lengths}[metric.split("_")[0]]
    name = {"reward": "rewards", "entropy": "entropies", "length": "lengths"}[metric.split("_")[0]]
    if source is None:
        raise ValueError(f"metric {metric!r} needs {name}")
    x = torch.as_tensor(source).to(torch.float32)
    if x.dim() != 2:
        raise ValueError(f"{name} must be (groups, group_size), got shape {tuple(x.shape)}")
    if metric in ("reward_variance", "entropy_variance"):
        return x.std(dim=-1)
    if metric == "reward_sum":
        return x.sum(dim=-1)
    return x.mean(dim=-1)


def _ranked(scores: torch.Tensor, candidates: list[int], descending: bool) -> list[int]:
    """``candidates`` ordered by score (descending or ascending), ties to the lower index."""
    sign = -1.0 if descending else 1.0
    return sorted(candidates, key=lambda g: (sign * float(scores[g]), g))


def select_groups(scores: Sequence[float] | torch.Tensor, strategy: str = "top_p", value: float = 1.0,
                  filter_type: str = "largest", include_zero: bool = True, top_p_prob_mode: str = "linear",
                  selection_eps: float = 0.01) -> tuple[int, ...]:
    """The groups (ascending indices) the reference keeps given one score per group.

    ``include_zero=False`` first drops every group with |score| <= 1e-10 (nothing left: keep
    nothing). Among the remaining candidates C (n = |C|, G = all groups), with "best" meaning
    the largest scores for ``filter_type="largest"`` and the smallest for ``"smallest"``:

    - ``top_p``, ``value >= 1``: keep all of C.
    - ``top_p`` ``linear``: walk C best first, adding each score to a running sum s, until
      s >= T = value·Σ_C scores - ``selection_eps``; stop early (and add nothing) at a score
      <= 0. Keep the walked groups if s reached T, else keep nothing — so a batch whose
      scores sum to <= 0 (every group zero-variance, say) keeps nothing, and so does one whose
      positive mass cannot reach T.
    - ``top_p`` ``softmax``: p = softmax(score) (of -score for smallest); keep the k most
      probable, k = 1 + the first position where the cumulative p reaches ``value`` (at most n).
    - ``top_k``: keep the best k = max(1, min(int(value·G), n)) — a fraction of *all* groups.
    - ``top_k_abs``: the best k = max(1, min(int(value), n)).
    - ``min_p``: largest: every score >= value·max_C - 1e-10; smallest: every score
      <= min_C / (value + 1e-10) + 1e-10.

    >>> select_groups([0.5, 0.0, 0.4, 0.1], "top_p", 0.9)  # T = 0.9·1.0 - 0.01 = 0.89: 0.5 + 0.4 >= T
    (0, 2)
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown rollout filter strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if filter_type not in FILTER_TYPES:
        raise ValueError(f"rollout filter type must be largest or smallest, got {filter_type!r}")
    if top_p_prob_mode not in TOP_P_MODES:
        raise ValueError(f"top_p_prob_mode must be linear or softmax, got {top_p_prob_mode!r}")
    s = torch.as_tensor(scores).to(torch.float32).reshape(-1)
    G = s.numel()
    cands = [g for g in range(G) if include_zero or abs(float(s[g])) > _ZERO]
    if not cands:
        return ()
    sub = s[cands]  # the candidates' scores (the reference sums and normalises over these)
    largest = filter_type == "largest"
    if strategy == "top_p":
        if value >= 1.0:
            return tuple(cands)
        if top_p_prob_mode == "softmax":
            probs = torch.softmax(sub if largest else -sub, dim=0)
            order = _ranked(probs, list(range(len(cands))), descending=True)
            cum = torch.cumsum(probs[order], dim=0)
            k = min(int(torch.searchsorted(cum, value)) + 1, len(cands))
            return tuple(sorted(cands[i] for i in order[:k]))
        order = _ranked(sub, list(range(len(cands))), descending=largest)
        # float32 threshold, as the reference's tensor arithmetic
        threshold = value * sub.sum() - selection_eps
        total, taken = 0.0, 0
        for i in order:
            if total >= threshold or float(sub[i]) <= 0:
                break
            total += float(sub[i])
            taken += 1
        return tuple(sorted(cands[i] for i in order[:taken])) if total >= threshold else ()
    if strategy in ("top_k", "top_k_abs"):
        k = int(value * G) if strategy == "top_k" else int(value)
        k = max(1, min(k, len(cands)))
        return tuple(sorted(_ranked(s, cands, descending=largest)[:k]))
    # float32 comparisons, as the reference's
    keep = sub >= sub.max() * value - _ZERO if largest else sub <= sub.min() / (value + _ZERO) + _ZERO
    return tuple(g for g, k in zip(cands, keep.tolist()) if k)


def filter_loss_scale(kept_groups: int, num_groups: int, mode: str = "none") -> float:
    """The factor on the kept batch's advantages (``filter_loss_scaling``), r = kept / total
    groups: ``none`` 1, ``linear`` r, ``sqrt`` √r — a step that kept few groups moves the
    policy less."""
    if mode not in LOSS_SCALINGS:
        raise ValueError(f"filter_loss_scaling must be none, linear or sqrt, got {mode!r}")
    if num_groups < 1 or not 0 <= kept_groups <= num_groups:
        raise ValueError(f"need 0 <= kept_groups <= num_groups and num_groups >= 1, got {kept_groups}/{num_groups}")
    ratio = kept_groups / num_groups
    return {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[mode]


def empty_streak(previous: int, kept_groups: int) -> int:
    """Consecutive steps whose filter kept nothing, after this one: previous + 1 when this step
    kept no group, else 0. The run stops once it reaches ``rollout_filter_empty_stop_steps``
    (when that is > 0)."""
    return previous + 1 if kept_groups == 0 else 0
