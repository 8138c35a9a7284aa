"""torch.distributed helpers for StarPO-S across processes and machines.

``torchrun --nproc_per_node=K -m ragen_envs.starpo ...`` starts K processes with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` / ``MASTER_PORT`` set; :func:`init_distributed`
reads them (gloo on CPU, nccl on CUDA; multi-node through torchrun's usual ``--nnodes``,
``--node_rank``, ``--rdzv_endpoint`` flags). Without them everything here is a no-op on one
process, so the same trainer code runs both ways.

The pieces of one StarPO-S iteration and what each needs to equal the one-process update:

- **Rollouts**: the P groups are sharded across ranks (:func:`shard_groups`: contiguous
  blocks, group g keeps its global seed ``base + g``), every rank plays only its groups.
- **Filter**: the uncertainty filter ranks *all* groups: :func:`gather_group_returns`
  all-gathers every rank's (G_local, N) returns into the global (G, N) tensor in group
  order, and every rank runs the same :func:`~.core.uncertainty_filter` on it.
- **Kept batch**: kept groups can sit on a few ranks only, so the kept trajectories are
  exchanged (:func:`all_gather_objects`) and every rank takes a balanced share of each
  mini-batch (:func:`shard_indices`); every rank then makes the same number of optimiser
  steps.
- **Token-mean**: the loss of a mini-batch divides by the *global* token count
  (:func:`global_sum` of the local masks' sums), so each rank's loss is its part of the
  global token-mean and the global gradient is the *sum* of the ranks' gradients.
- **Advantage whitening**: GAE advantages are whitened with the global mean / variance
  (Bessel's correction over the global token count): :func:`global_masked_whiten`, or
  :func:`compute_advantages` (the estimator registry of :mod:`.core` with global moments).
- **Gradients**: :func:`all_reduce_gradients` sums them (one flat buffer per dtype and
  device; the trainer's ``sharding=none``; ``ddp`` / ``fsdp`` leave it to DDP / FSDP2, see
  :mod:`.sharding`); clipping and the optimiser step then see identical gradients on every
  rank.
- **Logs / checkpoints**: only rank 0 writes (:func:`rank_zero_only`, :class:`RankZeroLog`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from .core import ADVANTAGE_ESTIMATORS, FilterResult, bilevel_gae_advantages, gae_advantages, masked_sum, uncertainty_filter

__all__ = [
    "DistContext",
    "init_distributed",
    "context",
    "shard_groups",
    "shard_indices",
    "gather_group_returns",
    "global_uncertainty_filter",
    "all_gather_objects",
    "global_sum",
    "global_sum_dict",
    "broadcast_object",
    "global_masked_moments",
    "global_masked_whiten",
    "compute_advantages",
    "all_reduce_gradients",
    "rank_zero_only",
    "RankZeroLog",
    "barrier",
    "shutdown",
]


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def context() -> DistContext:
    """The current process group's rank / size (rank 0 of 1 without one)."""
    if dist.is_available() and dist.is_initialized():
        return DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank())),
                           dist.get_backend())
    return DistContext()


def init_distributed(device: str = "cpu", backend: str | None = None, init_method: str | None = None,
                     rank: int | None = None, world_size: int | None = None) -> DistContext:
    """Join the process group torchrun describes (``RANK`` / ``WORLD_SIZE`` env vars), or the
    one given by ``init_method`` + ``rank`` + ``world_size`` (e.g. ``file://`` in tests).
    Backend: nccl for a CUDA ``device``, gloo otherwise. With one process and no
    ``init_method`` nothing is initialised. On CUDA the process uses ``cuda:LOCAL_RANK``."""
    if dist.is_initialized():
        return context()
    rank = int(os.environ.get("RANK", 0)) if rank is None else rank
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if world_size <= 1 and init_method is None:
        return DistContext()
    backend = backend or ("nccl" if str(device).startswith("cuda") else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    kwargs: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world_size}
    kwargs["init_method"] = init_method or "env://"
    dist.init_process_group(**kwargs)
    return DistContext(rank, world_size, local_rank, backend)


def barrier() -> None:
    if context().enabled:
        dist.barrier()


