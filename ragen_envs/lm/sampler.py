"""A batched multi-turn sampler that keeps each trajectory's KV cache across turns.

:func:`~.sampling.sample_replies` prefills every prompt from scratch on every turn: on turn k
a trajectory's whole history (system prompt, k-1 observations and replies) goes through the
model again. :class:`MultiTurnSampler` keeps, per live trajectory, the keys / values of the
tokens it has already run, so a turn prefills only what was appended since: the
end-of-turn token that closed the last reply, the template's increment with the next
observation and the forced prefix.

How a prompt finds its cache: the sampler stores one *slot* per trajectory, holding the
token ids its cache covers and, per layer, the compacted keys / values ``(heads, n, dim)``
of exactly those tokens (no padding). When a turn's prompts arrive, each prompt is matched
to a slot whose ids are a prefix of it (a multimap keyed by the ids, so identical
trajectories get distinct slots); a prompt without one is new (its first turn). Slots not
claimed by any prompt belong to trajectories whose episode ended: they are dropped, so
their cache rows leave memory. New prompts share the system prompt / instruction prefix:
it is prefilled once (batch 1) and the same tensors back every new slot.

A turn's batch is laid out as ``[pad][cached_i][pad][new_i]`` per row: the cache is the
rows' slots left-padded to a common length, the new tokens are left-padded after it, pads
are masked and position ids count real tokens only (rotary keys of a slot keep the
positions they were computed at, so compacting and re-padding never changes them). Then
one token per step is drawn for every row with an unfinished reply; a row that draws the
end-of-turn token (or reaches ``max_new_tokens``) leaves the batch and its cache goes back
to its slot (the last drawn token is not in it: the next prompt brings it).

Sampling: temperature / top-p exactly as :func:`~.sampling.sample_replies` (the same
:func:`~.sampling.draw_tokens`), randomness only from the caller's ``torch.Generator``;
temperature 0 (any below :data:`~.engine.MIN_TEMPERATURE`) is greedy; logits with NaN or +inf
raise ValueError. A call may give each prompt a generator of its own
(``generators=``): each row then draws alone from its generator (:func:`~.engine.draw_rows`),
so its tokens do not depend on which other prompts share the batch (up to float rounding of
the batched forward). A cache is only valid for the weights that computed it: call
:meth:`MultiTurnSampler.reset` (or use a new sampler) after the weights change. The trainer
wraps it as ``ragen_envs.starpo.sampler.CachedResponder``; the ``hf:`` agent keeps one per
loaded model.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from transformers.cache_utils import DynamicLayer

from .engine import BAD_ROW, cache_kwarg, draw_rows, draw_tokens, forward, out_cache
from .sampling import MIN_SHARED_PREFIX, common_prefix_length

__all__ = ["MultiTurnSampler", "SamplingCancelled"]


class SamplingCancelled(RuntimeError):
    """``should_stop`` asked a sampling call to stop (e.g. the process is shutting down)."""


class _BufferLayer(DynamicLayer):
    """A KV-cache layer over preallocated (B, heads, capacity, dim) buffers: ``update``
    writes the new keys / values in place and returns views of the filled part, so a
    decoding step costs no copy of the whole cache (``DynamicLayer`` concatenates)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.n = 0

    def set_buffers(self, K: torch.Tensor, V: torch.Tensor, n: int) -> None:
        self.K, self.V, self.n = K, V, n
        self.device = K.device
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self.K[:, :, : self.n], self.V[:, :, : self.n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            B, H, _, D = key_states.shape
            self.set_buffers(key_states.new_zeros((B, H, self.capacity, D)),
                             value_states.new_zeros((B, value_states.shape[1], self.capacity, value_states.shape[3])), 0)
        m = key_states.shape[-2]
        if self.n + m > self.K.shape[2]:  # never with the turn's capacity; grow if a caller feeds more
            extra = self.n + m - self.K.shape[2]
            self.K = torch.cat([self.K, self.K.new_zeros(self.K.shape[:2] + (extra,) + self.K.shape[3:])], dim=2)
            self.V = torch.cat([self.V, self.V.new_zeros(self.V.shape[:2] + (extra,) + self.V.shape[3:])], dim=2)
        self.K[:, :, self.n : self.n + m] = key_states
        self.V[:, :, self.n : self.n + m] = value_states
        self.n += m
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.n if self.is_initialized else 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self.K, self.V = self.K.index_select(0, indices), self.V.index_select(0, indices)
            self._views()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the sampler's cache is not cropped")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("the sampler's cache is not repeated")


def _buffer_cache(layers: list[_BufferLayer]):
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layers = layers
    return cache


class _Slot:
    """The cached state of one trajectory: ``ids`` and per layer ``(k, v)`` of shape
    (heads, len(ids), head_dim)."""

    __slots__ = ("ids", "kv")

    def __init__(self, ids: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.ids, self.kv = ids, kv

    def trimmed(self, n: int) -> "_Slot":
        if n == len(self.ids):
            return self
        return _Slot(self.ids[:n], [(k[:, :n], v[:, :n]) for k, v in self.kv])


class MultiTurnSampler:
    """Samples replies to growing prompts, reusing each trajectory's KV cache across turns.

    ``generate(prompts)`` returns ``[(ids, stopped), ...]`` like
    :func:`~.sampling.sample_replies`: the sampled ids, ending with ``eot_id`` when the model
    stopped (``stopped`` True) or cut at ``max_new_tokens``. Call it once per turn with the
    live trajectories' full token ids; the caller may drop, reorder or add trajectories
    between calls. ``stats`` counts prefilled and generated tokens and forward calls.

    By default a call frees the slots no prompt claimed (their episodes ended: the trainer
    plays every live trajectory each turn). A caller that sends only some of its live
    conversations per call (the ``hf:`` agent, whose batches form from concurrent requests)
    passes ``keep_unclaimed=True``, frees a finished conversation with :meth:`discard`, and
    bounds memory with ``max_slots`` (the oldest slots are dropped first). ``stop_ids`` are
    further tokens that end a reply like ``eot_id`` (e.g. a chat model's second eos token).
    """

    def __init__(self, model, *, eot_id: int, pad_id: int, max_new_tokens: int, temperature: float,
                 generator: torch.Generator, top_p: float = 1.0, batch_size: int | None = None,
                 stop_ids: Sequence[int] = (), max_slots: int | None = None) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.model = model
        self.eot_id, self.pad_id = int(eot_id), int(pad_id)
        self.stop_ids = frozenset(int(t) for t in stop_ids) | {self.eot_id}
        self.max_slots = max_slots
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.generator = generator
        self.batch_size = batch_size
        self.device = next(model.parameters()).device
        self._key = cache_kwarg(model)
        self._num_layers = int(model.config.get_text_config().num_hidden_layers)
        self._slots: dict[tuple[int, ...], list[_Slot]] = {}
        self.stats = {"prefill_tokens": 0, "generated_tokens": 0, "forward_calls": 0, "reused_tokens": 0}

    # ------------------------------------------------------------------ cache bookkeeping
    def reset(self) -> None:
        """Forget every cached trajectory (e.g. after the weights changed)."""
        self._slots.clear()

    @property
    def cached_trajectories(self) -> int:
        return sum(len(v) for v in self._slots.values())

    def _claim(self, prompt: Sequence[int], lengths: list[int]) -> _Slot | None:
        """Pop the longest slot whose ids are a prefix of ``prompt`` (leaving >= 1 new token)."""
        for n in lengths:
            if n > len(prompt):
                continue
            bucket = self._slots.get(tuple(prompt[:n]))
            if bucket:
                slot = bucket.pop()
                if not bucket:
                    del self._slots[tuple(prompt[:n])]
                return slot.trimmed(min(n, len(prompt) - 1))
        return None

    def _store(self, slot: _Slot) -> None:
        key = tuple(slot.ids)
        self._slots.setdefault(key, []).append(slot)
        if self.max_slots is not None:
            while self.cached_trajectories > self.max_slots:
                oldest = next(iter(self._slots))
                bucket = self._slots[oldest]
                bucket.pop(0)
                if not bucket:
                    del self._slots[oldest]

    def discard(self, ids: Sequence[int]) -> bool:
        """Free one cached conversation whose cache covers exactly ``ids`` (a finished
        conversation's prompt + reply without its last token); True when one was held."""
        key = tuple(ids)
        bucket = self._slots.get(key)
        if not bucket:
            return False
        bucket.pop()
        if not bucket:
            del self._slots[key]
        return True

    def _shared_prefix_slot(self, prompts: list[Sequence[int]]) -> _Slot | None:
        """Prefill the prefix common to new prompts once; the slot backs all of them."""
        if len(prompts) < 2:
            return None
        P = common_prefix_length(prompts)
        if P < MIN_SHARED_PREFIX:
            return None
        ids = torch.as_tensor(list(prompts[0][:P]), dtype=torch.long, device=self.device).unsqueeze(0)
        pos = torch.arange(P, device=self.device).unsqueeze(0)
        out = forward(self.model, ids, None, pos)
        self.stats["prefill_tokens"] += P
        self.stats["forward_calls"] += 1
        cache = out_cache(out)
        kv = [(layer.keys[0], layer.values[0]) for layer in cache.layers]
        return _Slot(list(prompts[0][:P]), kv)

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], *, keep_unclaimed: bool = False,
                 max_new_tokens: int | None = None, temperature: float | None = None,
                 top_p: float | None = None, should_stop: Callable[[], bool] | None = None,
                 generators: Sequence[torch.Generator] | None = None,
                 ) -> list[tuple[list[int], bool]]:
        """Replies to ``prompts``; ``max_new_tokens`` / ``temperature`` / ``top_p`` override
        the sampler's settings for this call. ``should_stop`` is polled before every token:
        when it returns True the call raises :class:`SamplingCancelled`. ``generators``: one
        per prompt (the same object may back several), instead of the sampler's own."""
        if generators is not None and len(generators) != len(prompts):
            raise ValueError(f"generators: one per prompt, got {len(generators)} for {len(prompts)} prompts")
        if not prompts:
            if not keep_unclaimed:
                self.reset()
            return []
        params = (self.max_new_tokens if max_new_tokens is None else int(max_new_tokens),
                  self.temperature if temperature is None else float(temperature),
                  self.top_p if top_p is None else float(top_p), should_stop)
        if params[0] < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {params[0]}")
        lengths = sorted({len(s.ids) for bucket in self._slots.values() for s in bucket}, reverse=True)
        slots: list[_Slot | None] = [self._claim(p, lengths) for p in prompts]
        if not keep_unclaimed:
            self._slots.clear()  # unclaimed slots: trajectories that ended; their cache is freed
        new = [i for i, s in enumerate(slots) if s is None]
        if new:
            shared = self._shared_prefix_slot([prompts[i] for i in new])
            for i in new:
                slots[i] = shared
        out: list[tuple[list[int], bool]] = [([], False)] * len(prompts)
        step = self.batch_size or len(prompts)
        for start in range(0, len(prompts), step):
            idx = list(range(start, min(start + step, len(prompts))))
            chunk = [slots[i] for i in idx]
            for i in idx:
                slots[i] = None  # the chunk list is the last reference: freed once copied to the batch
            gens = None if generators is None else [generators[i] for i in idx]
            for i, res in zip(idx, self._generate_batch([prompts[i] for i in idx], chunk, *params, gens)):
                out[i] = res
        return out

    def _generate_batch(self, prompts: list[Sequence[int]], slots: list[_Slot | None], max_new_tokens: int,
                        temperature: float, top_p: float, should_stop: Callable[[], bool] | None = None,
                        gens: list[torch.Generator] | None = None) -> list[tuple[list[int], bool]]:
        dev, B = self.device, len(prompts)
        cached = [len(s.ids) if s is not None else 0 for s in slots]
        new = [list(p[c:]) for p, c in zip(prompts, cached)]
        Lc, S = max(cached), max(len(n) for n in new)
        self.stats["reused_tokens"] += sum(cached)
        self.stats["prefill_tokens"] += sum(len(n) for n in new)
        # the batch: [pad][cached_i][pad][new_i]
        att = torch.zeros((B, Lc + S), dtype=torch.long)
        ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        pos = torch.zeros((B, S), dtype=torch.long)
        for b, (c, n) in enumerate(zip(cached, new)):
            att[b, Lc - c : Lc] = 1
            att[b, Lc + S - len(n) :] = 1
            ids[b, S - len(n) :] = torch.as_tensor(n, dtype=torch.long)
            pos[b, S - len(n) :] = torch.arange(c, c + len(n))
        att = att.to(dev)
        # preallocated keys / values for the whole turn (cached + new + reply): written in
        # place, no per-token concatenation of the growing cache
        cap = Lc + S + max_new_tokens
        ref = next((s.kv for s in slots if s is not None), None)
        layers = []
        for li in range(self._num_layers):
            layer = _BufferLayer(cap)
            if ref is not None:
                k0, v0 = ref[li]
                K = k0.new_zeros((B, k0.shape[0], cap, k0.shape[2]))  # zeros: pad columns are masked
                V = v0.new_zeros((B, v0.shape[0], cap, v0.shape[2]))
                for b, s in enumerate(slots):
                    if s is not None and cached[b]:
                        K[b, :, Lc - cached[b] : Lc] = s.kv[li][0]
                        V[b, :, Lc - cached[b] : Lc] = s.kv[li][1]
                layer.set_buffers(K, V, Lc)
            layers.append(layer)
        slots.clear()  # the slots' tensors now live in the batch buffers only (peak memory ~1 copy)
        del ref
        out = forward(self.model, ids.to(dev), att, pos.to(dev), _buffer_cache(layers))
        self.stats["forward_calls"] += 1
        cache = out_cache(out)
        logits = out.logits[:, -1, :]
        next_pos = pos[:, -1:].to(dev) + 1
        replies: list[list[int]] = [[] for _ in range(B)]
        stopped = [False] * B
        rows = list(range(B))  # batch row -> prompt index
        for step in range(max_new_tokens):
            if should_stop is not None and should_stop():
                raise SamplingCancelled("sampling was stopped")
            if gens is None:
                tok = draw_tokens(logits.float().cpu(), temperature, top_p, self.generator)
            else:  # each row from its own generator (rows: batch row -> prompt index)
                n = len(rows)
                drawn = draw_rows(logits, [temperature] * n, [top_p] * n, [gens[i] for i in rows])
                if BAD_ROW in drawn:  # the trainer's batch is one job: a broken row fails it, as draw_tokens does
                    raise ValueError(f"the model's logits are not usable (NaN or +inf) in batch row(s) "
                                     f"{[r for r, t in enumerate(drawn) if t == BAD_ROW][:8]}")
                tok = torch.tensor(drawn, dtype=torch.long)
            keep = []
            last = step == max_new_tokens - 1
            for r, i in enumerate(rows):
                t = int(tok[r])
                replies[i].append(t)
                self.stats["generated_tokens"] += 1
                if t in self.stop_ids:
                    stopped[i] = True
                if stopped[i] or last:
                    self._stash(cache, att, r, list(prompts[i]) + replies[i][:-1])
                else:
                    keep.append(r)
            if not keep:
                break
            if len(keep) < len(rows):
                sel = torch.as_tensor(keep, dtype=torch.long, device=dev)
                cache.batch_select_indices(sel)
                att, next_pos, tok = att[sel], next_pos[sel], tok[sel.cpu()]
                rows = [rows[r] for r in keep]
            att = torch.cat([att, torch.ones((len(rows), 1), dtype=att.dtype, device=dev)], dim=1)
            out = forward(self.model, tok.to(dev).unsqueeze(1), att, next_pos, cache)
            self.stats["forward_calls"] += 1
            cache = out_cache(out)
            logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
        return [(r, s) for r, s in zip(replies, stopped)]

    def _stash(self, cache, att: torch.Tensor, row: int, ids: list[int]) -> None:
        """Keep row ``row``'s keys / values (its real tokens only) for the next turn."""
        real = att[row].bool()
        kv = [(layer.keys[row][:, real], layer.values[row][:, real]) for layer in cache.layers]
        if kv and kv[0][0].shape[1] != len(ids):
            raise RuntimeError(f"cache holds {kv[0][0].shape[1]} tokens for a {len(ids)}-token history")
        self._store(_Slot(ids, kv))
