"""Checkpoint writes are atomic and durable, --resume survives damage and hostile files
(ragen_envs/starpo/checkpoint.py; issue 12 §5)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.starpo import checkpoint as C  # noqa: E402


class _Weights:
    """A stand-in model: ``save_pretrained`` writes one weights file holding ``value``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def save_pretrained(self, path) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        torch.save({"w": torch.full((4,), self.value)}, Path(path) / "weights.pt")


class _Tok:
    def save_pretrained(self, path) -> None:
        (Path(path) / "tokenizer.json").write_text("{}")


def _save(out, name, value, **kw):
    state = {"step": int(value), "generator": torch.Generator().manual_seed(0).get_state(), "best_eval": -float("inf"),
             "monitor": {"stds": [0.5], "first_probe": None, "active": []}, "config": {"seed": 0, "lora_targets": ["q"]}}
    return C.save_checkpoint(out, name, actor=_Weights(value), tokenizer=_Tok(), critic=None, state=state, **kw)


def _value(path) -> float:
    return float(torch.load(Path(path) / "actor" / "weights.pt")["w"][0])


def _no_leftovers(out) -> None:
    left = [p.name for p in (Path(out) / "checkpoints").iterdir() if p.name.endswith((".tmp", ".old"))]
    assert left == []


def test_rewriting_best_keeps_the_old_one_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    _save(tmp_path, "best", 1.0, update_latest=False)
    assert _value(C.checkpoint_dir(tmp_path, "best")) == 1.0
    # a crash (kill -9) at the moment the new directory is renamed into place
    real_rename = Path.rename

    def crash(self, target):
        if self.name == "best.tmp":
            raise KeyboardInterrupt("killed")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", crash)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, "best", 2.0, update_latest=False)
    monkeypatch.setattr(Path, "rename", real_rename)
    # the old best still exists on disk (as best.old) and the next --resume puts it back
    lines = C.recover_checkpoints(tmp_path)
    assert any("restored best" in line for line in lines)
    best = C.checkpoint_dir(tmp_path, "best")
    assert C.verify_checkpoint(best) is None and _value(best) == 1.0
    _no_leftovers(tmp_path)
    # and an uninterrupted rewrite replaces it, leaving nothing behind
    _save(tmp_path, "best", 3.0, update_latest=False)
    assert _value(best) == 3.0
    _no_leftovers(tmp_path)


