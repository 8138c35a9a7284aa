"""``ragen train ENV_ID --preset starpo-s [--model PATH] [--steps N] [--out DIR] [--overwrite]``,
``ragen train --out DIR --resume [--steps N]``: train a policy with StarPO / StarPO-S
(``ragen_envs.starpo``).

Without ``--model`` a tiny local model is built (CPU-sized); with ``--model PATH`` any Hugging
Face causal LM directory with a chat template (e.g. a Qwen2.5-0.5B-Instruct download, or the
``DIR/model`` of ``ragen sft``). Writes ``DIR/config.json``, ``DIR/metrics.jsonl``,
``DIR/checkpoints/``, ``DIR/curves.png`` and the final ``DIR/model`` (loadable as
``hf:DIR/model``). A DIR that already holds a run is refused unless ``--resume`` (continue it)
or ``--overwrite`` (delete it and start over) is given; a new run that fails before its
first result leaves DIR as it found it.

``--resume`` continues the run as it was started: everything comes from ``DIR/config.json``
(env, model, sizes, seeds, protocol); only ``--steps``, ``--device`` and the checkpoint and
logging fields may change (``starpo.config.RESUMABLE``, printed when they do); any other flag
must repeat the saved value, or it is refused in one line. Ctrl-C prints the checkpoint kept
and the command that continues.

Learning rates and batch sizes come from the model's size (``--profile auto``): below 50 M
parameters the tiny settings of ``make demo``, else the paper's (see docs/training.md); the
picked values are printed. ``--config FILE.yaml|.json`` reads any config fields,
``--print-config`` prints the resolved config (loadable with ``--config``) and exits.

Examples:
  ragen train ragen/Sokoban-v0 --preset starpo-s --steps 200 --out runs/sokoban
  ragen train ragen/FrozenLake-v0 --preset grpo --model runs/sft/model --set num_groups=4 --set actor_lr=1e-5
  ragen train --out runs/sokoban --resume                    # continue it (add --steps N to go further)
  ragen train ragen/Sokoban-v0 --config my_run.yaml --print-config > resolved.yaml
  torchrun --nproc_per_node=2 -m ragen_envs.starpo ragen/Sokoban-v0 --out runs/sokoban2   # 2 processes
  torchrun --nproc_per_node=2 -m ragen_envs.starpo --out runs/sokoban2 --resume
"""

from __future__ import annotations

import sys

from . import add_kwarg_limit_flag, kwarg_bounds_or_fail, parse_env_kwargs

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
    p.add_argument("env_id", nargs="?", help="e.g. ragen/Sokoban-v0 (see `ragen list`); optional with --resume (the run's own)")
    p.add_argument("--preset", default=None, help="starpo-s (default) | starpo | grpo | nothink | ragen2")
    p.add_argument("--profile", default=None, help="sizes: auto (default: from the model's parameter count) | tiny | full")
    p.add_argument("--model", help="a local Hugging Face model directory (default: build the tiny local model)")
    p.add_argument("--steps", type=int, help="rollout-update iterations (default 200)")
    p.add_argument("--out", default=None, help="output directory (default runs/starpo)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest checkpoint with its saved config (DIR/config.json); "
                        "only --steps, --device and the checkpoint and logging fields may change (docs/training.md), "
                        "any other flag must repeat the saved value")
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

    bounds = kwarg_bounds_or_fail(getattr(args, "kwarg_limit", None))
    make_env_or_fail(args.env_id, bounds).close()  # a clear error for unknown ids
    from ..starpo.config import PRESETS, StarPOConfig, make_config, rename_reference_fields

    known = {f.name for f in dataclasses.fields(StarPOConfig)}
    file = load_config_file(args.config) if getattr(args, "config", None) else {}
    try:
        file = rename_reference_fields(file)
    except ValueError as exc:
        raise CLIError(f"--config {args.config}: {exc}") from None
    check_fields(file, known | {"preset", "profile"}, f"--config {getattr(args, 'config', '')}")
    file = coerce_numbers(StarPOConfig, file)
    preset = args.preset or file.pop("preset", None) or "starpo-s"
    requested_profile = getattr(args, "profile", None) or file.pop("profile", None) or "auto"
    if preset not in PRESETS:
        raise CLIError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    overrides = parse_env_kwargs(getattr(args, "overrides", None), flag="--set")
    try:
        overrides = rename_reference_fields(overrides)
    except ValueError as exc:
        raise CLIError(f"--set: {exc}") from None
    check_fields(overrides, known, "--set")
    for key, value in overrides.items():
        if isinstance(value, str) and key not in _string_fields(StarPOConfig) and value not in NAMED_VALUES.get(key, ()):
            raise CLIError(f"--set {key}={value}: expected a number, boolean, null or JSON value"
                           + (f" (or one of: {', '.join(NAMED_VALUES[key])})" if key in NAMED_VALUES else ""))
    explicit = dict(file)
    explicit["env_id"] = args.env_id
    from . import validate_env_kwargs_or_fail

    env_kwargs = {**validate_env_kwargs_or_fail(args.env_id, file.get("env_kwargs"), bounds,
                                                source=f"--config {getattr(args, 'config', '')}: env_kwargs"),
                  **validate_env_kwargs_or_fail(args.env_id, parse_env_kwargs(args.env_kwarg), bounds)}
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
    # env kwargs from the command line, a config file (the operator's) or the model's saved settings
    # (checked as a file's when loaded: lm.settings): one gate, and the env must build with them
    make_env_or_fail(cfg.env_id, bounds, source="env_kwargs", **cfg.env_kwargs).close()
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


