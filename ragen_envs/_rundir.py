"""Run directories: a command writes only inside its own, and only into a run of its kind.

``ragen train`` / ``ragen sft`` / ``ragen eval`` / the demos claim their ``--out`` first
(:func:`claim_run_dir`):

- a missing or empty directory: a new run; the kind is recorded in ``DIR/.ragen-run``;
- a run of the command's kind: ``--resume`` continues it (train; eval always resumes),
  ``--overwrite`` deletes it and starts over, neither is a one-line error;
- anything else — a run of another kind, or a non-empty directory that holds no run (``/``,
  a home directory, a source tree) — is refused, ``--overwrite`` or not: ``--overwrite``
  only ever replaces a run of the command's own kind;
- a symlink inside the directory that leads out of it is refused (a resumed run would
  write through it); ``--overwrite`` unlinks links, never their targets.

A new run that fails before its first result (a bad env kwarg, a model that does not load,
Ctrl-C while it builds) gives its claim back (:class:`NewRunClaim`): the corrected command
starts it without ``--overwrite``.

It sits below ``commands/`` (not in it) because the trainer's demo claims its run directory
too, and ``starpo`` never imports a command.

Runs written before ``.ragen-run`` existed are recognised by their files
(:func:`run_kind`). Without the guard a second run silently rebuilt the model, cut
``metrics.jsonl`` and left the old checkpoints beside the new ones, and ``ragen train
--out / --overwrite`` wrote ``/config.json``, ``/model_init`` and ``/checkpoints``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ._errors import CLIError
from ._fs import LinkOutError, check_no_links_out, open_nofollow
from .protocol.jsonsafe import loads_untrusted

__all__ = ["RUN_FILE", "RUN_MARKERS", "KINDS", "run_markers", "run_kind", "claim_run_dir", "check_run_dir", "clear_run_dir",
           "NewRunClaim"]

RUN_FILE = ".ragen-run"

# What a train or sft run writes at the top of its directory: any one of them means a run is there.
RUN_MARKERS = ("config.json", "metrics.jsonl", "sft_metrics.jsonl", "checkpoints", "model", "model_init")

# The top-level names each kind of run writes (how a run from before RUN_FILE is recognised) ...
WRITES = {
    "train": {"config.json", "metrics.jsonl", "checkpoints", "model", "model_init", "curves.png", "eval", "tensorboard",
              "wandb"},
    "sft": {"model_init", "model", "sft_metrics.jsonl"},
    "eval": {"config.json", "episodes.jsonl", "errors.jsonl", "summary.json", "report.html", ".lock"},
    "demo": {"model_init", "sft", "starpo", "summary.json", "demo.json", "curves.png", "episodes.jsonl",
             "errors.jsonl", "config.json", "report.html", ".lock"},
}
# ... and the names only that kind writes, in the order they are looked for (a demo holds eval files too)
DISTINCTIVE = (("demo", {"demo.json"}), ("sft", {"sft_metrics.jsonl"}), ("train", {"metrics.jsonl", "checkpoints"}),
               ("eval", {"episodes.jsonl", "errors.jsonl"}))
KINDS = tuple(WRITES)
# What each kind's commands do with a run of their own kind, said when they refuse another:
# train and sft have --overwrite; eval (ragen eval, the agents demo) and the demo have none.
OWN_RUN = {
    "train": "--overwrite only replaces a train run",
    "sft": "--overwrite only replaces an sft run",
    "eval": "only an eval run there is resumed; nothing else is ever replaced or deleted",
    "demo": "only an earlier demo there is continued; nothing else is ever replaced or deleted",
}
# never a reason to call a directory non-empty: the kind file, a file manager's or git's droppings
IGNORED = frozenset({RUN_FILE, ".DS_Store", ".gitkeep", "Thumbs.db"})


def _entries(out: Path) -> set[str]:
    """The names in ``out`` that count (not the kind file, not an atomic write's leftover)."""
    try:
        names = set(os.listdir(out))
    except (FileNotFoundError, NotADirectoryError):
        return set()
    return {n for n in names if n not in IGNORED and not (n.startswith(".") and n.endswith(".tmp"))}


def run_markers(out: str | Path) -> list[str]:
    """The names of :data:`RUN_MARKERS` present in ``out`` (empty: no train/sft run there)."""
    out = Path(out)
    if not out.is_dir():
        return []
    return [name for name in RUN_MARKERS if os.path.lexists(out / name)]


def _recorded_kind(out: Path) -> str | None:
    path = out / RUN_FILE
    if not os.path.lexists(path):
        return None
    try:
        fd = open_nofollow(path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            kind = loads_untrusted(f.read(4096)).get("kind")  # UntrustedJSONError: a ValueError
    except (OSError, ValueError, AttributeError):
        return "unknown"
    return kind if kind in KINDS else "unknown"


def run_kind(out: str | Path) -> str | None:
    """The kind of run ``out`` holds (``train``, ``sft``, ``eval``, ``demo``), ``""`` for an
    empty or missing directory, None for a non-empty directory that holds no run (or a run
    whose kind cannot be told apart: then every kind whose files it holds is accepted)."""
    out = Path(out)
    recorded = _recorded_kind(out)
    if recorded is not None:
        return recorded
    names = _entries(out)
    if not names:
        return ""
    for kind, marks in DISTINCTIVE:
        if names & marks:
            return kind
    if "config.json" in names:  # eval and train both write one: its keys tell
        try:
            fd = open_nofollow(out / "config.json", os.O_RDONLY)
            with os.fdopen(fd, "rb") as f:
                config = loads_untrusted(f.read(1 << 20))
            if isinstance(config, dict) and "agent" in config and "env_ids" in config:
                return "eval" if names <= WRITES["eval"] else None
        except (OSError, ValueError):
            pass
    return None


def _kinds_of_files(out: Path) -> set[str]:
    """The kinds whose writes cover everything in ``out`` (a run cut short: ``model_init`` only)."""
    names = _entries(out)
    return {kind for kind, writes in WRITES.items() if names and names <= writes}


def _record_kind(out: Path, kind: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fd = open_nofollow(out / RUN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"kind": kind}) + "\n")


def claim_run_dir(out: str | Path, *, kind: str = "train", resume: bool = False, overwrite: bool = False,
                  can_resume: bool = True) -> list[str]:
    """Check that a ``kind`` run may start (or continue) in ``out``; with ``overwrite``
    empty it first; record the kind (module docstring). Returns the names of the entries
    deleted (empty when nothing was). Every refusal is a one-line :class:`CLIError`."""
    how = check_run_dir(out, kind=kind, resume=resume, overwrite=overwrite, can_resume=can_resume)
    removed = clear_run_dir(out) if how == "overwrite" else []
    _claim(Path(out), kind)
    return removed


def check_run_dir(out: str | Path, *, kind: str = "train", resume: bool = False, overwrite: bool = False,
                  can_resume: bool = True) -> str:
    """:func:`claim_run_dir`'s verdict without writing anything: ``"new"``, ``"resume"`` or
    ``"overwrite"``, or the one-line :class:`CLIError` of a refusal."""
    if kind not in KINDS:
        raise ValueError(f"unknown run kind {kind!r}")
    if resume and overwrite:
        raise CLIError("--resume and --overwrite contradict each other: continue the run or start it over, not both")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} is a file, not a directory")
    found = run_kind(out)
    if found == "" or not _entries(out):  # new run (a kind file alone: a start that failed before writing)
        return "new"
    if found is None:
        if kind not in _kinds_of_files(out):
            shown = sorted(_entries(out))
            listed = ", ".join(shown[:4]) + (f", ... ({len(shown)} entries)" if len(shown) > 4 else "")
            raise CLIError(f"--out {out} is not empty and holds no ragen {kind} run ({listed}); "
                           f"choose a new or empty directory ({OWN_RUN[kind]})")
    elif found != kind:
        raise CLIError(f"--out {out} holds a ragen {found} run, not {'an' if kind in ('eval', 'sft') else 'a'} "
                       f"{kind} run; choose another directory ({OWN_RUN[kind]})")
    if resume:
        try:
            check_no_links_out(out)  # a resumed run writes into what is there
        except LinkOutError as exc:
            raise CLIError(str(exc)) from None
        return "resume"
    if not overwrite:
        how = "--resume to continue it, --overwrite to delete it and start over," if can_resume else \
              "--overwrite to delete it and start over"
        held = ", ".join(run_markers(out) or sorted(_entries(out))[:4])
        raise CLIError(f"{out} already holds a run ({held}); pass {how} or choose another --out")
    return "overwrite"


