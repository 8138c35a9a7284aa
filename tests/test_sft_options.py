"""SFT options: the curriculum (the first steps on each episode's first turns: ``first_turns``,
``train_sft(curriculum_turns=, curriculum_steps=)``), the learning-rate schedules (``lr_at``)
the per-step hook (``train_sft(on_step=)``) and early stopping on a held-out split
(``train_sft(stop=)``, ``run_sft(stop_at_success=)``, ``validation_success``)."""

import pytest
import torch

from ragen_envs.starpo.rollout import Trajectory
from ragen_envs.starpo.sft import first_turns, lr_at, train_sft

TINY = dict(hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64)


def _three_turns() -> Trajectory:
    # prompt 0-2 | reply 3-4 | obs 5-6 | reply 7-8 | obs 9 | reply 10-11
    mask = [0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1]
    return Trajectory(group=3, member=1, token_ids=list(range(100, 112)), loss_mask=mask, turn_ends=[4, 8, 11],
                      turn_rewards=[-0.1, -0.1, 10.9])


def test_first_turns_cuts_after_the_kth_reply_by_hand():
    t = _three_turns()
    one = first_turns(t, 1)
    assert one.token_ids == [100, 101, 102, 103, 104] and one.loss_mask == [0, 0, 0, 1, 1]
    assert one.turn_ends == [4] and one.turn_rewards == [-0.1] and (one.group, one.member) == (3, 1)
    two = first_turns(t, 2)
    assert two.token_ids == list(range(100, 109)) and two.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 1]
    assert two.turn_ends == [4, 8] and two.num_reply_tokens == 4
    for k in (3, 7):  # no more turns than k: the whole episode, as a copy
        whole = first_turns(t, k)
        assert whole.token_ids == t.token_ids and whole.loss_mask == t.loss_mask and whole.turn_ends == t.turn_ends
        assert whole.token_ids is not t.token_ids
    assert t.token_ids == list(range(100, 112))  # the original is untouched
    with pytest.raises(ValueError, match="turns must be >= 1"):
        first_turns(t, 0)


@pytest.mark.parametrize("turns,steps", [(1, 0), (0, 3), (-1, 2), (2, -1)])
def test_a_half_set_curriculum_is_refused(turns, steps):
    with pytest.raises(ValueError, match="must both be > 0"):
        train_sft(torch.nn.Linear(1, 1), [_three_turns()], pad_id=0, steps=1, curriculum_turns=turns, curriculum_steps=steps)


def test_the_curriculum_steps_see_only_the_first_turns(tmp_path, monkeypatch):
    import ragen_envs.starpo.sft as sft

    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories

    path = str(build_tiny_checkpoint(tmp_path / "m", **TINY))
    tok = load_tokenizer(path)
    fmt = ChatFormat(tok, "<answer>")
    data = expert_trajectories("ragen/Sokoban-v0", fmt, range(20_000, 20_008), actions_per_turn=1,
                               env_kwargs={"think": False})
    assert max(len(t.turn_ends) for t in data) > 1  # some episode has a second turn to cut
    cut = max(len(first_turns(t, 1).token_ids) for t in data)
    whole = max(len(t.token_ids) for t in data)
    assert cut < whole
    real_loss = sft.sft_loss

    def widths(curriculum_steps):
        model = load_policy(path)
        seen = []

        def recording_loss(model, trajs, *args):
            seen.append(max(len(t.token_ids) for t in trajs))
            return real_loss(model, trajs, *args)

        monkeypatch.setattr(sft, "sft_loss", recording_loss)
        train_sft(model, data, pad_id=tok.pad_token_id, steps=4, batch_size=len(data), lr=1e-3, warmup=1,
                  curriculum_turns=1 if curriculum_steps else 0, curriculum_steps=curriculum_steps)
        return seen, [p.detach().clone() for p in model.parameters()]

    seen, _ = widths(2)
    assert seen == [cut, cut, whole, whole]  # one batch of every episode a step: its longest row
    seen, plain = widths(0)
    assert seen == [whole] * 4
    _, again = widths(0)  # no curriculum: deterministic, as before
    assert all(torch.equal(a, b) for a, b in zip(plain, again))


