"""`ragen train --resume` continues the run that was stopped: its own saved config, whatever
the resuming command leaves out; a flag that contradicts the saved run is refused and
touches nothing; a new run that fails before its first result gives its directory back;
Ctrl-C says what was kept and how to continue."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.cli import main as cli_main  # noqa: E402
from ragen_envs.starpo.diagnostics import read_metrics  # noqa: E402

ENV = "ragen/Bandit-v0"
TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64}
# a run whose every size differs from the defaults and the tiny profile: a resume that
# rebuilt the config from its own flags would change them
SETS = ["num_groups=2", "group_size=2", "max_new_tokens=6", "keep_ratio=1.0", "mini_batch_size=4", "micro_batch_size=2",
        "eval_every=1", "eval_episodes=2", "probe_every=1", "probe_states=1", "probe_samples=2", "save_every=1",
        "keep_checkpoints=1", "log_samples=0", "plots=false", "actor_lr=1e-3", "critic_lr=1e-3", "train_seed_start=500"]
VOLATILE = ("time/", "perf/")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from ragen_envs.models import build_tiny_checkpoint

    return str(build_tiny_checkpoint(tmp_path_factory.mktemp("model"), **TINY))


def _start(model, out, steps, *extra):
    argv = ["train", ENV, "--model", model, "--out", str(out), "--steps", str(steps), "--seed", "3"]
    for s in SETS:
        argv += ["--set", s]
    return argv + list(extra)


def _rows(out):
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in read_metrics(out / "metrics.jsonl")]


def _snapshot(out):
    """Every file under ``out`` with its bytes (a refusal must change none)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _one_line_error(capsys):
    """The command's error line (the last of stderr: model loading may draw progress bars first)."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.splitlines()[-1].startswith("ragen train: error: "), err
    return err.splitlines()[-1]


@pytest.fixture(scope="module")
def one_step_run(model, tmp_path_factory):
    """A run stopped after its first step (checkpoint step_000001), kept pristine: tests copy it."""
    out = tmp_path_factory.mktemp("cut") / "run"
    assert cli_main(_start(model, out, 1)) == 0
    return out


def _copy(run, tmp_path):
    dest = tmp_path / "run"
    shutil.copytree(run, dest, symlinks=True)
    return dest


# ----------------------------------------------------------------------------- 1. exact resume
def test_resume_with_only_out_and_steps_equals_the_uninterrupted_run(model, one_step_run, tmp_path, capsys):
    """The resuming command names nothing but the directory and the new step count: the
    model, sizes, seeds, protocol and eval settings come from the run (the KL to the
    reference model stays continuous), and the rows equal an uninterrupted run's."""
    straight = tmp_path / "straight"
    assert cli_main(_start(model, straight, 2)) == 0
    run = _copy(one_step_run, tmp_path)
    capsys.readouterr()
    assert cli_main(["train", "--out", str(run), "--resume", "--steps", "2"]) == 0
    printed = capsys.readouterr().out
    assert "--resume: steps 1 -> 2 (--steps 2)" in printed and "at step 1" in printed
    resumed, expected = _rows(run), _rows(straight)
    assert [r["step"] for r in resumed] == [0, 1, 2] and resumed == expected
    assert all(r["actor/kl_ref_k1"] < 0.1 for r in resumed if "actor/kl_ref_k1" in r)
    saved = json.loads((run / "config.json").read_text())
    assert {**saved, "out_dir": None} == {**json.loads((straight / "config.json").read_text()), "out_dir": None}
    # and the next bare --resume heads for the new target, not for the default 200 steps
    assert cli_main(["train", "--out", str(run), "--resume"]) == 0
    assert [r["step"] for r in _rows(run)] == [0, 1, 2]
    capsys.readouterr()
    assert cli_main(["train", "--out", str(run), "--resume", "--steps", "1"]) == 2  # fewer: nothing to continue
    assert "--steps 1 is below the run's step 2" in _one_line_error(capsys)


