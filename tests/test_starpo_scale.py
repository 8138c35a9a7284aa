"""Large-model helpers (ragen_envs/starpo/scale.py): gradient checkpointing gives the same
loss and gradients (with prefix sharing off, which prefix_sharing_safe says), LoRA (peft)
or a clear error without it, bf16 autocast close to fp32, memory figures."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.starpo import scale  # noqa: E402
from ragen_envs.starpo.core import masked_mean  # noqa: E402
from ragen_envs.starpo.policy import MIN_SHARED_PREFIX, load_policy, pad_right, sequence_logprobs  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from ragen_envs.models import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), hidden_size=32, num_layers=2, intermediate_size=64)


def _batch():
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(3, 300, (MIN_SHARED_PREFIX + 8,), generator=g).tolist()  # shared, long enough to share
    rows = [prefix + torch.randint(3, 300, (n,), generator=g).tolist() for n in (9, 14, 6)]
    ids = pad_right(rows, 0)
    att = pad_right([[1] * len(r) for r in rows], 0)
    mask = pad_right([[0] * len(prefix) + [1] * (len(r) - len(prefix)) for r in rows], 0).float()
    return ids, att, mask


def _loss_and_grads(model, share_prefix):
    model.zero_grad(set_to_none=True)
    ids, att, mask = _batch()
    lp, _ = sequence_logprobs(model, ids, att, mask, share_prefix=share_prefix)
    loss = -masked_mean(lp, mask)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_gradient_checkpointing_same_loss_and_grads(ckpt):
    ref_model = load_policy(ckpt)
    ref_loss, ref_grads = _loss_and_grads(ref_model, share_prefix=True)
    assert scale.prefix_sharing_safe(ref_model)

    model = load_policy(ckpt)
    scale.enable_gradient_checkpointing(model)
    assert scale.gradient_checkpointing_active(model)
    assert not scale.prefix_sharing_safe(model)
    loss, grads = _loss_and_grads(model, share_prefix=scale.prefix_sharing_safe(model))
    assert abs(loss - ref_loss) < 1e-5
    assert grads.keys() == ref_grads.keys()
    for n in grads:
        assert torch.allclose(grads[n], ref_grads[n], rtol=1e-4, atol=1e-6), n
    # why the guard exists: with prefix sharing on, checkpointed layers drop the prefix's
    # cache (transformers 5.x: no cache comes back and sequence_logprobs fails)
    try:
        bad_loss, _ = _loss_and_grads(model, share_prefix=True)
    except (AttributeError, TypeError):
        pass
    else:
        assert abs(bad_loss - ref_loss) > 1e-3


def test_gradient_checkpointing_refuses_dropout(ckpt):
    model = load_policy(ckpt)
    model.config.attention_dropout = 0.1
    with pytest.raises(ValueError, match="dropout"):
        scale.enable_gradient_checkpointing(model)


def test_lora_or_a_clear_error(ckpt):
    model = load_policy(ckpt)
    try:
        import peft  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install peft"):
            scale.apply_lora(model)
        return
    n_all = sum(p.numel() for p in model.parameters())
    lora = scale.apply_lora(model, r=4, alpha=8)
    trainable = scale.trainable_parameters(lora)
    assert 0 < sum(p.numel() for p in trainable) < n_all / 2
    ids, att, mask = _batch()
    lp, _ = sequence_logprobs(lora, ids, att, mask)
    (-masked_mean(lp, mask)).backward()
    assert all(p.grad is not None for p in trainable)


def test_bf16_autocast_close_to_fp32(ckpt):
    model = load_policy(ckpt)
    ids, att, mask = _batch()
    with torch.no_grad():
        ref, _ = sequence_logprobs(model, ids, att, mask)
        with scale.autocast("cpu", "bfloat16"):
            low, _ = sequence_logprobs(model, ids, att, mask)
        with scale.autocast("cpu", "float32"):
            same, _ = sequence_logprobs(model, ids, att, mask)
    assert torch.equal(same, ref)
    assert not torch.equal(low, ref)  # really computed in bf16
    assert float((low - ref).abs().max()) < 0.1
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_memory_stats_cpu():
    m = scale.memory_stats("cpu")
    assert m["max_rss_gib"] > 0.01


# ----------------------------------------------------------------------------- in the trainer
TRAIN = dict(steps=2, num_groups=2, group_size=4, max_new_tokens=8, keep_ratio=1.0, mini_batch_size=8, micro_batch_size=2,
             eval_every=0, probe_every=0, save_every=1, log_samples=0, plots=False, actor_lr=1e-3, critic_lr=1e-3)
VOLATILE = ("time/", "perf/")


def _train(out, ckpt, steps=2, resume=False, **kw):
    from ragen_envs.starpo.config import make_config
    from ragen_envs.starpo.diagnostics import read_metrics
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = make_config(kw.pop("preset", "starpo-s"), out_dir=str(out), model=str(ckpt), **{**TRAIN, "steps": steps, **kw})
    trainer = StarPOTrainer(cfg, resume=resume, log=lambda _m: None)
    trainer.train()
    rows = [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in read_metrics(out / "metrics.jsonl")]
    return trainer, rows


def test_trainer_with_gradient_checkpointing_makes_the_same_updates(ckpt, tmp_path):
    # float64: checkpointing turns prefix sharing off, so the two runs sum in other orders,
    # and Adam's first steps (slope up to lr / eps = 1e5 at tiny gradients) turned float32's
    # last bits into 2.4e-6..6.9e-6 of weight by the CPU's kernels and threads (AVX-512, AVX2,
    # scalar; 1 and 2 threads) against a 1e-5 tolerance. In float64 the same six runs differ
    # by 2.1e-7..3.4e-7 (the rotary tables stay float32 in transformers): a 30x margin.
    plain, rows = _train(tmp_path / "plain", ckpt, dtype="float64")
    ckpted, rows_ck = _train(tmp_path / "ckpt", ckpt, gradient_checkpointing=True, dtype="float64")
    assert not ckpted.actor.training  # sampling and scoring run in eval mode
    assert len(rows) == len(rows_ck) == 2
    for a, b in zip(rows, rows_ck):
        assert a.keys() == b.keys()
        for key, v in a.items():
            if isinstance(v, float):
                assert b[key] == pytest.approx(v, rel=1e-5, abs=1e-9, nan_ok=True), key  # seen: 1e-7
    for (n, p), (_, q) in zip(plain.actor.named_parameters(), ckpted.actor.named_parameters()):
        assert p.dtype == torch.float64
        assert torch.allclose(p, q, rtol=0, atol=1e-5), n
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(tmp_path / "ckpt" / "model").use_cache  # users' generate() keeps its cache


def _has_peft() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


def test_lora_config_needs_peft_or_trains_adapters_only(ckpt, tmp_path):
    from ragen_envs.starpo.config import make_config

    if not _has_peft():
        with pytest.raises(ValueError, match="pip install"):
            make_config("starpo-s", lora_rank=4)
        return
    init = {n: p.detach().clone() for n, p in load_policy(ckpt).named_parameters()}
    trainer, rows = _train(tmp_path / "lora", ckpt, lora_rank=4, lora_alpha=8)
    assert trainer.ref is None  # the reference policy is the actor with adapters disabled
    assert rows[0]["actor/kl_ref_k1"] == 0.0 and rows[1]["actor/kl_ref_k3"] > 0  # B = 0 at init, then it moves
    assert all(math.isfinite(r["critic/value_loss"]) for r in rows)
    # the saved final model is a plain causal LM with the adapters merged in
    merged = load_policy(tmp_path / "lora" / "model")
    assert set(n for n, _ in merged.named_parameters()) == set(init)
    changed = [n for n, p in merged.named_parameters() if not torch.equal(p, init[n])]
    assert changed and all("proj" in n for n in changed)  # only adapted projections moved
    ids, att, mask = _batch()
    with torch.no_grad():
        assert torch.allclose(sequence_logprobs(merged, ids, att, mask)[0],
                              sequence_logprobs(trainer.actor, ids, att, mask)[0], atol=1e-5)
    # the checkpoint holds adapters (small), and resuming from it is exact
    assert (tmp_path / "lora" / "checkpoints" / "step_000002" / "actor" / "adapter_config.json").exists()


def test_lora_resume_continues_as_if_never_stopped(ckpt, tmp_path):
    if not _has_peft():
        pytest.skip("peft is not installed (the lora extra); CI installs it")
    _, straight = _train(tmp_path / "a", ckpt, steps=3, lora_rank=4, preset="grpo")
    _train(tmp_path / "b", ckpt, steps=2, lora_rank=4, preset="grpo")
    _, resumed = _train(tmp_path / "b", ckpt, steps=3, resume=True, lora_rank=4, preset="grpo")
    assert len(straight) == 3 and straight == resumed


def test_trainer_runs_in_pure_bf16(ckpt, tmp_path):
    trainer, rows = _train(tmp_path / "bf16", ckpt, steps=1, dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in trainer.actor.parameters())
    assert math.isfinite(rows[0]["actor/pg_loss"]) and math.isfinite(rows[0]["critic/value_loss"])
    assert rows[0]["actor/grad_norm"] > 0