def test_on_step_sees_each_updated_model_and_changes_nothing(tmp_path):
    """``train_sft(on_step=)`` is called once after each optimiser step with the updated
    weights; a hook that only reads them leaves the run draw for draw as without it."""
    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories

    path = str(build_tiny_checkpoint(tmp_path / "m", **TINY))
    tok = load_tokenizer(path)
    fmt = ChatFormat(tok, "<answer>")
    data = expert_trajectories("ragen/Sokoban-v0", fmt, range(20_000, 20_006), actions_per_turn=1,
                               env_kwargs={"think": False})

    def run(hook):
        model = load_policy(path)
        train_sft(model, data, pad_id=tok.pad_token_id, steps=3, batch_size=2, lr=1e-3, warmup=1, on_step=hook)
        return [p.detach().clone() for p in model.parameters()]

    calls = []
    first = [p.detach().clone() for p in load_policy(path).parameters()]
    hooked = run(lambda step, model: calls.append((step, [p.detach().clone() for p in model.parameters()])))
    assert [s for s, _ in calls] == [0, 1, 2]
    assert not all(torch.equal(a, b) for a, b in zip(first, calls[0][1]))  # after step 0's update, not before
    assert all(torch.equal(a, b) for a, b in zip(calls[-1][1], hooked))  # the last call sees the final weights
    assert all(torch.equal(a, b) for a, b in zip(run(None), hooked))


def test_lr_schedules_by_hand():
    # 10 steps, 2 of warm-up, floor 0.1
    warm = [lr_at(s, 10, 2) for s in (0, 1)]
    assert warm == [0.5, 1.0]
    # cosine: f = (step - 2) / 8; 0.1 + 0.9 (1 + cos(pi f)) / 2
    assert lr_at(2, 10, 2) == pytest.approx(1.0)
    assert lr_at(6, 10, 2) == pytest.approx(0.55)  # f = 1/2
    assert lr_at(4, 10, 2) == pytest.approx(0.1 + 0.45 * (1 + 2 ** -0.5))  # f = 1/4
    assert lr_at(10, 10, 2) == pytest.approx(0.1)
    # wsd, decay over the last round(0.2 x 10) = 2 steps: 1 until step 7, then 0.55, 0.1
    wsd = [lr_at(s, 10, 2, schedule="wsd") for s in range(10)]
    assert wsd == pytest.approx([0.5, 1.0, 1, 1, 1, 1, 1, 1, 0.55, 0.1])
    assert [lr_at(s, 10, 0, 0.0, "wsd", 0.5) for s in range(5, 10)] == pytest.approx([0.8, 0.6, 0.4, 0.2, 0.0])
    with pytest.raises(ValueError, match="unknown lr schedule 'linear'"):
        lr_at(3, 10, 2, schedule="linear")


def test_an_unknown_schedule_fails_before_any_step():
    with pytest.raises(ValueError, match="unknown lr schedule"):
        train_sft(torch.nn.Linear(1, 1), [_three_turns()], pad_id=0, steps=1, lr_schedule="step")


def test_the_weight_average_by_hand(tmp_path):
    """``ema_decay`` = d, ``ema_from`` = 2 over 4 steps: A = theta_2, then A = d A + (1 - d) theta_t
    for t = 3, 4 (theta_t: the weights after optimiser step t, read by the hook), and the
    model ends with A; the training steps themselves are those of a run without it."""
    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories

    path = str(build_tiny_checkpoint(tmp_path / "m", **TINY))
    tok = load_tokenizer(path)
    data = expert_trajectories("ragen/Sokoban-v0", ChatFormat(tok, "<answer>"), range(20_000, 20_006),
                               actions_per_turn=1, env_kwargs={"think": False})
    seen = {}

    def run(**kw):
        model = load_policy(path)
        train_sft(model, data, pad_id=tok.pad_token_id, steps=4, batch_size=2, lr=1e-2, warmup=1,
                  on_step=lambda s, m: seen.setdefault((kw.get("ema_decay", 0), s), [p.detach().clone() for p in m.parameters()]),
                  **kw)
        return [p.detach().clone() for p in model.parameters()]

    plain = run()
    averaged = run(ema_decay=0.75, ema_from=2)
    theta = [seen[(0.75, s)] for s in range(4)]
    assert all(torch.equal(a, b) for s in range(4) for a, b in zip(seen[(0, s)], theta[s]))  # same steps
    for a, t2, t3, t4 in zip(averaged, theta[1], theta[2], theta[3]):
        want = 0.75 * (0.75 * t2 + 0.25 * t3) + 0.25 * t4
        assert torch.allclose(a, want, rtol=1e-5, atol=1e-7)
    assert not all(torch.equal(a, b) for a, b in zip(averaged, plain))
    assert all(torch.equal(a, b) for a, b in zip(theta[3], plain))


