"""The device defaults of the torch commands (a leaf module: it imports torch only when called).

``ragen train``, ``ragen sft``, ``ragen eval --agent hf:`` and ``ragen serve`` all run on
:func:`default_device` unless ``--device`` says otherwise, and all call :func:`passive_omp`
first thing, before torch is imported.
"""

from __future__ import annotations

import os

__all__ = ["default_device", "passive_omp"]


def passive_omp() -> None:
    """Let idle OpenMP threads sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE``, unless the
    user set a policy). Only takes effect before torch is imported, so commands call it first.
    On a shared CPU the spinning threads of a torch process slow everything else down, and are
    slowed down themselves: ``ragen eval --agent hf:`` on 64 seeds took ~12x longer beside one
    busy core without it. The policy changes scheduling only, never the numbers."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def default_device(requested: str | None = None) -> str:
    """``requested`` when given; else ``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    if requested:
        return str(requested)
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
