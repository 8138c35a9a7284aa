"""Per-rank memory and step time of the trainer's ``sharding`` modes: one process vs 2
processes under ``ddp`` and ``fsdp`` (gloo on CPU, nccl on CUDA).

    .venv/bin/python benchmarks/bench_sharding.py --layers 4 --steps 3      # CPU, reduced depth
    .venv/bin/python benchmarks/bench_sharding.py --device cuda --dtype bfloat16   # GPU, full 0.5B shape

The model is :func:`ragen_envs.models.build_random_checkpoint`'s randomly initialised Qwen2 with Qwen2.5-0.5B's
shapes (hidden 896, vocab 151936, tied embedding, intermediate 4864), with ``--layers``
decoder layers (24 = the real 494 M; fewer keeps the CPU run short). Each configuration runs
in fresh processes (``torchrun --nproc_per_node=K``) doing what the trainer does for the
actor: load the model, wrap it as ``sharding.wrap`` does (fsdp: plus the full
``SamplerCopy`` for generation, made before sharding), AdamW over it, then ``--steps``
steps of forward + backward of the token-level loss through the wrapper (``--micro``
sequences of ``--seq-len`` tokens per rank, the last half trained) + AdamW step.

Reported per rank (rank 0's numbers; the ranks are symmetric): the *counted* bytes of
parameters, gradients and AdamW state this rank holds after a step (local shards under
fsdp), the sampler copy's bytes (fsdp only), the process's peak memory (CPU: max RSS, which
includes loading the full checkpoint before sharding; CUDA: the allocator's peak), the
median step time after the first, and under fsdp the time of one sampler refresh (the
once-per-rollout-phase gather of the full weights into the copy).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _bytes(tensors) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def worker(args) -> None:
    import torch

    from ragen_envs.starpo import distributed as D
    from ragen_envs.starpo import scale
    from ragen_envs.starpo import sharding as S
    from ragen_envs.starpo.core import masked_mean
    from ragen_envs.starpo.policy import load_policy

    ctx = D.init_distributed(args.device)
    device = f"cuda:{ctx.local_rank}" if args.device == "cuda" else args.device
    dtype = getattr(torch, args.dtype)
    model = load_policy(args.model, device, dtype)
    sampler = None
    if args.mode == "fsdp" and ctx.world_size > 1:
        sampler = S.SamplerCopy(model, torch.bfloat16 if args.mixed_precision else None)
    wrapped = S.wrap(model, args.mode, ctx.world_size, device, args.mixed_precision)
    opt = torch.optim.AdamW(scale.trainable_parameters(model), lr=1e-6)
    g = torch.Generator().manual_seed(ctx.rank)
    ids = torch.randint(3, 300, (args.micro, args.seq_len), generator=g)
    att = torch.ones_like(ids)
    mask = torch.zeros((args.micro, args.seq_len))
    mask[:, args.seq_len // 2:] = 1
    scale.reset_peak_memory(device)
    times, counted = [], {}
    for step in range(args.steps):
        D.barrier()
        t0 = time.perf_counter()
        lp, ent = wrapped(ids, att, mask, with_entropy=True)
        m = mask.to(lp.device)
        loss = -masked_mean(lp, m) - 0.001 * masked_mean(ent, m)
        loss.backward()
        opt.step()
        if step == args.steps - 1:  # what this rank holds at its fullest: weights, gradients, AdamW state
            counted = {"params": _bytes(model.parameters()),
                       "grads": _bytes(p.grad for p in model.parameters() if p.grad is not None),
                       "optim": _bytes(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))}
        opt.zero_grad(set_to_none=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        D.barrier()
        times.append(time.perf_counter() - t0)
    refresh_s = None
    if sampler is not None:
        sampler.mark_stale()
        D.barrier()
        t0 = time.perf_counter()
        sampler.refresh(model)
        refresh_s = time.perf_counter() - t0
        counted["sampler_copy"] = _bytes(sampler.model.parameters())
    peak = scale.memory_stats(device)
    row = {"mode": args.mode, "world": ctx.world_size, "rank": ctx.rank, "mixed_precision": args.mixed_precision,
           "counted_gib": {k: round(v / 2 ** 30, 3) for k, v in counted.items()}, "peak": peak,
           "step_s": round(statistics.median(times[1:] or times), 2), "refresh_s": refresh_s and round(refresh_s, 2)}
    Path(args.result).with_suffix(f".rank{ctx.rank}.json").write_text(json.dumps(row))
    D.shutdown()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layers", type=int, default=24, help="decoder layers (24 = Qwen2.5-0.5B)")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--configs", default="1:none,2:ddp,2:fsdp", help="WORLD:MODE[:mp],... (mp: fsdp mixed precision)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads per configuration, split over its ranks")
    ap.add_argument("--model", help="(internal)")
    ap.add_argument("--mode", help="(internal)")
    ap.add_argument("--mixed-precision", action="store_true", help="(internal)")
    ap.add_argument("--result", help="(internal)")
    args = ap.parse_args(argv)
    if args.model:
        worker(args)
        return 0

    import torch

    from ragen_envs.models import QWEN25_05B, build_random_checkpoint

    configs = []
    for item in args.configs.split(","):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0].isdigit() or parts[1] not in ("none", "ddp", "fsdp"):
            ap.error(f"--configs items are WORLD:MODE[:mp], got {item!r}")
        configs.append((int(parts[0]), parts[1], len(parts) == 3 and parts[2] == "mp"))
    tmp = Path(tempfile.mkdtemp(prefix="bench_sharding_"))
    shape = dict(QWEN25_05B, num_hidden_layers=args.layers)
    path, n = build_random_checkpoint(tmp / "model", shape, dtype=getattr(torch, args.dtype))
    print(f"model: {n / 1e6:.1f} M parameters ({args.layers} layers of Qwen2.5-0.5B's shape), {args.dtype} on "
          f"{args.device}; {args.micro} x {args.seq_len} tokens per rank per step", file=sys.stderr)
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    rows = []
    for world, mode, mp in configs:
        result = tmp / f"{world}_{mode}_{int(mp)}"
        cmd = [torchrun, "--standalone", f"--nproc_per_node={world}", __file__, "--model", str(path), "--mode", mode,
               "--device", args.device, "--dtype", args.dtype, "--seq-len", str(args.seq_len), "--micro",
               str(args.micro), "--steps", str(args.steps), "--result", str(result)] + (["--mixed-precision"] if mp else [])
        env = {**os.environ, "OMP_NUM_THREADS": str(max(args.threads // world, 1))}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.exit(f"{world}:{mode} failed:\n{proc.stderr[-3000:]}")
        per_rank = [json.loads(result.with_suffix(f".rank{r}.json").read_text()) for r in range(world)]
        print(json.dumps(per_rank), file=sys.stderr)
        rows.append(per_rank[0])
    key = "max_rss_gib" if args.device == "cpu" else "peak_allocated_gib"
    print("| processes | sharding | params (GiB / rank) | grads | AdamW state | params + grads + AdamW | sampler copy | "
          f"peak ({key}) | s / step | sampler refresh (s) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c = r["counted_gib"]
        total = c["params"] + c["grads"] + c["optim"]
        label = r["mode"] + (" + bf16 params" if r["mixed_precision"] else "") if r["world"] > 1 else "(any)"
        print(f"| {r['world']} | {label} | {c['params']:.2f} | {c['grads']:.2f} | {c['optim']:.2f} | {total:.2f} | "
              f"{c.get('sampler_copy', 0):.2f} | {r['peak'][key]:.2f} | {r['step_s']} | {r['refresh_s'] or '-'} |")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
