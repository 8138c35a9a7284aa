"""torch.distributed helpers (ragen_envs/starpo/distributed.py): two CPU processes (gloo)
that each hold half of a fixed batch make the same policy update as one process on the
whole batch — global filter ranking, global advantage whitening, global token-mean,
summed gradients — using the real loss functions of core.py and the tiny model."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch.distributed as dist  # noqa: E402

from ragen_envs.starpo import distributed as D  # noqa: E402
from ragen_envs.starpo.core import compute_advantages, masked_mean, policy_loss, uncertainty_filter  # noqa: E402
from ragen_envs.starpo.policy import load_policy, pad_right, sequence_logprobs  # noqa: E402

G, N = 4, 3  # groups x members
LR, CLIP = 1e-3, 1.0


def _make_batch(model_path, vocab: int) -> dict:
    """A fixed batch: random sequences of different lengths, reply masks, rollout log-probs
    a bit off the model's (so ratios are not 1 and some clip), rewards on the last reply
    token, critic values."""
    g = torch.Generator().manual_seed(0)
    rows, masks = [], []
    for b in range(G * N):
        T = int(torch.randint(18, 40, (1,), generator=g))
        rows.append(torch.randint(3, vocab, (T,), generator=g).tolist())
        m = [0] * T
        for a in (6, 14):
            for t in range(a, min(a + int(torch.randint(2, 6, (1,), generator=g)), T)):
                m[t] = 1
        m[T - 3 : T] = [1, 1, 1]
        masks.append(m)
    ids = pad_right(rows, 0)
    att = pad_right([[1] * len(r) for r in rows], 0)
    mask = pad_right(masks, 0).float()
    model = load_policy(model_path)
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, ids, att, mask)
    old_lp = (lp + 0.3 * torch.randn(lp.shape, generator=g)) * mask
    returns = torch.randint(0, 3, (G * N,), generator=g).double()
    returns[N:2 * N] = 1.0  # a zero-std group
    rewards = torch.zeros_like(mask)
    for b, r in enumerate(rows):
        rewards[b, len(r) - 1] = float(returns[b])
    values = torch.randn(mask.shape, generator=g) * mask
    return {"ids": ids, "att": att, "mask": mask, "old_lp": old_lp, "rewards": rewards, "values": values,
            "returns": returns.view(G, N)}


def _rows(batch, rows):
    sel = torch.as_tensor(rows)
    L = int(batch["att"][sel].sum(-1).max())
    return {k: v[sel][:, :L] for k, v in batch.items() if k != "returns"}


def _advantages(b, advantages_fn):
    adv, _ = advantages_fn("gae", token_rewards=b["rewards"], values=b["values"], mask=b["mask"], turn_ends=None,
                           group_size=N, gamma=1.0, lam=1.0, gamma_high=0.95, eps=1e-6)
    return adv


def _update(model, batch, rows, num_tokens, advantages_fn):
    """One policy-loss step on ``rows`` of the batch; returns (loss, grads, adv)."""
    b = _rows(batch, rows)
    adv = _advantages(b, advantages_fn)
    logp, ent = sequence_logprobs(model, b["ids"], b["att"], b["mask"], with_entropy=True)
    n_tok = num_tokens(float(b["mask"].sum()))
    pg, metrics = policy_loss(logp, b["old_lp"], adv, b["mask"], 0.2, 0.28, 3.0, 20.0, num_tokens=n_tok)
    loss = pg - 0.001 * masked_mean(ent, b["mask"], n_tok)
    loss.backward()
    return loss.detach(), metrics, adv


def _worker(rank, world, init_file, model_path, batch_file, out_file):
    torch.set_num_threads(1)
    ctx = D.init_distributed(init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        batch = torch.load(batch_file)
        groups = D.shard_groups(G)
        rows = [g * N + m for g in groups for m in range(N)]
        # the filter ranks all groups from the gathered returns
        all_returns = D.gather_group_returns(batch["returns"][groups])
        kept = uncertainty_filter(all_returns, "top_p", 0.5).kept
        success = batch["returns"][groups] > 1.5
        filt = D.global_uncertainty_filter(batch["returns"][groups], success, "top_p", 0.25, explore_groups=1)
        model = load_policy(model_path).train()
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        loss, metrics, adv = _update(model, batch, rows, D.global_sum, D.compute_advantages)
        D.all_reduce_gradients(model)
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP))
        opt.step()
        total_loss = D.global_sum(loss)
        clip_high = D.global_sum(metrics["pg_clipfrac_high"])
        advs = D.all_gather_objects((rows, adv, _advantages(_rows(batch, rows), compute_advantages)))
        logged = []
        D.RankZeroLog(logged.append)(f"rank {ctx.rank}")
        D.rank_zero_only(lambda: torch.save({"params": {n: p.detach().clone() for n, p in model.named_parameters()},
                                             "grads": grads, "grad_norm": gn, "loss": total_loss, "kept": kept, "filt": (filt.kept, filt.metrics),
                                             "all_returns": all_returns, "advs": advs, "clip_high": clip_high,
                                             "logged": logged, "world": ctx.world_size}, out_file))()
        if ctx.rank != 0:
            assert logged == []
        D.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.policy import load_tokenizer

    d = tmp_path_factory.mktemp("dist")
    path = build_tiny_checkpoint(d / "model", hidden_size=32, num_layers=2, intermediate_size=64)
    batch = _make_batch(path, len(load_tokenizer(path)))
    torch.save(batch, d / "batch.pt")
    return d, path, batch


def test_sharding_covers_every_group_once():
    for world in (1, 2, 3, 5):
        for n in range(world, 13):
            shards = [D.shard_groups(n, r, world) for r in range(world)]
            assert sorted(g for s in shards for g in s) == list(range(n))
            assert max(map(len, shards)) - min(map(len, shards)) <= 1
            assert all(s == list(range(s[0], s[-1] + 1)) for s in shards)  # contiguous blocks
            idx = [D.shard_indices(n, r, world) for r in range(world)]
            assert sorted(i for s in idx for i in s) == list(range(n))
    with pytest.raises(ValueError):
        D.shard_groups(1, 0, 2)


def test_single_process_helpers_are_identities(setup):
    _, _, batch = setup
    assert not D.context().enabled
    x = torch.randn(3, 5, dtype=torch.float64)
    m = (torch.rand(3, 5) > 0.3).double()
    from ragen_envs.starpo.core import masked_whiten

    assert torch.allclose(D.global_masked_whiten(x, m), masked_whiten(x, m))
    assert D.global_sum(3.5) == 3.5
    assert torch.equal(D.gather_group_returns(batch["returns"]), batch["returns"])


def test_two_processes_equal_one_process_update(setup):
    import torch.multiprocessing as mp

    d, path, batch = setup
    # the one-process reference, with core.py alone (no distributed helper)
    model = load_policy(path).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    kept = uncertainty_filter(batch["returns"], "top_p", 0.5).kept
    loss, metrics, adv = _update(model, batch, list(range(G * N)), lambda n: n, compute_advantages)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP))
    assert gn > CLIP * 0.01  # a real gradient
    opt.step()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}

    for world in (2,):
        out = d / f"out_{world}.pt"
        mp.spawn(_worker, args=(world, str(d / f"init_{world}"), str(path), str(d / "batch.pt"), str(out)), nprocs=world,
                 join=True)
        res = torch.load(out)
        assert res["world"] == world and res["logged"] == ["rank 0"]
        assert torch.equal(res["all_returns"], batch["returns"])
        assert res["kept"] == kept
        ref_filt = uncertainty_filter(batch["returns"], "top_p", 0.25, 1, batch["returns"] > 1.5)
        assert res["filt"] == (ref_filt.kept, ref_filt.metrics)
        # advantages whitened with the global moments = the one-process whitening
        for rows, a, local in res["advs"]:
            L = a.shape[1]
            assert torch.allclose(a, adv[rows][:, :L], atol=1e-5), rows
            # (per-rank whitening, the bug this guards against, would differ)
            assert not torch.allclose(local, adv[rows][:, :L], atol=1e-3)
        assert abs(res["loss"] - float(loss)) < 1e-5
        assert abs(res["clip_high"] - metrics["pg_clipfrac_high"]) < 1e-9
        assert abs(res["grad_norm"] - gn) < 1e-4 * max(gn, 1.0)
        for n, g in grads.items():
            assert torch.allclose(res["grads"][n], g, rtol=1e-4, atol=1e-7), n
        for n, p in params.items():
            assert torch.allclose(res["params"][n], p, atol=2e-6), n
        # and the update really moved the weights
        init = load_policy(path)
        init_params = {n: p.detach() for n, p in init.named_parameters()}
        moved = max(float((p - init_params[n]).abs().max()) for n, p in res["params"].items())
        assert moved > LR * 0.5
