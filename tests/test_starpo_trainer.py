"""The trainer end to end on a tiny model: every preset runs, resume is exact, the CLI
reports user errors in one line, SFT learns, diagnostics and plots work."""

from __future__ import annotations

import json
import math

import os

import pytest

# Idle OpenMP threads sleep instead of spinning (only effective if torch is not loaded yet):
# on a shared CPU, spinning threads of several torch processes slow each other down ~10x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.cli import main as cli_main  # noqa: E402
from ragen_envs.starpo.config import PRESETS, make_config  # noqa: E402
from ragen_envs.starpo.diagnostics import EchoTrapMonitor, plot_metrics, read_metrics, think_diversity  # noqa: E402

TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64}
SMALL = dict(steps=3, num_groups=2, group_size=4, max_new_tokens=10, eval_every=2, eval_episodes=4, probe_every=2,
             probe_states=2, probe_samples=2, mini_batch_size=4, micro_batch_size=2, keep_ratio=0.5, tiny_model=TINY,
             actor_lr=1e-3, critic_lr=1e-3, log_samples=0, plots=False)
VOLATILE = ("time/", "perf/")


def _quiet(_msg):
    pass


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from ragen_envs.models import build_tiny_checkpoint

    return str(build_tiny_checkpoint(tmp_path_factory.mktemp("model"), **TINY))


# (ragen2 replaces the keep_ratio filter these checks count on: tests/test_rollout_filter_ragen2.py runs it)
@pytest.mark.parametrize("preset,extra", [(p, {}) for p in PRESETS if p != "ragen2"]
                         + [("starpo-s", {"advantage": "bilevel_gae", "reward_placement": "turn"})])
def test_three_iterations_of_every_preset(tmp_path, tiny_model_dir, preset, extra):
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = make_config(preset, out_dir=str(tmp_path), model=tiny_model_dir, save_every=0, **{**SMALL, **extra})
    final = StarPOTrainer(cfg, log=_quiet).train()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and rows[-1]["final"]
    assert "eval/success" in rows[0] and "probe/distinct_ngrams" in rows[0] and "eval/success" in final
    for r in rows[:3]:
        assert r["rollout/kept_fraction"] == (1.0 if cfg.filter_mode == "none" else 0.5)
        assert math.isfinite(r["actor/pg_loss"]) and r["actor/grad_norm"] >= 0
        assert ("critic/value_loss" in r) == cfg.uses_critic
        assert r["update/trajectories"] == (8 if cfg.filter_mode == "none" else 4)
    assert (tmp_path / "model" / "config.json").exists()  # a save_pretrained model, loadable as hf:PATH


def _run(tmp_path, steps, resume=False, model=None):
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = make_config("starpo-s", out_dir=str(tmp_path), model=model, save_every=1, keep_checkpoints=1,
                      **{**SMALL, "steps": steps, "eval_every": 0, "probe_every": 2})
    StarPOTrainer(cfg, resume=resume, log=_quiet).train()
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in read_metrics(tmp_path / "metrics.jsonl")]


def test_resume_continues_as_if_never_stopped(tmp_path, tiny_model_dir):
    straight = _run(tmp_path / "a", 3, model=tiny_model_dir)
    _run(tmp_path / "b", 2, model=tiny_model_dir)
    resumed = _run(tmp_path / "b", 3, resume=True, model=tiny_model_dir)
    assert len(straight) == 3 and straight == resumed
    ckpt = tmp_path / "b" / "checkpoints"
    assert (ckpt / "latest").read_text().strip() == "step_000003"
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_000003"]  # keep_checkpoints=1
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(ckpt / "step_000003" / "actor")  # loads like any HF checkpoint


