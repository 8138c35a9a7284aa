"""RAGEN-2's collapse metrics and gradient report in the trainer: the config fields, and a
2-step ``ragen train`` whose metrics.jsonl carries them.

A tiny random model almost never closes ``</think>`` in a few tokens, so its reasoning would be
empty and the metrics would have nothing to score: the smoke runs play scripted replies whose
think text depends on the state (the trainer scores them with the tiny model as usual).
"""

from __future__ import annotations

import json
import math
import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.cli import main as cli_main  # noqa: E402
from ragen_envs.starpo import trainer as T  # noqa: E402
from ragen_envs.starpo.config import make_config  # noqa: E402
from ragen_envs.starpo.diagnostics import read_metrics  # noqa: E402
from ragen_envs.starpo.rollout import ScriptedResponder  # noqa: E402

TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64}


@pytest.fixture
def scripted(monkeypatch):
    """Replies '<think>...</think><answer>...</answer>' whose think depends on the prompt and
    names a varying move; one reply in five has no closing tag (an invalid, empty reasoning)."""
    def responder(model, fmt, *args, **kwargs):  # one per rollout call: the same replies in every run
        count = [0]

        def reply(env, ids):
            count[0] += 1
            move = ["Up", "Down", "Left", "Right"][count[0] % 4]
            if count[0] % 5 == 0:
                return f"<think>no closing tag <answer>{move}</answer>"
            return f"<think>state {sum(ids) % 17}, try {move.lower()}</think><answer>{move}</answer>"

        return ScriptedResponder(fmt, reply)

    monkeypatch.setattr(T, "CachedResponder", responder)


ARGS = ["--steps", "2", "--set", "num_groups=4", "--set", "group_size=2", "--set", "eval_every=0", "--set", "probe_every=0",
        "--set", "mini_batch_size=4", "--set", "micro_batch_size=2", "--set", "keep_ratio=1.0", "--set", "max_new_tokens=24",
        "--set", "plots=false", "--set", "save_every=0", "--set", "log_samples=0",
        "--set", f"tiny_model={json.dumps(TINY)}", "--env-kwarg", "max_turns=2"]


def test_ragen_train_logs_collapse_metrics_and_gradient_report(tmp_path, scripted, capsys):
    cd = {"first_turn_enabled": True, "multi_turn_enabled": True, "compute_freq": 1, "num_samples": "all"}
    args = ["train", "ragen/Sokoban-v0", "--out", str(tmp_path), *ARGS, "--set", f"collapse_detection={json.dumps(cd)}",
            "--set", "gradient_analysis_mode=true", "--set", "gradient_analysis_every=1",
            "--set", "gradient_analysis_num_buckets=2"]
    assert cli_main(args) == 0, capsys.readouterr()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        for sample in ("collapse_first_turn_sample", "collapse_trajectory_sample"):
            n = 4 if sample == "collapse_first_turn_sample" else None
            if n is not None:  # one column per group
                assert r[f"{sample}/mi_upper_bound"] == pytest.approx(math.log(n))
            for key in ("mi_estimate", "mi_seq_estimate", "conditional_entropy_est", "reasoning_entropy_est",
                        "retrieval_accuracy", "retrieval_chance_level", "retrieval_accuracy@2", "mi_zscore",
                        "mi_zscore_ema", "marginal_std_ema", "conditional_entropy_seq_est"):
                assert math.isfinite(r[f"{sample}/{key}"]), (sample, key)
            # H(Z) = H(Z|X) + I(X;Z)
            assert r[f"{sample}/reasoning_entropy_est"] == pytest.approx(
                r[f"{sample}/conditional_entropy_est"] + r[f"{sample}/mi_estimate"], abs=1e-9)
        assert 0 < r["collapse/first_turn_num_valid"] < r["collapse/first_turn_num_total"] == 8
        assert 0 < r["collapse/valid_thinking_rate"] < 1
        assert r["time/collapse"] >= 0
        # the gradient report: all + 2 buckets of the 4 kept groups
        assert r["grad_norm/all/sample_count"] == 8 and r["grad_norm/all/sample_pct"] == 1.0
        assert r["grad_norm/bucket_1/sample_count"] + r["grad_norm/bucket_2/sample_count"] == 8
        assert r["grad_norm/bucket_1/reward_std_max"] <= r["grad_norm/bucket_2/reward_std_min"] + 1e-12
        for b in ("all", "bucket_1", "bucket_2"):
            assert r[f"grad_norm/{b}/task"] >= 0 and r[f"grad_norm/{b}/entropy"] >= 0
            assert "grad_norm/all/kl" not in r  # kl_coef 0: no KL component, as the reference without use_kl_loss
            assert math.isfinite(r[f"grad_norm/{b}/loss/total"])
    # the EMA carries across steps: step 1's EMA is 0.9 x step 0's std + 0.1 x its own
    s = "collapse_first_turn_sample"
    assert rows[1][f"{s}/marginal_std_ema"] == pytest.approx(
        0.9 * rows[0][f"{s}/marginal_std"] + 0.1 * rows[1][f"{s}/marginal_std"])


def test_the_report_leaves_the_update_unchanged(tmp_path, scripted):
    """Measuring gradients takes no optimiser step: the run's training numbers are the same."""
    def run(out, **extra):
        cfg = make_config("starpo-s", out_dir=str(out), steps=2, num_groups=4, group_size=2, eval_every=0, probe_every=0,
                          mini_batch_size=4, micro_batch_size=2, keep_ratio=0.5, max_new_tokens=24, plots=False,
                          save_every=0, log_samples=0, tiny_model=TINY, env_kwargs={"max_turns": 2}, actor_lr=1e-3,
                          **extra)
        T.StarPOTrainer(cfg, log=lambda m: None).train()
        return [{k: v for k, v in r.items() if k.startswith(("actor/", "critic/", "rollout/"))}
                for r in read_metrics(out / "metrics.jsonl")]

    plain = run(tmp_path / "a")
    probed = run(tmp_path / "b", gradient_analysis_mode=True, gradient_analysis_every=1,
                 collapse_detection={"first_turn_enabled": True, "compute_freq": 1})
    assert plain == probed


