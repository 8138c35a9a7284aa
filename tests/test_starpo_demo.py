"""The demo pipeline (ragen_envs/starpo/demo.py) end to end at smoke size, and its tokenizer."""

from __future__ import annotations

import json
import os
import sys

import pytest

# Idle OpenMP threads sleep instead of spinning (only effective if torch is not loaded yet).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_demo_tokenizer_cells_and_phrases_and_loaders_agree(tmp_path):
    """Grid cells are one token each, the env's fixed sentences one token each, and
    AutoTokenizer (what an hf:PATH agent uses; it rebuilds Qwen2's pre-tokenizer) tokenizes
    trajectories exactly like the trainer's loader."""
    from transformers import AutoTokenizer

    from ragen_envs.starpo.demo import QUICK, build_demo_model
    from ragen_envs.starpo.policy import ChatFormat, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories

    path = build_demo_model(tmp_path / "m", QUICK)
    ours, auto = load_tokenizer(path), AutoTokenizer.from_pretrained(str(path))
    row = ours("#_XP_#\n", add_special_tokens=False)["input_ids"]
    assert [ours.decode([i]) for i in row] == ["#", "_", "X", "P", "_", "#", "\n"]
    for think in (False, True):
        prefix = "<think>" if think else "<answer>"
        a = expert_trajectories("ragen/Sokoban-v0", ChatFormat(ours, prefix), range(123, 143), actions_per_turn=2,
                                env_kwargs={"think": think})
        b = expert_trajectories("ragen/Sokoban-v0", ChatFormat(auto, prefix), range(123, 143), actions_per_turn=2,
                                env_kwargs={"think": think})
        assert [t.token_ids for t in a] == [t.token_ids for t in b]
        assert ours.decode(a[0].token_ids).startswith("<|im_start|>system\n")
    first = a[0].token_ids
    assert len(first) < 400  # the instruction is one token: sequences stay short


