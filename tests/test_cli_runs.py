"""`ragen train` / `ragen sft` protect run directories, pick sizes from the model, read and
print config files; metrics.jsonl is strict JSON with TensorBoard / W&B sinks; one device
default for the torch commands."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.cli import CLIError  # noqa: E402
from ragen_envs.cli import main as cli_main  # noqa: E402
from ragen_envs._rundir import RUN_FILE, claim_run_dir, clear_run_dir, run_kind, run_markers  # noqa: E402

TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64}


def _strict_loads(line: str):
    """json.loads that rejects NaN / Infinity (what jq and other strict parsers do)."""
    def bad(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(line, parse_constant=bad)


def _fake_run(path, step_dirs=("step_000010",)):
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    (path / "config.json").write_text("{}")
    for name in step_dirs:
        (path / "checkpoints" / name).mkdir(parents=True)
    return path


# ----------------------------------------------------------------------------- run directories
def test_claim_run_dir_refuses_resumes_and_overwrites(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert claim_run_dir(tmp_path / "new") == []  # missing: fine
    (tmp_path / "empty").mkdir()
    assert claim_run_dir(tmp_path / "empty") == []
    run = _fake_run(tmp_path / "run")
    assert run_markers(run) == ["config.json", "metrics.jsonl", "checkpoints"]
    with pytest.raises(CLIError, match="already holds a run.*--resume.*--overwrite"):
        claim_run_dir(run)
    with pytest.raises(CLIError, match="--overwrite") as err:
        claim_run_dir(run, can_resume=False)
    assert "--resume" not in str(err.value)
    assert (run / "metrics.jsonl").read_text().count("\n") == 2  # untouched by a refusal
    assert claim_run_dir(run, resume=True) == []
    with pytest.raises(CLIError, match="contradict"):
        claim_run_dir(run, resume=True, overwrite=True)
    # a symlink inside is unlinked, its target kept
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "precious.txt").write_text("x")
    (run / "link").symlink_to(outside, target_is_directory=True)
    assert claim_run_dir(run, overwrite=True) == ["checkpoints", "config.json", "link", "metrics.jsonl"]
    assert run.is_dir() and [p.name for p in run.iterdir()] == [RUN_FILE] and (outside / "precious.txt").exists()
    assert run_kind(run) == "train"


def test_overwrite_never_empties_the_working_directory_or_a_non_run(tmp_path, monkeypatch):
    run = _fake_run(tmp_path / "cwdrun")
    monkeypatch.chdir(run)
    with pytest.raises(CLIError, match="refusing to empty"):
        clear_run_dir(".")
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "a.txt").write_text("x")
    with pytest.raises(CLIError, match="not empty and holds no ragen train run"):  # --overwrite or not
        claim_run_dir(other, overwrite=True)
    with pytest.raises(CLIError, match="holds no ragen run"):
        clear_run_dir(other)
    assert (other / "a.txt").exists()
    link = tmp_path / "linkrun"
    link.symlink_to(run, target_is_directory=True)
    with pytest.raises(CLIError, match="symlink"):
        clear_run_dir(link)
    assert (run / "metrics.jsonl").exists()


def test_train_and_sft_refuse_an_existing_run_in_one_line(tmp_path, capsys):
    run = _fake_run(tmp_path / "rl")
    before = (run / "metrics.jsonl").read_text()
    assert cli_main(["train", "ragen/Sokoban-v0", "--out", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert (run / "metrics.jsonl").read_text() == before and (run / "checkpoints" / "step_000010").is_dir()
    sft = tmp_path / "sft"
    (sft / "model").mkdir(parents=True)
    (sft / "sft_metrics.jsonl").write_text("{}\n")
    assert cli_main(["sft", "ragen/Bandit-v0", "--out", str(sft)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already holds a run" in err and "--overwrite" in err
    with pytest.raises(SystemExit) as exit_:  # argparse: not both
        cli_main(["train", "ragen/Sokoban-v0", "--out", str(run), "--resume", "--overwrite"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_sft_overwrite_starts_over_and_train_refuses_the_result(tmp_path, capsys):
    out = tmp_path / "sft"
    out.mkdir()
    (out / "sft_metrics.jsonl").write_text('{"step": 999}\n')
    (out / "stale.txt").write_text("old run")
    args = ["sft", "ragen/Bandit-v0", "--episodes", "4", "--steps", "2", "--batch-size", "2", "--out", str(out),
            "--config", str(_write(tmp_path / "tiny.json", {"tiny_model": TINY}))]
    assert cli_main(args) == 2
    assert cli_main(args + ["--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert "--overwrite: deleted 2 entries" in printed and "sizes: profile tiny" in printed
    assert not (out / "stale.txt").exists() and (out / "model" / "config.json").exists()
    assert (out / "model_init" / "config.json").exists()  # no --model: the tiny model was built first
    rows = [json.loads(x) for x in (out / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]  # the old row is gone


def _write(path, data):
    path.write_text(json.dumps(data) if path.suffix == ".json" else data)
    return path


# ----------------------------------------------------------------------------- sizes, config files
def _print_config(capsys, argv):
    assert cli_main(argv + ["--print-config"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_profiles_pick_sizes_from_the_parameter_count(tmp_path, capsys):
    import yaml
    from transformers import Qwen2Config

    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.profiles import count_model_parameters, pick_profile

    tiny = build_tiny_checkpoint(tmp_path / "tiny", **TINY)
    n = count_model_parameters(tiny)
    assert n == sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(tiny).parameters())
    assert pick_profile("auto", tiny) == ("tiny", n) and pick_profile(None, None) == ("tiny", None)
    big = tmp_path / "big"  # a 0.5B-sized config (no weights needed to count)
    Qwen2Config(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                intermediate_size=4864, vocab_size=151_936, tie_word_embeddings=True).save_pretrained(big)
    assert pick_profile("auto", big)[0] == "full" and 4e8 < count_model_parameters(big) < 6e8
    assert pick_profile("tiny", big)[0] == "tiny"

    from ragen_envs.starpo.demo import DEMO

    cfg = yaml.safe_load(_print_config(capsys, ["train", "ragen/Sokoban-v0", "--model", str(tiny)]))
    keys = ("actor_lr", "critic_lr", "num_groups", "group_size", "mini_batch_size", "micro_batch_size")
    assert [cfg[k] for k in keys] == [DEMO["rl"][k] for k in keys]  # the tiny profile is make demo's
    text = _print_config(capsys, ["train", "ragen/Sokoban-v0", "--model", str(big)])
    cfg = yaml.safe_load(text)
    assert (cfg["actor_lr"], cfg["critic_lr"], cfg["num_groups"], cfg["group_size"]) == (1e-6, 1e-5, 8, 16)
    assert "# sizes: profile full (" in text and "M parameters >= 50 M" in text
    cfg = yaml.safe_load(_print_config(capsys, ["train", "ragen/Sokoban-v0", "--model", str(big), "--set", "actor_lr=3e-6"]))
    assert cfg["actor_lr"] == 3e-6 and cfg["critic_lr"] == 1e-5  # an explicit field wins over the profile
    sft = yaml.safe_load(_print_config(capsys, ["sft", "ragen/Sokoban-v0"]))
    assert (sft["lr"], sft["batch_size"], sft["model"]) == (2e-3, 32, None)  # no --model: the tiny model is built
    assert [sft[k] for k in ("lr", "batch_size", "warmup", "context_coef")] == \
        [DEMO["sft"][k] for k in ("lr", "batch_size", "warmup", "context_coef")]
    sft = yaml.safe_load(_print_config(capsys, ["sft", "ragen/Sokoban-v0", "--model", str(big)]))
    assert (sft["lr"], sft["batch_size"]) == (1e-5, 16)
    sft = yaml.safe_load(_print_config(capsys, ["sft", "ragen/Sokoban-v0", "--model", str(big), "--lr", "4e-5"]))
    assert sft["lr"] == 4e-5


def test_config_files_round_trip_and_unknown_fields_suggest_a_name(tmp_path, capsys):
    yaml_file = _write(tmp_path / "run.yaml", "preset: grpo\nnum_groups: 4\nactor_lr: 1e-5\nenv_kwargs: {think: false}\n")
    text = _print_config(capsys, ["train", "ragen/Sokoban-v0", "--config", str(yaml_file), "--set", "group_size=3"])
    import yaml

    cfg = yaml.safe_load(text)
    assert cfg["advantage"] == "grpo" and cfg["num_groups"] == 4 and cfg["group_size"] == 3
    assert cfg["actor_lr"] == 1e-5 and cfg["env_kwargs"] == {"think": False}  # "1e-5" is a YAML string: coerced
    again = _print_config(capsys, ["train", "ragen/Sokoban-v0", "--config", str(_write(tmp_path / "out.yaml", text))])
    assert yaml.safe_load(again) == cfg  # --print-config output loads back to the same config
    as_json = _write(tmp_path / "run.json", cfg)
    assert yaml.safe_load(_print_config(capsys, ["train", "ragen/Sokoban-v0", "--config", str(as_json)])) == cfg
    sft_text = _print_config(capsys, ["sft", "ragen/FrozenLake-v0", "--steps", "7"])
    sft_again = _print_config(capsys, ["sft", "ragen/FrozenLake-v0", "--config", str(_write(tmp_path / "s.yaml", sft_text))])
    assert yaml.safe_load(sft_again) == yaml.safe_load(sft_text) and yaml.safe_load(sft_text)["steps"] == 7

    for argv, needle in (
        (["train", "ragen/Sokoban-v0", "--config", str(_write(tmp_path / "a.yaml", "num_grups: 3\n"))],
         "unknown config field 'num_grups' in --config"),
        (["train", "ragen/Sokoban-v0", "--set", "actor_rl=1e-5"], "did you mean 'actor_lr'?"),
        (["sft", "ragen/Sokoban-v0", "--config", str(_write(tmp_path / "b.json", {"episods": 5}))], "did you mean 'episodes'?"),
        (["train", "ragen/Sokoban-v0", "--config", str(_write(tmp_path / "c.yaml", "- a\n- b\n"))], "expected a mapping"),
        (["train", "ragen/Sokoban-v0", "--config", str(_write(tmp_path / "d.yaml", "a: [\n"))], "invalid YAML"),
        (["train", "ragen/Sokoban-v0", "--config", str(_write(tmp_path / "e.toml", "a = 1\n"))], ".yaml, .yml or .json"),
        (["train", "ragen/Sokoban-v0", "--config", str(tmp_path / "missing.yaml")], "no such file"),
        (["train", "ragen/Sokoban-v0", "--profile", "huge"], "unknown profile"),
        (["sft", "ragen/Sokoban-v0", "--lr", "0"], "--lr"),
    ):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and needle in err, (argv, err)
    assert cli_main(["train", "ragen/Sokoban-v0", "--config", str(tmp_path / "a.yaml")]) == 2
    assert "(did you mean 'num_groups'?)" in capsys.readouterr().err


def test_one_device_default_for_train_sft_eval_and_serve(monkeypatch, capsys):
    import yaml

    from ragen_envs import devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.default_device() == "cuda" and devices.default_device("cpu") == "cpu"
    for command in ("train", "sft"):
        cfg = yaml.safe_load(_print_config(capsys, [command, "ragen/Sokoban-v0"]))
        assert cfg["device"] == "cuda", command
        cfg = yaml.safe_load(_print_config(capsys, [command, "ragen/Sokoban-v0", "--device", "cpu"]))
        assert cfg["device"] == "cpu", command
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert yaml.safe_load(_print_config(capsys, ["train", "ragen/Sokoban-v0"]))["device"] == "cpu"
    # eval and serve build their hf: agent through HFAgent, which asks the same helper
    seen = []
    monkeypatch.setattr(devices, "default_device", lambda requested=None: seen.append(requested) or "cpu")
    from ragen_envs.agents.hf import HFAgent
    from ragen_envs.models import build_tiny_checkpoint

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        agent = HFAgent(build_tiny_checkpoint(d, **TINY))
    assert seen == [None] and str(agent.device) == "cpu"


# ----------------------------------------------------------------------------- metrics sinks
def test_metrics_jsonl_is_strict_json_with_null_for_nan(tmp_path):
    from ragen_envs.starpo.diagnostics import MetricsLogger, read_metrics

    log = MetricsLogger(tmp_path)
    log.log({"step": 0, "loss": float("nan"), "big": float("inf"), "t": torch.tensor(float("-inf")), "ok": 1.5,
             "nested": {"x": float("nan")}, "events": []})
    log.log({"step": 1, "loss": 0.25})
    log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    rows = [_strict_loads(line) for line in lines]
    assert rows[0] == {"step": 0, "loss": None, "big": None, "t": None, "ok": 1.5, "nested": {"x": None}, "events": []}
    assert read_metrics(tmp_path / "metrics.jsonl")[1]["loss"] == 0.25
    # resuming rewrites the kept rows strictly too, even rows an older version wrote with NaN
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss": NaN}\n{"step": 1, "loss": 1.0}\n')
    MetricsLogger(tmp_path, resume_step=1).close()
    assert [_strict_loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [{"step": 0, "loss": None}]


def test_tensorboard_writes_event_files_from_the_train_extra(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ragen_envs.starpo.diagnostics import MetricsLogger

    log = MetricsLogger(tmp_path, tensorboard=True, run_config={"actor_lr": 2e-5})
    for step in range(3):
        log.log({"step": step, "rollout/success": step / 4, "bad": float("nan"), "events": ["x"]})
    log.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert "rollout/success" in acc.Tags()["scalars"] and "bad" not in acc.Tags()["scalars"]
    assert [(e.step, e.value) for e in acc.Scalars("rollout/success")] == [(0, 0.0), (1, 0.25), (2, 0.5)]


class _FakeWandbRun:
    def __init__(self, **kwargs):
        self.init_kwargs, self.logged, self.finished = kwargs, [], False

    def log(self, data, step=None):
        self.logged.append((step, dict(data)))

    def finish(self):
        self.finished = True


def test_wandb_logs_every_row_when_installed_and_is_never_required(tmp_path, monkeypatch):
    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.diagnostics import MetricsLogger

    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    with pytest.raises(ValueError, match="wandb=true needs the wandb package"):
        make_config("starpo-s", wandb=True)
    assert make_config("starpo-s").wandb is False  # off by default: never needed
    runs = []
    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: runs.append(_FakeWandbRun(**kw)) or runs[-1]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    cfg = make_config("starpo-s", wandb=True, wandb_project="proj", out_dir=str(tmp_path))
    log = MetricsLogger(tmp_path, wandb_project=cfg.wandb_project, run_config=cfg.to_dict())
    log.log({"step": 0, "rollout/success": 0.5, "loss": float("nan"), "final": True})
    log.close()
    (run,) = runs
    assert run.init_kwargs["project"] == "proj" and run.init_kwargs["config"]["wandb"] is True
    assert run.logged == [(0, {"rollout/success": 0.5})] and run.finished


def test_cli_train_end_to_end_with_tensorboard_wandb_and_overwrite(tmp_path, monkeypatch, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ragen_envs.models import build_tiny_checkpoint

    model = build_tiny_checkpoint(tmp_path / "m", **TINY)
    runs = []
    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: runs.append(_FakeWandbRun(**kw)) or runs[-1]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    conf = _write(tmp_path / "rl.yaml", "num_groups: 2\ngroup_size: 2\neval_episodes: 2\neval_every: 1\nmini_batch_size: 2\n"
                                        "max_new_tokens: 6\nprobe_every: 0\nplots: false\ntensorboard: true\nwandb: true\n")
    out = tmp_path / "rl"
    args = ["train", "ragen/Bandit-v0", "--model", str(model), "--steps", "1", "--out", str(out), "--config", str(conf)]
    assert cli_main(args) == 0, capsys.readouterr().err
    assert "sizes: profile tiny" in capsys.readouterr().out
    rows = [_strict_loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/success")] == [0, 1]
    (run,) = runs
    assert run.finished and [step for step, _ in run.logged] == [0, 1] and "eval/success" in run.logged[0][1]
    assert cli_main(args) == 2 and "already holds a run" in capsys.readouterr().err  # protected
    (out / "checkpoints" / "step_000099").mkdir(parents=True)  # an old checkpoint must not survive
    assert cli_main(args + ["--overwrite"]) == 0
    assert not (out / "checkpoints" / "step_000099").exists()
    assert [r["step"] for r in map(_strict_loads, (out / "metrics.jsonl").read_text().splitlines())] == [0, 1]


def test_sft_schedule_and_weight_average_flags_and_their_checks(tmp_path, capsys):
    import yaml

    sft = yaml.safe_load(_print_config(capsys, ["sft", "ragen/Sokoban-v0", "--lr-schedule", "wsd", "--ema-decay", "0.99"]))
    assert (sft["lr_schedule"], sft["ema_decay"], sft["ema_from"]) == ("wsd", 0.99, 0)
    for flags, msg in ((["--lr-schedule", "linear"], "--lr-schedule must be one of cosine, wsd"),
                       (["--ema-decay", "1"], "--ema-decay must be a number in [0, 1)")):
        assert cli_main(["sft", "ragen/Sokoban-v0", *flags, "--out", str(tmp_path / "s")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and msg in err, err
    assert not (tmp_path / "s").exists()


def test_sft_early_stop_flags_and_their_checks(tmp_path, capsys):
    import yaml

    sft = yaml.safe_load(_print_config(capsys, ["sft", "ragen/Sokoban-v0", "--stop-at-success", "0.8",
                                                "--validate-every", "50"]))
    assert (sft["stop_at_success"], sft["validate_every"], sft["validate_from"], sft["validation_seed_start"],
            sft["validation_episodes"]) == (0.8, 50, 1000, 30_000, 512)
    assert yaml.safe_load(_print_config(capsys, ["sft", "ragen/Sokoban-v0"]))["stop_at_success"] is None
    for flags, msg in ((["--stop-at-success", "80"], "--stop-at-success must be a success rate in (0, 1]"),
                       (["--stop-at-success", "0.8", "--validate-every", "0"], "--validate-every must be an integer >= 1")):
        assert cli_main(["sft", "ragen/Sokoban-v0", *flags, "--out", str(tmp_path / "s")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and msg in err, err
    bad = tmp_path / "bad.yaml"  # held-out layouts inside the expert data: refused before the run directory exists
    bad.write_text("stop_at_success: 0.8\nvalidation_seed_start: 10500\n")
    assert cli_main(["sft", "ragen/Sokoban-v0", "--config", str(bad), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "overlap the expert data's seeds (10000..11999)" in err, err
    assert not (tmp_path / "s").exists()


def test_sft_context_coef_flag_and_its_check(tmp_path, capsys):
    import yaml

    sft = yaml.safe_load(_print_config(capsys, ["sft", "ragen/Sokoban-v0", "--context-coef", "0.25"]))
    assert sft["context_coef"] == 0.25
    assert cli_main(["sft", "ragen/Sokoban-v0", "--context-coef", "-1", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--context-coef must be a finite number >= 0" in err
    for bad in ("inf", "nan"):
        assert cli_main(["sft", "ragen/Sokoban-v0", "--context-coef", bad, "--out", str(tmp_path / "s")]) == 2
        assert "must be a finite number >= 0" in capsys.readouterr().err


def test_set_monitor_multiturn_prints_the_rule_and_a_wrong_name_lists_the_choice(capsys):
    import yaml

    cfg = yaml.safe_load(_print_config(capsys, ["train", "ragen/Sokoban-v0", "--set", "monitor=multiturn"]))
    assert cfg["monitor"] == {"success_ratio": 0.25, "success_k": 5.0, "success_window": 5,
                              "valid_success_ratio": None, "alarm": ["success_drop"]}
    assert cli_main(["train", "ragen/Sokoban-v0", "--set", "monitor=multi", "--print-config"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(or one of: multiturn)" in err[0]
