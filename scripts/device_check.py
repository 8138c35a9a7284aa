"""Device check: a few StarPO-S iterations on Sokoban with a randomly initialised model of
Qwen2.5-0.5B's size (no download), printing tokens/s, step time by phase and peak memory,
then (``--memory-table``) a forward/backward memory / throughput table of the actor.

    python scripts/device_check.py                       # GPU: the 0.5B-sized model, bf16
    python scripts/device_check.py --tiny --device cpu   # CPU smoke test (seconds)

The model: ``Qwen2Config`` with hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate
4864, vocab 151936 (Qwen2.5-0.5B's shapes; tied embeddings), random weights. The tokenizer is
the tiny protocol BPE of ``ragen_envs.models.build_tiny_tokenizer`` (a few hundred ids): the
embedding matrix keeps Qwen's 151936 rows, so memory and LM-head cost are the real model's
and the tokenizer's ids are a subset. ``--tiny`` builds a 2-layer model over the tokenizer's
own vocabulary instead.

``--sampler cached`` (default) is the trainer as it is (the multi-turn KV-cache sampler);
``--sampler per_turn`` swaps in the per-turn sampler (:class:`~ragen_envs.starpo.rollout.ModelResponder`)
in this process only, for comparison. ``--gradient-checkpointing``, ``--lora-rank R`` and
``--sharding none|ddp|fsdp`` (``--fsdp-mixed-precision``) set the trainer's config fields of
the same names; sharding acts with several processes::

    torchrun --standalone --nproc_per_node=8 scripts/device_check.py --sharding fsdp   # 8 GPUs, nccl

(rank 0 builds the model, prints and writes). Writes ``OUT/device_check.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from ragen_envs.models import QWEN25_05B, build_random_checkpoint  # noqa: E402

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            max_position_embeddings=4096)


def build_checkpoint(path: Path, tiny: bool, dtype: torch.dtype, shape: dict | None = None) -> tuple[Path, int]:
    """A random Qwen2 (Qwen2.5-0.5B's shapes, or ``TINY``; ``shape`` overrides the config,
    e.g. fewer layers) with the tiny protocol tokenizer, saved to ``path``
    (:func:`ragen_envs.models.build_random_checkpoint`)."""
    return build_random_checkpoint(path, shape if shape is not None else TINY if tiny else QWEN25_05B, dtype)


def memory_table(model_path: Path, device: str, seq_len: int, reply_tokens: int, micro_sizes: list[int],
                 dtypes: list[str]) -> list[dict]:
    """Forward + backward of the actor's token log-prob loss on micro-batches of
    ``seq_len``-token sequences (the last ``reply_tokens`` masked in): peak memory and
    tokens/s for each dtype x gradient checkpointing x micro-batch size."""
    from ragen_envs.starpo import scale
    from ragen_envs.starpo.core import masked_mean
    from ragen_envs.starpo.policy import load_policy, sequence_logprobs

    rows = []
    for dtype in dtypes:
        for gc in (False, True):
            model = load_policy(model_path, device, getattr(torch, dtype))
            if gc:
                scale.enable_gradient_checkpointing(model)
            vocab = min(model.config.vocab_size, 300)
            for mb in micro_sizes:
                g = torch.Generator().manual_seed(mb)
                ids = torch.randint(3, vocab, (mb, seq_len), generator=g)
                att = torch.ones_like(ids)
                mask = torch.zeros((mb, seq_len))
                mask[:, -reply_tokens:] = 1
                model.zero_grad(set_to_none=True)
                scale.reset_peak_memory(device)
                try:
                    times = []
                    for _ in range(2):
                        t0 = time.perf_counter()
                        lp, ent = sequence_logprobs(model, ids, att, mask, with_entropy=True, share_prefix=False)
                        loss = -masked_mean(lp, mask.to(lp.device)) - 0.001 * masked_mean(ent, mask.to(lp.device))
                        loss.backward()
                        if str(device).startswith("cuda"):
                            torch.cuda.synchronize()
                        times.append(time.perf_counter() - t0)
                    mem = scale.memory_stats(device)
                    row = {"dtype": dtype, "grad_checkpointing": gc, "micro_batch": mb, "seq_len": seq_len,
                           "fwd_bwd_s": round(times[-1], 4), "tokens_per_s": round(mb * seq_len / times[-1], 1), **mem}
                except torch.OutOfMemoryError:
                    row = {"dtype": dtype, "grad_checkpointing": gc, "micro_batch": mb, "seq_len": seq_len, "oom": True}
                    torch.cuda.empty_cache()
                print("  memory", json.dumps(row), flush=True)
                rows.append(row)
            del model
            if str(device).startswith("cuda"):
                torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model (CPU smoke test)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--sampler", choices=("cached", "per_turn"), default="cached")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--sharding", choices=("none", "ddp", "fsdp"), default="none",
                    help="the trainer's sharding (acts under torchrun with several processes)")
    ap.add_argument("--fsdp-mixed-precision", action="store_true")
    ap.add_argument("--memory-table", action="store_true")
    ap.add_argument("--table-seq-len", type=int, default=1024)
    ap.add_argument("--table-micro", default="4,16")
    ap.add_argument("--out", default="runs/device_check")
    args = ap.parse_args(argv)
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    if args.device == "cpu":
        torch.set_num_threads(min(torch.get_num_threads(), 2))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from ragen_envs.starpo import distributed as D
    from ragen_envs.starpo import scale
    from ragen_envs.starpo import trainer as trainer_mod
    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.rollout import ModelResponder

    ctx = D.init_distributed(args.device)  # (torchrun: every rank joins; rank 0 reports)
    say = print if ctx.is_main else (lambda *a, **k: None)
    info = {"device": args.device, "dtype": dtype, "tiny": args.tiny, "sampler": args.sampler, "torch": torch.__version__,
            "gradient_checkpointing": args.gradient_checkpointing, "lora_rank": args.lora_rank,
            "sharding": args.sharding, "fsdp_mixed_precision": args.fsdp_mixed_precision, "processes": ctx.world_size}
    if args.device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
    t0 = time.perf_counter()
    built = build_checkpoint(out / "model_init", args.tiny, getattr(torch, dtype)) if ctx.is_main else None
    path, n_params = D.broadcast_object(built)
    info["parameters"] = n_params
    info["build_s"] = round(time.perf_counter() - t0, 2)
    say(f"model: {n_params / 1e6:.1f} M parameters ({'tiny' if args.tiny else 'Qwen2.5-0.5B shapes'}), {dtype} on "
          f"{args.device}; built in {info['build_s']} s", flush=True)

    if args.sampler == "per_turn":
        trainer_mod.CachedResponder = ModelResponder  # this process only
    cfg = make_config("starpo-s", model=str(path), out_dir=str(out / "run"), device=args.device, dtype=dtype,
                      steps=args.steps, num_groups=args.groups, group_size=args.group_size,
                      max_new_tokens=args.max_new_tokens, eval_every=0, probe_every=0, save_every=0, plots=False,
                      log_samples=0, mini_batch_size=args.groups * args.group_size, micro_batch_size=args.micro_batch,
                      gradient_checkpointing=args.gradient_checkpointing, lora_rank=args.lora_rank,
                      sharding=args.sharding, fsdp_mixed_precision=args.fsdp_mixed_precision)
    scale.reset_peak_memory(args.device)
    tr = trainer_mod.StarPOTrainer(cfg, log=lambda s: print(s, flush=True))  # (logs on rank 0 only)
    info["trainable_parameters"] = sum(p.numel() for p in scale.trainable_parameters(tr.actor))
    steps = []
    for _ in range(args.steps):
        row = tr.train_step()
        gen = row["perf/gen_tokens_per_s"] * row["time/rollout"]
        steps.append({"step": row["step"], "rollout_s": round(row["time/rollout"], 3),
                      "update_s": round(row.get("time/update", 0.0), 3), "step_s": round(row["time/step"], 3),
                      "generated_tokens": int(round(gen)), "gen_tokens_per_s": round(row["perf/gen_tokens_per_s"], 1),
                      "update_tokens": row.get("update/tokens"),
                      "update_tokens_per_s": round(row.get("perf/update_tokens_per_s", 0.0), 1)})
        say("  phase", json.dumps(steps[-1]), flush=True)
    info["peak_memory_train"] = scale.memory_stats(args.device)
    info["peak_memory_train_per_rank"] = D.all_gather_objects(info["peak_memory_train"])
    info["steps"] = steps
    later = steps[1:] or steps
    info["median_after_first"] = {k: statistics.median(s[k] for s in later)
                                  for k in ("rollout_s", "update_s", "step_s", "gen_tokens_per_s", "update_tokens_per_s")}
    say("peak memory (training):", json.dumps(info["peak_memory_train"]), flush=True)
    say("median of steps after the first:", json.dumps(info["median_after_first"]), flush=True)
    del tr
    if not ctx.is_main:
        D.shutdown()
        return 0
    if args.memory_table:
        micro = [int(x) for x in args.table_micro.split(",")]
        info["memory_table"] = memory_table(path, args.device, args.table_seq_len, args.table_seq_len // 2, micro, [dtype])
    (out / "device_check.json").write_text(json.dumps(info, indent=2))
    print(f"wrote {out / 'device_check.json'}", flush=True)
    D.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