def _claim(out: Path, kind: str) -> None:
    try:
        check_no_links_out(out)
        _record_kind(out, kind)
    except LinkOutError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"cannot write the run directory {out}: {exc.strerror or exc}") from None


def clear_run_dir(out: str | Path) -> list[str]:
    """Delete everything inside the run directory ``out`` (not ``out`` itself), safely:

    - ``out`` must be a real directory (not a symlink) holding a run (:func:`run_kind`);
    - it must not be the working directory, one of its parents, the home directory or ``/``;
    - entries are deleted without following symlinks: a symlink inside is unlinked, never
      its target, and ``shutil.rmtree`` does not descend into linked directories.

    Returns the names deleted, sorted (the kind file not counted).
    """
    out = Path(out)
    if out.is_symlink():
        raise CLIError(f"--overwrite: {out} is a symlink; pass the directory itself")
    if not run_kind(out) and not run_markers(out):
        raise CLIError(f"--overwrite: {out} holds no ragen run; refusing to delete its contents")
    real = out.resolve()
    cwd = Path.cwd().resolve()
    protected = {Path(real.anchor), Path.home().resolve()}
    if real in protected or real == cwd or real in cwd.parents:
        raise CLIError(f"--overwrite: refusing to empty {real} (the working directory, one of its parents, "
                       "home or /); pass a run directory below it")
    names = sorted(p.name for p in real.iterdir())
    for name in names:
        path = real / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return [n for n in names if n != RUN_FILE]


class NewRunClaim:
    """:func:`claim_run_dir` for a new run (``overwrite``: the old one is deleted first) that
    can be undone: :meth:`release` deletes what was written into ``out`` since the claim, the
    kind file included, and ``out`` itself if the claim created it. For a run that failed
    before writing any result: left in place, its claim would make the corrected command
    fail with "already holds a run" until ``--overwrite``."""

    def __init__(self, out: str | Path, *, kind: str, overwrite: bool = False) -> None:
        self.out = Path(out)
        self.created = not os.path.lexists(self.out)
        self.removed = claim_run_dir(self.out, kind=kind, overwrite=overwrite)
        self.kept = set(os.listdir(self.out)) - {RUN_FILE}  # what the directory held before the run (.DS_Store, ...)

    def release(self) -> bool:
        """Undo the claim (best effort: False when something could not be deleted)."""
        try:
            for name in sorted(set(os.listdir(self.out)) - self.kept):
                path = self.out / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            if self.created:
                self.out.rmdir()
        except OSError:
            return False
        return True