def test_sft_learns_the_expert_replies_and_grounded_think_is_true(tiny_model_dir):
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories, sft_loss, train_sft

    tok, model = load_tokenizer(tiny_model_dir), load_policy(tiny_model_dir)
    fmt = ChatFormat(tok, "<think>")
    data = expert_trajectories("ragen/Sokoban-v0", fmt, range(20_000, 20_012), actions_per_turn=2)
    assert all(t.success for t in data)
    for t in data:
        for turn in t.episode.turns:
            r = turn.info["reasoning"]
            assert r["actions_agree"] and r["claims"] >= 1 and r["score"] == 1.0, turn.response
            assert 1 <= turn.info["n_valid"] <= 2
    # the loss goes down on the reply tokens (think off: short sequences, a fast test)
    fmt_off = ChatFormat(tok, "<answer>")
    small = expert_trajectories("ragen/Sokoban-v0", fmt_off, range(20_000, 20_004), actions_per_turn=2, env_kwargs={"think": False})
    with torch.no_grad():
        before = float(sft_loss(model, small, tok.pad_token_id)[0])
    train_sft(model, small, pad_id=tok.pad_token_id, steps=30, batch_size=4, lr=1e-2, warmup=3)
    with torch.no_grad():
        after = float(sft_loss(model, small, tok.pad_token_id)[0])
    assert after < 0.3 * before


