"""``ragen sft ENV_ID [--model PATH] [--episodes N] [--steps S] [--out DIR]``: supervised
fine-tuning on expert trajectories (the RAGEN paper's App. G baseline; the warm start of
``ragen train``). ``ragen sft [ENV_ID] --data FILE``: on the episodes of a trajectory dataset
instead (``ragen export``: Parquet or JSONL; ENV_ID picks one environment of the file).

The expert agent plays ``--episodes`` episodes on layout seeds from ``--seed-start`` (default
10000, disjoint from the 256 EVAL_SEEDS 123..378); each reply is written in the protocol
format with a short think text (``--think-style``) and at most ``--actions-per-turn``
actions; the loss is on reply tokens only. Writes ``DIR/model`` (save_pretrained: load it
with ``ragen train --model DIR/model`` or as ``hf:DIR/model``) and ``DIR/sft_metrics.jsonl``;
without ``--model`` the tiny local model is built first (``DIR/model_init``). A DIR that
already holds a run is refused unless ``--overwrite`` (delete it and start over) is given;
there is no ``--resume`` (a run starts from its first step). An input (``--data``,
``--model``, ``--config``) inside DIR is refused: the run writes there and ``--overwrite``
empties it. Episodes longer than the model's context are skipped and counted. The run ends
with the success on ``--heldout`` N (default 64, 0: skip) held-out layouts (from seed 30000,
past the training seeds and the 256 EVAL_SEEDS), one episode each at temperature 0.5.

``--format tools``: the model learns the transcript TRL's ``GRPOTrainer(environment_factory=
make_environment_factory(ENV_ID))`` renders (``ragen_envs.integrations.trl``): each reply the
argument of an ``act`` tool call, each observation its result, then a message without a call
— an untrained model never calls the tool, so TRL's rewards are all the same and it learns
nothing. The tiny model gets the tool layout as phrases; no ``ragen_protocol.json`` is saved.

Learning rate, batch size and warm-up come from the model's size (``--profile auto``): below
50 M parameters the tiny settings of ``make demo`` (lr 2e-3, 32 episodes a step), else lr
1e-5 and 16 episodes a step; the picked values are printed. ``--config FILE.yaml|.json``
reads any SFTConfig field, ``--print-config`` prints the resolved config and exits.

With ``--data FILE`` the file's ``messages`` are tokenized with the model's chat template
exactly as a rollout lays them out (the forced ``<think>`` prefix is prompt; an episode with a
reply that lacks it is skipped), or, with ``--token-ids``, its ``token_ids`` / ``loss_mask``
(trainer rollouts of the same tokenizer) are used as they are; ``--successful-only`` and
``--min-return`` select episodes; the env kwargs are the file's.

Examples:
  ragen sft ragen/Sokoban-v0 --episodes 4000 --steps 1500 --out runs/sft
  ragen export runs/eval-gpt --out gpt.parquet; ragen sft --data gpt.parquet --successful-only --out runs/sft-gpt
  ragen sft ragen/FrozenLake-v0 --model path/to/Qwen2.5-0.5B-Instruct --steps 200 --device cuda
  ragen sft ragen/Sokoban-v0 --print-config > sft.yaml; ragen sft ragen/Sokoban-v0 --config sft.yaml --out runs/sft2
  ragen sft ragen/Sokoban-v0 --format tools --env-kwarg max_turns=2 --episodes 256 --steps 120 --out runs/sft-tools
"""

from __future__ import annotations

from . import add_kwarg_limit_flag, kwarg_bounds_or_fail, make_env_or_fail, parse_env_kwargs

# flag -> SFTConfig field, for the flags that are plain copies of a field
_FLAGS = {"model": "model", "out": "out_dir", "episodes": "episodes", "seed_start": "seed_start", "steps": "steps",
          "batch_size": "batch_size", "lr": "lr", "actions_per_turn": "actions_per_turn", "think_style": "think_style",
          "context_coef": "context_coef", "seed": "seed", "device": "device", "data": "data",
          "successful_only": "successful_only", "min_return": "min_return", "token_ids": "token_ids",
          "lr_schedule": "lr_schedule", "ema_decay": "ema_decay", "stop_at_success": "stop_at_success",
          "validate_every": "validate_every", "format": "format", "heldout": "heldout_episodes"}


