"""``ragen sft ENV_ID [--model PATH] [--episodes N] [--steps S] [--out DIR]``: supervised
fine-tuning on expert trajectories (the RAGEN paper's App. G baseline; the warm start of
``ragen train``).

The expert agent plays ``--episodes`` episodes on layout seeds from ``--seed-start`` (default
10000, disjoint from the 256 EVAL_SEEDS 123..378); each reply is written in the protocol
format with a short think text (``--think-style``) and at most ``--actions-per-turn``
actions; the loss is on reply tokens only. Writes ``DIR/model`` (save_pretrained: load it
with ``ragen train --model DIR/model`` or as ``hf:DIR/model``) and ``DIR/sft_metrics.jsonl``;
without ``--model`` the tiny local model is built first (``DIR/model_init``). A DIR that
already holds a run is refused unless ``--overwrite`` (delete it and start over) is given.

Learning rate, batch size and warm-up come from the model's size (``--profile auto``): below
50 M parameters the tiny settings of ``make demo`` (lr 2e-3, 32 episodes a step), else lr
1e-5 and 16 episodes a step; the picked values are printed. ``--config FILE.yaml|.json``
reads any SFTConfig field, ``--print-config`` prints the resolved config and exits.

Examples:
  ragen sft ragen/Sokoban-v0 --episodes 4000 --steps 1500 --out runs/sft
  ragen sft ragen/FrozenLake-v0 --model path/to/Qwen2.5-0.5B-Instruct --steps 200 --device cuda
  ragen sft ragen/Sokoban-v0 --print-config > sft.yaml; ragen sft ragen/Sokoban-v0 --config sft.yaml --out runs/sft2
"""

from __future__ import annotations

from . import make_env_or_fail, parse_env_kwargs

# flag -> SFTConfig field, for the flags that are plain copies of a field
_FLAGS = {"model": "model", "out": "out_dir", "episodes": "episodes", "seed_start": "seed_start", "steps": "steps",
          "batch_size": "batch_size", "lr": "lr", "actions_per_turn": "actions_per_turn", "think_style": "think_style",
          "context_coef": "context_coef", "seed": "seed", "device": "device"}


def register(sub) -> None:
    import argparse

    p = sub.add_parser("sft", help="supervised fine-tuning on expert trajectories", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id", help="e.g. ragen/Sokoban-v0 (see `ragen list`)")
    p.add_argument("--model", help="a local Hugging Face model directory (default: build the tiny local model)")
    p.add_argument("--out", help="output directory (default runs/sft)")
    p.add_argument("--overwrite", action="store_true", help="delete the run already in --out and start over")
    p.add_argument("--profile", default=None, help="sizes: auto (default: from the model's parameter count) | tiny | full")
    p.add_argument("--episodes", type=int, help="expert episodes (default 2000)")
    p.add_argument("--seed-start", type=int, help="first layout seed of the expert episodes (default 10000)")
    p.add_argument("--steps", type=int, help="optimiser steps (default 1000)")
    p.add_argument("--batch-size", type=int, help="episodes per step (default: from the profile, 32 tiny / 16 full)")
    p.add_argument("--lr", type=float, help="peak learning rate (default: from the profile, 2e-3 tiny / 1e-5 full)")
    p.add_argument("--actions-per-turn", type=int, help="expert actions per reply (default 2)")
    p.add_argument("--think-style", help="grounded (default) | plan")
    p.add_argument("--context-coef", type=float,
                   help="weight of an auxiliary LM loss on prompts and observations (default: from the profile, "
                        "0.5 tiny / 0 full)")
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--device", help="cuda when available, else cpu (default) | cuda:1 ...")
    p.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE", help="environment constructor kwarg (repeatable)")
    p.add_argument("--config", metavar="FILE", help="a .yaml / .json file of SFTConfig fields (+ profile)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    p.set_defaults(run=run)


def resolve_config(args):
    """``(SFTConfig, profile line)``: defaults < size profile < ``--config`` file < flags."""
    import dataclasses

    from ..cli import CLIError
    from ..starpo.config import SFTConfig
    from .configfile import check_fields, coerce_numbers, load_config_file

    known = {f.name for f in dataclasses.fields(SFTConfig)}
    file = load_config_file(args.config) if args.config else {}
    check_fields(file, known | {"profile"}, f"--config {args.config}")
    file = coerce_numbers(SFTConfig, file)
    requested_profile = args.profile or file.pop("profile", None) or "auto"
    explicit = dict(file)
    explicit["env_id"] = args.env_id
    env_kwargs = {**(file.get("env_kwargs") or {}), **parse_env_kwargs(args.env_kwarg)}
    if env_kwargs:
        explicit["env_kwargs"] = env_kwargs
    for flag, name in _FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            explicit[name] = value
    make_env_or_fail(args.env_id, **explicit.get("env_kwargs", {})).close()
    try:
        from ..starpo.profiles import sizes_for

        picked, line = sizes_for("sft", requested_profile, explicit)
        cfg = SFTConfig(**{**picked, **explicit})
    except (TypeError, ValueError, FileNotFoundError, OSError) as exc:
        flag = {v: k for k, v in _FLAGS.items()}
        msg = str(exc)
        for name, fl in flag.items():  # name the flag the user typed
            if msg.startswith(f"{name} ") and name in explicit and name not in file:
                msg = f"--{fl.replace('_', '-')}" + msg[len(name):]
        raise CLIError(msg) from None
    return cfg, line


def run(args) -> int:
    from ..cli import CLIError

    from .train import _passive_omp

    _passive_omp()
    from ..models import require_train_extra

    try:
        require_train_extra()
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    cfg, profile_line = resolve_config(args)
    if args.print_config:
        from .configfile import dump_config

        print(dump_config(cfg.to_dict(), header=[f"ragen sft {args.env_id}", profile_line]), end="")
        return 0
    from .rundir import claim_run_dir

    removed = claim_run_dir(cfg.out_dir, kind="sft", overwrite=args.overwrite, can_resume=False)
    if removed:
        print(f"--overwrite: deleted {len(removed)} entries of the old run in {cfg.out_dir}: {', '.join(removed)}")
    print(f"sizes: {profile_line}")
    from ..starpo.sft import run_sft

    try:
        run_sft(cfg.env_id, cfg.out_dir, model=cfg.model, tiny_model=cfg.tiny_model, episodes=cfg.episodes,
                seed_start=cfg.seed_start, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup=cfg.warmup,
                think_style=cfg.think_style, actions_per_turn=cfg.actions_per_turn, env_kwargs=cfg.env_kwargs,
                max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, device=cfg.device, context_coef=cfg.context_coef)
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise CLIError(str(exc)) from None
    return 0