def test_collapse_off_by_default_and_schedule(tmp_path, scripted):
    cfg = make_config("starpo-s", out_dir=str(tmp_path), steps=3, num_groups=2, group_size=2, eval_every=0, probe_every=0,
                      mini_batch_size=4, micro_batch_size=2, keep_ratio=1.0, max_new_tokens=24, plots=False, save_every=0,
                      log_samples=0, tiny_model=TINY,
                      collapse_detection={"first_turn_enabled": True, "compute_freq": 2})
    assert cfg.collapse_detection["num_samples"] == 64 and cfg.collapse_detection["ema_decay"] == 0.9
    T.StarPOTrainer(cfg, log=lambda m: None).train()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    # reference steps 1, 2 (= ours 0, 1) of compute_freq 2; not 3 (ours 2)
    assert ["collapse_first_turn_sample/mi_estimate" in r for r in rows] == [True, True, False]
    assert not any(k.startswith(("collapse", "grad_norm/")) for k in read_metrics_default(tmp_path, scripted))


def read_metrics_default(tmp_path, _):
    cfg = make_config("starpo-s", out_dir=str(tmp_path / "d"), steps=1, num_groups=2, group_size=2, eval_every=0,
                      probe_every=0, mini_batch_size=4, micro_batch_size=2, keep_ratio=1.0, max_new_tokens=24,
                      plots=False, save_every=0, log_samples=0, tiny_model=TINY)
    T.StarPOTrainer(cfg, log=lambda m: None).train()
    return read_metrics(tmp_path / "d" / "metrics.jsonl")[0]


@pytest.mark.parametrize("bad,message", [
    ('collapse_detection={"first_turn": true}', "collapse_detection must be a dict with keys"),
    ('collapse_detection={"compute_freq": 0}', "compute_freq must be an integer >= 1"),
    ('collapse_detection={"num_samples": "some"}', 'num_samples must be a positive integer or "all"'),
    ('collapse_detection={"ema_decay": 1.5}', "ema_decay must be in [0, 1]"),
    ('collapse_detection={"first_turn_enabled": "yes"}', "first_turn_enabled must be true or false"),
    ("gradient_analysis_every=0", "gradient_analysis_every must be an integer >= 1"),
    ("gradient_analysis_bucket_mode=equal", "gradient_analysis_bucket_mode must be one of quantile, fixed_rv"),
])
def test_bad_fields_are_one_line_errors(capsys, tmp_path, bad, message):
    assert cli_main(["train", "ragen/Sokoban-v0", "--out", str(tmp_path), "--set", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_collapse_needs_think_mode():
    with pytest.raises(ValueError, match="needs think mode"):
        make_config("nothink", collapse_detection={"multi_turn_enabled": True})


def test_resume_keeps_the_ema(tmp_path, scripted):
    """The marginals' std EMA is in the checkpoint: a resumed run logs what a straight one does."""
    def run(out, steps, resume=False):
        cfg = make_config("starpo-s", out_dir=str(out), steps=steps, num_groups=2, group_size=2, eval_every=0,
                          probe_every=0, mini_batch_size=4, micro_batch_size=2, keep_ratio=1.0, max_new_tokens=24,
                          plots=False, save_every=1, keep_checkpoints=1, log_samples=0, tiny_model=TINY,
                          collapse_detection={"first_turn_enabled": True, "compute_freq": 1, "ema_decay": 0.5})
        T.StarPOTrainer(cfg, resume=resume, log=lambda m: None).train()
        return [{k: v for k, v in r.items() if k.startswith("collapse")} for r in read_metrics(out / "metrics.jsonl")]

    straight = run(tmp_path / "a", 2)
    run(tmp_path / "b", 1)
    resumed = run(tmp_path / "b", 2, resume=True)
    assert resumed == straight and "collapse_first_turn_sample/marginal_std_ema" in straight[1]
    assert straight[1]["collapse_first_turn_sample/marginal_std_ema"] != straight[1]["collapse_first_turn_sample/marginal_std"]


@pytest.mark.slow
def test_torchrun_fsdp_two_processes_with_collapse_metrics(tmp_path):
    """Under FSDP the scoring model is a full copy refreshed by a collective: every rank
    takes part, rank 0 scores, the run finishes (no hang) and logs the counts once."""
    import shutil
    import subprocess
    import sys

    from ragen_envs.models import build_tiny_checkpoint

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    model = build_tiny_checkpoint(tmp_path / "model", **TINY)
    out = tmp_path / "run"
    cmd = [torchrun, "--standalone", "--nproc_per_node=2", "-m", "ragen_envs.starpo", "ragen/Sokoban-v0",
           "--model", str(model), "--steps", "2", "--out", str(out)]
    for s in ("num_groups=2", "group_size=4", "max_new_tokens=6", "keep_ratio=1.0", "mini_batch_size=8",
              "micro_batch_size=2", "eval_every=0", "probe_every=0", "save_every=0", "log_samples=0", "plots=false",
              "sharding=fsdp", 'collapse_detection={"first_turn_enabled": true, "compute_freq": 1}'):
        cmd += ["--set", s]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["collapse/first_turn_num_total"] for r in rows if not r.get("final")] == [8, 8]
