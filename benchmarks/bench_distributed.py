"""One StarPO-S actor update on 1 vs K CPU processes (torch.distributed, gloo).

    .venv/bin/python benchmarks/bench_distributed.py --worlds 1,2 --rounds 3

A fixed batch (``--batch`` sequences of ``--seq`` tokens, the last ``--reply`` of them
trained on) is split across the ranks (``shard_indices``); each rank runs forward + backward
of the token-mean clipped policy loss (global token count, ``core.policy_loss``) in
micro-batches of ``--micro``, then ``all_reduce_gradients``, clipping and an AdamW step.
Rank 0 times each update between barriers. Worlds run interleaved for ``--rounds`` rounds;
the table gives the median update time and trained tokens per second. Each process uses
``--threads`` torch threads (1: K processes use K cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402


def _worker(rank, world, init_file, model_path, args, out_file):
    import torch.distributed as dist

    from ragen_envs.starpo import distributed as D
    from ragen_envs.starpo.core import policy_loss
    from ragen_envs.starpo.policy import load_policy, sequence_logprobs

    torch.set_num_threads(args.threads)
    D.init_distributed(init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(3, 300, (args.batch, args.seq), generator=g)
        att = torch.ones_like(ids)
        mask = torch.zeros((args.batch, args.seq))
        mask[:, -args.reply:] = 1
        adv = torch.randn((args.batch, args.seq), generator=g) * mask
        model = load_policy(model_path)
        with torch.no_grad():
            old = sequence_logprobs(model, ids, att, mask)[0]
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        share = D.shard_indices(args.batch)
        times = []
        for _ in range(args.repeats + 1):
            D.barrier()
            t0 = time.perf_counter()
            n_tok = D.global_sum(float(mask[share].sum()))
            for i in range(0, len(share), args.micro):
                sel = torch.as_tensor(share[i:i + args.micro])
                lp, _ = sequence_logprobs(model, ids[sel], att[sel], mask[sel])
                loss, _ = policy_loss(lp, old[sel], adv[sel], mask[sel], num_tokens=n_tok)
                loss.backward()
            D.all_reduce_gradients(model)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            D.barrier()
            times.append(time.perf_counter() - t0)
        if rank == 0:
            torch.save(times[1:], out_file)  # the first update warms up
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worlds", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2, help="timed updates per process start")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=600)
    ap.add_argument("--reply", type=int, default=250)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=384)
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    from ragen_envs.models import build_tiny_checkpoint

    worlds = [int(w) for w in args.worlds.split(",")]
    times: dict[int, list[float]] = {w: [] for w in worlds}
    with tempfile.TemporaryDirectory() as d:
        path = build_tiny_checkpoint(os.path.join(d, "model"), hidden_size=args.hidden, num_layers=args.layers,
                                     intermediate_size=args.intermediate)
        print(f"# batch {args.batch} x {args.seq} tokens ({args.reply} trained per row), micro {args.micro}, "
              f"threads/process {args.threads}, cores {os.cpu_count()}", flush=True)
        for r in range(args.rounds):
            for w in worlds:
                out = os.path.join(d, f"t_{r}_{w}.pt")
                mp.spawn(_worker, args=(w, os.path.join(d, f"init_{r}_{w}"), str(path), args, out), nprocs=w, join=True)
                t = torch.load(out)
                times[w] += t
                print(f"  round {r} world {w}: " + ", ".join(f"{x:.2f} s" for x in t), flush=True)
    tokens = args.batch * args.reply
    base = statistics.median(times[worlds[0]])
    print()
    print("| processes | median s / update | trained tokens / s | speed-up |")
    print("|---|---|---|---|")
    for w in worlds:
        med = statistics.median(times[w])
        print(f"| {w} | {med:.2f} | {tokens / med:.0f} | {base / med:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
