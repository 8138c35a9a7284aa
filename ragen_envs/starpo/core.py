"""The math of StarPO / StarPO-S: advantages, losses, KL, entropy, the uncertainty filter.

Pure tensor functions, no model and no config object: every hyper-parameter is a scalar
keyword. Shapes use ``B`` = trajectories, ``T`` = tokens of the (right-padded) sequences.
Token arrays are *aligned on the token they describe*: ``logprobs[b, t]`` is
``log pi(x_t | x_<t)``, ``values[b, t]`` is the critic's value of the state just before
``x_t`` (read at the same position as the log-prob), ``mask[b, t]`` is 1 exactly when the
policy sampled ``x_t``. Rewards sit on sampled tokens only.

Paper: RAGEN (arXiv 2504.20073) §2.2 (StarPO), §4.2 (StarPO-S); formulas follow verl's
``core_algos.py`` where the reference trainer used it (see ``docs/training.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

__all__ = [
    "score_dtype",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "gae_advantages",
    "bilevel_gae_advantages",
    "grpo_advantages",
    "drgrpo_advantages",
    "episode_scores",
    "length_weighted_advantages",
    "clipped_surrogate",
    "policy_loss",
    "value_loss",
    "kl_estimate",
    "entropy_from_logits",
    "explained_variance",
    "group_std",
    "FilterResult",
    "uncertainty_filter",
    "ADVANTAGE_ESTIMATORS",
    "register_advantage",
    "compute_advantages",
]


# ----------------------------------------------------------------------------- reductions
def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ x·mask (a 0-dim tensor)."""
    return (x * mask).sum()


def score_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype log-probs, values and losses are computed in for a model (or mask) of
    ``dtype``: float64 stays float64 (the numerical-equivalence checks run in it), anything
    else is computed in float32 (bf16 / fp16 logits upcast, bool / int masks become float)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def masked_mean(x: torch.Tensor, mask: torch.Tensor, num_tokens: float | int | None = None) -> torch.Tensor:
    """Token-mean: Σ x·mask / n, with ``n = num_tokens`` when given (the *global* token count
    of the whole update batch, so micro-batching does not change the loss), else Σ mask."""
    denom = mask.sum() if num_tokens is None else torch.as_tensor(float(num_tokens), dtype=x.dtype)
    return masked_sum(x, mask) / torch.clamp(denom, min=1.0)


LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def loss_weights(mask: torch.Tensor, mode: str = "token-mean", num_tokens: float | int | None = None,
                 num_seqs: float | int | None = None) -> torch.Tensor:
    """Per-token weights w with Σ w·x = the aggregated loss of a (B, T) mini-batch piece:

    - ``token-mean``: w = mask / N, N = ``num_tokens`` (the mini-batch's token count across
      micro-batches and ranks; default Σ mask) — every token weighs the same (verl);
    - ``seq-mean-token-mean``: w_bt = mask_bt / (S · n_b), n_b = Σ_t mask_bt and S =
      ``num_seqs`` (the mini-batch's trajectories; default the rows with n_b > 0) — each
      trajectory's token-mean, averaged: every trajectory weighs the same (the reference's
      micro-batch-1 setting);
    - ``seq-mean-token-sum``: w_bt = mask_bt / S — each trajectory's token *sum*, averaged
      (verl's / RAGEN-2's name; Dr. GRPO's aggregation: no division by the reply's length, so
      the weights sum to the mean reply length, not 1).

    Example: two rows with 1 and 3 tokens: token-mean gives every token 1/4;
    seq-mean-token-mean gives 1/2 to the lone token and 1/6 to each of the other three;
    seq-mean-token-sum gives every token 1/2.
    """
    mask = mask.to(score_dtype(mask.dtype))  # a float64 mask keeps float64 weights
    if mode == "token-mean":
        n = mask.sum() if num_tokens is None else torch.as_tensor(float(num_tokens), dtype=mask.dtype)
        return mask / torch.clamp(n, min=1.0)
    if mode == "seq-mean-token-mean":
        per_row = mask.sum(-1, keepdim=True)
        s = (per_row > 0).sum() if num_seqs is None else torch.as_tensor(float(num_seqs))
        return mask / torch.clamp(per_row, min=1.0) / torch.clamp(s.to(mask.dtype), min=1.0)
    if mode == "seq-mean-token-sum":
        s = (mask.sum(-1) > 0).sum() if num_seqs is None else torch.as_tensor(float(num_seqs))
        return mask / torch.clamp(s.to(mask.dtype), min=1.0)
    raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {LOSS_AGG_MODES}")


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - μ) / sqrt(σ² + eps) over masked entries; σ² with Bessel's correction (n-1), as
    verl's ``masked_whiten``. Unmasked entries come back as 0."""
    n = mask.sum()
    if n < 2:
        raise ValueError(f"whitening needs at least 2 masked tokens, got {int(n)}")
    mean = masked_sum(x, mask) / n
    var = masked_sum((x - mean) ** 2, mask) / (n - 1)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[R - V] / Var[R] over masked tokens, in float64; nan when Var[R] = 0, i.e.
    below 1e-10 · (1 + mean(R)²): equal returns leave only rounding noise in Var[R]."""
    values, returns, mask = values.double(), returns.double(), mask.double()
    n = mask.sum()
    if n < 1:
        return float("nan")
    mean_r = masked_sum(returns, mask) / n
    var_r = masked_sum((returns - mean_r) ** 2, mask) / n
    diff = returns - values
    mean_d = masked_sum(diff, mask) / n
    var_d = masked_sum((diff - mean_d) ** 2, mask) / n
    if var_r <= 1e-10 * (1.0 + mean_r ** 2):
        return float("nan")
    return float(1.0 - var_d / var_r)


# ----------------------------------------------------------------------------- advantages
def gae_advantages(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the sampled tokens.

    Backward over the masked tokens of each row only (observation / template tokens are not
    MDP steps: the next value and the running advantage are carried across them):

        δ_t = r_t + γ·V_next - V_t,   A_t = δ_t + γ·λ·A_next,   returns_t = A_t + V_t,

    with V_next = 0 and A_next = 0 after the last sampled token. With γ = λ = 1 this is
    A_t = (Σ_{k≥t} r_k) - V_t. Args are (B, T); returns ``(advantages, returns)``, both 0
    off the mask. Not whitened (see :func:`masked_whiten`).

    >>> A, R = gae_advantages(torch.tensor([[0., 1.]]), torch.tensor([[.4, .6]]), torch.ones(1, 2))
    >>> [round(a, 6) for a in A[0].tolist()]
    [0.6, 0.4]
    """
    _check_same_shape(token_rewards=token_rewards, values=values, mask=mask)
    mask = mask.to(values.dtype)
    B, T = values.shape
    adv = torch.zeros_like(values)
    next_value = torch.zeros(B, dtype=values.dtype)
    running = torch.zeros(B, dtype=values.dtype)
    for t in range(T - 1, -1, -1):
        m = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * running
        adv[:, t] = a_t * m
        # Carry across unmasked tokens unchanged.
        running = torch.where(m > 0, a_t, running)
        next_value = torch.where(m > 0, values[:, t], next_value)
    returns = (adv + values) * mask
    return adv, returns