# --------------------------------------------------------------------------- --resume
def _may_change() -> str:
    """What ``--resume`` applies, for its messages (the fields: ``starpo.config.RESUMABLE``)."""
    from ..starpo.config import RESUMABLE

    return "--steps, --device and --set " + "/".join(f for f in RESUMABLE if f not in ("steps", "device", "out_dir"))


UNSET = object()  # an env kwarg the run did not set


def _env_kwarg(env_kwargs: dict, key: str):
    """An env kwarg as the trainer reads it: ``think`` is on unless set."""
    return env_kwargs.get(key, True if key == "think" else UNSET)


def _flag_sources(args, file: dict, config_path: str | None) -> dict[str, str]:
    """What each flag given with ``--resume`` sets: config field (``env_kwargs.KEY`` for one
    env kwarg) -> the flag as the user wrote it, in :func:`resolve_config`'s precedence
    (profile < preset < ``--config`` < flags < ``--set``: the last source of a field wins).
    ``--preset`` speaks for every field some preset sets, ``--profile`` for every size."""
    from ..starpo.config import PRESETS
    from ..starpo.profiles import PROFILES

    out: dict[str, str] = {}
    profile = getattr(args, "profile", None) or file.get("profile")
    if profile:
        by = f"--profile {profile}" if getattr(args, "profile", None) else f"--config {config_path} (profile: {profile})"
        out.update({f: by for prof in PROFILES.values() for f in prof["train"]})
    preset = args.preset or file.get("preset")
    if preset:
        by = f"--preset {preset}" if args.preset else f"--config {config_path} (preset: {preset})"
        for fields in PRESETS.values():
            for f, v in fields.items():
                out.update({f"env_kwargs.{k}": by for k in v} if f == "env_kwargs" else {f: by})
    for key, value in file.items():
        if key in ("preset", "profile"):
            continue
        if key == "env_kwargs" and isinstance(value, dict):
            out.update({f"env_kwargs.{k}": f"--config {config_path} (env_kwargs: {k}: {v!r})" for k, v in value.items()})
        else:
            out[key] = f"--config {config_path} ({key}: {value!r})"
    if args.env_id:
        out["env_id"] = f"ENV_ID {args.env_id}"
    for key, attr in (("model", "model"), ("steps", "steps"), ("seed", "seed"), ("device", "device")):
        if getattr(args, attr, None) is not None:
            out[key] = f"--{attr} {getattr(args, attr)}"
    for pair in args.env_kwarg or []:
        out[f"env_kwargs.{pair.partition('=')[0]}"] = f"--env-kwarg {pair}"
    for pair in getattr(args, "overrides", None) or []:
        key = pair.partition("=")[0]
        if key == "env_kwargs":  # the whole dict: it replaces the kwargs from the other sources
            out = {k: v for k, v in out.items() if not k.startswith("env_kwargs.")}
        out[key] = f"--set {pair}"
    return out