def test_resume_of_a_run_started_on_the_tiny_model_keeps_its_model_and_sizes(tmp_path, capsys):
    """No --model: the resumed run reads the tiny model the run built (model_init) and the
    run's sizes, not the tiny profile's."""
    tiny = ["--set", "tiny_model=" + json.dumps({"hidden_size": 16, "num_layers": 1, "num_heads": 2,
                                                 "intermediate_size": 32})]
    argv = ["train", ENV, "--out", str(tmp_path / "a"), "--steps", "2", *tiny]
    for s in SETS:
        argv += ["--set", s]
    assert cli_main(argv) == 0
    cut = [a if a != str(tmp_path / "a") else str(tmp_path / "b") for a in argv]
    cut[cut.index("--steps") + 1] = "1"
    assert cli_main(cut) == 0
    init = (tmp_path / "b" / "model_init" / "model.safetensors").read_bytes()
    assert cli_main(["train", "--out", str(tmp_path / "b"), "--resume", "--steps", "2"]) == 0
    assert _rows(tmp_path / "b") == _rows(tmp_path / "a")
    assert (tmp_path / "b" / "model_init" / "model.safetensors").read_bytes() == init


def test_repeating_the_original_command_with_more_steps_continues(model, one_step_run, tmp_path, monkeypatch, capsys):
    from pathlib import Path

    run = _copy(one_step_run, tmp_path)
    monkeypatch.chdir(Path(model).parent)
    same_model = f"./{Path(model).name}"  # another spelling of the same folder
    assert cli_main(_start(same_model, run, 2, "--resume", "--device", "cpu", "--set", "log_samples=1")) == 0
    printed = capsys.readouterr().out
    assert "--resume: log_samples 0 -> 1 (--set log_samples=1)" in printed and "--resume: device" not in printed
    assert [r["step"] for r in _rows(run)] == [0, 1, 2]
    saved = json.loads((run / "config.json").read_text())
    assert saved["steps"] == 2 and saved["log_samples"] == 1 and saved["model"] == model and saved["num_groups"] == 2


def test_a_run_saved_on_cuda_resumes_on_a_machine_without_one_with_device_cpu(one_step_run, tmp_path, monkeypatch,
                                                                               capsys):
    run = _copy(one_step_run, tmp_path)
    saved = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**saved, "device": "cuda"}, indent=2))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli_main(["train", "--out", str(run), "--resume"]) == 2
    assert "device cuda: torch sees no CUDA device on this machine; --device cpu continues the run" in \
        _one_line_error(capsys)
    assert cli_main(["train", "--out", str(run), "--resume", "--device", "cpu", "--steps", "2"]) == 0
    assert "--resume: device 'cuda' -> 'cpu' (--device cpu)" in capsys.readouterr().out
    assert json.loads((run / "config.json").read_text())["device"] == "cpu"


@pytest.mark.parametrize("flags,named", [
    (["--set", "num_groups=4"], ["--set num_groups=4", "num_groups=2"]),
    (["--set", "eval_episodes=8"], ["--set eval_episodes=8", "eval_episodes=2"]),
    (["--model", "OTHER"], ["--model", "model="]),
    (["--env-kwarg", "think=false"], ["--env-kwarg think=false", "env kwarg think=True"]),
    (["--preset", "grpo"], ["--preset grpo", "advantage='gae'"]),
    (["--profile", "full"], ["--profile full", "actor_lr=0.001"]),
    (["--seed", "0"], ["--seed 0", "seed=3"]),
    (["ragen/FrozenLake-v0"], ["ENV_ID ragen/FrozenLake-v0", "env_id='ragen/Bandit-v0'"]),
])
def test_a_contradicting_flag_is_refused_naming_both_values_and_touches_nothing(model, one_step_run, tmp_path, capsys,
                                                                                flags, named):
    run = _copy(one_step_run, tmp_path)
    if "OTHER" in flags:
        other = shutil.copytree(model, tmp_path / "other")
        flags = [str(other) if f == "OTHER" else f for f in flags]
    before = _snapshot(run)
    env_first = flags[0].startswith("ragen/")
    argv = ["train", *(flags if env_first else []), "--out", str(run), "--resume", "--steps", "3",
            *([] if env_first else flags)]
    assert cli_main(argv) == 2
    err = _one_line_error(capsys)
    assert all(n in err for n in named) and "contradicts the run's" in err and "config.json" in err, err
    assert _snapshot(run) == before


