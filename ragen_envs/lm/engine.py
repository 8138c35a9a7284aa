"""The one token-sampling engine of the package: the model's forward call, token drawing and a
running batch that rows join and leave between decoding steps.

Used by the trainer's samplers (:func:`~.sampling.sample_replies`,
:class:`~.sampler.MultiTurnSampler`) and by ``ragen serve`` (:class:`~.token_engine.TokenEngine`):

- :func:`cache_kwarg` / :func:`out_cache` / :func:`forward` — the forward call with a KV cache
  (transformers 5 renamed ``past_key_values`` to ``cache``; ``logits_to_keep`` where offered);
- :func:`draw_tokens` — one token per row from ``softmax(logits / T)`` restricted to the top-p
  nucleus, from one ``torch.Generator`` (T below :data:`MIN_TEMPERATURE`: greedy); :func:`draw_rows`
  — the same with per-row settings and per-row generators, where a row whose logits are not
  usable (NaN, +inf) gets :data:`BAD_ROW` and the others draw as if it were not there;
- :class:`RunningBatch` — continuous batching: prompts are prefilled and their cache rows
  appended to the running batch's, finished rows leave at once.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch

__all__ = ["BAD_ROW", "MIN_TEMPERATURE", "RunningBatch", "cache_kwarg", "draw_rows", "draw_tokens", "forward",
           "left_pad", "out_cache", "usable_rows"]

# Temperatures below this are greedy (argmax). Dividing float32 logits by a smaller T overflows
# (5e-324 makes every logit infinite), and above it sampling already equals the argmax except
# between logits closer than ~T (the floor vLLM uses too).
MIN_TEMPERATURE = 1e-5
# The token :func:`draw_rows` reports for a row whose logits are not usable (see :func:`usable_rows`).
BAD_ROW = -1

_CACHE_ARG: dict[type, str] = {}
_KEEPS_LOGITS: dict[type, bool] = {}


def cache_kwarg(model) -> str:
    """The forward() keyword for the KV cache: ``cache`` (transformers >= 5.x) or
    ``past_key_values`` (older)."""
    cls = type(model)
    if cls not in _CACHE_ARG:
        params = inspect.signature(model.forward).parameters
        _CACHE_ARG[cls] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_ARG[cls]


def _keeps_logits(model) -> bool:
    cls = type(model)
    if cls not in _KEEPS_LOGITS:
        _KEEPS_LOGITS[cls] = "logits_to_keep" in inspect.signature(model.forward).parameters
    return _KEEPS_LOGITS[cls]


def out_cache(out):
    """The KV cache a forward call returned (``cache`` or ``past_key_values``)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor,
            cache: Any = None, *, last_only: bool = True):
    """One forward call with a KV cache: returns the model output (``out.logits``, and the
    cache through :func:`out_cache`). ``cache`` None starts a new one; ``last_only`` asks for
    the logits of the last position only (``logits_to_keep=1``) where the model offers it."""
    kwargs: dict[str, Any] = {}
    if cache is not None:
        kwargs[cache_kwarg(model)] = cache
    if last_only and _keeps_logits(model):
        kwargs["logits_to_keep"] = 1
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    return model(input_ids=input_ids, position_ids=position_ids, use_cache=True, **kwargs)


