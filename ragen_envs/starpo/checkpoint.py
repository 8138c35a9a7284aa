"""Checkpoints that rebuild a run: actor and critic weights, the optimisers, the sampling
RNGs, the step (= seed cursor), the Echo Trap monitor and the best evaluation so far.

Layout (``sharding`` none / ddp: full weights in ``save_pretrained`` format, so
``DIR/checkpoints/step_000010/actor`` loads directly as a model: the ``hf:PATH`` agent,
``ragen eval``)::

    DIR/checkpoints/step_000010/actor/         model + tokenizer (save_pretrained; LoRA: the adapters) + ragen_protocol.json
    DIR/checkpoints/step_000010/critic/        value model (save_pretrained), PPO only
    DIR/checkpoints/step_000010/trainer_state.pt   step, RNGs, optimisers, monitor, best eval, config
    DIR/checkpoints/step_000010/MANIFEST.json  every file's size and sha256, written last
    DIR/checkpoints/latest                     the name of the newest complete checkpoint
    DIR/checkpoints/best/                      the same, for the best evaluation

``sharding=fsdp`` (:func:`is_sharded`): ``dcp/`` holds actor, critic and both optimisers as a
``torch.distributed.checkpoint`` (each rank writes its shards; loads into any number of
ranks), ``tokenizer/`` the tokenizer, ``trainer_state.pt`` the rest.

Writes are atomic: everything goes to ``NAME.tmp``, every file and directory is fsynced,
then ``NAME.tmp`` is renamed to ``NAME``. Rewriting an existing name (``best``) first
renames the old one to ``NAME.old`` and deletes it only once the new one is in place; a
crash in between leaves ``NAME.old``, which :func:`recover_checkpoints` puts back. The
``latest`` pointer is replaced atomically too, and is only followed to a checkpoint
directly under ``DIR/checkpoints``. A write that fails (disk full) removes its ``.tmp``
and raises :class:`CheckpointError` (one line); the previous checkpoints stay intact.

:func:`resume_checkpoint` picks the newest *intact* checkpoint: the manifest's files
present with their sizes and sha256 digests (a file damaged in place, at its own size, is
caught too: a bad disk sector, a copy that rewrote a block) and ``trainer_state.pt``
readable (loaded with ``weights_only=True``: tensors and plain containers, no arbitrary
unpickling); each damaged one skipped is reported in one line. Manifests written before
digests existed (``{file: size}``) are checked by size only.

Cost: the digests are computed right after the files are written (they are still in the
page cache) and again when a checkpoint is verified, a thread per file;
BENCHMARKS.md#checkpoint-digests has the seconds per GiB.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["CheckpointError", "save_checkpoint", "latest_checkpoint", "resume_checkpoint", "load_trainer_state",
           "prune_checkpoints", "checkpoint_dir", "verify_checkpoint", "recover_checkpoints", "staging_dir",
           "publish", "discard", "write_pointer", "is_sharded", "fsync_tree", "save_model_dir", "sha256_file", "STATE_FILE",
           "MANIFEST", "average_state_dicts", "average_actors", "step_checkpoints", "pointed_checkpoint"]

STATE_FILE = "trainer_state.pt"
MANIFEST = "MANIFEST.json"
DCP_DIR = "dcp"


class CheckpointError(OSError):
    """A checkpoint (or final model) that could not be written or read; one-line message."""


def checkpoint_dir(out_dir: str | Path, name: str) -> Path:
    return Path(out_dir) / "checkpoints" / name


def is_sharded(path: str | Path) -> bool:
    """Whether a checkpoint holds a ``torch.distributed.checkpoint`` (written under fsdp)."""
    return (Path(path) / DCP_DIR).is_dir()


# ----------------------------------------------------------------------------- atomic writes
def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (and ``root``), children first."""
    for dirpath, _dirs, files in os.walk(root, topdown=False):
        for f in files:
            _fsync(Path(dirpath) / f)
        _fsync(Path(dirpath))


