"""How the trainer's models are placed across torchrun ranks: ``sharding = none | ddp | fsdp``.

- ``none``: every rank holds a plain replica; the trainer sums the gradients itself
  (:func:`~.distributed.all_reduce_gradients`, one flat buffer per dtype) before clipping.
- ``ddp``: :class:`torch.nn.parallel.DistributedDataParallel` (bucketed all-reduce that
  overlaps the backward pass; ``no_sync`` for every micro-batch but the last of a
  mini-batch).
- ``fsdp``: FSDP2 :func:`torch.distributed.fsdp.fully_shard` on every decoder layer and on
  the root: parameters, gradients and AdamW state are split across ranks (1/K each),
  a layer's weights are all-gathered for its forward / backward and the gradients
  reduce-scattered; optional mixed precision (bf16 parameters for compute, fp32 gradient
  reduction). Sampling runs on a full copy (:class:`SamplerCopy`).

On one process all three are the same plain model.

The trainer computes log-probs and values through :func:`~.policy.sequence_logprobs` /
``sequence_values``, which call the decoder stack and the head separately (prefix sharing,
the LM head on masked positions only). DDP and FSDP both act in the *root* module's
forward (DDP prepares its reducer there, FSDP all-gathers the root's parameters: embedding,
final norm, head), so the models are wrapped in :class:`Scorer`, whose ``forward`` runs
those functions: every training / scoring forward goes through the wrapper.

Gradient scale: the trainer divides each rank's loss by the mini-batch's *global* token
count, so the global gradient is the **sum** of the ranks' gradients; DDP and FSDP average
(divide by K). :func:`loss_scale` (= K under ddp / fsdp, 1 otherwise) multiplies the loss
before ``backward`` so that the average is the sum (exact for K a power of two, within
rounding otherwise).

Collective forwards: under FSDP every forward all-gathers, so every rank must run the same
number of forwards; under DDP every rank must run exactly one synchronising backward per
optimiser step. :func:`micro_batches_per_rank` is that common count; a rank with fewer
rows pads with zero-weighted micro-batches.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any, Iterator

import torch

__all__ = ["SHARDING_MODES", "Scorer", "wrap", "gradient_sync", "loss_scale", "micro_batches_per_rank",
           "decoder_layers", "SamplerCopy", "full_grad_norm", "is_sharded"]

SHARDING_MODES = ("none", "ddp", "fsdp")


class Scorer(torch.nn.Module):
    """One ``forward`` for what the trainer computes with a model (so DDP / FSDP hooks run):
    ``kind="logprobs"`` (:func:`~.policy.sequence_logprobs`, returns (logp, entropy)),
    ``"ref_logprobs"`` (the same with a peft model's adapters disabled) or ``"values"``
    (:func:`~.policy.sequence_values`)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, mask, kind: str = "logprobs", **kwargs):
        from .policy import sequence_logprobs, sequence_values

        if kind == "logprobs":
            return sequence_logprobs(self.model, input_ids, attention_mask, mask, **kwargs)
        if kind == "ref_logprobs":
            with self.model.disable_adapter():
                return sequence_logprobs(self.model, input_ids, attention_mask, mask, **kwargs)
        if kind == "values":
            return sequence_values(self.model, input_ids, attention_mask, mask, **kwargs)
        raise ValueError(f"unknown kind {kind!r}")


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a HF causal LM / token classifier (also under peft): the
    modules of the ``layers`` / ``h`` ModuleList of its backbone, each one FSDP unit."""
    from .policy import backbone_of

    backbone = backbone_of(model)
    for name in ("layers", "h", "blocks"):
        layers = getattr(backbone, name, None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers):
            return list(layers)
    raise ValueError(f"{type(backbone).__name__} has no 'layers' ModuleList to shard")


def wrap(model: torch.nn.Module, mode: str, world_size: int, device: str, mixed_precision: bool = False,
         ) -> torch.nn.Module:
    """The module the trainer calls for scoring / training forwards of ``model``:
    ``Scorer(model)`` itself (``none`` or one process), in DDP, or FSDP2-sharded in place
    (each decoder layer, then the root; ``model``'s parameters become DTensor shards)."""
    if mode not in SHARDING_MODES:
        raise ValueError(f"sharding must be one of {', '.join(SHARDING_MODES)}, got {mode!r}")
    scorer = Scorer(model)
    if world_size <= 1 or mode == "none":
        return scorer
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        dev = torch.device(device)
        ids = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else None
        # buffers (rotary tables) are identical everywhere: no per-forward broadcast
        return DistributedDataParallel(scorer, device_ids=ids, forward_sync_buffers=False)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dev = torch.device(device)
    mesh = init_device_mesh(dev.type, (world_size,))
    kwargs: dict[str, Any] = {"mesh": mesh}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(scorer, **kwargs)
    return scorer


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether ``model``'s parameters are FSDP2 DTensor shards."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


@contextlib.contextmanager
def gradient_sync(wrapped: torch.nn.Module, on: bool) -> Iterator[None]:
    """Backward passes inside communicate gradients only if ``on`` (gradient accumulation:
    off for every micro-batch but the last). DDP: ``no_sync``; FSDP2:
    ``set_requires_gradient_sync``; otherwise nothing (the trainer all-reduces itself)."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(wrapped, DistributedDataParallel) and not on:
        with wrapped.no_sync():
            yield
        return
    if hasattr(wrapped, "set_requires_gradient_sync"):
        wrapped.set_requires_gradient_sync(on)
        try:
            yield
        finally:
            wrapped.set_requires_gradient_sync(True)
        return
    yield


def loss_scale(mode: str, world_size: int) -> float:
    """Factor on each rank's loss so that DDP's / FSDP's gradient *average* over K ranks is
    the *sum* the global token-mean needs: K under ddp / fsdp, 1 otherwise."""
    return float(world_size) if mode in ("ddp", "fsdp") and world_size > 1 else 1.0


def micro_batches_per_rank(rows: int, world_size: int, micro_batch_size: int) -> int:
    """ceil(ceil(rows / K) / micro): the micro-batches of the largest strided share of
    ``rows`` rows over K ranks, i.e. the count every rank runs (smaller shares pad)."""
    return math.ceil(math.ceil(rows / max(world_size, 1)) / micro_batch_size)


def full_grad_norm(norm: torch.Tensor) -> float:
    """``clip_grad_norm_``'s result as a float (under FSDP it is a DTensor: the global norm
    once materialised)."""
    full = getattr(norm, "full_tensor", None)
    return float(full() if full is not None else norm)


class SamplerCopy:
    """A full, unsharded copy of an FSDP-sharded model for sampling (generation runs a
    data-dependent number of forwards per rank, which sharded collectives cannot do).

    Made with ``copy.deepcopy`` before sharding; :meth:`refresh` copies the current weights
    in, one parameter at a time (``DTensor.full_tensor``: one all-gather per parameter,
    so the transient memory is one parameter), and only if the weights changed since the
    last refresh (:meth:`mark_stale` after every optimiser step). Every rank must call
    :meth:`refresh` at the same point (it is a collective)."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype | None = None) -> None:
        self.model = copy.deepcopy(model)
        if dtype is not None:
            self.model.to(dtype)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.model.eval()
        self.stale = False
        self.refreshes = 0

    def mark_stale(self) -> None:
        self.stale = True

    @torch.no_grad()
    def refresh(self, sharded: torch.nn.Module) -> bool:
        """Copy ``sharded``'s weights in if they changed; returns whether it copied."""
        if not self.stale:
            return False
        mine = dict(self.model.named_parameters())
        for name, p in sharded.named_parameters():
            full = p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
            mine[name].copy_(full)
            del full
        self.stale = False
        self.refreshes += 1
        return True
