"""Batched sampling from a causal LM with a KV cache (one turn, every prompt prefilled), and
shared-prefix detection. Token drawing (temperature / top-p from a private
``torch.Generator``), the cache keyword and the forward call come from :mod:`.engine`, the
engine ``ragen serve`` uses too (re-exported here under their old names)."""

from __future__ import annotations

from typing import Sequence

import torch

from .engine import cache_kwarg, draw_tokens, forward, left_pad, out_cache

__all__ = ["MIN_SHARED_PREFIX", "common_prefix_length", "draw_tokens", "sample_replies"]


_pad_left = left_pad  # the names this module had before the engine was shared
_cache_kwarg = cache_kwarg
_out_cache = out_cache


MIN_SHARED_PREFIX = 16  # shorter common prefixes are not worth a separate forward pass


def common_prefix_length(seqs: Sequence[Sequence[int]], keep: int = 1) -> int:
    """Length of the token prefix shared by every sequence, leaving at least ``keep`` tokens
    of the shortest one after it. All trajectories of an env start with the same system
    message and instruction, so this is typically a few hundred tokens."""
    if not seqs:
        return 0
    first, limit = seqs[0], min(len(s) for s in seqs) - keep
    n = 0
    while n < limit and all(s[n] == first[n] for s in seqs):
        n += 1
    return max(n, 0)


def _expand_cache(cache, batch: int) -> None:
    if batch > 1:
        cache.batch_repeat_interleave(batch)


@torch.no_grad()
def sample_replies(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    eot_id: int,
    pad_id: int,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    top_p: float = 1.0,
) -> list[tuple[list[int], bool]]:
    """Sample one reply per prompt with a KV cache; returns ``[(ids, stopped), ...]``.

    ``ids`` are exactly the sampled token ids, ending with ``eot_id`` when the model stopped
    (``stopped`` True) or cut at ``max_new_tokens`` (``stopped`` False). Randomness comes
    only from ``generator`` (a private ``torch.Generator``): same generator state, same
    replies. ``temperature`` 0 (below :data:`~.engine.MIN_TEMPERATURE`) means greedy.

    The prefix shared by all prompts is run once and its cache copied to every row; the
    rest of each prompt is left-padded after it (``[prefix][pad][rest]``, pads masked).
    Finished rows leave the batch.
    """
    if not prompts:
        return []
    device = next(model.parameters()).device
    B = len(prompts)
    P = common_prefix_length(prompts)
    if P < MIN_SHARED_PREFIX or B == 1:
        P = 0
    rest_ids, rest_att = _pad_left([p[P:] for p in prompts], pad_id)
    att = torch.cat([torch.ones((B, P), dtype=torch.long), rest_att], dim=1).to(device)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    if P:
        head = torch.as_tensor(list(prompts[0][:P]), dtype=torch.long, device=device).unsqueeze(0)
        first = forward(model, head, None, pos[:1, :P])
        cache = _out_cache(first)
        _expand_cache(cache, B)
        out = forward(model, rest_ids.to(device), att, pos[:, P:], cache)
    else:
        out = forward(model, rest_ids.to(device), att, pos)
    cache = _out_cache(out)
    replies: list[list[int]] = [[] for _ in range(B)]
    stopped = [False] * B
    rows = list(range(B))  # batch row -> prompt index
    next_pos = pos[:, -1:] + 1
    logits = out.logits[:, -1, :]
    for step in range(max_new_tokens):
        tok = draw_tokens(logits.float().cpu(), temperature, top_p, generator)
        keep = []
        for r, i in enumerate(rows):
            t = int(tok[r])
            replies[i].append(t)
            if t == eot_id:
                stopped[i] = True
            else:
                keep.append(r)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(rows):
            sel = torch.as_tensor(keep, dtype=torch.long, device=device)
            cache.batch_select_indices(sel)
            att, next_pos, tok = att[sel], next_pos[sel], tok[sel.cpu()]
            rows = [rows[r] for r in keep]
        att = torch.cat([att, torch.ones((len(rows), 1), dtype=att.dtype, device=device)], dim=1)
        out = forward(model, tok.to(device).unsqueeze(1), att, next_pos, cache)
        cache = _out_cache(out)
        logits = out.logits[:, -1, :]
        next_pos = next_pos + 1
    return [(r, s) for r, s in zip(replies, stopped)]
