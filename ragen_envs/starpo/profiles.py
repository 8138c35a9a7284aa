"""Size profiles: learning rates and batch sizes picked from the model's size.

The paper's settings (actor lr 1e-6, 8 groups x 16, ...) are sized for Qwen2.5-0.5B; a
1 M-parameter model trained from scratch barely moves under them, and the tiny model's SFT
learning rate would wreck a pretrained 0.5B model. ``ragen train`` and ``ragen sft`` pick a
profile from the parameter count of ``--model`` (the tiny local model when there is none):

- ``tiny`` (below :data:`TINY_MAX_PARAMS` parameters): the settings ``make demo`` uses
  (``ragen_envs/starpo/demo.py`` ``DEMO``);
- ``full``: the paper's settings (the :class:`~.config.StarPOConfig` defaults), and an SFT
  learning rate for pretrained models.

``--profile tiny|full`` forces one; a field set in ``--config``, ``--set`` or a flag wins over
the profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PROFILES", "TINY_MAX_PARAMS", "count_model_parameters", "pick_profile", "describe_profile", "sizes_for"]

TINY_MAX_PARAMS = 50_000_000
"""models with fewer parameters get the ``tiny`` profile"""

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {
        "train": {"actor_lr": 5e-5, "critic_lr": 5e-4, "num_groups": 32, "group_size": 8, "mini_batch_size": 32,
                  "micro_batch_size": 16},
        "sft": {"lr": 2e-3, "batch_size": 32, "warmup": 50, "context_coef": 0.5},
    },
    "full": {
        "train": {"actor_lr": 1e-6, "critic_lr": 1e-5, "num_groups": 8, "group_size": 16, "mini_batch_size": 32,
                  "micro_batch_size": 4},
        "sft": {"lr": 1e-5, "batch_size": 16, "warmup": 50, "context_coef": 0.0},
    },
}


def count_model_parameters(path: str | Path) -> int:
    """Parameters of the Hugging Face causal LM saved in ``path``, counted from its
    ``config.json`` on the meta device (no weights are read; tied weights count once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"model path {path} has no config.json (a local save_pretrained directory is expected)")
    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def pick_profile(requested: str | None, model: str | Path | None) -> tuple[str, int | None]:
    """``(profile name, parameter count or None)``: ``requested`` when it is ``tiny`` or
    ``full``; for ``auto`` / None the model's size decides (no model: the tiny local model)."""
    if requested not in (None, "auto", *PROFILES):
        raise ValueError(f"unknown profile {requested!r}; choose auto, {', '.join(PROFILES)}")
    params = count_model_parameters(model) if model else None
    if requested in PROFILES:
        return requested, params
    if params is None:
        return "tiny", None
    return ("tiny" if params < TINY_MAX_PARAMS else "full"), params


def describe_profile(name: str, params: int | None, requested: str | None, picked: dict[str, Any]) -> str:
    """One line saying which sizes were picked and why."""
    if params is None:
        size = "no --model: the tiny local model"
    else:
        size = f"{params / 1e6:.2f} M parameters {'<' if params < TINY_MAX_PARAMS else '>='} {TINY_MAX_PARAMS / 1e6:.0f} M"
    why = f"--profile {requested}; {size}" if requested in PROFILES else size
    values = ", ".join(f"{k}={v}" for k, v in picked.items()) or "(all set explicitly)"
    return f"profile {name} ({why}): {values}"


def sizes_for(kind: str, requested: str | None, explicit: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``(fields, line)`` for a ``ragen train`` (``kind="train"``) or ``ragen sft`` run: the
    profile's fields the user did not set in ``explicit``, plus ``device`` (cuda when available)
    when unset, and the line saying what was picked. Raises FileNotFoundError for a missing
    ``explicit["model"]`` folder."""
    import os

    from ..devices import default_device

    model = explicit.get("model")
    if model and not os.path.isdir(model):
        raise FileNotFoundError(f"model path {model} does not exist (a local save_pretrained directory is expected)")
    profile, params = pick_profile(requested, model)
    picked = {k: v for k, v in PROFILES[profile][kind].items() if k not in explicit}
    line = describe_profile(profile, params, requested, picked)
    if "device" not in explicit:
        picked["device"] = default_device()
    return picked, line
