"""How the torch commands start (issue 43, item 2): each sets ``OMP_WAIT_POLICY=PASSIVE``
before torch is imported (``ragen eval --agent hf:`` ran ~12x slow beside a busy core without
it), and an ``hf:`` path that looks local and does not exist, or a hub id that cannot be had,
fails at once with one line instead of after ~50 s of hub retries."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragen_envs.cli import main

# Runs a ragen command; when torch is first imported it prints the OpenMP wait policy then in
# force and exits: what torch's OpenMP runtime reads at that moment.
SPY = """
import importlib.abc, os, sys

class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            print("OMP_WAIT_POLICY=" + os.environ.get("OMP_WAIT_POLICY", "<unset>"), flush=True)
            os._exit(0)
        return None

sys.meta_path.insert(0, Spy())
from ragen_envs.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["eval", "serve", "train", "sft"])
def test_every_torch_command_sets_a_passive_omp_wait_policy_before_torch_loads(command, tmp_path):
    tiny = tmp_path / "model"  # a folder is all it takes to get as far as importing torch
    tiny.mkdir()
    args = {
        "eval": ["eval", "ragen/Bandit-v0", "--agent", f"hf:{tiny}", "--out", str(tmp_path / "e"), "--seeds", "1"],
        "serve": ["serve", f"hf:{tiny}", "--port", "0"],
        "train": ["train", "ragen/Bandit-v0", "--out", str(tmp_path / "t")],
        "sft": ["sft", "ragen/Bandit-v0", "--out", str(tmp_path / "s")],
    }[command]
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", SPY, *args], capture_output=True, text=True, env=env, timeout=120,
                         cwd=tmp_path)
    assert "OMP_WAIT_POLICY=PASSIVE" in out.stdout, (out.stdout, out.stderr[-2000:])


def test_a_policy_the_user_set_is_kept(monkeypatch):
    from ragen_envs.devices import passive_omp

    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    passive_omp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


@pytest.mark.parametrize("spec", ["runs/nope", "./nope", "runs/train/final", "a\\b", "my model"])
@pytest.mark.parametrize("command", ["eval", "serve"])
def test_a_local_looking_hf_path_that_does_not_exist_fails_at_once_in_one_line(spec, command, tmp_path, monkeypatch,
                                                                               capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()  # so runs/nope can only mean a folder here
    args = {"eval": ["eval", "ragen/Bandit-v0", "--agent", f"hf:{spec}", "--out", str(tmp_path / "e"), "--seeds", "1"],
            "serve": ["serve", f"hf:{spec}", "--port", "0"]}[command]
    start = time.monotonic()
    assert main(args) == 2
    assert time.monotonic() - start < 1.0
    err = capsys.readouterr().err.strip()
    assert "does not exist" in err and "\n" not in err, err


def test_a_hub_id_that_cannot_be_had_fails_at_once_in_one_line(tmp_path, monkeypatch, capsys):
    import socket

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    assert main(["serve", "hf:Qwen/Qwen2.5-0.5B-Instruct"]) == 2
    err = capsys.readouterr().err.strip()
    assert "HF_HUB_OFFLINE" in err and "\n" not in err and time.monotonic() - start < 1.0, err
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def no_address(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_address)
    assert main(["eval", "ragen/Bandit-v0", "--agent", "hf:Qwen/Qwen2.5-0.5B-Instruct", "--out",
                 str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be reached" in err and "\n" not in err, err


def test_a_cached_hub_model_loads_from_its_snapshot_without_the_network(tmp_path, monkeypatch):
    import socket

    import huggingface_hub.constants

    from ragen_envs.agents.hf import resolve_model_path

    cache = tmp_path / "cache"
    snapshot = cache / "models--someone--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--someone--tiny" / "refs").mkdir()
    (cache / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: pytest.fail("the network was asked"))
    assert Path(resolve_model_path("someone/tiny")) == snapshot
    assert resolve_model_path(str(snapshot)) == str(snapshot)
