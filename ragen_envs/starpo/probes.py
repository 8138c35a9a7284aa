"""Probes of how much the replies still depend on the input state (RAGEN-2's template collapse).

A probe batch: states x_1..x_S (their prompts), one or more replies z sampled per state.
Every reply is scored under every *distinct* probe prompt, in one batched forward
(:func:`cross_score`), giving a matrix L[i][j] = log p(z_i | x'_j). From it:

- :func:`mi_proxy`: the contrastive estimate of the mutual information between state and
  reply, I(X;Z) ≈ mean_i [log p(z_i|x_i) − log Σ_j w_j p(z_i|x'_j)], with w_j the share of
  probe states whose prompt is x'_j (so the mixture Σ_j w_j p(z|x'_j) is the probe batch's
  marginal p(z)); and the retrieval accuracy, how often a reply's own prompt is the argmax.
- :func:`cond_entropy`: H(Z|X) ≈ −mean_i log p(z_i|x_i), the Monte Carlo estimate from the
  sampled replies' own log-probs (nats per reply, and per token).

When all probe prompts are the same text there is one distinct prompt, I = 0 by
construction and the retrieval accuracy is 1 trivially: the probe then cannot see whether
replies depend on the state (``distinct_prompts`` says so). On Bandit-v0 the prompt varies
with the seed only by the order of the two arm names, so there are two distinct prompts and
I(X;Z) <= log 2.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

__all__ = ["logsumexp", "mi_proxy", "cond_entropy", "distinct_prompts", "cross_score"]


def logsumexp(xs: Sequence[float]) -> float:
    """log Σ exp(x), stable (max subtracted first); -inf for an empty or all -inf input."""
    xs = list(xs)
    if not xs:
        return -math.inf
    m = max(xs)
    if m == -math.inf:
        return -math.inf
    return m + math.log(sum(math.exp(x - m) for x in xs))


def distinct_prompts(prompts: Sequence[Any]) -> tuple[list[Any], list[int], list[float]]:
    """(the distinct prompts in first-seen order, each prompt's index among them, the share
    of prompts equal to each distinct one). Prompts are compared with ``==`` after
    ``tuple()`` for token-id lists."""
    keys: dict[Any, int] = {}
    uniq: list[Any] = []
    index: list[int] = []
    for p in prompts:
        k = tuple(p) if isinstance(p, list) else p
        if k not in keys:
            keys[k] = len(uniq)
            uniq.append(p)
        index.append(keys[k])
    if not prompts:
        return [], [], []
    counts = [0] * len(uniq)
    for i in index:
        counts[i] += 1
    return uniq, index, [c / len(prompts) for c in counts]


def mi_proxy(logp: Sequence[Sequence[float]], own: Sequence[int], weights: Sequence[float] | None = None) -> dict[str, float]:
    """The cross-scoring estimate of I(X;Z) and the retrieval accuracy.

    ``logp[i][j]`` = log p(z_i | x'_j) for reply i under distinct prompt j; ``own[i]`` = the
    column of reply i's own prompt; ``weights[j]`` = w_j, the share of probe states with
    prompt j (uniform when None; normalised to sum 1).

        I_i = L[i][own_i] − log Σ_j w_j exp(L[i][j]);   mi = mean_i I_i   (nats)
        retrieval = mean_i 1[own_i is the unique argmax_j L[i][j]]   (a tie counts 1/k)

    ``mi_max`` = Σ_j w_j log(1/w_j) = H(X), the most I can be. Empty input gives nan.
    """
    n = len(logp)
    if len(own) != n:
        raise ValueError(f"logp has {n} rows but own has {len(own)} entries")
    if n == 0:
        return {"mi": float("nan"), "retrieval": float("nan"), "mi_max": float("nan")}
    k = len(logp[0])
    if k == 0 or any(len(row) != k for row in logp):
        raise ValueError("logp must be a non-empty rectangular matrix (replies x distinct prompts)")
    w = [1.0 / k] * k if weights is None else [float(x) for x in weights]
    if len(w) != k or any(x < 0 for x in w) or sum(w) <= 0:
        raise ValueError(f"weights must be {k} non-negative numbers with a positive sum")
    total = sum(w)
    w = [x / total for x in w]
    logw = [math.log(x) if x > 0 else -math.inf for x in w]
    mis, hits = [], []
    for row, o in zip(logp, own):
        if not 0 <= o < k:
            raise ValueError(f"own index {o} out of range for {k} prompts")
        mis.append(row[o] - logsumexp([a + b for a, b in zip(row, logw)]))
        best = max(row)
        ties = [j for j, v in enumerate(row) if v == best]
        hits.append(1.0 / len(ties) if o in ties else 0.0)
    return {"mi": sum(mis) / n, "retrieval": sum(hits) / n, "mi_max": 0.0 - sum(x * lx for x, lx in zip(w, logw) if x > 0)}


def cond_entropy(own_logp: Sequence[float], lengths: Sequence[int] | None = None) -> dict[str, float]:
    """H(Z|X) from sampled replies: ``per_reply`` = −mean_i log p(z_i|x_i) (nats), and
    ``per_token`` = −Σ_i log p(z_i|x_i) / Σ_i len_i when ``lengths`` is given (else nan).
    Empty input gives nan."""
    n = len(own_logp)
    if n == 0:
        return {"per_reply": float("nan"), "per_token": float("nan")}
    per_reply = -sum(own_logp) / n
    per_token = float("nan")
    if lengths is not None:
        if len(lengths) != n:
            raise ValueError(f"{n} log-probs but {len(lengths)} lengths")
        tokens = sum(lengths)
        per_token = -sum(own_logp) / tokens if tokens > 0 else float("nan")
    return {"per_reply": per_reply, "per_token": per_token}


def cross_score(model, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]], pad_id: int,
                temperature: float = 1.0, batch_size: int = 128,
                with_entropy: bool = True) -> tuple[list[list[float]], list[list[float]]]:
    """Score every reply under every prompt: (L, E) with L[i][j] = log p(replies[i] | prompts[j])
    (summed over the reply's tokens, at ``temperature``) and E[i][j] the summed per-token
    entropy of the policy along it (0 with ``with_entropy`` off, which skips the vocabulary
    softmax's entropy). All (i, j) pairs go through
    :func:`~ragen_envs.starpo.policy.sequence_logprobs` in batches of ``batch_size``
    sequences (one forward when they fit), prompt by prompt."""
    import torch

    from .policy import pad_right, sequence_logprobs

    # prompt-major: the rows of one forward share their prompt, whose states are then computed
    # once (policy._hidden_states' shared prefix); in a prompt-x-reply order every row differs
    pairs = [(i, j) for j in range(len(prompts)) for i in range(len(replies))]
    L = [[0.0] * len(prompts) for _ in replies]
    E = [[0.0] * len(prompts) for _ in replies]
    step = max(int(batch_size), 1)
    with torch.no_grad():
        for start in range(0, len(pairs), step):
            chunk = pairs[start : start + step]
            seqs = [list(prompts[j]) + list(replies[i]) for i, j in chunk]
            masks = [[0] * len(prompts[j]) + [1] * len(replies[i]) for i, j in chunk]
            ids = pad_right(seqs, pad_id)
            att = pad_right([[1] * len(s) for s in seqs], 0)
            msk = pad_right(masks, 0)
            lp, ent = sequence_logprobs(model, ids, att, msk, with_entropy=with_entropy, temperature=temperature)
            lp_sum = lp.sum(-1).tolist()
            ent_sum = ent.sum(-1).tolist() if ent is not None else [0.0] * len(chunk)
            for (i, j), a, b in zip(chunk, lp_sum, ent_sum):
                L[i][j], E[i][j] = float(a), float(b)
    return L, E