def test_quick_demo_writes_the_eval_summary(tmp_path):
    from ragen_envs.starpo.demo import QUICK, run_demo

    report = run_demo(tmp_path, QUICK, log=lambda *_: None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "ragen/Sokoban-v0" in json.dumps(summary)
    assert (tmp_path / "episodes.jsonl").exists() and (tmp_path / "demo.json").exists()
    assert set(report) >= {"sft", "starpo_s", "seconds", "settings"}
    paired = json.loads((tmp_path / "demo.json").read_text())["paired_seeds"]
    assert sum(paired[k] for k in ("both", "only_sft", "only_starpo_s", "neither")) == QUICK["eval_episodes"]
    assert 0.0 < paired["mcnemar_p"] <= 1.0
    assert 0.0 <= report["sft"]["success"] <= 1.0 and report["eval_seeds"] == QUICK["eval_episodes"]
    assert (tmp_path / "starpo" / "model" / "config.json").exists()
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == QUICK["eval_episodes"]
    # the SFT early stop's checks (QUICK: after steps 4 and 7 of 10, on 8 layouts; the tiny run stays below 80 %)
    run = report["sft_run"]
    assert [c["step"] for c in run["validation"]] == [4, 7] and run["steps"] == run["of"] == 10
    assert not run["stopped_early"] and all(c["episodes"] == 8 and 0 <= c["success"] <= 1 for c in run["validation"])
    import torch

    machine = report["machine"]  # what the numbers depend on besides seed and threads
    assert machine["torch"] == torch.__version__ and machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["cpu"] and machine["cores"] >= 1


def test_rl_trend_averages_the_first_and_last_iterations(tmp_path):
    from ragen_envs.starpo.demo import rl_trend

    rows = [{"step": i, "rollout/success": i / 10, "rollout/response_length": 30 - i, "rollout/reasoning_score": 0.5,
             "rollout/actions_agree": 1.0, "rollout/claims_true": 0.25} for i in range(10)]
    rows.insert(3, {"step": 3, "eval/success": 0.9})  # evaluation rows are not rollouts
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trend = rl_trend(path, window=3)
    assert trend["success"] == {"first": pytest.approx(0.1), "last": pytest.approx(0.8), "window": 3}
    assert trend["response_length"]["first"] == pytest.approx(29.0)  # (30 + 29 + 28) / 3
    assert trend["response_length"]["last"] == pytest.approx(22.0)  # (23 + 22 + 21) / 3
    assert rl_trend(tmp_path / "missing.jsonl") == {}


def test_quick_think_demo_trains_think_replies(tmp_path):
    from ragen_envs.starpo.demo import QUICK_THINK, run_demo

    lines = []
    report = run_demo(tmp_path, QUICK_THINK, log=lines.append)
    from ragen_envs.starpo.demo import gain_verdict

    assert f"  {gain_verdict(report['over_streams'])}" in lines  # the summary reads its own test
    first = json.loads((tmp_path / "episodes.jsonl").read_text().splitlines()[0])
    assert first["think"] is True
    settings = json.loads((tmp_path / "starpo" / "model" / "ragen_protocol.json").read_text())
    assert "<think>" in json.dumps(settings)
    assert set(report["rl_trend"]) >= {"response_length", "reasoning_score", "actions_agree", "claims_true"}
    assert any(line.strip().startswith("reasoning_score") for line in lines)


def test_stream_comparison_averages_streams_per_seed():
    from ragen_envs.starpo.demo import stream_comparison

    sft = [[True, False, False, True], [False, False, True, True]]
    rl = [[True, True, False, True], [True, True, False, True]]
    # per-seed differences: (0+1)/2, (1+1)/2, (0-1)/2, 0 -> 0.5, 1, -0.5, 0
    out = stream_comparison(sft, rl)
    assert out["streams"] == 2 and out["sft_success"] == 4 / 8 and out["starpo_s_success"] == 6 / 8
    assert (out["seeds_better"], out["seeds_worse"]) == (2, 1)
    # sign flips of (0.5, 1, -0.5): |sum| >= 1 in 6 of 8 patterns
    assert out["sign_flip_p"] == pytest.approx(6 / 8)
    with pytest.raises(ValueError, match="same streams"):
        stream_comparison(sft, rl[:1])


def test_gain_verdict_reads_the_sign_flip_test():
    from ragen_envs.starpo.demo import gain_verdict

    # seed 0 of the adopted demo on an AVX-512 EPYC: 0.834 -> 0.850, p = 0.122
    # (benchmarks/results/2026-12-06-demo-issue23.md, "A variant for a wider margin")
    line = gain_verdict({"sft_success": 0.83447265625, "starpo_s_success": 0.85009765625, "sign_flip_p": 0.122})
    assert line.startswith("the change (+1.6 points) is not significant at 0.05")
    assert gain_verdict({"sft_success": 0.818, "starpo_s_success": 0.878, "sign_flip_p": 1e-05}) == \
        "the RL gain (+6.0 points) is significant (p < 0.05)"
    assert gain_verdict({"sft_success": 0.85, "starpo_s_success": 0.80, "sign_flip_p": 0.001}) == \
        "StarPO-S is significantly worse than its SFT start (-5.0 points, p < 0.05)"
    # the boundary: p equal to alpha is not below it
    assert "not significant at 0.05" in gain_verdict({"sft_success": 0.5, "starpo_s_success": 0.6, "sign_flip_p": 0.05})
    assert "significant (p < 0.1)" in gain_verdict({"sft_success": 0.5, "starpo_s_success": 0.6, "sign_flip_p": 0.05},
                                                   alpha=0.1)


def test_expert_data_is_the_same_with_forked_workers():
    from ragen_envs.starpo.demo import QUICK
    from ragen_envs.starpo.policy import ChatFormat, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories
    from ragen_envs.starpo.tiny import build_tiny_policy

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = build_tiny_policy(Path(d) / "m", QUICK["env_id"], QUICK["env_kwargs"], seed=0, vocab_size=400,
                                 **QUICK["tiny_model"])
        fmt = ChatFormat(load_tokenizer(path), "<answer>")
    kw = {"actions_per_turn": 2, "env_kwargs": {"think": False}, "chunk": 5}
    one = expert_trajectories("ragen/Sokoban-v0", fmt, range(40, 57), **kw)
    two = expert_trajectories("ragen/Sokoban-v0", fmt, range(40, 57), workers=2, **kw)
    assert [t.episode.seed for t in two] == list(range(40, 57))
    assert [t.token_ids for t in two] == [t.token_ids for t in one]
    assert [t.loss_mask for t in two] == [t.loss_mask for t in one]
    with pytest.raises(ValueError, match="workers"):
        expert_trajectories("ragen/Sokoban-v0", fmt, range(3), workers=0)


def test_demo_refuses_a_thread_count_below_one(capsys):
    from ragen_envs.starpo.demo import main

    assert main(["--threads", "0", "--quick"]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err


def test_cpu_threads_sets_the_environment_before_torch_loads_and_fixes_the_thread_count():
    import subprocess

    code = ("import os, sys; from ragen_envs.starpo.demo import cpu_threads; assert 'torch' not in sys.modules; "
            "cpu_threads(1); import torch; print(os.environ['OMP_NUM_THREADS'], os.environ['OMP_WAIT_POLICY'], "
            "os.environ['TOKENIZERS_PARALLELISM'], torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["1", "PASSIVE", "false", "1"]


def test_cpu_busy_fraction_reads_the_share_of_busy_time_between_two_samples():
    from ragen_envs.starpo.demo import cpu_busy_fraction

    # user nice system idle iowait irq softirq steal: 200 jiffies pass, 100 of them idle or iowait
    lines = iter(["cpu  100 0 100 700 100 0 0 0 0 0\n", "cpu  150 0 150 770 130 0 0 0 0 0\n"])
    assert cpu_busy_fraction(0.0, read=lambda: next(lines)) == 0.5
    assert cpu_busy_fraction(0.0, read=lambda: "garbage") is None

    def unreadable():
        raise OSError("no /proc")

    assert cpu_busy_fraction(0.0, read=unreadable) is None


def test_openmp_threads_may_spin_only_for_a_run_that_takes_every_core_of_an_idle_cpu():
    from ragen_envs.starpo.demo import IDLE_BELOW, may_spin

    asked = []

    def busy(fraction):
        return lambda: asked.append(fraction) or fraction

    assert may_spin(None, 2, busy(0.0)) and may_spin(2, 2, busy(IDLE_BELOW / 2)) and may_spin(8, 2, busy(0.1))
    assert not may_spin(None, 2, busy(IDLE_BELOW)) and not may_spin(2, 2, busy(0.9)) and not may_spin(None, 2, busy(None))
    assert not may_spin(1, 2, busy(0.0))  # a run on part of the CPU shares it: never measured, never spins
    assert asked == [0.0, IDLE_BELOW / 2, 0.1, IDLE_BELOW, 0.9, None]


@pytest.mark.parametrize("threads, busy, preset, expected", [
    (None, 0.0, None, "default"), (None, 0.9, None, "PASSIVE"), (1, 0.0, None, "PASSIVE"), (None, 0.0, "ACTIVE", "ACTIVE")])
def test_the_demo_spins_only_on_an_idle_cpu_and_never_overrides_the_callers_policy(threads, busy, preset, expected):
    import subprocess

    code = ("import os, sys; from ragen_envs.starpo.demo import cpu_threads; "
            f"print(cpu_threads({threads}, spin_when_idle=True, busy=lambda: {busy}), "
            "os.environ.get('OMP_WAIT_POLICY', 'default'))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    if preset:
        env["OMP_WAIT_POLICY"] = preset
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == [expected, expected]


SFT_UNDER_POLICY = """
import hashlib, os, sys, torch
torch.set_num_threads(2)
from ragen_envs.models import build_tiny_model
from ragen_envs.starpo.policy import ChatFormat, load_tokenizer
from ragen_envs.starpo.sft import expert_trajectories, train_sft
tok = load_tokenizer(sys.argv[1])
data = expert_trajectories("ragen/Sokoban-v0", ChatFormat(tok, "<answer>"), range(10_000, 10_016), actions_per_turn=2,
                           env_kwargs={"think": False})
model = build_tiny_model(tok, hidden_size=64, num_layers=2, intermediate_size=192, num_heads=4, seed=0)
train_sft(model, data, pad_id=tok.pad_token_id, steps=3, batch_size=8, lr=2e-3, warmup=1, context_coef=0.5)
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
print(os.environ["OMP_WAIT_POLICY"], h.hexdigest())
"""


def test_the_openmp_wait_policy_changes_no_number(tmp_path):
    """Two threads under PASSIVE and ACTIVE waiting: the same weights, bit for bit, after SFT
    steps (the policy decides how idle threads wait, not how work is split)."""
    import subprocess

    from ragen_envs.starpo.demo import QUICK, build_demo_model

    model_dir = build_demo_model(tmp_path / "m", QUICK)
    digests = {}
    for policy in ("PASSIVE", "ACTIVE"):
        env = {**{k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}, "OMP_WAIT_POLICY": policy}
        out = subprocess.run([sys.executable, "-c", SFT_UNDER_POLICY, str(model_dir)], capture_output=True, text=True,
                             env=env, check=True).stdout.split()
        assert out[0] == policy
        digests[policy] = out[1]
    assert digests["PASSIVE"] == digests["ACTIVE"]


def test_machine_info_records_the_kernel_settings_a_user_can_override(monkeypatch):
    """The env settings that change the float kernels (and so a from-scratch model's numbers)
    are in demo.json: MKL's code-path switches and the OpenMP policy; unset ones are None."""
    from ragen_envs.starpo.demo import machine_info

    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    monkeypatch.delenv("MKL_CBWR", raising=False)
    info = machine_info()
    assert info["mkl_enable_instructions"] == "AVX2" and info["mkl_cbwr"] is None
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS")
    assert machine_info()["mkl_enable_instructions"] is None


def test_override_settings_reads_json_or_text_and_refuses_unknown_keys_in_one_line():
    """The ``--sft-set`` / ``--model-set`` / ``--rl-set`` items labs/demo_sizing.py,
    labs/demo_robustness.py and benchmarks/bench_omp_wait.py apply to the demo's settings."""
    from ragen_envs.starpo.demo import DEMO, override_settings

    settings = json.loads(json.dumps(DEMO))
    override_settings(settings, sft_set=["steps=7", "lr=0.5"], model_set=["num_heads=4", "architecture=gpt2"],
                      rl_set=["keep_ratio=0.5"])
    assert settings["sft"]["steps"] == 7 and settings["sft"]["lr"] == 0.5
    assert settings["tiny_model"]["num_heads"] == 4 and settings["tiny_model"]["architecture"] == "gpt2"  # text kept
    assert settings["rl"]["keep_ratio"] == 0.5 and DEMO["rl"].get("keep_ratio") != 0.5  # a copy was changed
    for kwargs, flag in (({"sft_set": ["nope=1"]}, "--sft-set"), ({"model_set": ["num_heads"]}, "--model-set"),
                         ({"rl_set": ["seed=3"]}, "--rl-set")):  # unknown, no '=', a key the demo fixes
        with pytest.raises(ValueError, match=f"^{flag} .*expected KEY=VALUE with KEY one of ") as exc:
            override_settings(json.loads(json.dumps(DEMO)), **kwargs)
        assert "\n" not in str(exc.value)
