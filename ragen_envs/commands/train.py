"""``ragen train ENV_ID --preset starpo-s [--model PATH] [--steps N] [--out DIR] [--resume | --overwrite]``:
train a policy with StarPO / StarPO-S (``ragen_envs.starpo``).

Without ``--model`` a tiny local model is built (CPU-sized); with ``--model PATH`` any Hugging
Face causal LM directory with a chat template (e.g. a Qwen2.5-0.5B-Instruct download, or the
``DIR/model`` of ``ragen sft``). Writes ``DIR/metrics.jsonl``, ``DIR/checkpoints/``,
``DIR/curves.png`` and the final ``DIR/model`` (loadable as ``hf:DIR/model``). A DIR that
already holds a run is refused unless ``--resume`` (continue it) or ``--overwrite`` (delete it
and start over) is given.

Learning rates and batch sizes come from the model's size (``--profile auto``): below 50 M
parameters the tiny settings of ``make demo``, else the paper's (see docs/training.md); the
picked values are printed. ``--config FILE.yaml|.json`` reads any config fields,
``--print-config`` prints the resolved config (loadable with ``--config``) and exits.

Examples:
  ragen train ragen/Sokoban-v0 --preset starpo-s --steps 200 --out runs/sokoban
  ragen train ragen/FrozenLake-v0 --preset grpo --model runs/sft/model --set num_groups=4 --set actor_lr=1e-5
  ragen train ragen/Sokoban-v0 --out runs/sokoban --resume
  ragen train ragen/Sokoban-v0 --config my_run.yaml --print-config > resolved.yaml
  torchrun --nproc_per_node=2 -m ragen_envs.starpo ragen/Sokoban-v0 --out runs/sokoban2   # 2 processes
"""

from __future__ import annotations

import sys

from . import add_kwarg_limit_flag, check_env_kwargs_or_fail, kwarg_bounds_or_fail, parse_env_kwargs

# non-string config fields that also take a name (StarPOConfig expands it)
NAMED_VALUES = {"monitor": ("multiturn",)}


def _string_fields(cls) -> set[str]:
    """The fields of a config dataclass annotated as strings (``str``, ``str | None``): any
    other field given as a bare string in --set is a typo."""
    import dataclasses

    return {f.name for f in dataclasses.fields(cls)
            if "str" in str(f.type) and not str(f.type).startswith(("list", "dict", "tuple"))}