def test_flags_are_judged_as_they_resolve_with_the_models_protocol_settings(model, tmp_path, capsys):
    """A model folder's ragen_protocol.json (think off, a reply cap) gave the run its env kwargs
    and max_new_tokens: the original command's --preset starpo-s resolves to them again (and is
    accepted), while a flag that turns think back on is refused."""
    import argparse

    from ragen_envs.commands.train import resolve_config
    from ragen_envs.lm.settings import ProtocolSettings, save_settings

    sft = shutil.copytree(model, tmp_path / "sft")
    save_settings(sft, ProtocolSettings(env_id=ENV, env_kwargs={"think": False}, reply_prefix="<answer>",
                                        max_new_tokens=7))
    run = tmp_path / "run"
    args = argparse.Namespace(env_id=ENV, preset="starpo-s", profile=None, model=str(sft), steps=2, out=str(run),
                              seed=None, device="cpu", env_kwarg=None, kwarg_limit=None, overrides=None, config=None)
    cfg = resolve_config(args)[0]
    assert cfg.env_kwargs == {"think": False} and cfg.max_new_tokens == 7
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))  # as the trainer writes it
    (run / ".ragen-run").write_text('{"kind": "train"}\n')
    before = _snapshot(run)
    for flags in (["--preset", "starpo-s"], ["--preset", "nothink"], ["--model", str(sft), "--env-kwarg", "think=false"]):
        assert cli_main(["train", "--out", str(run), "--resume", "--print-config", *flags]) == 0, flags
        assert "max_new_tokens: 7" in capsys.readouterr().out
    assert cli_main(["train", "--out", str(run), "--resume", "--env-kwarg", "think=true"]) == 2
    assert "--env-kwarg think=true contradicts the run's env kwarg think=False" in _one_line_error(capsys)
    assert cli_main(["train", "--out", str(run), "--resume", "--model", str(model)]) == 2
    assert f"--model {model} contradicts the run's model='{sft}'" in _one_line_error(capsys)
    assert _snapshot(run) == before


def test_a_config_file_is_judged_by_the_fields_it_sets(model, one_step_run, tmp_path, capsys):
    run = _copy(one_step_run, tmp_path)
    before = _snapshot(run)
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps({"num_groups": 2, "group_size": 3}))
    assert cli_main(["train", "--out", str(run), "--resume", "--config", str(conf)]) == 2
    err = _one_line_error(capsys)
    assert f"--config {conf} (group_size: 3)" in err and "group_size=2" in err
    assert _snapshot(run) == before


def test_the_torchrun_entry_follows_the_same_rule(model, one_step_run, tmp_path, monkeypatch, capsys):
    """``python -m ragen_envs.starpo`` (what torchrun starts) = ``ragen train``, --resume included."""
    import runpy

    run = _copy(one_step_run, tmp_path)
    before = _snapshot(run)

    def entry(*argv):
        monkeypatch.setattr(sys, "argv", ["ragen_envs.starpo", *argv])
        with pytest.raises(SystemExit) as done:
            runpy.run_module("ragen_envs.starpo", run_name="__main__", alter_sys=False)
        return done.value.code

    assert entry("--out", str(run), "--resume", "--set", "group_size=4") == 2
    assert "--set group_size=4 contradicts the run's group_size=2" in _one_line_error(capsys)
    assert _snapshot(run) == before
    assert entry("--out", str(run), "--resume", "--steps", "2") == 0
    assert [r["step"] for r in _rows(run)] == [0, 1, 2] and json.loads((run / "config.json").read_text())["steps"] == 2


