"""``ragen train ENV_ID --preset starpo-s [--model PATH] [--steps N] [--out DIR] [--resume]``:
train a policy with StarPO / StarPO-S (``ragen_envs.starpo``).

Without ``--model`` a tiny local model is built (CPU-sized); with ``--model PATH`` any Hugging
Face causal LM directory with a chat template (e.g. a Qwen2.5-0.5B-Instruct download, or the
``DIR/model`` of ``ragen sft``). Writes ``DIR/metrics.jsonl``, ``DIR/checkpoints/``,
``DIR/curves.png`` and the final ``DIR/model`` (loadable as ``hf:DIR/model``).

Examples:
  ragen train ragen/Sokoban-v0 --preset starpo-s --steps 200 --out runs/sokoban
  ragen train ragen/FrozenLake-v0 --preset grpo --model runs/sft/model --set num_groups=4 --set actor_lr=1e-5
  ragen train ragen/Sokoban-v0 --out runs/sokoban --resume
  torchrun --nproc_per_node=2 -m ragen_envs.starpo ragen/Sokoban-v0 --out runs/sokoban2   # 2 processes
"""

from __future__ import annotations

from . import parse_env_kwargs


def register(sub) -> None:
    import argparse

    p = sub.add_parser("train", help="train a policy with StarPO / StarPO-S", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id", help="e.g. ragen/Sokoban-v0 (see `ragen list`)")
    p.add_argument("--preset", default="starpo-s", help="starpo-s (default) | starpo | grpo | nothink")
    p.add_argument("--model", help="a local Hugging Face model directory (default: build the tiny local model)")
    p.add_argument("--steps", type=int, help="rollout-update iterations (default 200)")
    p.add_argument("--out", default=None, help="output directory (default runs/starpo)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.add_argument("--seed", type=int, help="run seed (default 0)")
    p.add_argument("--device", help="cpu (default) | cuda | cuda:1 ...")
    p.add_argument("--env-kwarg", action="append", metavar="KEY=VALUE", help="environment constructor kwarg (repeatable)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", dest="overrides",
                   help="any StarPOConfig field, e.g. num_groups=4, actor_lr=1e-5, keep_ratio=0.5 (repeatable)")
    p.set_defaults(run=run)


def config_from_args(args, extra: dict | None = None):
    """The :class:`StarPOConfig` of parsed ``ragen train`` / ``ragen sft`` arguments."""
    import dataclasses

    from ..cli import CLIError
    from . import make_env_or_fail

    make_env_or_fail(args.env_id).close()  # a clear error for unknown ids
    from ..starpo.config import PRESETS, StarPOConfig, make_config

    if args.preset not in PRESETS:
        raise CLIError(f"unknown preset {args.preset!r}; choose one of {', '.join(PRESETS)}")
    overrides = parse_env_kwargs(getattr(args, "overrides", None))
    known = {f.name for f in dataclasses.fields(StarPOConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise CLIError(f"unknown config field(s) {unknown} in --set; see ragen_envs/starpo/config.py")
    for key, value in overrides.items():
        if isinstance(value, str) and key not in ("env_id", "model", "out_dir", "device", "dtype", "advantage",
                                                   "filter_mode", "reward_placement", "kl_kind", "echo_action"):
            raise CLIError(f"--set {key}={value}: expected a number, boolean, null or JSON value")
    overrides["env_id"] = args.env_id
    env_kwargs = parse_env_kwargs(args.env_kwarg)
    if env_kwargs:
        overrides["env_kwargs"] = env_kwargs
    for key, attr in (("model", "model"), ("steps", "steps"), ("out_dir", "out"), ("seed", "seed"), ("device", "device")):
        value = getattr(args, attr, None)
        if value is not None:
            overrides[key] = value
    overrides.update(extra or {})
    try:
        return make_config(args.preset, **overrides)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None


def run(args) -> int:
    from ..cli import CLIError

    _passive_omp()

    cfg = config_from_args(args)
    from ..models import require_train_extra

    try:
        require_train_extra()
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    from ..starpo import distributed
    from ..starpo.trainer import StarPOTrainer

    try:
        try:
            trainer = StarPOTrainer(cfg, resume=args.resume)
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise CLIError(str(exc)) from None
        trainer.train()
    finally:
        distributed.shutdown()  # under torchrun: leave the process group cleanly
    return 0


def _passive_omp() -> None:
    """Let idle OpenMP threads sleep instead of spinning (set before torch loads): on a
    shared CPU, spinning threads of several torch processes slow each other down ~10x."""
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