def _same_model(a: str | None, b: str | None) -> bool:
    """Two ``model`` values name the same folder (``./m``, ``m`` and its absolute path do)."""
    import os

    if a == b:
        return True
    if not a or not b:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _resume_values(saved: dict, resolved: dict, field: str):
    """``(saved value, value the flags give)`` of ``field`` (``env_kwargs.KEY``: one env kwarg)."""
    if field.startswith("env_kwargs."):
        key = field.split(".", 1)[1]
        return _env_kwarg(saved.get("env_kwargs") or {}, key), _env_kwarg(resolved["env_kwargs"], key)
    return saved.get(field, UNSET), resolved.get(field, UNSET)


def _shown(field: str, value) -> str:
    """``field=value`` as the saved run has it, for a refusal."""
    if field.startswith("env_kwargs."):
        key = field.split(".", 1)[1]
        return f"env kwarg {key} unset" if value is UNSET else f"env kwarg {key}={value!r}"
    if field == "model" and value is None:
        return "model=None (the tiny local model in model_init)"
    return f"{field}={value!r}"


def _refusal(by: str, field: str, saved, path) -> Exception:
    from ..cli import CLIError

    return CLIError(f"{by} contradicts the run's {_shown(field, saved)} ({path}); resume continues the saved run "
                    f"(only {_may_change()} may change)")


def resume_config(args):
    """``(StarPOConfig, notes)`` for ``ragen train --resume``: the run's own saved config
    (``DIR/config.json``: model, sizes, seeds, protocol, env id and kwargs, everything), with
    the :data:`~ragen_envs.starpo.config.RESUMABLE` fields the flags set applied (each
    change is a note). Any other flag must give the saved value (repeating the original
    command is fine); one that contradicts it is a one-line :class:`CLIError` naming both,
    and nothing is written. The flags are resolved exactly as when a run starts, with the
    run's env id and model, so ``--preset`` / ``--profile`` / ``--config`` are judged by the
    fields they would set."""
    import argparse
    import dataclasses
    import json
    import os
    from pathlib import Path

    from ..cli import CLIError
    from ..starpo.config import RESUMABLE, StarPOConfig
    from .configfile import load_config_file
    from .._rundir import check_run_dir

    file = load_config_file(args.config) if getattr(args, "config", None) else {}
    out = _resume_dir(args, file)
    path = out / "config.json"
    if check_run_dir(out, kind="train", resume=True) == "new":
        raise CLIError(f"--resume: {out} holds no train run to resume; start one without --resume")
    if not path.is_file():  # (a kill -9 before the trainer was built: nothing to continue)
        raise CLIError(f"--resume: {out} holds no train run to resume (no config.json: it stopped before its first "
                       f"step); start it again with its command (the env id and flags) and --resume, or --overwrite")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        base = StarPOConfig.from_dict(saved)
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as exc:
        raise CLIError(f"--resume: {path} is not a usable ragen train config ({' '.join(str(exc).split())})") from None
    saved = base.to_dict()  # (fields this version added since: their defaults)
    model = saved["model"]
    if model and not os.path.isdir(model):
        raise CLIError(f"--resume: the run's initial model {model} (model in {path}) is not there: the resumed run needs "
                       "it (tokenizer, KL reference); a relative path counts from the directory the run was started in")

    given = _flag_sources(args, file, getattr(args, "config", None))
    if args.model and not _same_model(args.model, model):  # (before the other model is looked at)
        raise _refusal(given["model"], "model", model, path)
    if args.env_id and args.env_id != saved["env_id"]:
        raise _refusal(given["env_id"], "env_id", saved["env_id"], path)
    probe = argparse.Namespace(**vars(args))
    probe.env_id, probe.model, probe.out = args.env_id or saved["env_id"], args.model or model, str(out)
    resolved = resolve_config(probe)[0].to_dict()  # what the flags give, by the rules of a new run

    changes: dict = {}
    notes = [f"--resume: {out} continues its saved run ({path}: {saved['env_id']}, "
             f"model {model or 'the tiny local model (model_init)'}, seed {saved['seed']})"]
    for field, by in given.items():
        old, new = _resume_values(saved, resolved, field)
        if field == "out_dir" or (field == "model" and _same_model(old, new)) or (old is UNSET and new is UNSET):
            continue
        if field in RESUMABLE:
            if json.dumps(old) != json.dumps(new):
                changes[field] = new
                notes.append(f"--resume: {field} {old!r} -> {new!r} ({by})")
        elif old is UNSET or new is UNSET or json.loads(json.dumps(old)) != json.loads(json.dumps(new)):
            raise _refusal(by, field, old, path)
    newest = _checkpoint_step(out)
    if "steps" in changes and newest is not None and changes["steps"] < newest:
        raise CLIError(f"{given['steps']} is below the run's step {newest} ({out / 'checkpoints'}): resume continues "
                       f"from there (--steps >= {newest})")
    try:
        cfg = dataclasses.replace(base, **changes, out_dir=str(out))
    except (TypeError, ValueError) as exc:
        raise CLIError(f"--resume: {exc}") from None
    return cfg, notes


