"""The update's speed levers (issue 23 goal 3, BENCHMARKS.md#trainer-step-vs-trl) change nothing the trainer
learns: causal-only attention on right-padded rows gives the masked forward's log-probs and
gradients; the old log-probs taken from the update's own forward give the separate no-grad
pass's update; ``track_kl=False`` drops the reference model and only its metrics. Plus the
benchmark's ``--smoke`` run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.starpo import policy as P  # noqa: E402
from ragen_envs.starpo.config import make_config  # noqa: E402
from ragen_envs.starpo.trainer import StarPOTrainer  # noqa: E402

TINY = {"hidden_size": 32, "num_layers": 2, "intermediate_size": 64}
RUN = dict(steps=2, num_groups=2, group_size=4, max_new_tokens=10, eval_every=0, probe_every=0, mini_batch_size=8,
           micro_batch_size=4, filter_mode="none", actor_lr=1e-2, critic_lr=1e-2, log_samples=0, plots=False,
           save_every=0, tiny_model=TINY)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from ragen_envs.models import build_tiny_checkpoint

    return str(build_tiny_checkpoint(tmp_path_factory.mktemp("model"), **TINY))


def test_right_padded_on_hand_made_masks():
    assert P.right_padded(torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]]))
    assert not P.right_padded(torch.tensor([[1, 1, 1], [0, 1, 1]]))  # left padding
    assert not P.right_padded(torch.tensor([[1, 0, 1]]))  # a hole


def _masked_hidden_states(backbone, input_ids, attention_mask, share_prefix=True):
    """The forward before the lever: the padding mask, positions counting real tokens."""
    pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos).last_hidden_state


def test_causal_only_scoring_equals_the_masked_forward_with_gradients(tiny_model_dir, monkeypatch):
    model = P.load_policy(tiny_model_dir)
    gen = torch.Generator().manual_seed(0)
    lengths = [40, 23, 31, 9]  # ragged rows: 31, 17, 9 pads
    V = model.config.vocab_size
    seqs = [torch.randint(3, V, (n,), generator=gen).tolist() for n in lengths]
    ids = P.pad_right(seqs, 0)
    att = P.pad_right([[1] * n for n in lengths], 0)
    mask = P.pad_right([[0] * (n // 2) + [1] * (n - n // 2) for n in lengths], 0, dtype=torch.float32)
    assert P.right_padded(att)

    def run():
        model.zero_grad()
        lp, ent = P.sequence_logprobs(model, ids, att, mask, with_entropy=True, temperature=0.7)
        (lp.sum() + 0.1 * ent.sum()).backward()
        return lp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]

    fast = run()
    monkeypatch.setattr(P, "_hidden_states", _masked_hidden_states)
    slow = run()
    assert fast[0].abs().sum() > 0 and (fast[0] != 0).sum() == mask[:, 1:].sum()
    torch.testing.assert_close(fast[0], slow[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast[1], slow[1], rtol=1e-5, atol=1e-5)
    for a, b in zip(fast[2], slow[2]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # and values (the critic's scoring goes through the same forward)
    critic = P.load_critic(tiny_model_dir, seed=0)
    v_fast = P.sequence_values(critic, ids, att, mask)
    monkeypatch.setattr(P, "_hidden_states", _masked_hidden_states)
    torch.testing.assert_close(v_fast, P.sequence_values(critic, ids, att, mask), rtol=1e-5, atol=1e-5)


def test_entropy_off_the_graph_leaves_the_gradient_alone(tiny_model_dir):
    """entropy_coef 0: the entropy computed on detached logits has the same values and the
    loss the same gradients as with the entropy on the graph times 0."""
    model = P.load_policy(tiny_model_dir)
    ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    att = torch.ones_like(ids)
    mask = torch.zeros((2, 12))
    mask[:, 5:] = 1
    grads, ents = [], []
    for on_graph in (True, False):
        model.zero_grad()
        lp, ent = P.sequence_logprobs(model, ids, att, mask, with_entropy=True, entropy_grad=on_graph)
        (lp.sum() - 0.0 * ent.sum()).backward()
        assert ent.requires_grad == on_graph
        grads.append([p.grad.clone() for p in model.parameters()])
        ents.append(ent.detach())
    torch.testing.assert_close(ents[0], ents[1], rtol=0, atol=0)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _weights(trainer):
    return torch.cat([p.detach().flatten() for p in trainer.actor.parameters()])


def _two_steps(tmp_path, model, name, preset="grpo", fresh=True, **kw):
    cfg = make_config(preset, out_dir=str(tmp_path / name), model=model, **{**RUN, **kw})
    trainer = StarPOTrainer(cfg, log=lambda s: None)
    trainer.fresh_old_logprobs = fresh
    rows = [trainer.train_step() for _ in range(cfg.steps)]
    return trainer, rows


@pytest.mark.parametrize("preset", ["grpo", "starpo-s"])
def test_old_logprobs_from_the_update_forward_give_the_same_update(tmp_path, tiny_model_dir, preset):
    """Same seed, same rollouts: the weights after two steps and the logged losses, clip
    fractions and KL match the separate no-grad pass within float rounding (PPO + critic
    too); the sampled tokens of step 2 are identical (they depend on step 1's update)."""
    fast, rows_fast = _two_steps(tmp_path, tiny_model_dir, "fast", preset, fresh=True)
    slow, rows_slow = _two_steps(tmp_path, tiny_model_dir, "slow", preset, fresh=False)
    w0 = torch.cat([p.detach().flatten() for p in P.load_policy(tiny_model_dir).parameters()])
    assert (_weights(fast) - w0).abs().max() > 1e-4  # the steps did train
    torch.testing.assert_close(_weights(fast), _weights(slow), rtol=1e-4, atol=1e-6)
    for a, b in zip(rows_fast, rows_slow):
        assert a["rollout/return_mean"] == b["rollout/return_mean"] and a["update/tokens"] == b["update/tokens"]
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/kl_ref_k3", "actor/approx_kl_old", "actor/pg_clipfrac_high"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    assert rows_fast[0]["actor/approx_kl_old"] == 0.0  # ratio exactly 1


def test_track_kl_off_drops_the_reference_and_nothing_else(tmp_path, tiny_model_dir):
    on, rows_on = _two_steps(tmp_path, tiny_model_dir, "on", track_kl=True)
    off, rows_off = _two_steps(tmp_path, tiny_model_dir, "off", track_kl=False)
    assert on.ref is not None and off.ref is None
    assert "actor/kl_ref_k1" in rows_on[1] and "actor/kl_ref_k1" not in rows_off[1]
    torch.testing.assert_close(_weights(on), _weights(off), rtol=0, atol=0)
    with pytest.raises(ValueError, match="track_kl must be true or false"):
        make_config("grpo", track_kl="no")


def test_bench_trl_grpo_smoke(tmp_path, capsys):
    pytest.importorskip("trl")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import bench_trl_grpo
    finally:
        sys.path.pop(0)
    assert bench_trl_grpo.main(["--smoke", "--quiet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| whole step |" in out and "exact McNemar" in out
    import json

    res = json.loads((tmp_path / "bench_trl_grpo.json").read_text())
    assert len(res["steps"]) == 2 and res["measured_steps"] == 1
    for key in ("ours_step_cpu", "trl_step_cpu", "ours_gen_cpu", "trl_gen_cpu"):
        assert res["medians"][key] > 0
    assert res["eval"]["episodes"] == 2


def _bench_module():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import bench_trl_grpo
    finally:
        sys.path.pop(0)
    return bench_trl_grpo


@pytest.mark.slow
def test_bench_trl_grpo_hf_generate_mode_runs_and_restores_the_sampler(tmp_path, capsys):
    """TRL's side generating with ``model.generate`` per turn: the run completes and the
    rollout function's sampler factory is put back afterwards."""
    pytest.importorskip("trl")
    from ragen_envs.integrations import trl as rtrl

    before = rtrl._sampler_generator
    assert _bench_module().main(["--smoke", "--quiet", "--out", str(tmp_path), "--trl-generation", "hf-generate",
                                 "--eval-episodes", "0"]) == 0
    assert "TRL's generation: hf-generate" in capsys.readouterr().out
    assert rtrl._sampler_generator is before


def test_hf_generate_generator_ends_replies_at_the_end_of_turn_or_the_cap(tmp_path):
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM

    from ragen_envs.models import build_tiny_checkpoint

    model = AutoModelForCausalLM.from_pretrained(build_tiny_checkpoint(tmp_path / "tiny")).eval()
    prompts = [[5, 6, 7, 8], [9, 10], list(range(11, 30))]
    for eot, cap in ((3, 6), (int(model(input_ids=torch.tensor([prompts[1]])).logits[0, -1].argmax()), 4)):
        torch.manual_seed(0)
        gen = _bench_module().hf_generate_generator(model, SimpleNamespace(eot_id=eot), 0, cap, 1e-4, 1.0, None)
        replies = gen(prompts)
        assert len(replies) == 3
        for ids, stopped, lp in replies:
            assert lp is None and 1 <= len(ids) <= cap and eot not in ids[:-1]
            assert stopped == (ids[-1] == eot) and (stopped or len(ids) == cap)
    assert replies[1] == ([eot], True, None)  # near-greedy: row 1's argmax is the end token


def _trajectories_of_mixed_lengths(vocab: int, n: int = 8):
    """``n`` one- to four-turn trajectories of 17-170 tokens (random ids, seeded), replies of
    3 tokens after each 12-40-token observation, returns of 0 or 1 per group member."""
    from ragen_envs.starpo.rollout import Trajectory

    g = torch.Generator().manual_seed(7)
    trajs, rewards = [], []
    for i in range(n):
        t = Trajectory(group=i // 4, member=i % 4)
        turns = 1 + (i * 5) % 4
        for _ in range(turns):
            obs = int(torch.randint(12, 40, (1,), generator=g))
            t.token_ids += torch.randint(1, vocab, (obs + 3,), generator=g).tolist()
            t.loss_mask += [0] * obs + [1, 1, 1]
            t.turn_ends.append(len(t.token_ids) - 1)
        rs = [0.0] * (turns - 1) + [float(i % 3 == 0)]
        t.turn_rewards = rs
        trajs.append(t)
        rewards.append(rs)
    return trajs, rewards


def _update_gradients(tmp_path, model, name, preset, bucket):
    """The gradients each optimiser step of one update on :func:`_trajectories_of_mixed_lengths`
    applies (after clipping), the update's metrics, and the token cells its micro-batches held
    (rows x padded length), with length-bucketed micro-batches on or off."""
    cfg = make_config(preset, out_dir=str(tmp_path / name), model=model, **{**RUN, "steps": 1})
    trainer = StarPOTrainer(cfg, log=lambda s: None)
    trainer.bucket_micro_batches = bucket
    grads, cells = [], []
    for opt, net in ((trainer.actor_opt, trainer.actor), (getattr(trainer, "critic_opt", None), trainer.critic)):
        if net is None:
            continue
        real_step = opt.step

        def step(*a, _real=real_step, _net=net, **k):
            grads.append(torch.cat([p.grad.detach().flatten() for p in _net.parameters() if p.grad is not None]))
            return _real(*a, **k)

        opt.step = step
    real_micro = trainer._micro

    def micro(batch, idx):
        m = real_micro(batch, idx)
        cells.append(int(m["ids"].shape[1]) * len(idx))
        return m

    trainer._micro = micro
    trajs, rewards = _trajectories_of_mixed_lengths(trainer.actor.config.vocab_size)
    out = trainer._update(trajs, rewards, kept_groups=2)
    return grads, out, sum(cells)


@pytest.mark.parametrize("preset", ["grpo", "starpo-s"])
def test_length_bucketed_micro_batches_give_the_same_gradients(tmp_path, tiny_model_dir, preset):
    """Micro-batches of similar-length rows pad less and apply the same update: the gradients
    are compared before the optimiser (Adam's normalisation would magnify last-bit
    differences; BENCHMARKS.md#test-suite-across-cpu-kernels), so the tolerance holds on any CPU's kernels."""
    g_on, row_on, cells_on = _update_gradients(tmp_path, tiny_model_dir, "on", preset, True)
    g_off, row_off, cells_off = _update_gradients(tmp_path, tiny_model_dir, "off", preset, False)
    assert len(g_on) == len(g_off) == (2 if preset == "starpo-s" else 1)
    for a, b in zip(g_on, g_off):
        assert a.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    for key in [k for k in row_off if k.startswith(("actor/", "critic/"))]:
        assert row_on[key] == pytest.approx(row_off[key], rel=1e-4, abs=1e-6), key
    assert cells_on < cells_off  # fewer padded token cells scored and trained


def test_micro_rows_take_the_longest_rows_first(tmp_path, tiny_model_dir):
    cfg = make_config("grpo", out_dir=str(tmp_path / "m"), model=tiny_model_dir, **{**RUN, "micro_batch_size": 2})
    trainer = StarPOTrainer(cfg, log=lambda s: None)
    lengths = torch.tensor([5, 9, 2, 9, 7])
    assert trainer._micro_rows([0, 1, 2, 3, 4], 5, lengths) == [([1, 3], True), ([4, 0], True), ([2], True)]
    assert trainer._micro_rows([4, 2], 5, lengths) == [([4, 2], True)]  # one micro-batch: as given
    trainer.bucket_micro_batches = False
    assert trainer._micro_rows([0, 1, 2, 3, 4], 5, lengths) == [([0, 1], True), ([2, 3], True), ([4], True)]