@pytest.mark.parametrize("kw,match", [({"ema_decay": 1.0}, "ema_decay"), ({"ema_decay": -0.1}, "ema_decay"),
                                      ({"ema_from": -1}, "ema_from"), ({"decay_frac": 0.0}, "decay_frac"),
                                      ({"min_lr_ratio": 1.5}, "min_lr_ratio")])
def test_bad_schedule_settings_fail_before_any_step(kw, match):
    with pytest.raises(ValueError, match=match):
        train_sft(torch.nn.Linear(1, 1), [_three_turns()], pad_id=0, steps=1, **kw)


def test_run_sft_refuses_a_bad_schedule_before_any_work(tmp_path):
    from ragen_envs.starpo.sft import run_sft

    with pytest.raises(ValueError, match="unknown lr schedule 'cosin'"):
        run_sft("ragen/Sokoban-v0", str(tmp_path / "out"), lr_schedule="cosin")
    with pytest.raises(ValueError, match="ema_decay"):
        run_sft("ragen/Sokoban-v0", str(tmp_path / "out"), ema_decay=2)
    assert not (tmp_path / "out").exists()  # no model built, no data played


def _tiny_data(tmp_path):
    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.policy import ChatFormat, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories

    path = str(build_tiny_checkpoint(tmp_path / "m", **TINY))
    tok = load_tokenizer(path)
    fmt = ChatFormat(tok, "<answer>")
    data = expert_trajectories("ragen/Sokoban-v0", fmt, range(20_000, 20_006), actions_per_turn=1,
                               env_kwargs={"think": False})
    return path, tok, fmt, data


def test_stop_ends_the_run_after_that_step_with_the_unstopped_runs_weights(tmp_path):
    """``train_sft(stop=)`` returning True after step 2 (0-based) of 5 ends the run there: the
    weights are the 5-step run's after its step 2 (the schedule is still the 5-step one), the
    hooks saw steps 0-2 only, and the stopping step is logged."""
    from ragen_envs.starpo.policy import load_policy

    path, tok, _, data = _tiny_data(tmp_path)
    seen, stops, rows = {}, [], []

    def run(stop, log=None):
        model = load_policy(path)
        train_sft(model, data, pad_id=tok.pad_token_id, steps=5, batch_size=2, lr=1e-2, warmup=1, log=log, log_every=10,
                  on_step=lambda s, m: seen.setdefault((stop is None, s), [p.detach().clone() for p in m.parameters()]),
                  stop=stop)
        return [p.detach().clone() for p in model.parameters()]

    run(None)
    stopped = run(lambda s, m: stops.append(s) or s == 2, log=rows.append)
    assert stops == [0, 1, 2] and sorted(s for full, s in seen if not full) == [0, 1, 2]
    assert all(torch.equal(a, b) for a, b in zip(stopped, seen[(True, 2)]))
    assert not all(torch.equal(a, b) for a, b in zip(stopped, seen[(True, 4)]))
    assert [r["step"] for r in rows] == [0, 2]  # step 0 (log_every) and the stop