def _resume_dir(args, file: dict | None = None):
    """The run directory ``--resume`` continues: ``--out``, else the ``--config`` file's, else the default."""
    from pathlib import Path

    from ..starpo.config import StarPOConfig

    if file is None:
        from .configfile import load_config_file

        file = load_config_file(args.config) if getattr(args, "config", None) else {}
    return Path(args.out or file.get("out_dir") or StarPOConfig.out_dir)


def _never_started(out) -> bool:
    """A train run killed before its trainer was built (no ``config.json``, no result): nothing
    of it was fixed yet, so a complete command (env id and flags) with ``--resume`` starts it
    again rather than failing: a kill at any moment, then the same command, goes on."""
    from .._rundir import check_run_dir

    try:
        found = check_run_dir(out, kind="train", resume=True)
    except Exception:  # (the refusal itself comes from resume_config, in one line)
        return False
    return found == "resume" and not (out / "config.json").exists() and not train_results(out)


def _device_here(device: str) -> bool:
    """Whether torch can use ``device`` on this machine (a CUDA one needs a GPU: torch's own
    error is an AssertionError deep in the model loading)."""
    if not device.startswith("cuda"):
        return True
    import torch

    return torch.cuda.is_available()


def _checkpoint_step(out) -> int | None:
    """The step of the checkpoint ``DIR/checkpoints/latest`` names (None: no step checkpoint)."""
    from ..starpo.checkpoint import pointed_checkpoint

    ckpt = pointed_checkpoint(out)
    if ckpt is None or not ckpt.name.startswith("step_") or not ckpt.name[5:].isdigit():
        return None
    return int(ckpt.name[5:])


