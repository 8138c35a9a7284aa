"""Memory and throughput of one actor training step for a Qwen2.5-0.5B-sized model, per
option (gradient checkpointing off / on x LoRA off / on), on whatever device is given.

    .venv/bin/python benchmarks/bench_memory.py --device cpu --seq-len 256 --micro 2

The model is :func:`ragen_envs.models.build_random_checkpoint`'s randomly initialised Qwen2 with Qwen2.5-0.5B's
shapes (494 M parameters, no download), saved once. Each option runs in a fresh process
(CPU peak memory is the process's max RSS, which never goes down): load the model, apply
the option, build AdamW over the trainable parameters, then ``--steps`` steps of forward +
backward of the trainer's token-level loss (``sequence_logprobs`` of the last half of each
sequence, entropy bonus) + AdamW step on ``--micro`` sequences of ``--seq-len`` tokens.
Reported: memory after loading, peak memory, and seconds / tokens per second of the last
step (the first warms up). On CUDA the peaks are the allocator's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def one(args) -> dict:
    import torch

    from ragen_envs.starpo import scale
    from ragen_envs.starpo.core import masked_mean
    from ragen_envs.starpo.policy import load_policy, sequence_logprobs

    dtype = getattr(torch, args.dtype)
    model = load_policy(args.model, args.device, dtype)
    if args.checkpointing:
        scale.enable_gradient_checkpointing(model)
    if args.lora:
        model = scale.apply_lora(model, r=args.lora)
    model.train(args.checkpointing)
    loaded = scale.memory_stats(args.device)
    params = scale.trainable_parameters(model)
    opt = torch.optim.AdamW(params, lr=1e-6)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 300, (args.micro, args.seq_len), generator=g)
    att = torch.ones_like(ids)
    mask = torch.zeros((args.micro, args.seq_len))
    mask[:, args.seq_len // 2:] = 1
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        lp, ent = sequence_logprobs(model, ids, att, mask, with_entropy=True, share_prefix=not args.checkpointing)
        m = mask.to(lp.device)
        loss = -masked_mean(lp, m) - 0.001 * masked_mean(ent, m)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = scale.memory_stats(args.device)
    return {"checkpointing": args.checkpointing, "lora_rank": args.lora, "dtype": args.dtype,
            "trainable_M": round(sum(p.numel() for p in params) / 1e6, 2),
            "loaded": loaded, "peak": peak, "step_s": round(times[-1], 2),
            "tokens_per_s": round(args.micro * args.seq_len / times[-1], 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--model", help="(internal) the saved model")
    ap.add_argument("--checkpointing", action="store_true", help="(internal)")
    ap.add_argument("--lora", type=int, default=0, help="(internal)")
    args = ap.parse_args(argv)
    if args.model:  # one option, in this process
        print(json.dumps(one(args)))
        return 0

    import torch

    from ragen_envs.models import build_random_checkpoint

    tmp = Path(tempfile.mkdtemp(prefix="bench_memory_"))
    path, n = build_random_checkpoint(tmp / "model", dtype=getattr(torch, args.dtype))
    print(f"model: {n / 1e6:.1f} M parameters, {args.dtype} on {args.device}; {args.micro} x {args.seq_len} tokens "
          f"per step", file=sys.stderr)
    rows = []
    for ckpt in (False, True):
        for lora in (0, args.lora_rank):
            cmd = [sys.executable, __file__, "--model", str(path), "--device", args.device, "--dtype", args.dtype,
                   "--seq-len", str(args.seq_len), "--micro", str(args.micro), "--steps", str(args.steps),
                   "--lora", str(lora)] + (["--checkpointing"] if ckpt else [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(proc.stderr[-3000:])
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
    key = "max_rss_gib" if args.device == "cpu" else "peak_allocated_gib"
    print("| gradient checkpointing | LoRA rank | trainable (M) | memory after load (GiB) | peak (GiB) | s / step | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {'on' if r['checkpointing'] else 'off'} | {r['lora_rank'] or '-'} | {r['trainable_M']} | "
              f"{r['loaded'][key]:.2f} | {r['peak'][key]:.2f} | {r['step_s']} | {r['tokens_per_s']} |")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