def test_resume_without_a_run_is_one_line_and_writes_nothing(tmp_path, capsys):
    missing, empty, notes, cut = tmp_path / "missing", tmp_path / "empty", tmp_path / "notes", tmp_path / "cut"
    empty.mkdir()
    notes.mkdir()
    (notes / "a.txt").write_text("x")
    (cut / "model_init").mkdir(parents=True)  # killed while it built its model: no config.json
    (cut / ".ragen-run").write_text('{"kind": "train"}\n')
    for out, says in ((missing, "holds no train run to resume"), (empty, "holds no train run to resume"),
                      (notes, "holds no ragen train run"), (cut, "no config.json: it stopped before its first step")):
        assert cli_main(["train", "--out", str(out), "--resume"]) == 2
        assert says in _one_line_error(capsys)
    assert not missing.exists() and list(empty.iterdir()) == [] and [p.name for p in notes.iterdir()] == ["a.txt"]
    assert sorted(p.name for p in cut.iterdir()) == [".ragen-run", "model_init"]
    assert cli_main(["train", "--out", str(notes), "--resume", ENV]) == 2  # an env id does not make it a run
    assert "holds no ragen train run" in _one_line_error(capsys)
    assert cli_main(["train", "--out", str(tmp_path / "new")]) == 2  # no --resume: the env id is needed
    assert "environment id is required" in _one_line_error(capsys)


def test_a_run_killed_before_it_was_built_starts_with_its_full_command_and_resume(model, tmp_path, capsys):
    """kill -9 while the run loads its model (claimed, no config.json yet) and the same command
    again with --resume: nothing was fixed yet, so it starts (the leftovers deleted)."""
    cut = tmp_path / "cut"
    (cut / "model_init").mkdir(parents=True)
    (cut / "model_init" / "config.json").write_text("{")  # half written
    (cut / ".ragen-run").write_text('{"kind": "train"}\n')
    assert cli_main(_start(model, cut, 1, "--resume")) == 0
    assert "stopped before its first step (no config.json): starting it with this command (deleted what it left: " \
           "model_init)" in capsys.readouterr().out
    assert [r["step"] for r in _rows(cut)] == [0, 1] and not (cut / "model_init").exists()


def test_the_trainer_refuses_a_resumed_config_that_is_not_the_runs(model, one_step_run, tmp_path):
    """The Python API holds the same rule: StarPOTrainer(cfg, resume=True) with another
    experiment is a ValueError naming the field and both values."""
    import dataclasses

    from ragen_envs.starpo.config import StarPOConfig
    from ragen_envs.starpo.trainer import StarPOTrainer

    run = _copy(one_step_run, tmp_path)
    saved = StarPOConfig.from_dict({**json.loads((run / "config.json").read_text()), "out_dir": str(run)})
    before = _snapshot(run)
    with pytest.raises(ValueError, match=r"group_size=3 contradicts the run's group_size=2"):
        StarPOTrainer(dataclasses.replace(saved, group_size=3), resume=True, log=lambda _m: None)
    # config.json edited by hand: the checkpoint still knows what it was trained with
    (run / "config.json").write_text(json.dumps({**json.loads((run / "config.json").read_text()), "actor_lr": 0.5}))
    with pytest.raises(ValueError, match=r"actor_lr=0.5 contradicts the run's actor_lr=0.001 \(checkpoint"):
        StarPOTrainer(dataclasses.replace(saved, actor_lr=0.5), resume=True, log=lambda _m: None)


# ----------------------------------------------------------------------------- 3. a failed start
def test_a_start_that_fails_leaves_no_claim_and_the_corrected_command_runs(model, tmp_path, capsys):
    out = tmp_path / "x"
    argv = _start(model, out, 1)
    assert cli_main(argv + ["--env-kwarg", "max_trns=3"]) == 2
    err = _one_line_error(capsys)
    assert "max_trns" in err
    assert not out.exists()
    assert cli_main(argv) == 0  # no --overwrite needed