def test_every_file_and_directory_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def record(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", record)
    final = _save(tmp_path, "step_000001", 1.0)
    staged = str(final.with_name("step_000001.tmp"))
    files = [str(p.relative_to(final)) for p in final.rglob("*")]
    assert files and all(f"{staged}/{rel}" in synced for rel in files), (files, synced)
    assert staged in synced and str(final.parent) in synced  # the directories: entries durable
    assert str(final.parent / "latest.tmp") in synced  # the pointer's content before its rename


def test_resume_falls_back_to_the_last_intact_checkpoint_with_one_warning(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, f"step_{step:06d}", float(step))
    root = tmp_path / "checkpoints"
    assert (root / "latest").read_text().strip() == "step_000003"
    # step 3's weights were cut short (a copy interrupted, a bad disk)
    w = root / "step_000003" / "actor" / "weights.pt"
    w.write_bytes(w.read_bytes()[:10])
    warnings: list[str] = []
    assert C.resume_checkpoint(tmp_path, warn=warnings.append) == root / "step_000002"
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "step_000003" in warnings[0] and "falling back to step_000002" in warnings[0]
    # an unreadable state file counts as damage too
    (root / "step_000002" / C.STATE_FILE).write_bytes(b"not a torch file")
    warnings.clear()
    assert C.resume_checkpoint(tmp_path, warn=warnings.append) == root / "step_000001"
    assert len(warnings) == 2


def test_latest_pointer_outside_the_run_directory_is_never_followed(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    _save(run, "step_000001", 1.0)
    _save(elsewhere, "step_000009", 9.0)  # a valid checkpoint, but not this run's
    root = run / "checkpoints"
    for pointer in ("../../elsewhere/checkpoints/step_000009", str(elsewhere / "checkpoints" / "step_000009"), ".."):
        (root / "latest").write_text(pointer + "\n")
        warnings: list[str] = []
        assert C.resume_checkpoint(run, warn=warnings.append) == root / "step_000001", pointer
        assert len(warnings) == 1 and "ignored" in warnings[0]
    # a symlink inside checkpoints/ that leads out is not followed either
    (root / "step_000010").symlink_to(elsewhere / "checkpoints" / "step_000009")
    (root / "latest").write_text("step_000010\n")
    warnings = []
    assert C.resume_checkpoint(run, warn=warnings.append) == root / "step_000001"
    assert any("outside" in w for w in warnings)


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pwned"))


def test_trainer_state_is_loaded_without_arbitrary_unpickling(tmp_path):
    final = _save(tmp_path, "step_000001", 1.0)
    state = C.load_trainer_state(final)  # what the trainer writes loads under weights_only
    assert state["step"] == 1 and state["monitor"]["stds"] == [0.5]
    marker = tmp_path / "marker"
    torch.save({"step": 1, "payload": _Exploit(str(marker))}, final / C.STATE_FILE)
    with pytest.raises(Exception):
        C.load_trainer_state(final)
    assert not marker.exists()
    assert C.verify_checkpoint(final) is not None


def test_disk_full_is_one_error_line_and_leaves_no_tmp(tmp_path, monkeypatch):
    _save(tmp_path, "step_000001", 1.0)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(C.torch, "save", full)
    with pytest.raises(C.CheckpointError) as info:
        _save(tmp_path, "step_000002", 2.0)
    msg = str(info.value)
    assert "\n" not in msg and "No space left on device" in msg and "step_000002" in msg
    _no_leftovers(tmp_path)
    assert not (tmp_path / "checkpoints" / "step_000002").exists()
    assert C.resume_checkpoint(tmp_path, warn=lambda m: pytest.fail(m)) == tmp_path / "checkpoints" / "step_000001"
    # the final model directory: the same rule
    with pytest.raises(C.CheckpointError):
        C.save_model_dir(tmp_path / "model", _Weights(1.0), _Tok())
    assert not (tmp_path / "model.tmp").exists() and not (tmp_path / "model").exists()


def test_cli_training_on_a_full_disk_stops_with_one_line(tmp_path, monkeypatch, capsys):
    from ragen_envs.cli import main as cli_main
    from ragen_envs.models import build_tiny_checkpoint

    model = build_tiny_checkpoint(tmp_path / "m", hidden_size=32, num_layers=1, intermediate_size=64)
    real_save = C.torch.save
    calls = []

    def save(obj, f, *a, **k):  # the second checkpoint's state hits a full disk
        calls.append(f)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(C.torch, "save", save)
    args = ["train", "ragen/Sokoban-v0", "--model", str(model), "--out", str(tmp_path / "run"), "--steps", "3"]
    for s in ("num_groups=2", "group_size=2", "max_new_tokens=4", "keep_ratio=1.0", "mini_batch_size=4",
              "eval_every=0", "probe_every=0", "save_every=1", "log_samples=0", "plots=false"):
        args += ["--set", s]
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # (above it: transformers' loading progress bar)
    assert last.startswith("ragen train: error:") and "No space left on device" in last and "Traceback" not in err
    _no_leftovers(tmp_path / "run")
    assert C.resume_checkpoint(tmp_path / "run") == tmp_path / "run" / "checkpoints" / "step_000001"


# ----------------------------------------------------------------------------- damage in place (issue 20 §5)
def _damage_in_place(path: Path, at: int | None = None) -> None:
    """Flip bytes of ``path`` without changing its size (a bad sector, a botched copy)."""
    data = bytearray(path.read_bytes())
    at = len(data) // 2 if at is None else at
    for i in range(at, min(at + 16, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_manifest_holds_a_sha256_per_file_and_damage_at_the_same_size_is_skipped(tmp_path):
    import hashlib
    import json

    for step in (1, 2):
        _save(tmp_path, f"step_{step:06d}", float(step))
    root = tmp_path / "checkpoints"
    manifest = json.loads((root / "step_000002" / C.MANIFEST).read_text())
    w = root / "step_000002" / "actor" / "weights.pt"
    assert manifest["actor/weights.pt"] == {"size": w.stat().st_size,
                                            "sha256": hashlib.sha256(w.read_bytes()).hexdigest()}
    assert set(manifest) == {"actor/weights.pt", "actor/tokenizer.json", C.STATE_FILE}
    size = w.stat().st_size
    _damage_in_place(w)  # the tensor data: torch.load would read it without complaint
    assert w.stat().st_size == size
    warnings: list[str] = []
    assert C.resume_checkpoint(tmp_path, warn=warnings.append) == root / "step_000001"
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "actor/weights.pt does not match its sha256" in warnings[0] and "falling back to step_000001" in warnings[0]


def test_old_manifests_without_digests_are_checked_by_size(tmp_path):
    import json

    final = _save(tmp_path, "step_000001", 1.0)
    files = json.loads((final / C.MANIFEST).read_text())
    (final / C.MANIFEST).write_text(json.dumps({rel: e["size"] for rel, e in files.items()}))
    assert C.verify_checkpoint(final) is None
    for bad in ('{"actor/weights.pt": {"size": 1}}', '["x"]', '{"../../etc/passwd": 1}'):
        (final / C.MANIFEST).write_text(bad)
        assert C.verify_checkpoint(final) is not None, bad


def test_cli_resume_skips_a_checkpoint_whose_safetensors_is_damaged_in_place(tmp_path, capsys):
    """`ragen train --resume` fell into a 9-frame SafetensorError traceback here."""
    from ragen_envs.cli import main as cli_main
    from ragen_envs.models import build_tiny_checkpoint

    model = build_tiny_checkpoint(tmp_path / "m", hidden_size=32, num_layers=1, intermediate_size=64)
    run = tmp_path / "run"
    args = ["train", "ragen/Bandit-v0", "--model", str(model), "--out", str(run)]
    for s in ("num_groups=2", "group_size=2", "max_new_tokens=4", "keep_ratio=1.0", "mini_batch_size=4",
              "eval_every=0", "probe_every=0", "save_every=1", "log_samples=0", "plots=false"):
        args += ["--set", s]
    assert cli_main(args + ["--steps", "2"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    weights = run / "checkpoints" / "step_000002" / "actor" / "model.safetensors"
    _damage_in_place(weights, at=0)  # the header: safetensors cannot even parse it
    assert cli_main(args + ["--steps", "3", "--resume"]) == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text and "SafetensorError" not in text
    damaged = [line for line in text.splitlines() if "damaged" in line]
    assert len(damaged) == 1 and "step_000002" in damaged[0] and "falling back to step_000001" in damaged[0]
    assert "resumed from" in text and "at step 1" in text