def test_run_sft_stops_at_the_first_check_at_or_above_the_target(tmp_path, monkeypatch):
    """Checks after optimiser steps 2, 4, 6 of 8 (validate_from 2, validate_every 2; none at
    the last step, which ends the run anyway), each written to sft_validation.jsonl; the run
    ends at the first check >= the target, or runs all steps when none is."""
    import json

    import ragen_envs.starpo.sft as sft

    calls = []

    def fake(model, fmt, pad_id, env_id, *, seed_start, episodes, max_new_tokens, env_kwargs=None, **_):
        calls.append((seed_start, episodes, max_new_tokens))
        return [0.25, 0.5, 0.75][len(calls) - 1]

    monkeypatch.setattr(sft, "validation_success", fake)
    common = dict(tiny_model=TINY, tokenizer_kwargs={"vocab_size": 400}, episodes=6, steps=8, batch_size=2, warmup=1,
                  actions_per_turn=1, env_kwargs={"think": False}, max_new_tokens=9, log=lambda *_: None,
                  validate_from=2, validate_every=2, validation_episodes=7)
    out = tmp_path / "a"
    sft.run_sft("ragen/Sokoban-v0", str(out), stop_at_success=0.5, **common)
    checks = [json.loads(line) for line in (out / "sft_validation.jsonl").read_text().splitlines()]
    assert [(c["step"], c["success"], c["stop"]) for c in checks] == [(2, 0.25, False), (4, 0.5, True)]
    assert calls == [(30_000, 7, 9)] * 2
    last = json.loads((out / "sft_metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 3 and (out / "model" / "config.json").exists()
    calls.clear()
    out = tmp_path / "b"
    sft.run_sft("ragen/Sokoban-v0", str(out), stop_at_success=0.9, **common)
    checks = [json.loads(line) for line in (out / "sft_validation.jsonl").read_text().splitlines()]
    assert [c["step"] for c in checks] == [2, 4, 6] and not any(c["stop"] for c in checks)
    assert json.loads((out / "sft_metrics.jsonl").read_text().splitlines()[-1])["step"] == 7
    calls.clear()
    sft.run_sft("ragen/Sokoban-v0", str(tmp_path / "c"), **common)  # no target: no check
    assert calls == [] and not (tmp_path / "c" / "sft_validation.jsonl").exists()


def test_validation_success_counts_solved_layouts_and_leaves_the_global_rng_alone(tmp_path):
    """The held-out check is a fraction of ``episodes`` layouts, the same for the same
    stream, and draws only from its own generator (the SFT run after it is unchanged)."""
    from ragen_envs.starpo.policy import load_policy
    from ragen_envs.starpo.rollout import collect_rollouts
    from ragen_envs.starpo.sampler import CachedResponder
    from ragen_envs.starpo.sft import validation_success

    path, tok, fmt, _ = _tiny_data(tmp_path)
    model = load_policy(path)
    state = torch.get_rng_state()
    kw = dict(seed_start=30_000, episodes=6, max_new_tokens=6, env_kwargs={"think": False})
    a = validation_success(model, fmt, tok.pad_token_id, "ragen/Sokoban-v0", **kw)
    assert torch.equal(state, torch.get_rng_state())
    assert a == validation_success(model, fmt, tok.pad_token_id, "ragen/Sokoban-v0", **kw)
    with torch.no_grad():  # by hand: the same episodes played through the rollout code
        trajs = collect_rollouts("ragen/Sokoban-v0", 30_000, 6, 1,
                                 CachedResponder(model, fmt, tok.pad_token_id, 6, 0.5, torch.Generator().manual_seed(1)),
                                 fmt, env_kwargs={"think": False})
    assert a == sum(t.success for t in trajs) / 6 and len(trajs) == 6


@pytest.mark.parametrize("kw,match", [({"stop_at_success": 1.5}, "stop_at_success"), ({"stop_at_success": 0}, "stop_at_success"),
                                      ({"stop_at_success": True}, "stop_at_success"),
                                      ({"stop_at_success": 0.8, "validate_every": 0}, "validate_every"),
                                      ({"stop_at_success": 0.8, "validation_episodes": 0}, "validation_episodes"),
                                      ({"stop_at_success": 0.8, "validation_seed_start": 10_500}, "overlap the expert data"),
                                      ({"stop_at_success": 0.8, "validation_seed_start": 300}, "overlap EVAL_SEEDS")])
def test_bad_early_stop_settings_fail_before_any_work(tmp_path, kw, match):
    from ragen_envs.starpo.sft import run_sft

    with pytest.raises(ValueError, match=match):
        run_sft("ragen/Sokoban-v0", str(tmp_path / "out"), **kw)
    assert not (tmp_path / "out").exists()