def shutdown(clean: bool = True) -> None:
    """Leave the process group (the end of a torchrun run); a no-op without one. After a
    ``clean`` run every rank first waits for the others, so no rank tears its group down
    while a peer still talks to it (a rank leaving early was seen to abort at exit under
    load); after an error the ranks leave at once (a wait could hang)."""
    if dist.is_available() and dist.is_initialized():
        if clean:
            try:
                dist.barrier()
            except RuntimeError:  # a peer already gone: leave anyway
                pass
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- sharding
def shard_groups(num_groups: int, rank: int | None = None, world_size: int | None = None) -> list[int]:
    """The global group indices rank ``rank`` plays: contiguous blocks, the first
    ``num_groups % world_size`` ranks get one more. Every group belongs to exactly one rank."""
    ctx = context()
    rank = ctx.rank if rank is None else rank
    world_size = ctx.world_size if world_size is None else world_size
    if num_groups < world_size:
        raise ValueError(f"num_groups={num_groups} < world_size={world_size}: every rank needs at least one group")
    base, extra = divmod(num_groups, world_size)
    start = rank * base + min(rank, extra)
    return list(range(start, start + base + (1 if rank < extra else 0)))


def shard_indices(n: int, rank: int | None = None, world_size: int | None = None) -> list[int]:
    """Rank ``rank``'s share of ``range(n)`` (strided: i % world_size == rank), e.g. of one
    mini-batch of the global kept batch. Shares differ in size by at most one."""
    ctx = context()
    rank = ctx.rank if rank is None else rank
    world_size = ctx.world_size if world_size is None else world_size
    return list(range(rank, n, world_size))


# ----------------------------------------------------------------------------- collectives
def _device_for_collectives() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if context().backend == "nccl" else torch.device("cpu")


