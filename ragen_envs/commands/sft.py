"""``ragen sft ENV_ID [--model PATH] [--episodes N] [--steps S] [--out DIR]``: supervised
fine-tuning on expert trajectories (the RAGEN paper's App. G baseline; the warm start of
``ragen train``).

The expert agent plays ``--episodes`` episodes on layout seeds from ``--seed-start`` (default
10000, disjoint from the 256 EVAL_SEEDS 123..378); each reply is written in the protocol
format with a short think text (``--think-style``) and at most ``--actions-per-turn``
actions; the loss is on reply tokens only. Writes ``DIR/model`` (save_pretrained: load it
with ``ragen train --model DIR/model`` or as ``hf:DIR/model``) and ``DIR/sft_metrics.jsonl``.

Examples:
  ragen sft ragen/Sokoban-v0 --episodes 4000 --steps 1500 --out runs/sft
  ragen sft ragen/FrozenLake-v0 --model path/to/Qwen2.5-0.5B-Instruct --steps 200 --lr 1e-5 --device cuda
"""

from __future__ import annotations

from . import make_env_or_fail, parse_env_kwargs


def register(sub) -> None:
    import argparse

    p = sub.add_parser("sft", help="supervised fine-tuning on expert trajectories", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id", help="e.g. ragen/Sokoban-v0 (see `ragen list`)")
    p.add_argument("--model", help="a local Hugging Face model directory (default: build the tiny local model)")
    p.add_argument("--out", default="runs/sft", help="output directory (default runs/sft)")
    p.add_argument("--episodes", type=int, default=2000, help="expert episodes (default 2000)")
    p.add_argument("--seed-start", type=int, default=10_000, help="first layout seed of the expert episodes (default 10000)")
    p.add_argument("--steps", type=int, default=1000, help="optimiser steps (default 1000)")
    p.add_argument("--batch-size", type=int, default=16, help="episodes per step (default 16)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3, for the tiny model)")
    p.add_argument("--actions-per-turn", type=int, default=2, help="expert actions per reply (default 2)")
    p.add_argument("--think-style", default="grounded", help="grounded (default) | plan")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--device", default="cpu", help="cpu (default) | cuda ...")
    p.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE", help="environment constructor kwarg (repeatable)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..cli import CLIError

    from .train import _passive_omp

    _passive_omp()

    for name in ("episodes", "steps", "batch_size", "actions_per_turn"):
        if getattr(args, name) < 1:
            raise CLIError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.seed_start < 0 or args.lr <= 0:
        raise CLIError("--seed-start must be >= 0 and --lr > 0")
    env_kwargs = parse_env_kwargs(args.env_kwarg)
    make_env_or_fail(args.env_id, **env_kwargs).close()
    from ..models import require_train_extra

    try:
        require_train_extra()
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    from ..starpo.sft import THINK_STYLES, run_sft

    if args.think_style not in THINK_STYLES:
        raise CLIError(f"--think-style must be one of {', '.join(THINK_STYLES)}, got {args.think_style!r}")
    try:
        run_sft(args.env_id, args.out, model=args.model, episodes=args.episodes, seed_start=args.seed_start,
                steps=args.steps, batch_size=args.batch_size, lr=args.lr, think_style=args.think_style,
                actions_per_turn=args.actions_per_turn, env_kwargs=env_kwargs, seed=args.seed, device=args.device)
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise CLIError(str(exc)) from None
    return 0