def staging_dir(final: Path) -> Path:
    """A fresh, empty ``FINAL.tmp`` next to ``final`` (a stale one from a crash is removed)."""
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def discard(tmp: Path) -> None:
    """Remove a staging directory after a failed write (best effort: the disk may be full)."""
    shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file's content (hashlib releases the GIL: files hash in parallel)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def _digests(paths: list[Path]) -> list[str]:
    if len(paths) <= 1:
        return [sha256_file(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(8, len(paths), os.cpu_count() or 1)) as pool:
        return list(pool.map(sha256_file, paths))


def _write_manifest(tmp: Path) -> None:
    paths = [p for p in sorted(tmp.rglob("*")) if p.is_file()]
    files = {str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": digest}
             for p, digest in zip(paths, _digests(paths))}
    (tmp / MANIFEST).write_text(json.dumps(files, indent=0, sort_keys=True))


def publish(tmp: Path, final: Path, manifest: bool = True) -> Path:
    """Make the staged ``tmp`` the directory ``final``: manifest, fsync, rename. An existing
    ``final`` is moved to ``FINAL.old`` first and deleted only after the rename."""
    if manifest:
        _write_manifest(tmp)
    fsync_tree(tmp)
    old = final.with_name(final.name + ".old")
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    _fsync(final.parent)
    if old.exists():
        shutil.rmtree(old)
    return final


def write_pointer(root: Path, name: str) -> None:
    """``root/latest`` <- ``name``, atomically and durably."""
    tmp = root / "latest.tmp"
    with open(tmp, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(root / "latest")
    _fsync(root)


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())


def save_checkpoint(out_dir: str | Path, name: str, *, actor, tokenizer, critic, state: dict[str, Any],
                    update_latest: bool = True, write: Callable[[Path], None] | None = None,
                    settings=None) -> Path:
    """Write checkpoint ``name`` (e.g. ``step_000010`` or ``best``) atomically and point
    ``latest`` at it. ``settings`` (:class:`~ragen_envs.lm.settings.ProtocolSettings`) go
    beside the actor. ``write(tmp)``, if given, replaces the ``save_pretrained`` of actor and
    critic (the caller writes the weights into ``tmp`` itself). On failure (e.g. disk
    full) nothing is replaced, the ``.tmp`` is removed, :class:`CheckpointError` is raised."""
    final = checkpoint_dir(out_dir, name)
    tmp = None
    try:
        tmp = staging_dir(final)
        if write is not None:
            write(tmp)
        else:
            actor.save_pretrained(tmp / "actor")
            tokenizer.save_pretrained(tmp / "actor")
            if settings is not None:
                from ..lm.settings import save_settings

                save_settings(tmp / "actor", settings)
            if critic is not None:
                critic.save_pretrained(tmp / "critic")
        torch.save(state, tmp / STATE_FILE)
        publish(tmp, final)
        if update_latest:
            write_pointer(final.parent, name)
    except OSError as exc:
        if tmp is not None:
            discard(tmp)
        raise CheckpointError(f"could not write checkpoint {final}: {_one_line(exc)} "
                              f"(the previous checkpoints are intact)") from None
    return final


def save_model_dir(final: Path, model, tokenizer, extra: Callable[[Path], None] | None = None) -> Path:
    """``model.save_pretrained`` + ``tokenizer.save_pretrained`` (+ ``extra(tmp)``, e.g. the
    protocol settings) into ``final`` atomically (the run's ``DIR/model``);
    :class:`CheckpointError` on failure, no ``.tmp`` left."""
    tmp = None
    try:
        tmp = staging_dir(final)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if extra is not None:
            extra(tmp)
        return publish(tmp, final, manifest=False)
    except OSError as exc:
        if tmp is not None:
            discard(tmp)
        raise CheckpointError(f"could not write {final}: {_one_line(exc)}") from None


# ----------------------------------------------------------------------------- reading
def recover_checkpoints(out_dir: str | Path) -> list[str]:
    """After a crash: put back ``NAME.old`` where ``NAME`` is missing (the crash fell
    between the two renames of :func:`publish`), delete the other ``.old`` and every
    ``.tmp``. Returns what it did, one line each."""
    root = Path(out_dir) / "checkpoints"
    done = []
    if not root.is_dir():
        return done
    for p in sorted(root.iterdir()):
        if p.name.endswith(".old") and p.is_dir():
            base = p.with_name(p.name[: -len(".old")])
            if base.exists():
                shutil.rmtree(p)
            else:
                p.rename(base)
                done.append(f"restored {base.name} from {p.name} (a write of it was interrupted)")
        elif p.name.endswith(".tmp"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            done.append(f"removed the unfinished {p.name}")
    return done


def _pointer_target(root: Path) -> tuple[Path | None, str | None]:
    """The checkpoint ``latest`` names, if it names one directly under ``root``; else (None,
    why)."""
    pointer = root / "latest"
    if not pointer.is_file():
        return None, None
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{pointer} is unreadable ({_one_line(exc)})"
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        return None, f"{pointer} names {name!r}, not a checkpoint of this run; ignored"
    path = root / name
    try:
        inside = path.resolve().parent == root.resolve()
    except (OSError, RuntimeError):
        inside = False
    if not inside:
        return None, f"{pointer} leads outside {root} ({name!r}); ignored"
    return path, None


def pointed_checkpoint(out_dir: str | Path) -> Path | None:
    """The checkpoint ``DIR/checkpoints/latest`` names (not verified: for messages, e.g. what
    an interrupted run kept; the pointer only ever names a complete one), or None."""
    path, _why = _pointer_target(Path(out_dir) / "checkpoints")
    return path if path is not None and path.is_dir() else None


def verify_checkpoint(path: str | Path) -> str | None:
    """Why checkpoint ``path`` is not intact, or None if it is: its manifest's files are
    present with their sizes and sha256 digests, and ``trainer_state.pt`` loads
    (checkpoints written before manifests existed: the state file only; manifests written
    before digests: sizes only)."""
    path = Path(path)
    if not path.is_dir():
        return "missing"
    manifest = path / MANIFEST
    if manifest.exists():
        try:
            from ..protocol.jsonsafe import loads_untrusted  # every bad manifest: a ValueError

            files = loads_untrusted(manifest.read_bytes())
            if not isinstance(files, dict):
                raise ValueError(f"a JSON {type(files).__name__}, not an object")
            entries = {rel: (e, None) if isinstance(e, int) else (e["size"], e["sha256"]) for rel, e in files.items()}
        except (OSError, ValueError, TypeError, KeyError) as exc:
            return f"unreadable {MANIFEST} ({_one_line(exc)})"
        for rel, (size, _digest) in entries.items():
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                return f"{MANIFEST} names {rel!r}, a file outside the checkpoint"
            f = path / rel
            if not f.is_file():
                return f"{rel} is missing"
            if f.stat().st_size != size:
                return f"{rel} has {f.stat().st_size} bytes, {size} were written"
        hashed = [(rel, digest) for rel, (_size, digest) in entries.items() if digest is not None]
        try:
            found = _digests([path / rel for rel, _ in hashed])
        except OSError as exc:
            return f"unreadable file ({_one_line(exc)})"
        for (rel, digest), got in zip(hashed, found):
            if got != digest:
                return f"{rel} does not match its sha256 (damaged in place)"
    try:
        load_trainer_state(path)
    except Exception as exc:  # any unreadable state file makes the checkpoint unusable
        return _one_line(exc)
    return None


def _candidates(root: Path) -> tuple[list[Path], list[str]]:
    notes = []
    first, why = _pointer_target(root)
    if why:
        notes.append(why)
    real_root = root.resolve()
    steps = sorted((p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith((".tmp", ".old"))
                    and p.resolve().parent == real_root), reverse=True)  # (a symlink leading out: never)
    out = [first] if first is not None else []
    out += [p for p in steps if first is None or p.resolve() != first.resolve()]
    return out, notes


def resume_checkpoint(out_dir: str | Path, warn: Callable[[str], None] = print) -> Path | None:
    """The newest intact checkpoint of a run (the one ``latest`` names first, then the
    ``step_*`` from newest to oldest), or None; ``warn`` gets one line per checkpoint
    skipped as damaged and for a ``latest`` pointer that is ignored."""
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return None
    cands, notes = _candidates(root)
    for n in notes:
        warn(f"WARNING: {n}")
    verdicts: dict[Path, str | None] = {}

    def why_damaged(p: Path) -> str | None:  # each checkpoint hashed once
        if p not in verdicts:
            verdicts[p] = verify_checkpoint(p)
        return verdicts[p]

    for i, path in enumerate(cands):
        why = why_damaged(path)
        if why is None:
            return path
        nxt = next((c.name for c in cands[i + 1:] if why_damaged(c) is None), None)
        warn(f"WARNING: checkpoint {path} is damaged ({why}); "
             + (f"falling back to {nxt}" if nxt else "no intact checkpoint is left"))
    return None


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest intact checkpoint of a run, or None (silently; see :func:`resume_checkpoint`)."""
    return resume_checkpoint(out_dir, warn=lambda _m: None)


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    """The ``trainer_state.pt`` of a checkpoint directory, loaded with ``weights_only=True``
    (tensors, numbers, strings and containers only: a crafted file cannot run code)."""
    file = Path(path) / STATE_FILE
    if not file.exists():
        raise FileNotFoundError(f"{path} is not a trainer checkpoint (no {STATE_FILE})")
    return torch.load(file, map_location="cpu", weights_only=True)


def step_checkpoints(out_dir: str | Path) -> list[Path]:
    """The run's complete ``step_*`` checkpoints, oldest first (no ``.tmp`` / ``.old``)."""
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith((".tmp", ".old")))


def average_state_dicts(states) -> dict[str, torch.Tensor]:
    """The uniform average of K state dicts, tensor by tensor:

        theta_bar[name] = (1 / K) * sum_k theta_k[name]

    summed in float64 and cast back to each tensor's dtype, so the result does not depend
    on the order beyond float64 rounding. ``states`` is any iterable (a generator keeps one
    model's weights in memory at a time). Integer and bool tensors (buffers such as position
    ids) are not averaged: they must be equal in every state, and are copied. Every state must
    hold the same names, shapes and dtypes; otherwise :class:`ValueError` names the first
    difference."""
    total: dict[str, torch.Tensor] = {}
    first: dict[str, torch.Tensor] | None = None
    k = 0
    for state in states:
        k += 1
        if first is None:
            first = state
            for name, t in state.items():
                total[name] = t.detach().to(torch.float64, copy=True) if t.is_floating_point() else t.detach().clone()
            continue
        if state.keys() != first.keys():
            diff = sorted(set(state) ^ set(first))
            raise ValueError(f"state {k} has different tensors than state 1 (e.g. {diff[0]!r})")
        for name, t in state.items():
            ref = first[name]
            if t.shape != ref.shape or t.dtype != ref.dtype:
                raise ValueError(f"state {k}: {name!r} is {tuple(t.shape)} {t.dtype}, state 1 has "
                                 f"{tuple(ref.shape)} {ref.dtype}")
            if t.is_floating_point():
                total[name] += t.detach().to(torch.float64)
            elif not torch.equal(t, total[name]):
                raise ValueError(f"state {k}: the non-float tensor {name!r} differs from state 1 (it cannot be averaged)")
    if first is None:
        raise ValueError("average_state_dicts needs at least one state")
    return {name: (t / k).to(first[name].dtype) if first[name].is_floating_point() else t for name, t in total.items()}


def average_actors(actor_dirs, dest: str | Path, settings=None, dtype: torch.dtype = torch.float32) -> Path:
    """Write ``dest``: a model directory (``save_pretrained`` format, loadable as ``hf:dest``)
    whose weights are :func:`average_state_dicts` of the actors in ``actor_dirs`` (model
    directories of one architecture, e.g. ``DIR/checkpoints/step_*/actor``), loaded one at a
    time through :func:`~.policy.load_policy` in ``dtype``; config, tokenizer and protocol settings
    are the last directory's (``settings`` overrides the latter). Atomic, like :func:`save_model_dir`."""
    from .policy import load_policy, load_tokenizer

    dirs = [Path(d) for d in actor_dirs]
    if not dirs:
        raise ValueError("average_actors needs at least one actor directory")
    for d in dirs:
        if not (d / "config.json").is_file():
            raise CheckpointError(f"{d} is not a model directory (no config.json)")
    model = load_policy(dirs[-1], dtype=dtype)
    avg = average_state_dicts(load_policy(d, dtype=dtype).state_dict() for d in dirs)
    model.load_state_dict(avg)
    tokenizer = load_tokenizer(dirs[-1])

    def extra(tmp: Path) -> None:
        from ..lm.settings import SETTINGS_FILE, save_settings

        if settings is not None:
            save_settings(tmp, settings)
        elif (dirs[-1] / SETTINGS_FILE).is_file():
            shutil.copyfile(dirs[-1] / SETTINGS_FILE, tmp / SETTINGS_FILE)

    return save_model_dir(Path(dest), model, tokenizer, extra=extra)


def prune_checkpoints(out_dir: str | Path, keep: int) -> None:
    """Delete all but the ``keep`` newest ``step_*`` checkpoints (``best`` is kept)."""
    steps = step_checkpoints(out_dir)
    for old in steps[: max(0, len(steps) - max(keep, 1))]:
        shutil.rmtree(old)
