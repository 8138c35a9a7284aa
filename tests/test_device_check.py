"""scripts/device_check.py: the CPU smoke run (--tiny) completes and reports every phase;
the full-size model has Qwen2.5-0.5B's parameter count (built on the meta device)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device_check.py"


def _run_tiny(out, *flags):
    """The script on the tiny model (2 x 2 rollouts, 8 new tokens) with ``flags``; returns
    the process and device_check.json."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--device", "cpu", "--groups", "2", "--group-size", "2",
                           "--max-new-tokens", "8", "--out", str(out), *flags], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, json.loads((out / "device_check.json").read_text())


def test_tiny_cpu_run_reports_phases_and_memory(tmp_path):
    proc, info = _run_tiny(tmp_path, "--steps", "2", "--memory-table", "--table-seq-len", "64", "--table-micro", "2")
    assert info["tiny"] and info["device"] == "cpu" and info["sampler"] == "cached"
    assert len(info["steps"]) == 2
    for s in info["steps"]:
        assert s["rollout_s"] > 0 and s["step_s"] >= s["rollout_s"]
        assert s["generated_tokens"] > 0 and s["gen_tokens_per_s"] > 0
    assert info["peak_memory_train"]["max_rss_gib"] > 0
    assert {(r["grad_checkpointing"], r["micro_batch"]) for r in info["memory_table"]} == {(False, 2), (True, 2)}
    assert "median of steps after the first" in proc.stdout


def test_tiny_cpu_run_with_checkpointing_lora_and_the_per_turn_sampler(tmp_path):
    pytest.importorskip("peft")
    _, info = _run_tiny(tmp_path, "--steps", "1", "--gradient-checkpointing", "--lora-rank", "4", "--sampler", "per_turn")
    assert info["gradient_checkpointing"] and info["lora_rank"] == 4 and info["sampler"] == "per_turn"
    assert 0 < info["trainable_parameters"] < info["parameters"] / 4  # only the adapters train
    assert info["steps"][0]["generated_tokens"] > 0


def test_full_size_model_has_qwen25_05b_parameter_count():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import device_check
    finally:
        sys.path.pop(0)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**device_check.QWEN25_05B, tie_word_embeddings=True)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    n = sum(p.numel() for p in model.parameters())
    assert abs(n - 494_032_768) < 1_000_000, n  # Qwen2.5-0.5B: 0.49 B parameters


def test_torchrun_two_processes_fsdp_with_lora_checkpointing_and_mixed_precision(tmp_path):
    """``torchrun --nproc_per_node=2 scripts/device_check.py --sharding fsdp``: the trainer
    under FSDP2 with LoRA adapters, gradient checkpointing and bf16 compute parameters
    trains in 2 gloo processes; rank 0 alone reports, with every rank's peak memory."""
    import shutil

    pytest.importorskip("peft")
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.fail("torchrun not found next to the interpreter")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1")
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", str(SCRIPT), "--tiny", "--device", "cpu",
                           "--groups", "2", "--group-size", "2", "--max-new-tokens", "8", "--steps", "2", "--out",
                           str(tmp_path), "--sharding", "fsdp", "--fsdp-mixed-precision", "--gradient-checkpointing",
                           "--lora-rank", "4"], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((tmp_path / "device_check.json").read_text())
    assert info["processes"] == 2 and info["sharding"] == "fsdp" and info["fsdp_mixed_precision"]
    assert len(info["peak_memory_train_per_rank"]) == 2
    assert [s["step"] for s in info["steps"]] == [0, 1] and all(s["update_tokens"] for s in info["steps"])
    assert proc.stdout.count("median of steps after the first") == 1  # rank 0 reports once