def test_any_failure_before_the_first_result_gives_the_directory_back(model, tmp_path, monkeypatch, capsys):
    from ragen_envs.starpo import trainer as T

    out = tmp_path / "x"
    out.mkdir()
    (out / ".DS_Store").write_bytes(b"")  # what was there before stays
    argv = _start(model, out, 1)

    def crash(self):
        raise RuntimeError("boom in step 0")

    monkeypatch.setattr(T.StarPOTrainer, "train_step", crash)  # after config.json and the step-0 eval
    with pytest.raises(RuntimeError, match="boom"):
        cli_main(argv)
    assert [p.name for p in out.iterdir()] == [".DS_Store"]
    monkeypatch.undo()
    monkeypatch.setattr(T, "load_critic", lambda *a, **k: (_ for _ in ()).throw(TypeError("bad critic")))
    assert cli_main(argv) == 2
    assert "cannot start the run: bad critic" in _one_line_error(capsys)
    assert [p.name for p in out.iterdir()] == [".DS_Store"]
    monkeypatch.undo()
    assert cli_main(argv) == 0 and (out / "model").is_dir()


# ----------------------------------------------------------------------------- 2. Ctrl-C
def test_the_interrupt_line_names_the_checkpoint_and_the_resume_command(tmp_path):
    from ragen_envs.commands.train import interrupted_message
    from ragen_envs.starpo.checkpoint import write_pointer

    out = tmp_path / "my runs" / "r"
    assert "nothing was kept" in interrupted_message(out, None, released=True)
    line = interrupted_message(out, 3, released=False)
    assert "before the first checkpoint" in line and "from step 0" in line
    (out / "checkpoints" / "step_000002").mkdir(parents=True)
    write_pointer(out / "checkpoints", "step_000002")
    line = interrupted_message(out, 3, released=False)
    assert line == (f"interrupted at step 3: kept the checkpoint of step 2 ({out / 'checkpoints' / 'step_000002'}) "
                    f"and metrics.jsonl; continue with: ragen train --out '{out}' --resume")
    assert "torchrun --nproc_per_node=2 -m ragen_envs.starpo --out" in interrupted_message(out, 3, False, world=2)


def test_ctrl_c_after_a_checkpoint_prints_it_and_the_resume_command(model, tmp_path, monkeypatch, capsys):
    """A real SIGINT (Python's own handler: KeyboardInterrupt) right after the step-1
    checkpoint: exit status 130, one line with that checkpoint and the command."""
    from ragen_envs.starpo import trainer as T

    save = T.StarPOTrainer.save

    def save_then_ctrl_c(self, *args, **kwargs):
        path = save(self, *args, **kwargs)
        if path.name.startswith("step_"):
            signal.raise_signal(signal.SIGINT)
        return path

    monkeypatch.setattr(T.StarPOTrainer, "save", save_then_ctrl_c)
    out = tmp_path / "run"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # (a test runner may ignore SIGINT)
    try:
        assert cli_main(_start(model, out, 50)) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("interrupted")]
    assert line == [f"interrupted at step 1: kept the checkpoint of step 1 ({out / 'checkpoints' / 'step_000001'}) "
                    f"and metrics.jsonl; continue with: ragen train --out {out} --resume"]
    assert [r["step"] for r in _rows(out)] == [0]


@pytest.mark.slow
def test_ctrl_c_during_training_prints_the_kept_checkpoint_and_the_resume_command(model, tmp_path):
    out = tmp_path / "run"
    argv = _start(model, out, 10_000)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "ragen_envs.cli", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env,
                            # an inherited ignored SIGINT stays ignored: give the default disposition
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoints" / "latest").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    line = [x for x in err.splitlines() if x.startswith("interrupted")]
    assert len(line) == 1 and "Traceback" not in err, err[-2000:]
    kept = (out / "checkpoints" / "latest").read_text().strip()
    assert f"kept the checkpoint of step {int(kept.removeprefix('step_'))} ({out / 'checkpoints' / kept})" in line[0]
    assert line[0].endswith(f"continue with: ragen train --out {out} --resume")