def left_pad(seqs: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of shape (len(seqs), max length): each sequence right-aligned after
    ``pad`` tokens, ``mask`` 1 on its real tokens. ``[[5, 6], [7]]`` -> ids ``[[5, 6], [pad, 7]]``,
    mask ``[[1, 1], [0, 1]]``."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, T - len(s):] = torch.as_tensor(list(s), dtype=torch.long)
            att[i, T - len(s):] = 1
    return ids, att


def _nucleus(probs: torch.Tensor, top_p) -> torch.Tensor:
    """Keep, per row, the most probable tokens in order while the mass before each is at most
    ``top_p`` (so the token that crosses ``top_p`` is kept), zero the rest (unnormalised: the
    multinomial draw normalises). probs (0.5, 0.3, 0.15, 0.05), top_p 0.7 -> (0.5, 0.3, 0, 0)."""
    sorted_p, idx = probs.sort(dim=-1, descending=True)
    cum = sorted_p.cumsum(dim=-1)
    sorted_p = torch.where(cum - sorted_p > top_p, torch.zeros_like(sorted_p), sorted_p)
    return torch.zeros_like(probs).scatter(-1, idx, sorted_p)


def usable_rows(logits: torch.Tensor) -> torch.Tensor:
    """A (B,) bool mask of the rows of ``logits`` (B, V) a token can be drawn from: no NaN, no
    +inf and at least one finite value (-inf is fine: a masked token). A broken model or a
    numerical fault in the forward pass makes a row unusable; one pass when all is finite."""
    if bool(torch.isfinite(logits).all()):
        return torch.ones(logits.shape[0], dtype=torch.bool, device=logits.device)
    bad = torch.isnan(logits).any(dim=-1) | torch.isposinf(logits).any(dim=-1)
    return ~bad & torch.isfinite(logits).any(dim=-1)


def _check_usable(logits: torch.Tensor) -> None:
    ok = usable_rows(logits)
    if not bool(ok.all()):
        rows = (~ok).nonzero().flatten().tolist()
        raise ValueError(f"the model's logits are not usable (NaN or +inf) in batch row(s) {rows[:8]}")


def _tempered_probs(logits: torch.Tensor, temperature) -> torch.Tensor:
    """``softmax(logits / temperature)`` over the last dim, never inf or NaN for usable rows
    (ValueError for the others) and any temperature >= :data:`MIN_TEMPERATURE`. The float32
    division is kept whenever it is finite, so every draw that worked before is unchanged; when
    it overflows (huge logits over a small T) the same distribution comes from the max-shifted
    logits in float64, whose values lie in [-inf, 0]."""
    scaled = logits / temperature
    if bool(torch.isfinite(scaled).all()):
        return torch.softmax(scaled, dim=-1)
    _check_usable(logits)
    if bool(torch.isnan(scaled).any()) or bool(torch.isposinf(scaled).any()):
        wide = logits.double()
        shifted = wide - wide.amax(dim=-1, keepdim=True)
        scaled = shifted / (temperature.double() if isinstance(temperature, torch.Tensor) else float(temperature))
    return torch.softmax(scaled, dim=-1)


def draw_tokens(logits: torch.Tensor, temperature, top_p, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``logits`` (B, V): from ``softmax(logits / temperature)`` restricted
    to the top-p nucleus (:func:`_nucleus`), one multinomial call on ``generator``; temperature
    below :data:`MIN_TEMPERATURE` is the argmax (no draw). ``temperature`` and ``top_p`` are floats
    for the whole batch, or (B, 1) tensors of per-row values (then every row's temperature must be
    >= :data:`MIN_TEMPERATURE`; smaller ones are raised to it). Raises ValueError when a row's
    logits are not usable (NaN, +inf: :func:`usable_rows`); :func:`draw_rows` sets such rows apart."""
    if not isinstance(temperature, torch.Tensor):
        if temperature < MIN_TEMPERATURE:
            _check_usable(logits)
            return logits.argmax(dim=-1)
    else:
        temperature = temperature.clamp_min(MIN_TEMPERATURE)
    probs = _tempered_probs(logits, temperature)
    if isinstance(top_p, torch.Tensor) or top_p < 1.0:
        probs = _nucleus(probs, top_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def draw_rows(logits: torch.Tensor, temperatures: Sequence[float], top_ps: Sequence[float],
              generators: Sequence[torch.Generator]) -> list[int]:
    """One token per row with per-row settings: a row with temperature below
    :data:`MIN_TEMPERATURE` takes its argmax; the others are grouped by generator (the same
    object), and each group is one :func:`draw_tokens` call on its rows in order (plain floats
    when the group's settings agree). A row with a generator of its own therefore draws exactly
    what it would draw alone, whatever else is in the batch.

    A row whose logits are not usable (:func:`usable_rows`) gets :data:`BAD_ROW` and is left out
    of its group, so every other row draws exactly what it would draw without it: one broken row
    fails alone (the caller decides what that means: ``ragen serve`` fails its request only)."""
    logits = logits.float().cpu()
    ok = usable_rows(logits).tolist()
    tokens = [tok if good else BAD_ROW for tok, good in zip(logits.argmax(dim=-1).tolist(), ok)]
    groups: dict[int, list[int]] = {}
    for j, t in enumerate(temperatures):
        if t >= MIN_TEMPERATURE and ok[j]:
            groups.setdefault(id(generators[j]), []).append(j)
    for rows in groups.values():
        temps, tops = [float(temperatures[j]) for j in rows], [float(top_ps[j]) for j in rows]
        if len(set(temps)) == 1 and len(set(tops)) == 1:
            temp, top = temps[0], tops[0]
        else:
            temp = torch.tensor(temps, dtype=torch.float32)[:, None]
            top = torch.tensor(tops, dtype=torch.float32)[:, None]
        picked = draw_tokens(logits[rows], temp, top, generators[rows[0]]).tolist()
        for j, tok in zip(rows, picked):
            tokens[j] = tok
    return tokens


def _mergeable(cache) -> bool:
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _pad_cols(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """``t`` with zeros prepended along ``dim`` up to ``width``."""
    extra = width - t.shape[dim]
    if extra <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class RunningBatch:
    """Rows decoding together with one KV cache (continuous batching).

    Layout: each row is ``[pad][its tokens]`` right-aligned in a (B, W) attention mask, the cache
    holding W positions per row (pads masked, zeros); position ids count a row's real tokens
    only, so a row's keys / values do not depend on the padding it got. :meth:`admit` prefills
    new prompts (left-padded among themselves) and appends their cache rows, both sides
    left-padded to a common width; :meth:`keep` drops rows and the leading columns no row uses
    any more; :meth:`step` runs one token per row. ``logits`` (B, V) are the pending next-token
    logits of every row, ``rows`` the callers' payloads in batch order.

    Joining needs a cache of plain full-attention layers (``DynamicLayer``); with any other
    cache :attr:`can_join` is False and a caller admits only into an empty batch."""

    def __init__(self, model, pad_id: int, device) -> None:
        self.model, self.pad_id, self.device = model, int(pad_id), torch.device(device)
        self.rows: list[Any] = []
        self.cache: Any = None
        self.mask: torch.Tensor | None = None
        self.next_pos: torch.Tensor | None = None
        self.logits: torch.Tensor | None = None
        self.can_join = True

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    @torch.no_grad()
    def admit(self, prompts: Sequence[Sequence[int]], payloads: Sequence[Any]) -> None:
        """Prefill ``prompts`` in one forward pass and append them to the batch (their logits
        become pending like everyone's)."""
        if not prompts:
            return
        if self.rows and not self.can_join:
            raise RuntimeError("this model's cache cannot take rows while others decode")
        ids, att = left_pad(prompts, self.pad_id)
        ids, att = ids.to(self.device), att.to(self.device)
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        out = forward(self.model, ids, att, pos)
        cache, logits = out_cache(out), out.logits[:, -1, :]
        if not self.rows:
            self.cache, self.mask, self.logits = cache, att, logits
            self.next_pos = pos[:, -1] + 1
            self.rows = list(payloads)
            self.can_join = _mergeable(cache)
            return
        W = max(self.width, att.shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers):
            mine.keys = torch.cat([_pad_cols(mine.keys, W, 2), _pad_cols(theirs.keys, W, 2)], dim=0)
            mine.values = torch.cat([_pad_cols(mine.values, W, 2), _pad_cols(theirs.values, W, 2)], dim=0)
        self.mask = torch.cat([_pad_cols(self.mask, W, 1), _pad_cols(att, W, 1)], dim=0)
        self.next_pos = torch.cat([self.next_pos, pos[:, -1] + 1])
        self.logits = torch.cat([self.logits, logits], dim=0)
        self.rows.extend(payloads)

    def keep(self, indices: Sequence[int]) -> None:
        """Keep only the rows at ``indices`` (in that order); the others' cache rows are freed,
        and so are the leading columns that only they used."""
        if len(indices) == len(self.rows):
            return
        if not indices:
            self.rows, self.cache, self.mask, self.next_pos, self.logits = [], None, None, None, None
            return
        sel = torch.as_tensor(list(indices), dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(sel)
        self.mask, self.next_pos, self.logits = self.mask[sel], self.next_pos[sel], self.logits[sel]
        self.rows = [self.rows[i] for i in indices]
        used = self.mask.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        if first > 0 and self.can_join:
            self.mask = self.mask[:, first:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]

    @torch.no_grad()
    def step(self, tokens: Sequence[int]) -> None:
        """Feed one token per row (in batch order); the logits of the next one become pending."""
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        step_ids = torch.as_tensor(list(tokens), dtype=torch.long, device=self.device)[:, None]
        out = forward(self.model, step_ids, self.mask, self.next_pos[:, None], self.cache)
        self.cache, self.logits = out_cache(out), out.logits[:, -1, :]
        self.next_pos = self.next_pos + 1
