"""A model trained here evaluates as it trained: the protocol settings saved beside it
(ragen_protocol.json) make ``ragen eval --agent hf:DIR`` play exactly as the trainer's own
evaluation, with no extra flags; the hf: agent samples through the multi-turn KV-cache sampler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import ragen_envs  # noqa: E402
from ragen_envs.cli import main as ragen  # noqa: E402
from ragen_envs.lm.settings import SETTINGS_FILE, ProtocolSettings, load_settings, save_settings  # noqa: E402

ENV = "ragen/Sokoban-v0"
TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64, "num_heads": 4}


@pytest.fixture(scope="module", params=[False, True], ids=["no-think", "think"])
def sft_model(request, tmp_path_factory) -> Path:
    """A tiny model after a short SFT (peaked enough that greedy replies are stable)."""
    from ragen_envs.starpo.sft import run_sft
    from ragen_envs.starpo.tiny import build_tiny_policy

    root = tmp_path_factory.mktemp("think" if request.param else "nothink")
    kw = {"think": request.param}
    init = build_tiny_policy(root / "init", ENV, kw, vocab_size=512, **TINY)
    model = run_sft(ENV, str(root / "sft"), model=str(init), env_kwargs=kw, episodes=48, steps=30, batch_size=8,
                    lr=3e-3, log=lambda *a: None)
    return model


def _trainer_eval(model_dir: Path, n: int):
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.trainer import evaluate_policy

    st = load_settings(model_dir)
    tok = load_tokenizer(model_dir)
    with torch.no_grad():
        return evaluate_policy(load_policy(model_dir), ChatFormat(tok, st.reply_prefix), tok.pad_token_id, st.env_id,
                               episodes=n, temperature=0.0, seed=1, max_new_tokens=st.max_new_tokens,
                               env_kwargs=st.env_kwargs)


def test_sft_model_carries_its_protocol_settings(sft_model):
    st = load_settings(sft_model)
    think = sft_model.parent.parent.name.startswith("think")  # the fixture's folder: think0 / nothink0
    assert st.env_id == ENV and st.think is think and st.env_kwargs["think"] is think
    assert st.reply_prefix == ("<think>" if think else "<answer>")
    assert st.history == "tokens" and st.eot_token == "<|im_end|>" and st.written_by == "ragen sft"
    assert st.max_new_tokens >= 8  # twice the longest expert reply


def test_ragen_eval_without_flags_plays_exactly_as_the_trainer(sft_model, tmp_path, capsys):
    n = 8
    trajs = _trainer_eval(sft_model, n)
    out = tmp_path / "run"
    rc = ragen(["eval", ENV, "--agent", f"hf:{sft_model}", "--out", str(out), "--seeds", str(n),
                "--temperature", "0", "--quiet", "--report-frames", "0"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "(checkpoint)" in err and "reply prefix" in err and "history tokens (checkpoint)" in err
    episodes = {e["seed"]: e for e in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())}
    assert sorted(episodes) == list(ragen_envs.EVAL_SEEDS[:n])
    for t in trajs:
        ours = episodes[t.episode.seed]
        assert [tu["response"] for tu in ours["turns"]] == [tu.response for tu in t.episode.turns]
        assert [tu["reward"] for tu in ours["turns"]] == pytest.approx([tu.reward for tu in t.episode.turns])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"]["successes"] == sum(t.success for t in trajs)


def test_flags_override_the_checkpoint(sft_model, tmp_path, capsys):
    st = load_settings(sft_model)
    rc = ragen(["eval", ENV, "--agent", f"hf:{sft_model}", "--out", str(tmp_path / "r"), "--seeds", "2",
                "--max-tokens", "3", "--no-prefill", "--history", "messages", "--quiet", "--report-frames", "0"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "reply cap 3 tokens (argument)" in err and "history messages (argument)" in err
    assert f"temperature {st.temperature:g} (checkpoint)" in err
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["agent_config"]["max_tokens"] == 3 and config["agent_config"]["prefill"] is False


def test_the_trainer_saves_settings_and_writes_its_closing_evaluation_as_a_run(tmp_path):
    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = make_config("starpo-s", env_id=ENV, env_kwargs={"think": False}, out_dir=str(tmp_path / "rl"), steps=1,
                      num_groups=2, group_size=2, max_new_tokens=6, eval_every=1, eval_before_train=False,
                      eval_episodes=4, probe_every=0, save_every=1, mini_batch_size=4, micro_batch_size=4,
                      tiny_model=TINY, log_samples=0, plots=False)
    StarPOTrainer(cfg, log=lambda *a: None).train()
    for d in (tmp_path / "rl" / "model", tmp_path / "rl" / "checkpoints" / "step_000001" / "actor"):
        st = load_settings(d)
        assert st == ProtocolSettings(env_id=ENV, env_kwargs={"think": False}, reply_prefix="<answer>",
                                      max_new_tokens=6, eot_token="<|im_end|>", temperature=0.5, history="tokens",
                                      written_by="ragen train")
    run = tmp_path / "rl" / "eval"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["totals"]["episodes"] == 4 and (run / "report.html").exists()
    seeds = sorted(json.loads(line)["seed"] for line in (run / "episodes.jsonl").read_text().splitlines())
    assert seeds == list(ragen_envs.EVAL_SEEDS[:4])


def test_settings_files_are_validated(tmp_path):
    st = ProtocolSettings(env_id=ENV, env_kwargs={"think": True}, reply_prefix="<think>", max_new_tokens=9)
    save_settings(tmp_path, st)
    assert load_settings(tmp_path) == st and load_settings(tmp_path / "elsewhere") is None
    data = json.loads((tmp_path / SETTINGS_FILE).read_text())
    for bad, match in [({**data, "max_new_tokens": 0}, "max_new_tokens"), ({**data, "history": "x"}, "history"),
                       ({**data, "version": 99}, "newer"), ({**data, "format": "x"}, "not a protocol-settings"),
                       ([1, 2], "JSON object"), ({**data, "temperature": float("nan")}, "temperature")]:
        (tmp_path / SETTINGS_FILE).write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            load_settings(tmp_path)
    (tmp_path / SETTINGS_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        load_settings(tmp_path)


def test_a_broken_settings_file_is_one_line_error(tmp_path, capsys):
    from ragen_envs.models import build_tiny_checkpoint

    model = build_tiny_checkpoint(tmp_path / "m")
    (model / SETTINGS_FILE).write_text('{"format": "ragen-envs/protocol-settings", "version": 1}')
    assert ragen(["eval", ENV, "--agent", f"hf:{model}", "--out", str(tmp_path / "r"), "--seeds", "1"]) == 2
    assert "env_id is missing" in capsys.readouterr().err


def test_sessions_are_freed_when_episodes_end(sft_model):
    from ragen_envs.agents.hf import HFAgent
    from ragen_envs.eval.harness import evaluate

    agent = HFAgent(str(sft_model), temperature=0.0)
    kw = load_settings(sft_model).env_kwargs
    first = evaluate(agent, [ENV], ragen_envs.EVAL_SEEDS[:3], sft_model.parent / "s1", progress=False,
                     env_kwargs=kw, frame_episodes=0)
    assert agent._sessions == {} and agent.sampler.cached_trajectories == 0  # evaluate closes the agent
    again = evaluate(agent, [ENV], ragen_envs.EVAL_SEEDS[:3], sft_model.parent / "s2", progress=False,
                     env_kwargs=kw, frame_episodes=0)  # still usable, same greedy episodes
    assert again.summary["totals"] == first.summary["totals"]
    agent.end_session("never-started")  # unknown sessions are ignored
    agent.reply([{"role": "user", "content": "Turn 1:"}])


def test_sampled_episodes_do_not_depend_on_how_requests_were_batched(sft_model, tmp_path):
    """At temperature 1 each episode draws from its own generator (seeded from the agent's seed
    and the episode's env id / seed), so one request at a time and 8 at a time give the same
    episodes; the agent's seed still changes them."""
    from ragen_envs.agents.hf import HFAgent
    from ragen_envs.eval.harness import evaluate

    kw = load_settings(sft_model).env_kwargs
    seeds = ragen_envs.EVAL_SEEDS[:8]

    def play(name, seed=0, **how):
        batch = how.pop("batch_size")
        agent = HFAgent(str(sft_model), temperature=1.0, batch_size=batch, seed=seed)
        res = evaluate(agent, [ENV], seeds, tmp_path / name, progress=False, env_kwargs=kw, frame_episodes=0, **how)
        rows = map(json.loads, (tmp_path / name / "episodes.jsonl").read_text().splitlines())
        return {e["seed"]: [t["response"] for t in e["turns"]] for e in rows}, res

    one, _ = play("one", batch_size=1, concurrency=1)
    eight, _ = play("eight", batch_size=8, concurrency=8)
    assert sorted(one) == sorted(seeds) and one == eight
    other, _ = play("other", seed=1, batch_size=8, concurrency=8)
    assert other != one  # the agent's seed is part of every episode's stream
    assert len({tuple(map(tuple, v)) for v in one.values()} | {()}) > 2  # replies differ between episodes


def test_a_resumed_sampled_eval_plays_the_episodes_of_an_uninterrupted_one(sft_model, tmp_path, capsys):
    """A run cut after some episodes (whole lines kept, as a kill leaves it) and resumed gives,
    at temperature 1, the episodes the uninterrupted run gave: each episode's stream depends on
    the episode, not on what was sampled before it in the process."""
    import shutil

    args = ["eval", ENV, "--agent", f"hf:{sft_model}", "--seeds", "8", "--temperature", "1", "--quiet",
            "--report-frames", "0"]
    whole = tmp_path / "whole"
    assert ragen([*args, "--out", str(whole)]) == 0
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    lines = (whole / "episodes.jsonl").read_text().splitlines()
    (cut / "episodes.jsonl").write_text("\n".join(lines[:3]) + "\n")
    (cut / "summary.json").unlink()
    capsys.readouterr()
    assert ragen([*args, "--out", str(cut)]) == 0
    assert "5 episodes played now, 3 resumed" in capsys.readouterr().out

    def replies(run):
        rows = map(json.loads, (run / "episodes.jsonl").read_text().splitlines())
        return {e["seed"]: [t["response"] for t in e["turns"]] for e in rows}

    assert replies(cut) == replies(whole) and len(replies(cut)) == 8


def test_ctrl_c_during_hf_eval_exits_130_after_the_friendly_line(tmp_path):
    from ragen_envs.models import build_tiny_checkpoint

    model = build_tiny_checkpoint(tmp_path / "m")
    env = dict(os.environ, SDL_VIDEODRIVER="dummy", PYGAME_HIDE_SUPPORT_PROMPT="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from ragen_envs.cli import main; sys.exit(main())", "eval", ENV,
         "--agent", f"hf:{model}", "--out", str(tmp_path / "r"), "--max-tokens", "400", "--temperature", "1",
         "--quiet"], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        # a child inherits an ignored SIGINT (some test runners' workers ignore it), and Python
        # then keeps ignoring it: give the command the default disposition a terminal gives
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stderr:
            if line.startswith("evaluating "):
                break
        time.sleep(2.0)  # inside generation
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: finished episodes are kept" in err and "Traceback" not in err


def test_the_progress_bar_ticks_while_a_reply_is_generated(tmp_path, monkeypatch):
    import asyncio
    import io

    from ragen_envs.agents import Agent
    from ragen_envs.eval import harness

    class TTY(io.StringIO):
        def isatty(self):
            return True

    from ragen_envs._progress import Progress

    stream = TTY()
    monkeypatch.setattr(harness, "Progress", lambda total, label: Progress(total, label, stream=stream))

    class Slow(Agent):
        name = "slow"

        def act(self, messages):
            return "<answer>Dragon</answer>"

        async def aact(self, messages):
            await asyncio.sleep(2.6)
            return self.act(messages)

    harness.evaluate(Slow(), ["ragen/Bandit-v0"], [1], tmp_path / "r", progress=True, frame_episodes=0)
    # drawn at least twice by the ticker before the only episode finished (and once after)
    assert stream.getvalue().count("0/1") >= 2 and "1/1" in stream.getvalue()


def test_ragen_train_continues_in_the_models_protocol(sft_model, tmp_path, capsys):
    import yaml

    st = load_settings(sft_model)

    def resolved(*extra):
        assert ragen(["train", ENV, "--model", str(sft_model), "--out", str(tmp_path / "rl"), "--print-config",
                      *extra]) == 0
        out = capsys.readouterr().out
        return yaml.safe_load(out), out

    cfg, out = resolved()
    assert cfg["env_kwargs"]["think"] is st.think and cfg["force_prefix"] is True
    assert cfg["max_new_tokens"] == st.max_new_tokens
    assert "ragen_protocol.json" in out
    cfg, _ = resolved("--env-kwarg", f"think={'false' if st.think else 'true'}", "--set", "max_new_tokens=7")
    assert cfg["env_kwargs"]["think"] is (not st.think) and cfg["max_new_tokens"] == 7
    cfg, _ = resolved("--preset", "nothink")
    assert cfg["env_kwargs"]["think"] is False


def test_the_context_window_is_saved_with_the_model_and_eval_plays_it(tmp_path, capsys):
    """A model trained windowed records its context mode in ragen_protocol.json; ``ragen eval
    hf:DIR`` then plays it windowed without flags (and says so), a flag overrides it, and files
    written before the fields existed read as full."""
    from ragen_envs.models import build_tiny_checkpoint

    st = ProtocolSettings(env_id="ragen/Sokoban-v0", env_kwargs={"think": False, "max_turns": 3},
                          reply_prefix="<answer>", max_new_tokens=4, context_window_mode="limited_multi_turn",
                          max_context_window=2)
    model = build_tiny_checkpoint(tmp_path / "m", hidden_size=32, num_layers=1, intermediate_size=64)
    save_settings(model, st)
    assert load_settings(model) == st
    data = json.loads((model / SETTINGS_FILE).read_text())
    for bad, match in [({**data, "context_window_mode": "sliding"}, "context_window_mode"),
                       ({**data, "max_context_window": 0}, "max_context_window"),
                       ({**data, "context_window_mode": "full"}, "needs context_window_mode")]:
        (model / SETTINGS_FILE).write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            load_settings(model)
    old = {k: v for k, v in data.items() if k not in ("context_window_mode", "max_context_window")}
    (model / SETTINGS_FILE).write_text(json.dumps(old))
    assert load_settings(model).context_window_mode == "full" and load_settings(model).max_context_window == -1
    save_settings(model, st)
    base = ["eval", "ragen/Sokoban-v0", "--agent", f"hf:{model}", "--seeds", "1", "--quiet", "--report-frames", "0"]
    assert ragen([*base, "--out", str(tmp_path / "a")]) == 0
    assert "context window limited_multi_turn, K=2 (checkpoint)" in capsys.readouterr().err
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["context_window"] == {"mode": "limited_multi_turn", "max_context_window": 2}
    assert ragen([*base, "--out", str(tmp_path / "b"), "--context-window-mode", "full"]) == 0
    assert "context window" not in capsys.readouterr().err
    assert "context_window" not in json.loads((tmp_path / "b" / "config.json").read_text())
    assert ragen([*base, "--out", str(tmp_path / "c"), "--max-context-window", "1",
                  "--context-window-mode", "single_turn"]) == 0
    assert "context window single_turn, K=1 (argument)" in capsys.readouterr().err
