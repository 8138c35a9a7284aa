"""Checkpoints that rebuild a run: actor and critic in ``save_pretrained`` format, plus the
optimisers, the sampling RNG, the step (= seed cursor), the Echo Trap monitor and the best
evaluation so far. ``DIR/checkpoints/step_000010/actor`` loads directly as a model
(``AutoModelForCausalLM.from_pretrained``, the ``hf:PATH`` agent, ``ragen eval``).

Layout::

    DIR/checkpoints/step_000010/actor/         model + tokenizer (save_pretrained) + ragen_protocol.json
    DIR/checkpoints/step_000010/critic/        value model (save_pretrained), PPO only
    DIR/checkpoints/step_000010/trainer_state.pt
    DIR/checkpoints/latest                     the name of the newest complete checkpoint
    DIR/checkpoints/best/                      the same, for the best evaluation

A checkpoint is written to a temporary directory and renamed when complete, so a crash
never leaves a half-written one behind ``latest``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

__all__ = ["save_checkpoint", "latest_checkpoint", "load_trainer_state", "prune_checkpoints", "checkpoint_dir"]

STATE_FILE = "trainer_state.pt"


def checkpoint_dir(out_dir: str | Path, name: str) -> Path:
    return Path(out_dir) / "checkpoints" / name


def save_checkpoint(out_dir: str | Path, name: str, *, actor, tokenizer, critic, state: dict[str, Any],
                    update_latest: bool = True, settings=None) -> Path:
    """Write checkpoint ``name`` (e.g. ``step_000010`` or ``best``) and point ``latest`` at it.
    ``settings`` (:class:`~ragen_envs.lm.settings.ProtocolSettings`) go beside the actor."""
    final = checkpoint_dir(out_dir, name)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    actor.save_pretrained(tmp / "actor")
    tokenizer.save_pretrained(tmp / "actor")
    if settings is not None:
        from ..lm.settings import save_settings

        save_settings(tmp / "actor", settings)
    if critic is not None:
        critic.save_pretrained(tmp / "critic")
    torch.save(state, tmp / STATE_FILE)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    if update_latest:
        latest = final.parent / "latest"
        latest_tmp = final.parent / "latest.tmp"
        latest_tmp.write_text(name + "\n")
        latest_tmp.replace(latest)
    return final


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    root = Path(out_dir) / "checkpoints"
    pointer = root / "latest"
    if pointer.exists():
        path = root / pointer.read_text().strip()
        if (path / STATE_FILE).exists():
            return path
    steps = sorted(p for p in root.glob("step_*") if (p / STATE_FILE).exists() and not p.name.endswith(".tmp"))
    return steps[-1] if steps else None


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    """The ``trainer_state.pt`` of a checkpoint directory."""
    file = Path(path) / STATE_FILE
    if not file.exists():
        raise FileNotFoundError(f"{path} is not a trainer checkpoint (no {STATE_FILE})")
    return torch.load(file, map_location="cpu", weights_only=False)


def prune_checkpoints(out_dir: str | Path, keep: int) -> None:
    """Delete all but the ``keep`` newest ``step_*`` checkpoints (``best`` is kept)."""
    root = Path(out_dir) / "checkpoints"
    steps = sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in steps[: max(0, len(steps) - max(keep, 1))]:
        shutil.rmtree(old)