def test_cli_errors_are_one_line(capsys, tmp_path):
    assert cli_main(["train", "ragen/Sokoban-v0", "--preset", "ppo9", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown preset" in err and "starpo-s" in err
    assert cli_main(["train", "ragen/Nope-v0"]) == 2
    assert "unknown environment" in capsys.readouterr().err
    assert cli_main(["train", "ragen/Sokoban-v0", "--set", "num_grups=3"]) == 2
    assert "num_grups" in capsys.readouterr().err
    assert cli_main(["train", "ragen/Sokoban-v0", "--set", "keep_ratio=2"]) == 2
    assert "keep_ratio" in capsys.readouterr().err
    assert cli_main(["train", "ragen/Sokoban-v0", "--model", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["sft", "ragen/Sokoban-v0", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
    for bad, field in (("gradient_checkpointing=3", "gradient_checkpointing"), ("lora_alpha=0", "lora_alpha"),
                       ("lora_rank=-1", "lora_rank"), ('lora_targets="q_proj"', "lora_targets"),
                       ("sharding=zero3", "sharding"), ("fsdp_mixed_precision=true", "fsdp_mixed_precision")):
        assert cli_main(["train", "ragen/Sokoban-v0", "--set", bad, "--out", str(tmp_path)]) == 2, bad
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and field in err, (bad, err)


def test_lora_on_modules_the_model_lacks_is_a_one_line_error(capsys, tmp_path, tiny_model_dir):
    pytest.importorskip("peft")
    assert cli_main(["train", "ragen/Sokoban-v0", "--model", tiny_model_dir, "--out", str(tmp_path), "--set", "lora_rank=4",
                     "--set", 'lora_targets=["no_such_proj"]']) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # (above it: transformers' loading progress bar)
    assert last.startswith("ragen train: error:") and "no_such_proj" in last and "Traceback" not in err


def test_cli_sft_then_train_smoke(tmp_path, capsys):
    assert cli_main(["sft", "ragen/Bandit-v0", "--episodes", "8", "--steps", "3", "--batch-size", "4",
                     "--out", str(tmp_path / "sft")]) == 0
    model = tmp_path / "sft" / "model"
    assert (model / "config.json").exists() and (tmp_path / "sft" / "sft_metrics.jsonl").exists()
    args = ["train", "ragen/Bandit-v0", "--model", str(model), "--steps", "1", "--out", str(tmp_path / "rl"),
            "--set", "num_groups=2", "--set", "group_size=2", "--set", "eval_episodes=2", "--set", "eval_every=1",
            "--set", "mini_batch_size=2", "--set", "max_new_tokens=8", "--set", "probe_every=0", "--set", "plots=false"]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert "final evaluation" in out
    cfg = json.loads((tmp_path / "rl" / "config.json").read_text())
    assert cfg["env_id"] == "ragen/Bandit-v0" and cfg["num_groups"] == 2


def test_config_validation():
    with pytest.raises(ValueError, match="bilevel_gae needs per-turn rewards"):
        make_config("starpo-s", advantage="bilevel_gae")
    with pytest.raises(ValueError, match="advantage"):
        make_config("starpo-s", advantage="a2c")
    with pytest.raises(ValueError, match="num_groups"):
        make_config("starpo-s", num_groups=0)
    with pytest.raises(ValueError, match="preset"):
        make_config("fast")
    cfg = make_config("nothink", env_kwargs={"max_turns": 3})
    assert cfg.env_kwargs == {"think": False, "max_turns": 3} and not cfg.think
    vanilla = make_config("starpo")
    assert (vanilla.kl_coef, vanilla.clip_high, vanilla.filter_mode) == (0.001, 0.2, "none")
    s = make_config("starpo-s")
    assert (s.kl_coef, s.clip_low, s.clip_high, s.dual_clip, s.keep_ratio, s.entropy_coef, s.gamma, s.lam) == (
        0.0, 0.2, 0.28, 3.0, 0.25, 0.001, 1.0, 1.0)
    assert (s.num_groups, s.group_size, s.actor_lr, s.critic_lr, s.temperature, s.eval_temperature) == (8, 16, 1e-6, 1e-5, 1.0, 0.5)


# ----------------------------------------------------------------------------- diagnostics
def test_think_diversity():
    same = think_diversity(["push the box down"] * 4)
    assert same["distinct_texts"] == 0.25 and same["pairwise_similarity"] == 1.0
    varied = think_diversity(["push the box down", "go left now", "box is above me", "target right"])
    assert varied["distinct_texts"] == 1.0 and varied["pairwise_similarity"] == 0.0 and varied["distinct_ngrams"] == 1.0
    assert math.isnan(think_diversity([])["distinct_texts"])


def test_echo_trap_monitor_warns_on_std_collapse_grad_spike_and_diversity_drop():
    mon = EchoTrapMonitor(std_ratio=0.1, spike_factor=5.0, diversity_ratio=0.5, window=5)
    events = []
    for step in range(12):
        std = 1.0 if step < 6 else 0.01  # the std collapses while the mean return holds
        events += mon.update(std, 2.0, 1.0 if step != 10 else 50.0)
    names = [e.split(":")[0] for e in events]
    assert names.count("reward_std_collapse") == 1 and names.count("grad_norm_spike") == 1
    assert mon.update_probe(0.8, 2.0) == []
    assert [e.split(":")[0] for e in mon.update_probe(0.3, 2.05)] == ["echo_trap"]
    assert mon.update_probe(0.3, 2.05) == []  # fires once
    mon2 = EchoTrapMonitor()
    mon2.load_state(json.loads(json.dumps(mon.state())))
    assert mon2.state() == mon.state()
    # a policy that is improving (rising return) is not in the trap: its diversity may fall
    # (changed with the redesign, docs/monitor.md: the gate was "return flat", which hid the
    # falling return that precedes a collapse; it is now "not improving")
    mon3 = EchoTrapMonitor(window=3)
    for step in range(6):
        mon3.update(1.0, 0.5 * step, 1.0)
    mon3.update_probe(0.8, 2.5)
    assert mon3.update_probe(0.3, 2.5) == []


def test_plot_metrics_writes_a_png(tmp_path):
    rows = [{"step": i, "rollout/return_mean": i * 0.1, "rollout/in_group_std": 1 / (i + 1), "actor/entropy": 0.5,
             "events": ["x"] if i == 2 else []} for i in range(5)]
    png = plot_metrics(rows, tmp_path / "c.png", title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_config_refuses_settings_that_would_train_off_policy_or_on_nothing():
    with pytest.raises(ValueError, match="top_p must be 1"):
        make_config("starpo-s", top_p=0.9)
    with pytest.raises(ValueError, match="group_size >= 2"):
        make_config("grpo", group_size=1)
    with pytest.raises(ValueError, match="loss_agg"):
        make_config("starpo-s", loss_agg="sum")
    assert make_config("starpo-s").loss_agg == "token-mean"


def test_old_logprobs_are_the_sampling_distributions_at_the_rollout_temperature(tmp_path, tiny_model_dir):
    """Rollouts sample from softmax(logits / T): the recorded old log-probs must be those,
    not the T = 1 ones (replayed here token by token with a plain forward pass)."""
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = make_config("starpo-s", out_dir=str(tmp_path), model=tiny_model_dir, save_every=0, temperature=0.7,
                      **{**SMALL, "eval_every": 0, "probe_every": 0})
    trainer = StarPOTrainer(cfg, log=_quiet)
    trajs = trainer.rollout(cfg.train_seed_start)[:3]
    batch = trainer._batch(trajs, [t.turn_rewards for t in trajs])
    trainer._score(batch)
    worst_t1 = 0.0
    with torch.no_grad():
        for b, t in enumerate(trajs):
            ids = torch.tensor([t.token_ids])
            logits = trainer.actor(input_ids=ids).logits[0].float()
            for pos in [i for i, m in enumerate(t.loss_mask) if m]:
                lp_t = torch.log_softmax(logits[pos - 1] / 0.7, -1)[t.token_ids[pos]]
                lp_1 = torch.log_softmax(logits[pos - 1], -1)[t.token_ids[pos]]
                assert float(batch["old_lp"][b, pos]) == pytest.approx(float(lp_t), abs=2e-4)
                worst_t1 = max(worst_t1, abs(float(lp_1) - float(lp_t)))
    assert worst_t1 > 1e-2  # the test can tell T = 0.7 from T = 1


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_both_loss_aggregations_train(tmp_path, tiny_model_dir, loss_agg):
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = make_config("starpo-s", out_dir=str(tmp_path), model=tiny_model_dir, save_every=0, loss_agg=loss_agg,
                      **{**SMALL, "steps": 1, "eval_every": 0, "probe_every": 0})
    trainer = StarPOTrainer(cfg, log=_quiet)
    before = [p.detach().clone() for p in trainer.actor.parameters()]
    row = trainer.train_step()
    assert math.isfinite(row["actor/pg_loss"]) and 0 <= row["actor/pg_clipfrac_high"] <= 1
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.actor.parameters()))


def test_sft_context_loss_adds_the_env_side_tokens_lm_loss(tiny_model_dir):
    """sft_loss(context_coef=c) = reply NLL / reply tokens + c x context NLL / context tokens,
    checked against a plain forward pass and a per-token sum by hand."""
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories, sft_loss

    tok, model = load_tokenizer(tiny_model_dir), load_policy(tiny_model_dir)
    data = expert_trajectories("ragen/Sokoban-v0", ChatFormat(tok, "<answer>"), range(20_000, 20_002),
                               actions_per_turn=2, env_kwargs={"think": False})
    reply_sum = ctx_sum = 0.0
    n_reply = n_ctx = 0
    with torch.no_grad():
        for t in data:
            ids = torch.tensor([t.token_ids])
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            for pos in range(1, len(t.token_ids)):
                nll = -float(logp[pos - 1, t.token_ids[pos]])
                if t.loss_mask[pos]:
                    reply_sum, n_reply = reply_sum + nll, n_reply + 1
                else:
                    ctx_sum, n_ctx = ctx_sum + nll, n_ctx + 1
        plain = float(sft_loss(model, data, tok.pad_token_id)[0])
        mixed = float(sft_loss(model, data, tok.pad_token_id, context_coef=0.5)[0])
    assert plain == pytest.approx(reply_sum / n_reply, rel=1e-4)
    assert mixed == pytest.approx(reply_sum / n_reply + 0.5 * ctx_sum / n_ctx, rel=1e-4)