def register(sub) -> None:
    import argparse

    p = sub.add_parser("sft", help="supervised fine-tuning on expert trajectories or a dataset file", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id", nargs="?", help="e.g. ragen/Sokoban-v0 (see `ragen list`); with --data: the file's one env")
    p.add_argument("--model", help="a local Hugging Face model directory (default: build the tiny local model)")
    p.add_argument("--out", help="output directory (default runs/sft)")
    p.add_argument("--overwrite", action="store_true", help="delete the run already in --out and start over")
    # sft has no resume (a run is short, and it keeps no optimiser checkpoints): `--resume` is taken here only to
    # answer it in one line under `ragen sft:` instead of argparse's top-level "unrecognized arguments"
    p.add_argument("--resume", nargs="?", const=True, default=None, help=argparse.SUPPRESS)
    p.add_argument("--profile", default=None, help="sizes: auto (default: from the model's parameter count) | tiny | full")
    p.add_argument("--episodes", type=int, help="expert episodes (default 2000)")
    p.add_argument("--seed-start", type=int, help="first layout seed of the expert episodes (default 10000)")
    p.add_argument("--steps", type=int, help="optimiser steps (default 1000)")
    p.add_argument("--batch-size", type=int, help="episodes per step (default: from the profile, 32 tiny / 16 full)")
    p.add_argument("--lr", type=float, help="peak learning rate (default: from the profile, 2e-3 tiny / 1e-5 full)")
    p.add_argument("--lr-schedule", help="cosine (default): decay over all steps | wsd: constant, then a linear "
                                         "decay over the last 20 %% of the steps")
    p.add_argument("--ema-decay", type=float, help="save a moving average of the weights (e.g. 0.99) instead of the "
                                                   "last step's (default: from the profile, 0 = off)")
    p.add_argument("--stop-at-success", type=float, metavar="S",
                   help="early stopping: end at the first held-out check (512 layouts from seed 30000, after step "
                        "1000 and every --validate-every steps after it) whose success is >= S (default: off)")
    p.add_argument("--validate-every", type=int, metavar="N", help="with --stop-at-success: steps between checks "
                                                                  "(default 100)")
    p.add_argument("--format", choices=("protocol", "tools"),
                   help="what the model learns to write: protocol (default): each reply an assistant message, as "
                        "ragen train / ragen eval hf: / TRL's rollout_func play | tools: each reply an act(reply) "
                        "tool call and each observation its result, the transcript TRL's "
                        "GRPOTrainer(environment_factory=...) renders (an untrained model never calls the tool)")
    p.add_argument("--heldout", type=int, metavar="N",
                   help="at the end: success on N held-out layouts (seed 30000 on, past the training seeds and "
                        "the EVAL_SEEDS), one episode each at temperature 0.5 (default 64; 0 skips it)")
    p.add_argument("--actions-per-turn", type=int, help="expert actions per reply (default 2)")
    p.add_argument("--think-style", help="grounded (default) | plan")
    p.add_argument("--context-coef", type=float,
                   help="weight of an auxiliary LM loss on prompts and observations (default: from the profile, "
                        "0.5 tiny / 0 full)")
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--device", help="cuda when available, else cpu (default) | cuda:1 ...")
    p.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE", help="environment constructor kwarg (repeatable)")
    add_kwarg_limit_flag(p)
    p.add_argument("--data", metavar="FILE", help="train on a trajectory dataset (.parquet / .jsonl from `ragen export`)")
    p.add_argument("--successful-only", action="store_true", default=None, help="with --data: only successful episodes")
    p.add_argument("--min-return", type=float, help="with --data: only episodes whose return is at least this")
    p.add_argument("--token-ids", action="store_true", default=None,
                   help="with --data: use the file's token_ids / loss_mask as they are (same tokenizer)")
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
    env_kwargs = {**(file.get("env_kwargs") or {}), **parse_env_kwargs(args.env_kwarg)}
    if env_kwargs:
        explicit["env_kwargs"] = env_kwargs
    for flag, name in _FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            explicit[name] = value
    env_id = args.env_id or file.get("env_id")
    if explicit.get("data"):
        env_id, explicit["env_kwargs"] = _data_env(explicit["data"], env_id, explicit.get("env_kwargs"))
    elif env_id is None:
        raise CLIError("an ENV_ID is needed (e.g. ragen/Sokoban-v0), or --data FILE to train on a dataset")
    explicit["env_id"] = env_id
    make_env_or_fail(env_id, bounds=kwarg_bounds_or_fail(getattr(args, "kwarg_limit", None)),
                     **explicit.get("env_kwargs", {})).close()
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


def _data_env(path: str, env_id: str | None, env_kwargs: dict | None) -> tuple[str, dict]:
    """The environment id and kwargs of a dataset file's episodes (ENV_ID picks one)."""
    import json

    from ..cli import CLIError
    from ..trajectories import DatasetError, read_dataset

    try:
        rows = read_dataset(path)
    except DatasetError as exc:
        raise CLIError(f"--data {exc}") from None
    envs = sorted({r["env_id"] for r in rows})
    if env_id is None:
        if len(envs) > 1:
            raise CLIError(f"--data {path} holds episodes of {', '.join(envs)}; name one: ragen sft ENV_ID --data {path}")
        env_id = envs[0]
    elif env_id not in envs:
        raise CLIError(f"--data {path} holds no episode of {env_id} (only {', '.join(envs)})")
    settings = {r["env_kwargs"] for r in rows if r["env_id"] == env_id and isinstance(r["env_kwargs"], str)}
    try:
        file_kwargs = json.loads(settings.pop()) if len(settings) == 1 else {}
    except json.JSONDecodeError:
        raise CLIError(f"--data {path}: env_kwargs is not a JSON object") from None
    # the file's env kwargs pass the gate of every file's: no operator-only keyword (a remote
    # backend's host, a catalog path), known names, booleans that are booleans, the bounds
    from . import validate_env_kwargs_or_fail

    file_kwargs = validate_env_kwargs_or_fail(env_id, file_kwargs, source=f"--data {path}: env_kwargs",
                                              operator=False)
    if env_kwargs and {**file_kwargs, **env_kwargs} != file_kwargs:
        raise CLIError(f"--data {path}: its episodes were played with env kwargs {json.dumps(file_kwargs)}; "
                       "--env-kwarg cannot change them")
    return env_id, file_kwargs


def check_no_clobber(out_dir: str, inputs: dict[str, str | None]) -> None:
    """CLIError when an input path of the run (``{flag: path}``: --data, --model, --config)
    is --out or lies inside it: the run writes there, and ``--overwrite`` empties it first.
    Paths that do not exist (a hub id, nothing given) are not inputs on this disk."""
    from pathlib import Path

    from ..cli import CLIError

    out = Path(out_dir).expanduser().resolve()
    for flag, value in inputs.items():
        if not value or not Path(value).expanduser().exists():
            continue
        where = Path(value).expanduser().resolve()
        if where == out or out in where.parents:
            raise CLIError(f"{flag} {value} lies inside --out {out_dir}, which this run writes into (and --overwrite "
                           "empties): pick another --out, or move it out of there first")


def run(args) -> int:
    from ..cli import CLIError

    if args.resume is not None:
        raise CLIError("sft has no --resume (a run starts from its first step): run it again with --overwrite to "
                       "start over in the same --out, or give a new --out")
    from ..devices import passive_omp as _passive_omp

    _passive_omp()
    from ..models import require_train_extra

    try:
        require_train_extra()
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    cfg, profile_line = resolve_config(args)
    if args.print_config:
        from .configfile import dump_config

        print(dump_config(cfg.to_dict(), header=[f"ragen sft {cfg.env_id}", profile_line]), end="")
        return 0
    check_no_clobber(cfg.out_dir, {"--data": cfg.data, "--model": cfg.model, "--config": args.config})
    from .._rundir import claim_run_dir

    removed = claim_run_dir(cfg.out_dir, kind="sft", overwrite=args.overwrite, can_resume=False)
    if removed:
        print(f"--overwrite: deleted {len(removed)} entries of the old run in {cfg.out_dir}: {', '.join(removed)}")
    print(f"sizes: {profile_line}")
    from ..starpo.sft import run_sft

    try:
        run_sft(cfg.env_id, cfg.out_dir, model=cfg.model, tiny_model=cfg.tiny_model, episodes=cfg.episodes,
                seed_start=cfg.seed_start, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup=cfg.warmup,
                think_style=cfg.think_style, actions_per_turn=cfg.actions_per_turn, env_kwargs=cfg.env_kwargs,
                max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, device=cfg.device, context_coef=cfg.context_coef,
                data=cfg.data, successful_only=cfg.successful_only, min_return=cfg.min_return,
                use_token_ids=cfg.token_ids, lr_schedule=cfg.lr_schedule, ema_decay=cfg.ema_decay,
                ema_from=cfg.ema_from, stop_at_success=cfg.stop_at_success, validate_from=cfg.validate_from,
                validate_every=cfg.validate_every, validation_seed_start=cfg.validation_seed_start,
                validation_episodes=cfg.validation_episodes, format=cfg.format, heldout_episodes=cfg.heldout_episodes)
    except (FileNotFoundError, ValueError, OSError, ImportError) as exc:
        raise CLIError(str(exc)) from None
    return 0