def register(sub) -> None:
    import argparse

    p = sub.add_parser("train", help="train a policy with StarPO / StarPO-S", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id", help="e.g. ragen/Sokoban-v0 (see `ragen list`)")
    p.add_argument("--preset", default=None, help="starpo-s (default) | starpo | grpo | nothink")
    p.add_argument("--profile", default=None, help="sizes: auto (default: from the model's parameter count) | tiny | full")
    p.add_argument("--model", help="a local Hugging Face model directory (default: build the tiny local model)")
    p.add_argument("--steps", type=int, help="rollout-update iterations (default 200)")
    p.add_argument("--out", default=None, help="output directory (default runs/starpo)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    g.add_argument("--overwrite", action="store_true", help="delete the run already in --out and start over")
    p.add_argument("--seed", type=int, help="run seed (default 0)")
    p.add_argument("--device", help="cuda when available, else cpu (default) | cuda:1 ...")
    p.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE", help="environment constructor kwarg (repeatable)")
    add_kwarg_limit_flag(p)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", dest="overrides",
                   help="any StarPOConfig field, e.g. num_groups=4, actor_lr=1e-5, keep_ratio=0.5 (repeatable)")
    p.add_argument("--config", metavar="FILE", help="a .yaml / .json file of StarPOConfig fields (+ preset, profile)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    p.set_defaults(run=run)


def resolve_config(args, extra: dict | None = None):
    """``(StarPOConfig, notes)`` of parsed ``ragen train`` arguments: defaults < size profile <
    the model's saved protocol settings < preset < ``--config`` file < flags < ``--set`` <
    ``extra``. ``notes``: the lines saying what was picked (sizes; protocol, when inherited).

    A ``--model`` folder written by ``ragen sft`` / ``ragen train`` carries
    ``ragen_protocol.json``: its env kwargs (think on/off, ...), forced prefix and reply cap
    carry over, so a model trained answer-only keeps answering answer-only."""
    import dataclasses

    from ..cli import CLIError
    from . import make_env_or_fail
    from .configfile import check_fields, coerce_numbers, load_config_file

    make_env_or_fail(args.env_id).close()  # a clear error for unknown ids
    from ..starpo.config import PRESETS, StarPOConfig, make_config

    known = {f.name for f in dataclasses.fields(StarPOConfig)}
    file = load_config_file(args.config) if getattr(args, "config", None) else {}
    check_fields(file, known | {"preset", "profile"}, f"--config {getattr(args, 'config', '')}")
    file = coerce_numbers(StarPOConfig, file)
    preset = args.preset or file.pop("preset", None) or "starpo-s"
    requested_profile = getattr(args, "profile", None) or file.pop("profile", None) or "auto"
    if preset not in PRESETS:
        raise CLIError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    overrides = parse_env_kwargs(getattr(args, "overrides", None))
    check_fields(overrides, known, "--set")
    for key, value in overrides.items():
        if isinstance(value, str) and key not in _string_fields(StarPOConfig) and value not in NAMED_VALUES.get(key, ()):
            raise CLIError(f"--set {key}={value}: expected a number, boolean, null or JSON value"
                           + (f" (or one of: {', '.join(NAMED_VALUES[key])})" if key in NAMED_VALUES else ""))
    explicit = dict(file)
    explicit["env_id"] = args.env_id
    env_kwargs = {**(file.get("env_kwargs") or {}), **parse_env_kwargs(args.env_kwarg)}
    if env_kwargs:
        explicit["env_kwargs"] = env_kwargs
    for key, attr in (("model", "model"), ("steps", "steps"), ("out_dir", "out"), ("seed", "seed"), ("device", "device")):
        value = getattr(args, attr, None)
        if value is not None:
            explicit[key] = value
    explicit.update(overrides)
    explicit.update(extra or {})
    notes: list[str] = []
    try:
        from ..starpo.profiles import sizes_for

        picked, line = sizes_for("train", requested_profile, explicit)
        notes.append("sizes: " + line)
        model = explicit.get("model")
        inherited = _inherited_protocol(model, preset, explicit) if model else {}
        if inherited:
            explicit.update(inherited)
            shown = ", ".join(f"{k}={v!r}" for k, v in inherited.items())
            notes.append(f"protocol (from {model}/ragen_protocol.json unless set): {shown}")
        cfg = make_config(preset, **{**picked, **explicit})
    except (TypeError, ValueError, FileNotFoundError, OSError) as exc:
        raise CLIError(str(exc)) from None
    # env kwargs from the command line, a config file or the model's saved settings: the same bounds
    check_env_kwargs_or_fail(cfg.env_kwargs, kwarg_bounds_or_fail(getattr(args, "kwarg_limit", None)))
    return cfg, notes


def _inherited_protocol(model: str, preset: str, explicit: dict) -> dict:
    """The config fields a model's saved protocol settings give (env kwargs, forced prefix,
    reply cap), less what the preset or the user set."""
    from ..lm.settings import load_settings
    from ..starpo.config import PRESETS

    saved = load_settings(model)
    if saved is None:
        return {}
    out: dict = {}
    preset_env = PRESETS[preset].get("env_kwargs", {})
    env_kwargs = {**saved.env_kwargs, **preset_env, **(explicit.get("env_kwargs") or {})}
    if env_kwargs != (explicit.get("env_kwargs") or {}):
        out["env_kwargs"] = env_kwargs
    if "force_prefix" not in explicit:
        out["force_prefix"] = bool(saved.reply_prefix)
    if "max_new_tokens" not in explicit:
        out["max_new_tokens"] = saved.max_new_tokens
    return out


def config_from_args(args, extra: dict | None = None):
    """The :class:`StarPOConfig` of parsed ``ragen train`` arguments (see :func:`resolve_config`)."""
    return resolve_config(args, extra)[0]


def run(args) -> int:
    import os

    from ..cli import CLIError

    _passive_omp()
    from ..models import require_train_extra

    try:
        require_train_extra()
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    cfg, notes = resolve_config(args)
    main_rank = os.environ.get("RANK", "0") == "0"  # under torchrun only rank 0 talks and touches files
    if args.print_config:
        from .configfile import dump_config

        print(dump_config(cfg.to_dict(), header=[f"ragen train {args.env_id} --preset {args.preset or 'starpo-s'}",
                                                 *notes]), end="")
        return 0
    if main_rank:
        from .rundir import claim_run_dir

        removed = claim_run_dir(cfg.out_dir, kind="train", resume=args.resume, overwrite=args.overwrite)
        if removed:
            print(f"--overwrite: deleted {len(removed)} entries of the old run in {cfg.out_dir}: {', '.join(removed)}")
        for line in notes:
            print(line)
    from ..starpo import distributed
    from ..starpo.trainer import StarPOTrainer

    try:
        try:
            trainer = StarPOTrainer(cfg, resume=args.resume)
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise CLIError(str(exc)) from None
        try:
            trainer.train()
        except OSError as exc:  # disk full while writing metrics, a checkpoint or the model
            raise CLIError(f"training stopped at step {trainer.step}: {' '.join(str(exc).split())}") from None
    finally:
        distributed.shutdown(clean=sys.exc_info()[0] is None)  # under torchrun: leave the process group
    return 0


def _passive_omp() -> None:
    """Let idle OpenMP threads sleep instead of spinning (set before torch loads): on a
    shared CPU, spinning threads of several torch processes slow each other down ~10x."""
    from ..devices import passive_omp

    passive_omp()
