"""The one device default of the torch commands (a leaf module: it imports torch only when called).

``ragen train``, ``ragen sft``, ``ragen eval --agent hf:`` and ``ragen serve`` all run on
:func:`default_device` unless ``--device`` says otherwise.
"""

from __future__ import annotations

__all__ = ["default_device"]


def default_device(requested: str | None = None) -> str:
    """``requested`` when given; else ``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    if requested:
        return str(requested)
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