# --------------------------------------------------------------------------- the command
def run(args) -> int:
    import os

    from ..cli import CLIError

    _passive_omp()
    from ..models import require_train_extra

    try:
        require_train_extra()
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    restart = bool(args.resume and args.env_id and _never_started(_resume_dir(args)))
    if restart:  # killed before it was built: this command starts it (what it left is deleted)
        args.resume = False
    if args.resume:
        cfg, notes = resume_config(args)
    elif not args.env_id:
        raise CLIError("the environment id is required (e.g. ragen train ragen/Sokoban-v0; see `ragen list`); "
                       "only --resume reads it from the run")
    else:
        cfg, notes = resolve_config(args)
    main_rank = os.environ.get("RANK", "0") == "0"  # under torchrun only rank 0 talks and touches files
    if args.print_config:
        from .configfile import dump_config

        header = (f"ragen train --out {cfg.out_dir} --resume" if args.resume else
                  f"ragen train {args.env_id} --preset {args.preset or 'starpo-s'}")
        print(dump_config(cfg.to_dict(), header=[header, *notes]), end="")
        return 0
    if not _device_here(cfg.device):
        raise CLIError(f"device {cfg.device}: torch sees no CUDA device on this machine; --device cpu"
                       + (" continues the run on the CPU" if args.resume else ""))
    claim = None
    if main_rank:
        claim = _claim(cfg.out_dir, args, restart)
        for line in notes:
            print(line)
    from ..starpo import distributed
    from ..starpo.trainer import StarPOTrainer

    trainer = None
    try:
        try:
            trainer = StarPOTrainer(cfg, resume=args.resume)
        except (TypeError, ValueError, OSError, ImportError, RuntimeError) as exc:
            raise CLIError(f"cannot start the run: {_one_line(exc)}") from None
        try:
            trainer.train()
        except OSError as exc:  # disk full while writing metrics, a checkpoint or the model
            raise CLIError(f"training stopped at step {trainer.step}: {_one_line(exc)}") from None
    except BaseException as exc:
        # a new run that failed before its first result leaves no claim: the corrected command
        # starts it without --overwrite (nothing is lost: there was nothing yet)
        released = claim is not None and not train_results(cfg.out_dir) and claim.release()
        if isinstance(exc, KeyboardInterrupt) and main_rank:
            print(interrupted_message(cfg.out_dir, trainer.step if trainer else None, released,
                                      int(os.environ.get("WORLD_SIZE", "1"))), file=sys.stderr)
        raise
    finally:
        distributed.shutdown(clean=sys.exc_info()[0] is None)  # under torchrun: leave the process group
    return 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _claim(out_dir: str, args, restart: bool = False):
    """Claim ``--out`` for this run (:func:`ragen_envs._rundir.claim_run_dir`); for a new run, the
    :class:`ragen_envs._rundir.NewRunClaim` that can undo it. ``restart``: ``--resume`` of a run that
    never started (:func:`_never_started`): what it left is deleted and the run starts."""
    from .._rundir import NewRunClaim, claim_run_dir

    if args.resume:
        claim_run_dir(out_dir, kind="train", resume=True)
        return None
    claim = NewRunClaim(out_dir, kind="train", overwrite=args.overwrite or restart)
    if restart:
        print(f"--resume: {out_dir} stopped before its first step (no config.json): starting it with this command"
              + (f" (deleted what it left: {', '.join(claim.removed)})" if claim.removed else ""))
    elif claim.removed:
        print(f"--overwrite: deleted {len(claim.removed)} entries of the old run in {out_dir}: {', '.join(claim.removed)}")
    return claim


def train_results(out_dir) -> list[str]:
    """What a train run in ``out_dir`` has produced that a rerun would lose: a metrics row
    (a finished step), a step checkpoint, the final model. Empty: the run failed before its
    first result (what it wrote — ``model_init``, ``config.json``, the step-0 evaluation's
    ``best`` — a rerun writes again)."""
    from pathlib import Path

    from ..starpo.checkpoint import step_checkpoints

    out = Path(out_dir)
    found = []
    try:
        if (out / "metrics.jsonl").stat().st_size > 0:
            found.append("metrics.jsonl")
    except OSError:
        pass
    if step_checkpoints(out):
        found.append("checkpoints")
    if (out / "model").exists():
        found.append("model")
    return found


def interrupted_message(out_dir, step: int | None, released: bool, world: int = 1) -> str:
    """The line ``ragen train`` prints on Ctrl-C: what was kept (the newest checkpoint, its
    step and folder) and the exact command that continues the run."""
    import shlex
    from pathlib import Path

    from ..starpo.checkpoint import pointed_checkpoint

    out = Path(out_dir)
    if released:
        return f"interrupted before the run's first result: nothing was kept; {out} is free for a new run"
    launch = (f"torchrun --nproc_per_node={world} -m ragen_envs.starpo" if world > 1 else "ragen train")
    resume = f"{launch} --out {shlex.quote(str(out))} --resume"
    at = f" at step {step}" if step is not None else ""
    kept = _checkpoint_step(out)
    if kept is None:
        return (f"interrupted{at}, before the first checkpoint: the metrics rows are kept; `{resume}` runs the saved "
                f"config again from step 0")
    return (f"interrupted{at}: kept the checkpoint of step {kept} ({pointed_checkpoint(out)}) and metrics.jsonl; "
            f"continue with: {resume}")


def _passive_omp() -> None:
    """Let idle OpenMP threads sleep instead of spinning (set before torch loads): on a
    shared CPU, spinning threads of several torch processes slow each other down ~10x."""
    from ..devices import passive_omp

    passive_omp()