def bilevel_gae_advantages(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    turn_ends: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    gamma_high: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bi-level GAE (RAGEN App. D): turn-level GAE over turn ends, token-level inside turns.

    ``turn_ends`` (B, T, bool) marks each turn's last sampled token; they come from the
    rollout structure, never from non-zero rewards (a turn may earn exactly 0). For the turn
    ends e_1..e_K of a row, with r_k the reward on e_k and V_k = V(e_k):

        high level: δ_k = r_k + γ_high·V_{k+1} - V_k (V_{K+1} = 0),  A_k = δ_k + γ_high·λ·A_{k+1},
                    G_k = A_k + V_k   (the turn's return);
        low level:  inside turn k, GAE over its sampled tokens with (γ, λ) where the turn end
                    carries reward G_k, everything else in the turn 0, and no bootstrap past e_k.

    Sampled tokens after the last turn end (there should be none) get advantage 0.
    Returns ``(advantages, returns)`` (B, T), 0 off the mask.
    """
    _check_same_shape(token_rewards=token_rewards, values=values, mask=mask, turn_ends=turn_ends)
    mask_f = mask.to(values.dtype)
    ends = turn_ends.bool() & (mask > 0)
    B, T = values.shape
    adv_rows = [[0.0] * T for _ in range(B)]
    vals, rews, msk = values.tolist(), token_rewards.tolist(), mask_f.tolist()
    for b in range(B):
        end_pos = torch.nonzero(ends[b], as_tuple=False).flatten().tolist()
        if not end_pos:
            continue
        # High level: one backward pass over the turn ends.
        turn_return = {}
        next_v, running = 0.0, 0.0
        for e in reversed(end_pos):
            v = vals[b][e]
            delta = rews[b][e] + gamma_high * next_v - v
            running = delta + gamma_high * lam * running
            turn_return[e] = running + v
            next_v = v
        # Low level: each turn is its own token-level episode ending at its turn end.
        start = 0
        for e in end_pos:
            next_v, running = 0.0, 0.0
            for t in range(e, start - 1, -1):
                if msk[b][t] <= 0:
                    continue
                r = turn_return[e] if t == e else 0.0
                v = vals[b][t]
                delta = r + gamma * next_v - v
                running = delta + gamma * lam * running
                adv_rows[b][t] = running
                next_v = v
            start = e + 1
    adv = torch.tensor(adv_rows, dtype=values.dtype) * mask_f
    returns = (adv + values) * mask_f
    return adv, returns


def group_std(scores: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Per-group standard deviation of a (G, N) tensor: sample std (n-1, ``torch.std``'s
    default, as the reference) when ``unbiased`` else population std (n). Groups of one
    have std 0."""
    if scores.dim() != 2:
        raise ValueError(f"scores must be (groups, group_size), got shape {tuple(scores.shape)}")
    if scores.shape[1] < 2:
        return torch.zeros(scores.shape[0], dtype=scores.dtype)
    return scores.std(dim=1, unbiased=unbiased)


def grpo_advantages(
    scores: torch.Tensor,
    group_size: int,
    eps: float = 1e-6,
    unbiased: bool = True,
) -> torch.Tensor:
    """GRPO's group-relative advantage of each trajectory (B,) with B = G·group_size,
    consecutive trajectories forming a group:

        A_i = (R_i - mean_g(R)) / (std_g(R) + eps),

    std the sample std (n-1) when ``unbiased`` (the reference's choice; ``unbiased=False``
    gives the population std of the paper's worked example), and A = 0 for every member of
    a group whose std is <= eps (no signal, no division by ~0).

    >>> grpo_advantages(torch.tensor([1., 0., 1., 0.]), 4, unbiased=False).round(decimals=4).tolist()
    [1.0, -1.0, 1.0, -1.0]
    """
    if scores.dim() != 1 or group_size < 1 or scores.numel() % group_size:
        raise ValueError(f"scores must be 1-D with a length divisible by group_size={group_size}, got {tuple(scores.shape)}")
    g = scores.view(-1, group_size)
    mean = g.mean(dim=1, keepdim=True)
    std = group_std(g, unbiased).unsqueeze(1)
    adv = (g - mean) / (std + eps)
    adv = torch.where(std > eps, adv, torch.zeros_like(adv))
    return adv.reshape(-1)


def drgrpo_advantages(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO's advantage (RAGEN-2's ``norm_adv_by_std_in_grpo: false``): GRPO without the
    division by the group's std, A_i = R_i - mean_g(R), for (B,) returns in consecutive
    groups of ``group_size``. A group with one return for all gets 0.

    >>> drgrpo_advantages(torch.tensor([1., 0., 0., 0.]), 4).tolist()
    [0.75, -0.25, -0.25, -0.25]
    """
    if scores.dim() != 1 or group_size < 1 or scores.numel() % group_size:
        raise ValueError(f"scores must be 1-D with a length divisible by group_size={group_size}, got {tuple(scores.shape)}")
    g = scores.view(-1, group_size)
    return (g - g.mean(dim=1, keepdim=True)).reshape(-1)


def length_weighted_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """RAGEN-2's ``grpo_advantage_length_weight``: each trajectory's (B, T) advantages divided
    by its relative length, (n_b + 1e-6) / mean_b(n_b), n_b = Σ_t mask_bt its policy tokens —
    a reply twice the batch's mean length gets half the advantage per token, so a long reply
    does not outweigh a short one under token-mean aggregation.

    >>> a = length_weighted_advantages(torch.ones(2, 3), torch.tensor([[1., 0., 0.], [1., 1., 1.]]))
    >>> [round(x, 4) for x in a[:, 0].tolist()]  # lengths 1 and 3, mean 2
    [2.0, 0.6667]
    """
    _check_same_shape(advantages=advantages, mask=mask)
    n = mask.sum(dim=-1)
    return advantages / ((n + 1e-6) / n.to(advantages.dtype).mean()).unsqueeze(-1)


# ----------------------------------------------------------------------------- losses
def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
) -> torch.Tensor:
    """The per-token PPO objective to *maximise* (Clip-Higher, dual clip):

        f = min(ρ·A, clip(ρ, 1 - ε_low, 1 + ε_high)·A),   and for A < 0: f = max(f, c·A),

    ε_low = ``clip_low``, ε_high = ``clip_high`` (0.2 / 0.28: Clip-Higher; 0.2 / 0.2:
    symmetric PPO), c = ``dual_clip`` (> 1, or None to turn it off).

    >>> round(float(clipped_surrogate(torch.tensor(1.4), torch.tensor(0.6))), 3)  # paper-notes §6
    0.768
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    f = torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        f = torch.where(advantages < 0, torch.maximum(f, dual_clip * advantages), f)
    return f


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
    log_ratio_clamp: float = 20.0,
    num_tokens: float | int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level clipped policy loss, token-mean aggregated.

    ρ_t = exp(clamp(logπ_t - logπ_old,t, ±``log_ratio_clamp``)); loss = -Σ_t mask·f_t / n with
    f from :func:`clipped_surrogate` and n = ``num_tokens`` (the global token count of the
    update batch; defaults to this call's Σ mask). Returns ``(loss, metrics)``: metrics
    ``pg_clipfrac_high`` (A > 0 and ρ > 1 + ε_high), ``pg_clipfrac_low`` (A < 0 and
    ρ < 1 - ε_low), ``pg_clipfrac_dual`` (the dual clip bound), ``approx_kl_old`` (mean of
    logπ_old - logπ) — as sums over this call's tokens divided by n, so micro-batch
    metrics add up to the batch's.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=mask)
    mask = mask.to(logprobs.dtype)
    log_ratio = torch.clamp(logprobs - old_logprobs, -log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    f = clipped_surrogate(ratio, advantages, clip_low, clip_high, dual_clip)
    loss = -masked_mean(f, mask, num_tokens)
    with torch.no_grad():
        n = float(mask.sum()) if num_tokens is None else float(num_tokens)
        n = max(n, 1.0)
        high = ((advantages > 0) & (ratio > 1.0 + clip_high)).to(mask.dtype)
        low = ((advantages < 0) & (ratio < 1.0 - clip_low)).to(mask.dtype)
        if dual_clip is not None:
            dual = ((advantages < 0) & (ratio > dual_clip)).to(mask.dtype)
        else:
            dual = torch.zeros_like(mask)
        metrics = {
            "pg_clipfrac_high": float(masked_sum(high, mask)) / n,
            "pg_clipfrac_low": float(masked_sum(low, mask)) / n,
            "pg_clipfrac_dual": float(masked_sum(dual, mask)) / n,
            "approx_kl_old": float(masked_sum(old_logprobs - logprobs, mask)) / n,
        }
    return loss, metrics


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = 0.5,
    num_tokens: float | int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped critic loss (verl's): 0.5 · token-mean(max((V - R)², (V_clip - R)²)) with
    V_clip = clip(V, V_old - c, V_old + c), c = ``clip`` (None: unclipped 0.5·(V - R)²).
    Returns ``(loss, {"vf_clipfrac": ...})``: the fraction of tokens whose loss is the
    clipped branch's, |V - V_old| > c and (V_clip - R)² > (V - R)². (Inside the band
    ``old + clamp(V - old)`` can differ from V by a rounding error; the |V - V_old| > c test
    keeps such tokens out of the count.)"""
    _check_same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    mask = mask.to(values.dtype)
    err = (values - returns) ** 2
    if clip is not None:
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
        err_clip = (v_clip - returns) ** 2
        per_token = torch.maximum(err, err_clip)
        clipped = (((values - old_values).abs() > clip) & (err_clip > err)).to(mask.dtype)
    else:
        per_token = err
        clipped = torch.zeros_like(mask)
    loss = 0.5 * masked_mean(per_token, mask, num_tokens)
    n = max(float(mask.sum()) if num_tokens is None else float(num_tokens), 1.0)
    return loss, {"vf_clipfrac": float(masked_sum(clipped, mask)) / n}


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token KL(π ‖ π_ref) estimators from samples of π (Schulman's k1 / k3):

        k1 = logπ - logπ_ref;     k3 = exp(d) - d - 1 with d = clamp(logπ_ref - logπ, ±20),
        clamped to [-10, 10] (verl's ``low_var_kl``). k3 >= 0 and unbiased; k1 unbiased."""
    if kind == "k1":
        return logprobs - ref_logprobs
    if kind == "k3":
        d = torch.clamp(ref_logprobs - logprobs, -20.0, 20.0)
        return torch.clamp(torch.exp(d) - d - 1.0, -10.0, 10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; choose 'k1' or 'k3'")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis: H = logsumexp(z) - Σ softmax(z)·z."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


# ----------------------------------------------------------------------------- the filter
@dataclass(frozen=True)
class FilterResult:
    """Which initial-state groups an update keeps.

    ``kept`` are group indices in ascending order; ``group_std`` the per-group return std
    (the uncertainty U(s0)); ``metrics`` the logged numbers (std before / after, fraction).
    """

    kept: tuple[int, ...]
    group_std: tuple[float, ...]
    metrics: dict[str, float] = field(default_factory=dict)


FILTER_MODES = ("top_p", "top_k", "min_p", "snr", "nonzero", "none")


def uncertainty_filter(
    returns: torch.Tensor,
    mode: str = "top_p",
    keep_ratio: float = 0.25,
    explore_groups: int = 0,
    success: torch.Tensor | None = None,
    unbiased: bool = True,
    zero_tol: float = 1e-6,
    top_k: int = 4,
    min_p: float = 0.5,
) -> FilterResult:
    """StarPO-S's uncertainty-based rollout filter on a (G, N) tensor of trajectory returns.

    U(s0) = Std_{τ~π(·|s0)}[R(τ)] per group (sample std when ``unbiased``). Modes:

    - ``"top_p"`` (StarPO-S): keep the k = max(1, int(``keep_ratio``·G + 1e-9)) groups with
      the largest U; ties go to the lower group index (deterministic, unlike ``topk``).
    - ``"top_k"``: keep the k = min(``top_k``, G) groups with the largest U (an absolute
      count, whatever the number of groups); ties as top_p.
    - ``"min_p"``: keep every group with U ≥ ``min_p``·max_g U (relative to this batch's most
      uncertain group); when max U ≤ ``zero_tol`` no group carries a signal: keep nothing.
    - ``"snr"``: rank by the signal-to-noise score S = U / (|μ| + U) ∈ [0, 1], μ the group's
      mean return (S = 0 when U = 0) — a monotone map of the coefficient of variation U/|μ|,
      scale-free and finite at μ = 0 — and keep the top ``keep_ratio`` (count as top_p) among
      groups with U > ``zero_tol`` (a zero-std group has no signal, whatever its mean).
    - ``"nonzero"`` (DAPO): keep every group with U > ``zero_tol``; none → keep nothing.
    - ``"none"``: keep every group.

    ``explore_groups``: additionally keep up to this many *all-fail* groups (every member
    unsuccessful, per ``success`` (G, N) bool) not already kept, largest U first, then lower
    index — the exploration quota that stops the hardest states from never being learned.
    With shared environment noise inside a group the std reflects the policy alone.
    """
    if returns.dim() != 2:
        raise ValueError(f"returns must be (groups, group_size), got shape {tuple(returns.shape)}")
    if mode not in FILTER_MODES:
        raise ValueError(f"unknown filter mode {mode!r}; choose one of {FILTER_MODES}")
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError(f"keep_ratio must be in (0, 1], got {keep_ratio}")
    if mode == "top_k" and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
    if mode == "min_p" and not 0.0 < min_p <= 1.0:
        raise ValueError(f"min_p must be in (0, 1], got {min_p}")
    G = returns.shape[0]
    std = group_std(returns.double(), unbiased)
    order = sorted(range(G), key=lambda g: (-float(std[g]), g))
    if mode == "top_p":
        k = max(1, int(keep_ratio * G + 1e-9))
        kept = set(order[:k])
    elif mode == "top_k":
        kept = set(order[: min(top_k, G)])
    elif mode == "min_p":
        top = float(std.max()) if G else 0.0
        kept = {g for g in range(G) if top > zero_tol and float(std[g]) >= min_p * top}
    elif mode == "snr":
        mean = returns.double().mean(-1).abs()
        score = [float(std[g] / (mean[g] + std[g])) if float(std[g]) > zero_tol else 0.0 for g in range(G)]
        ranked = [g for g in sorted(range(G), key=lambda g: (-score[g], g)) if float(std[g]) > zero_tol]
        kept = set(ranked[: max(1, int(keep_ratio * G + 1e-9))])
    elif mode == "nonzero":
        kept = {g for g in range(G) if float(std[g]) > zero_tol}
    else:
        kept = set(range(G))
    if explore_groups > 0:
        if success is None:
            raise ValueError("explore_groups needs the per-trajectory success tensor")
        all_fail = [g for g in order if not bool(success[g].any()) and g not in kept]
        kept |= set(all_fail[:explore_groups])
    kept_t = tuple(sorted(kept))
    std_list = tuple(float(s) for s in std)
    mean_all = sum(std_list) / max(G, 1)
    mean_kept = sum(std_list[g] for g in kept_t) / len(kept_t) if kept_t else float("nan")
    metrics = {
        "in_group_std": mean_all,
        "in_group_std_kept": mean_kept,
        "kept_fraction": len(kept_t) / max(G, 1),
        "zero_std_fraction": sum(s <= zero_tol for s in std_list) / max(G, 1),
    }
    return FilterResult(kept_t, std_list, metrics)


# ----------------------------------------------------------------------------- registry
AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an estimator under ``name``. Every estimator takes the same keywords:
    ``token_rewards, values, mask, turn_ends, group_size, gamma, lam, gamma_high, eps`` (all
    (B, T) tensors except the scalars) and returns ``(advantages, returns)``."""

    def deco(fn: AdvantageFn) -> AdvantageFn:
        if name in ADVANTAGE_ESTIMATORS and ADVANTAGE_ESTIMATORS[name] is not fn:
            raise ValueError(f"an advantage estimator named {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return deco


@register_advantage("gae")
def _gae(*, token_rewards, values, mask, gamma, lam, **_):
    adv, ret = gae_advantages(token_rewards, values, mask, gamma, lam)
    return masked_whiten(adv, mask.to(adv.dtype)), ret


@register_advantage("bilevel_gae")
def _bilevel(*, token_rewards, values, mask, turn_ends, gamma, lam, gamma_high, **_):
    adv, ret = bilevel_gae_advantages(token_rewards, values, mask, turn_ends, gamma, lam, gamma_high)
    return masked_whiten(adv, mask.to(adv.dtype)), ret


def episode_scores(scores: torch.Tensor, episodes: torch.Tensor) -> torch.Tensor:
    """Per-episode scores (E,) of per-turn rows: ``out[e] = scores[first row r with
    episodes[r] = e]``, episodes numbered 0..E-1. The reference's GRPO in its windowed context
    modes counts each (group, episode) once, so an episode's turns do not weigh its return
    by their number; every row of an episode carries the same score.

    >>> episode_scores(torch.tensor([2., 2., 0., 5.]), torch.tensor([0, 0, 1, 2])).tolist()
    [2.0, 0.0, 5.0]
    """
    if scores.shape != episodes.shape or scores.dim() != 1:
        raise ValueError(f"scores and episodes must be 1-D of one length, got {tuple(scores.shape)} and {tuple(episodes.shape)}")
    first: dict[int, int] = {}
    for r, e in enumerate(episodes.tolist()):
        first.setdefault(e, r)
    if sorted(first) != list(range(len(first))):
        raise ValueError("episodes must number every episode 0..E-1 with at least one row each")
    return scores[torch.as_tensor([first[e] for e in range(len(first))], dtype=torch.long)]


@register_advantage("grpo")
def _grpo(*, token_rewards, mask, group_size, eps, norm_by_std=True, episodes=None, **_):
    scores = token_rewards.sum(dim=1)
    if episodes is not None:  # per-turn rows: the group statistics over episodes, each row its episode's advantage
        scores = episode_scores(scores, episodes)
    per_row = grpo_advantages(scores, group_size, eps) if norm_by_std else drgrpo_advantages(scores, group_size)
    if episodes is not None:
        per_row = per_row[episodes]
    adv = per_row.unsqueeze(1) * mask.to(token_rewards.dtype)
    return adv, adv.clone()


def compute_advantages(name: str, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Dispatch to a registered estimator (``gae``, ``bilevel_gae``, ``grpo``)."""
    try:
        fn = ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {sorted(ADVANTAGE_ESTIMATORS)}") from None
    return fn(**inputs)


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"tensors must have the same shape, got {shapes}")