def all_gather_objects(obj: Any) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` (picklable objects, e.g. trajectories)."""
    ctx = context()
    if not ctx.enabled:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def gather_group_returns(local: torch.Tensor) -> torch.Tensor:
    """All ranks' (G_r, N) return tensors concatenated in rank order = global group order
    (with :func:`shard_groups`' contiguous blocks); ranks may hold different G_r."""
    ctx = context()
    if not ctx.enabled:
        return local
    dev = _device_for_collectives()
    x = local.to(dev, torch.float64)
    sizes = [torch.zeros(1, dtype=torch.long, device=dev) for _ in range(ctx.world_size)]
    dist.all_gather(sizes, torch.tensor([x.shape[0]], dtype=torch.long, device=dev))
    G_max = int(max(int(s) for s in sizes))
    padded = torch.zeros((G_max, x.shape[1]), dtype=x.dtype, device=dev)
    padded[: x.shape[0]] = x
    parts = [torch.empty_like(padded) for _ in range(ctx.world_size)]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(s)] for p, s in zip(parts, sizes)]).to(local.device, local.dtype)


def global_uncertainty_filter(local_returns: torch.Tensor, local_success: torch.Tensor | None = None,
                              mode: str = "top_p", keep_ratio: float = 0.25, explore_groups: int = 0,
                              **mode_params) -> FilterResult:
    """:func:`~.core.uncertainty_filter` over *all* ranks' groups: the (G_r, N) returns (and
    success flags) of each rank are all-gathered in group order and every rank runs the
    same filter, so ``kept`` holds global group indices and is identical everywhere."""
    returns = gather_group_returns(local_returns)
    success = None
    if local_success is not None:
        success = gather_group_returns(local_success.to(torch.float64)) > 0.5
    return uncertainty_filter(returns, mode, keep_ratio, explore_groups, success, **mode_params)


def global_sum(x: torch.Tensor | float | int) -> float:
    """Σ over ranks of a scalar (e.g. the token count of the local share of a mini-batch)."""
    t = torch.as_tensor(float(x), dtype=torch.float64, device=_device_for_collectives())
    if context().enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t)


def global_sum_dict(values: dict[str, float]) -> dict[str, float]:
    """``{key: Σ over ranks of values[key]}`` in one all-reduce (every rank passes the same
    keys in the same order), e.g. the per-rank parts of token-mean loss statistics."""
    if not context().enabled or not values:
        return dict(values)
    t = torch.tensor([float(v) for v in values.values()], dtype=torch.float64, device=_device_for_collectives())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return dict(zip(values, t.tolist()))


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (e.g. rank 0's mini-batch permutation)."""
    if not context().enabled:
        return obj
    box = [obj if context().rank == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def global_masked_moments(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(n, mean, var) of the masked entries of ``x`` over all ranks; var with Bessel's
    correction (n - 1), as :func:`~.core.masked_whiten`. Two passes (mean, then the sum of
    squared deviations) in float64, so it matches the one-process numbers to rounding."""
    enabled = context().enabled
    dev = _device_for_collectives()
    m = mask.to(x.dtype)
    s = torch.stack([m.sum(), masked_sum(x, m)]).to(dev, torch.float64)
    if enabled:
        dist.all_reduce(s, op=dist.ReduceOp.SUM)
    n, mean = s[0], s[1] / s[0].clamp(min=1.0)
    sq = masked_sum((x.double() - mean.to(x.device)) ** 2, m.double()).to(dev).reshape(1)
    if enabled:
        dist.all_reduce(sq, op=dist.ReduceOp.SUM)
    var = sq[0] / (n - 1).clamp(min=1.0)
    return n, mean, var


def global_masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """:func:`~.core.masked_whiten` with the mean and variance of all ranks' masked entries."""
    n, mean, var = global_masked_moments(x, mask)
    if float(n) < 2:
        raise ValueError(f"whitening needs at least 2 masked tokens over all ranks, got {int(n)}")
    mean = mean.to(x.device, x.dtype)
    var = var.to(x.device, x.dtype)
    return (x - mean) * torch.rsqrt(var + eps) * mask.to(x.dtype)


def compute_advantages(name: str, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~.core.compute_advantages` for the local share of the batch, with the GAE
    estimators whitened over all ranks. GRPO needs no communication (groups are never
    split across ranks); other registered estimators run as registered (local)."""
    if name == "gae":
        adv, ret = gae_advantages(inputs["token_rewards"], inputs["values"], inputs["mask"], inputs["gamma"], inputs["lam"])
    elif name == "bilevel_gae":
        adv, ret = bilevel_gae_advantages(inputs["token_rewards"], inputs["values"], inputs["mask"], inputs["turn_ends"],
                                          inputs["gamma"], inputs["lam"], inputs["gamma_high"])
    else:
        if name not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"unknown advantage estimator {name!r}; known: {sorted(ADVANTAGE_ESTIMATORS)}")
        return ADVANTAGE_ESTIMATORS[name](**inputs)
    return global_masked_whiten(adv, inputs["mask"].to(adv.dtype)), ret


def all_reduce_gradients(params: Sequence[torch.nn.Parameter] | torch.nn.Module, op: str = "sum") -> None:
    """All-reduce the ``.grad`` of ``params`` across ranks, in one flat buffer per (device,
    dtype). ``op="sum"`` when each rank's loss is already divided by the global token count
    (the trainer's token-mean); ``"mean"`` for losses normalised per rank. Parameters
    without a gradient on this rank count as zeros (every rank must call this)."""
    ctx = context()
    if not ctx.enabled:
        return
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', got {op!r}")
    if isinstance(params, torch.nn.Module):
        params = [p for p in params.parameters() if p.requires_grad]
    buckets: dict[tuple[torch.device, torch.dtype], list[torch.nn.Parameter]] = {}
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        buckets.setdefault((p.grad.device, p.grad.dtype), []).append(p)
    for ps in buckets.values():
        flat = torch.cat([p.grad.reshape(-1) for p in ps])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        if op == "mean":
            flat /= ctx.world_size
        offset = 0
        for p in ps:
            n = p.grad.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n


# ----------------------------------------------------------------------------- rank 0 only
def rank_zero_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: call ``fn`` on rank 0 only (returns None elsewhere), e.g. checkpoint saves."""

    def wrapper(*args, **kwargs):
        if context().is_main:
            return fn(*args, **kwargs)
        return None

    wrapper.__name__ = getattr(fn, "__name__", "rank_zero_fn")
    wrapper.__doc__ = fn.__doc__
    return wrapper


class RankZeroLog:
    """A ``log(text)`` callable (the trainer's ``log=`` argument) that prints on rank 0 only."""

    def __init__(self, log: Callable[[str], None] = print) -> None:
        self.inner = log

    def __call__(self, text: str) -> None:
        if context().is_main:
            self.inner(text)
