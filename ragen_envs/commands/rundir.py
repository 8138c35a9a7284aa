"""Run directories of ``ragen train`` / ``ragen sft`` are protected: starting a run in a
directory that already holds one is refused unless the user says what to do with it —
``--resume`` continues it (``ragen train``), ``--overwrite`` deletes it and starts over.

Without the guard a second run silently rebuilt the model, cut ``metrics.jsonl`` and left
the old checkpoints beside the new ones.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..cli import CLIError

__all__ = ["RUN_MARKERS", "run_markers", "claim_run_dir", "clear_run_dir"]

# What a train or sft run writes at the top of its directory: any one of them means a run is there.
RUN_MARKERS = ("config.json", "metrics.jsonl", "sft_metrics.jsonl", "checkpoints", "model", "model_init")


def run_markers(out: str | Path) -> list[str]:
    """The names of :data:`RUN_MARKERS` present in ``out`` (empty: no run there)."""
    out = Path(out)
    if not out.is_dir():
        return []
    return [name for name in RUN_MARKERS if os.path.lexists(out / name)]


def claim_run_dir(out: str | Path, *, resume: bool = False, overwrite: bool = False, can_resume: bool = True) -> list[str]:
    """Check that a new run may start in ``out``; with ``overwrite`` empty it first.

    - no run in ``out`` (missing, empty, or none of :data:`RUN_MARKERS`): go;
    - a run and ``resume``: go (the trainer continues it);
    - a run and ``overwrite``: its contents are deleted (:func:`clear_run_dir`), go;
    - a run and neither: a :class:`CLIError` naming both flags.

    Returns the names of the entries deleted (empty when nothing was).
    """
    if resume and overwrite:
        raise CLIError("--resume and --overwrite contradict each other: continue the run or start it over, not both")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} is a file, not a directory")
    found = run_markers(out)
    if not found or resume:
        return []
    if not overwrite:
        how = "--resume to continue it, --overwrite to delete it and start over," if can_resume else \
              "--overwrite to delete it and start over"
        raise CLIError(f"{out} already holds a run ({', '.join(found)}); pass {how} or choose another --out")
    return clear_run_dir(out)


def clear_run_dir(out: str | Path) -> list[str]:
    """Delete everything inside the run directory ``out`` (not ``out`` itself), safely:

    - ``out`` must be a real directory (not a symlink) holding a run (:func:`run_markers`);
    - it must not be the working directory, one of its parents, the home directory or ``/``;
    - entries are deleted without following symlinks: a symlink inside is unlinked, never
      its target, and ``shutil.rmtree`` does not descend into linked directories.

    Returns the names deleted, sorted.
    """
    out = Path(out)
    if out.is_symlink():
        raise CLIError(f"--overwrite: {out} is a symlink; pass the directory itself")
    if not run_markers(out):
        raise CLIError(f"--overwrite: {out} holds no ragen run; refusing to delete its contents")
    real = out.resolve()
    cwd = Path.cwd().resolve()
    protected = {Path(real.anchor), Path.home().resolve()}
    if real in protected or real == cwd or real in cwd.parents:
        raise CLIError(f"--overwrite: refusing to empty {real} (the working directory, one of its parents, "
                       "home or /); pass a run directory below it")
    removed = sorted(p.name for p in real.iterdir())
    for name in removed:
        path = real / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return removed
