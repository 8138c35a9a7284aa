"""A command writes only inside its run directory, only into a run of its kind, and never
through a link leading out of it (issue 20 §6)."""

from __future__ import annotations

import json
import os

import pytest

from ragen_envs.cli import main as cli_main

EXPERT_EVAL = ["eval", "ragen/Bandit-v0", "--agent", "expert", "--quiet", "--report-frames", "0"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def _not_a_run(path):
    """A stand-in for `/` or a home directory: non-empty, no run."""
    (path / "etc").mkdir(parents=True)
    (path / "etc" / "passwd").write_text("root:x:0:0\n")
    (path / "notes.txt").write_text("mine\n")
    return path


def test_train_and_sft_refuse_a_non_empty_directory_that_holds_no_run_even_with_overwrite(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    root = _not_a_run(tmp_path / "root")
    before = sorted(p.name for p in root.iterdir())
    small = ["--steps", "1", "--set", "num_groups=1", "--set", "group_size=2", "--set", "max_new_tokens=2",
             "--set", "eval_every=0", "--set", "probe_every=0", "--set", "plots=false"]
    for argv in (["train", "ragen/Bandit-v0", "--out", str(root), "--overwrite", *small],
                 ["train", "ragen/Bandit-v0", "--out", str(root), "--resume", *small],
                 ["sft", "ragen/Bandit-v0", "--out", str(root), "--overwrite", "--episodes", "2", "--steps", "1"]):
        assert cli_main(argv) == 2, argv
        err = _one_line_error(capsys)
        assert "not empty and holds no ragen" in err and "notes.txt" in err, err
    assert sorted(p.name for p in root.iterdir()) == before  # no config.json, model_init, checkpoints
    assert (root / "etc" / "passwd").read_text() == "root:x:0:0\n"


def test_overwrite_replaces_only_a_run_of_the_commands_own_kind(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    ev = tmp_path / "ev"
    assert cli_main(EXPERT_EVAL + ["--seeds", "2", "--out", str(ev)]) == 0
    capsys.readouterr()
    kept = (ev / "episodes.jsonl").read_text()
    assert cli_main(["sft", "ragen/Bandit-v0", "--out", str(ev), "--overwrite", "--episodes", "2", "--steps", "1"]) == 2
    assert "holds a ragen eval run, not an sft run" in _one_line_error(capsys)
    assert cli_main(["train", "ragen/Bandit-v0", "--out", str(ev), "--overwrite", "--steps", "1"]) == 2
    assert "holds a ragen eval run, not a train run" in _one_line_error(capsys)
    assert (ev / "episodes.jsonl").read_text() == kept
    # and eval into a train run (one from before .ragen-run: recognised by its files)
    rl = tmp_path / "rl"
    (rl / "checkpoints" / "step_000001").mkdir(parents=True)
    (rl / "metrics.jsonl").write_text('{"step": 0}\n')
    assert cli_main(EXPERT_EVAL + ["--seeds", "2", "--out", str(rl)]) == 2
    assert "holds a ragen train run, not an eval run" in _one_line_error(capsys)
    assert sorted(p.name for p in rl.iterdir()) == ["checkpoints", "metrics.jsonl"]


def test_eval_refuses_a_non_empty_directory_that_holds_no_run(tmp_path, capsys):
    root = _not_a_run(tmp_path / "root")
    assert cli_main(EXPERT_EVAL + ["--seeds", "2", "--out", str(root)]) == 2
    assert "not empty and holds no ragen eval run" in _one_line_error(capsys)
    assert sorted(p.name for p in root.iterdir()) == ["etc", "notes.txt"]


@pytest.mark.parametrize("name", ["episodes.jsonl", "errors.jsonl", ".lock", "config.json"])
def test_eval_never_writes_through_a_link_leading_out(tmp_path, capsys, name):
    out = tmp_path / "run"
    assert cli_main(EXPERT_EVAL + ["--seeds", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = out / name
    if target.exists():
        target.unlink()
    target.symlink_to(victim)
    assert cli_main(EXPERT_EVAL + ["--seeds", "4", "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    assert "symbolic link" in err and str(victim) in err, err
    assert victim.read_text() == "precious\n"


def test_the_store_refuses_links_leading_out_and_opens_without_following(tmp_path):
    from ragen_envs._fs import LinkOutError, open_nofollow
    from ragen_envs.eval.store import RunStore

    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (run / "sub" / "away").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkOutError, match="outside the run directory"):
        RunStore(run)
    (run / "sub" / "away").unlink()
    (run / "inside").symlink_to(run / "sub", target_is_directory=True)  # a link that stays inside is harmless
    RunStore(run).close()
    (run / "file").symlink_to(outside / "f")
    with pytest.raises(LinkOutError, match="symbolic link"):
        open_nofollow(run / "file", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert not (outside / "f").exists()


def test_train_resume_refuses_a_link_leading_out(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    run = tmp_path / "rl"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "model_init").symlink_to(elsewhere, target_is_directory=True)
    assert cli_main(["train", "ragen/Bandit-v0", "--out", str(run), "--resume", "--steps", "1"]) == 2
    err = _one_line_error(capsys)
    assert "symbolic link" in err and "model_init" in err
    assert list(elsewhere.iterdir()) == []


def test_demo_refuses_a_non_empty_directory_that_holds_no_demo(tmp_path, capsys):
    from ragen_envs import demo

    root = _not_a_run(tmp_path / "root")
    (root / "expert").mkdir()
    (root / "expert" / "thesis.tex").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        demo.main(["--seeds", "1", "--out", str(root)])
    assert exit_.value.code == 2 and "holds no ragen eval run" in capsys.readouterr().err
    assert sorted(p.name for p in (root / "expert").iterdir()) == ["thesis.tex"]


def test_render_refuses_a_symlinked_output(tmp_path, capsys):
    pytest.importorskip("pygame")
    victim = tmp_path / "victim.gif"
    victim.write_bytes(b"precious")
    link = tmp_path / "ep.gif"
    link.symlink_to(victim)
    assert cli_main(["render", "ragen/Bandit-v0", "--seed", "1", "--agent", "expert", "--out", str(link)]) == 2
    assert "symbolic link" in _one_line_error(capsys)
    assert victim.read_bytes() == b"precious"


def test_run_kind_is_recorded_and_old_runs_are_recognised(tmp_path):
    from ragen_envs._rundir import RUN_FILE, claim_run_dir, run_kind

    assert run_kind(tmp_path / "missing") == "" and claim_run_dir(tmp_path / "new", kind="eval") == []
    assert json.loads((tmp_path / "new" / RUN_FILE).read_text()) == {"kind": "eval"}
    assert run_kind(tmp_path / "new") == "eval"
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"agent": "expert", "env_ids": []}))
    (old / ".lock").write_text("")
    assert run_kind(old) == "eval"
    (old / "sft_metrics.jsonl").write_text("")
    assert run_kind(old) == "sft"
    cut = tmp_path / "cut"  # a train run killed while building its tiny model
    (cut / "model_init").mkdir(parents=True)
    assert run_kind(cut) is None
    with pytest.raises(Exception, match="already holds a run"):
        claim_run_dir(cut, kind="train")
    assert claim_run_dir(cut, kind="train", resume=True) == [] and run_kind(cut) == "train"


def test_root_and_home_are_refused_before_anything_is_written(tmp_path):
    from pathlib import Path

    from ragen_envs.cli import CLIError
    from ragen_envs._rundir import RUN_FILE, claim_run_dir

    for where in (Path("/"), Path.home()):
        if not any(where.iterdir()):
            continue
        for kw in ({"overwrite": True}, {"resume": True}, {}):
            with pytest.raises(CLIError, match="not empty and holds no ragen"):
                claim_run_dir(where, kind="train", **kw)
        assert not (where / RUN_FILE).exists()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / ".DS_Store").write_bytes(b"")  # not a reason to refuse
    assert claim_run_dir(fresh, kind="eval") == []


def test_metrics_are_never_written_through_a_link(tmp_path):
    pytest.importorskip("torch")
    from ragen_envs._fs import LinkOutError
    from ragen_envs.starpo.diagnostics import MetricsLogger

    victim = tmp_path / "victim.txt"
    victim.write_text('{"step": 0}\n')
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(victim)
    MetricsLogger(run, resume_step=1).close()  # the kept rows replace the link, not its target
    assert not (run / "metrics.jsonl").is_symlink() and victim.read_text() == '{"step": 0}\n'
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(victim)
    log = MetricsLogger(run, resume_step=5)
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(victim)  # planted while the run goes on
    with pytest.raises(LinkOutError):
        log.log({"step": 5})
    assert victim.read_text() == '{"step": 0}\n'
