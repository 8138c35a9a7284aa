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
ADAM_EPS = 1e-8  # torch.optim.AdamW's default
# The update is compared in float64. In float32 the two sides' gradients differ in the last
# bits (a sum over 2 ranks vs one sum, and each CPU's kernels sum in their own order), and
# Adam's first step, lr * g / (|g| + eps), has a slope of up to lr / eps = 1e5 at |g| ~ eps:
# a last-bit gradient difference of 1e-10 moves a weight by 1e-5 on one machine and not on
# another. In float64 the same rounding is ~1e-17 of the gradient, far below every tolerance.
DTYPE = torch.float64
GRAD_RTOL = 1e-12


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
    mask = pad_right(masks, 0, dtype=DTYPE)
    model = load_policy(model_path, dtype=DTYPE)
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, ids, att, mask)
    old_lp = (lp + 0.3 * torch.randn(lp.shape, generator=g, dtype=DTYPE)) * mask
    returns = torch.randint(0, 3, (G * N,), generator=g).double()
    returns[N:2 * N] = 1.0  # a zero-std group
    rewards = torch.zeros_like(mask)
    for b, r in enumerate(rows):
        rewards[b, len(r) - 1] = float(returns[b])
    values = torch.randn(mask.shape, generator=g, dtype=DTYPE) * mask
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


def _leave(done: bool) -> None:
    """End a spawned worker. When every rank has finished (results saved, the last barrier
    passed) the process ends at once, ``os._exit(0)``: no process-group teardown and no
    interpreter finalisation, where gloo's threads now and then aborted a rank after the
    test's work was done ("terminate called without an active exception", SIGABRT: a failed
    clean-clone CI run on 2026-12-06, not reproduced in 6 reruns). After an error the group is
    destroyed and the exception goes on to ``mp.spawn``."""
    if done:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group()


def _worker(rank, world, init_file, model_path, batch_file, out_file):
    torch.set_num_threads(1)
    ctx = D.init_distributed(init_method=f"file://{init_file}", rank=rank, world_size=world)
    done = False
    try:
        batch = torch.load(batch_file)
        groups = D.shard_groups(G)
        rows = [g * N + m for g in groups for m in range(N)]
        # the filter ranks all groups from the gathered returns
        all_returns = D.gather_group_returns(batch["returns"][groups])
        kept = uncertainty_filter(all_returns, "top_p", 0.5).kept
        success = batch["returns"][groups] > 1.5
        filt = D.global_uncertainty_filter(batch["returns"][groups], success, "top_p", 0.25, explore_groups=1)
        model = load_policy(model_path, dtype=DTYPE).train()
        opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=ADAM_EPS)
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
        done = True
    finally:
        _leave(done)


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
    model = load_policy(path, dtype=DTYPE).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=ADAM_EPS)
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
        assert abs(res["loss"] - float(loss)) < 1e-12
        assert abs(res["clip_high"] - metrics["pg_clipfrac_high"]) < 1e-12
        assert abs(res["grad_norm"] - gn) < 1e-12 * max(gn, 1.0)
        for n, g in grads.items():
            # float64 sums of a few thousand terms agree to ~1e-16 of the largest gradient;
            # 1e-12 leaves three orders of margin for any CPU's summation order
            grad_tol = GRAD_RTOL * float(g.abs().max())
            assert float((res["grads"][n] - g).abs().max()) <= grad_tol, n
            # Adam's first step moves a weight by lr * g / (|g| + eps): by at most lr / eps
            # per unit of gradient difference, plus float64 rounding of the weight itself
            param_tol = LR / ADAM_EPS * grad_tol + 1e-14
            assert float((res["params"][n] - params[n]).abs().max()) <= param_tol, n
        # and the update really moved the weights
        init = load_policy(path)
        init_params = {n: p.detach() for n, p in init.named_parameters()}
        moved = max(float((p - init_params[n]).abs().max()) for n, p in res["params"].items())
        assert moved > LR * 0.5


# ----------------------------------------------------------------------------- the trainer itself
# mini-batches of 3 over 2 ranks: shares of 2 and 1 rows (padding micro-batches under ddp / fsdp)
TRAIN = dict(steps=1, num_groups=4, group_size=4, max_new_tokens=8, keep_ratio=0.5, mini_batch_size=3,
             micro_batch_size=1, updates_per_rollout=2, eval_every=1, eval_episodes=4, probe_every=1, probe_states=2,
             probe_samples=2, save_every=1, actor_lr=1e-3, critic_lr=1e-3, log_samples=0, plots=False,
             dtype="float64")  # in float64, as the update test above: Adam amplifies float32's last bits
VOLATILE = ("time/", "perf/", "eval/")


SHARDINGS = ("none", "ddp", "fsdp")


def _trainer_config(out, model, **overrides):
    from ragen_envs.starpo.config import make_config

    return make_config("starpo-s", out_dir=str(out), model=str(model), **{**TRAIN, **overrides})


def _full(model) -> dict:
    """Every parameter as a full plain tensor (FSDP's DTensor shards gathered)."""
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for n, p in model.named_parameters()}


def _one_step(trainer, trajs):
    """One train_step on fixed rollouts: the trainer's own rollout is replaced by this rank's
    block of ``trajs`` (the groups shard_groups gives it)."""
    import copy

    mine = set(D.shard_groups(trainer.cfg.num_groups))
    trainer.rollout = lambda base_seed: [copy.deepcopy(t) for t in trajs if t.group in mine]
    row = trainer.train_step()
    params, critic = _full(trainer.actor), _full(trainer.critic)
    sampler = {n: p.detach().clone() for n, p in trainer._sampling_model().named_parameters()}
    assert sampler.keys() == params.keys()
    for n, p in params.items():  # the model that generates holds the updated weights
        assert torch.equal(sampler[n], p), n
    return {k: v for k, v in row.items() if not k.startswith(VOLATILE)}, params, critic


def _full_optim(trainer) -> dict:
    """The actor's AdamW state, FQN-keyed full tensors (gathered under FSDP; a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(trainer.actor, trainer.actor_opt, options=StateDictOptions(full_state_dict=True))["state"]


def _trainer_worker(rank, world, init_file, out, model, trajs_file, result_dir, one_fsdp):
    import shutil

    torch.set_num_threads(1)
    D.init_distributed(init_method=f"file://{init_file}", rank=rank, world_size=world)
    done = False
    try:
        from ragen_envs.starpo.trainer import StarPOTrainer

        trajs = torch.load(trajs_file, weights_only=False)
        for mode in SHARDINGS:  # one process group, one trainer per sharding mode
            logged = []
            trainer = StarPOTrainer(_trainer_config(f"{out}/{mode}", model, sharding=mode), log=logged.append)
            row, params, critic = _one_step(trainer, trajs)
            res = {"row": row, "params": params, "critic": critic, "logged": logged}
            if mode == "fsdp":
                # --resume with the same world size is exact: a copy of the run at step 1
                # resumes and takes the same second step as the run itself
                if rank == 0:
                    shutil.copytree(f"{out}/fsdp", f"{out}/fsdp_copy")
                D.barrier()
                res["second"] = _one_step(trainer, trajs)
                res["second_optim"] = _full_optim(trainer)
                resumed = StarPOTrainer(_trainer_config(f"{out}/fsdp_copy", model, sharding="fsdp"), resume=True,
                                        log=lambda _m: None)
                res["resumed_step"] = resumed.step
                res["resumed_second"] = _one_step(resumed, trajs)
                # 1 -> 2 processes: the one-process fsdp checkpoint loads with the same weights
                if rank == 0:
                    shutil.copytree(one_fsdp, f"{out}/one_to_two")
                D.barrier()
                grown = StarPOTrainer(_trainer_config(f"{out}/one_to_two", model, sharding="fsdp"), resume=True,
                                      log=lambda _m: None)
                res["one_to_two"] = (grown.step, _full(grown.actor), _full(grown.critic), _full_optim(grown))
            torch.save(res, f"{result_dir}/{mode}_rank{rank}.pt")
            D.barrier()
        done = True
    finally:
        _leave(done)


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """One 2-process gloo run of the real trainer for every sharding on fixed rollouts, and
    the one-process reference on the same rollouts."""
    import torch.multiprocessing as mp

    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.trainer import StarPOTrainer

    tmp_path = tmp_path_factory.mktemp("trainer2")
    model = build_tiny_checkpoint(tmp_path / "model", hidden_size=32, num_layers=1, intermediate_size=64)
    first = StarPOTrainer(_trainer_config(tmp_path / "collect", model), log=lambda _m: None)
    trajs = first.rollout(123_456)
    g = torch.Generator().manual_seed(0)
    for t in trajs:  # an untrained model fails everywhere: give the groups distinct return spreads
        t.turn_rewards[-1] += float(torch.rand(1, generator=g)) * (t.group + 1)
    torch.save(trajs, tmp_path / "trajs.pt")

    ref = _one_step(StarPOTrainer(_trainer_config(tmp_path / "one", model), log=lambda _m: None), trajs)
    assert ref[0]["update/trajectories"] == 8 and ref[0]["actor/grad_norm"] > 0
    # one process, sharding=fsdp: the plain model (the same update), sharded checkpoints
    one_fsdp = StarPOTrainer(_trainer_config(tmp_path / "one_fsdp", model, sharding="fsdp"), log=lambda _m: None)
    fsdp_one = _one_step(one_fsdp, trajs)
    assert all(torch.equal(fsdp_one[1][n], p) for n, p in ref[1].items())
    assert (tmp_path / "one_fsdp" / "checkpoints" / "step_000001" / "dcp").is_dir()

    (tmp_path / "res").mkdir()
    mp.spawn(_trainer_worker, args=(2, str(tmp_path / "init"), str(tmp_path / "two"), str(model),
                                    str(tmp_path / "trajs.pt"), str(tmp_path / "res"), str(tmp_path / "one_fsdp")),
             nprocs=2, join=True)
    return {"dir": tmp_path, "model": model, "trajs": trajs, "ref": ref, "one_fsdp_optim": _full_optim(one_fsdp)}


@pytest.mark.parametrize("mode", SHARDINGS)
def test_trainer_two_processes_equal_one_process_on_same_rollouts(two_process_run, mode):
    """The real StarPOTrainer.train_step under 2 gloo processes (groups sharded, kept batch
    scored in shares, mini-batches split across ranks, gradients summed, rank 0's shuffle,
    critic included) makes the same update as one process on the same rollouts, for every
    ``sharding`` (none: the trainer's all-reduce; ddp: DistributedDataParallel with no_sync
    and padding micro-batches; fsdp: FSDP2 shards, sampling from the gathered copy)."""
    from ragen_envs.starpo.diagnostics import read_metrics

    tmp_path = two_process_run["dir"]
    ref_row, ref_params, ref_critic = two_process_run["ref"]
    r0, r1 = (torch.load(tmp_path / "res" / f"{mode}_rank{r}.pt", weights_only=False) for r in (0, 1))
    assert r1["logged"] == [] and any("torch.distributed: 2 processes" in m for m in r0["logged"])
    # every rank holds the same weights after the step ...
    for n in r0["params"]:
        assert torch.equal(r0["params"][n], r1["params"][n]), n
    # ... and they are the one-process update's (to float tolerance)
    # ... and they are the one-process update's. float64 rounding (~1e-16 here on 1 and 2
    # threads, AVX-512, AVX2 and the scalar kernels) through six Adam steps of slope <= lr /
    # eps = 1e5 stays far below 1e-9.
    for n, p in ref_params.items():
        assert torch.allclose(r0["params"][n], p, rtol=0, atol=1e-9), (mode, n)
    for n, p in ref_critic.items():
        assert torch.allclose(r0["critic"][n], p, rtol=0, atol=1e-9), (mode, n)
    assert r0["row"].keys() == ref_row.keys() and r0["row"]["events"] == ref_row["events"]
    for key, v in ref_row.items():
        if isinstance(v, float):
            assert r0["row"][key] == pytest.approx(v, rel=1e-9, abs=1e-12), (mode, key)
            assert r1["row"][key] == r0["row"][key], (mode, key)
        else:
            assert r0["row"][key] == v, (mode, key)
    # only rank 0 wrote: one metrics row, a checkpoint holding both ranks' RNG states
    run = tmp_path / "two" / mode
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == ([0, 1] if mode == "fsdp" else [0])  # (fsdp: 2 steps)
    state = torch.load(run / "checkpoints" / "step_000001" / "trainer_state.pt", weights_only=True)
    assert len(state["rank_generators"]) == 2
    assert not torch.equal(state["rank_generators"][0], state["rank_generators"][1])
    assert (run / "checkpoints" / "step_000001" / "dcp").is_dir() == (mode == "fsdp")


def _assert_optim_equal(a: dict, b: dict, atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for fqn in a:
        for k in a[fqn]:
            assert torch.allclose(torch.as_tensor(a[fqn][k]).float(), torch.as_tensor(b[fqn][k]).float(), atol=atol,
                                  rtol=0), (fqn, k)


def test_fsdp_resume_with_the_same_world_size_is_exact(two_process_run):
    r0 = torch.load(two_process_run["dir"] / "res" / "fsdp_rank0.pt", weights_only=False)
    assert r0["resumed_step"] == 1
    (row, params, critic), (row_b, params_b, critic_b) = r0["second"], r0["resumed_second"]
    assert row == row_b and row["step"] == 1
    for n in params:
        assert torch.equal(params[n], params_b[n]), n
    for n in critic:
        assert torch.equal(critic[n], critic_b[n]), n


def test_fsdp_checkpoints_load_across_world_sizes(two_process_run):
    """2 -> 1: the 2-process fsdp checkpoint resumes in one process with the same weights
    and optimiser state; 1 -> 2: the one-process one resumes in 2 processes (checked there)."""
    import shutil

    from ragen_envs.starpo.trainer import StarPOTrainer

    tmp_path = two_process_run["dir"]
    r0 = torch.load(tmp_path / "res" / "fsdp_rank0.pt", weights_only=False)
    # 1 -> 2 (the workers resumed the one-process checkpoint)
    step, actor, critic, optim = r0["one_to_two"]
    _, ref_params, ref_critic = two_process_run["ref"]
    assert step == 1
    for n, p in ref_params.items():
        assert torch.equal(actor[n], p), n
    for n, p in ref_critic.items():
        assert torch.equal(critic[n], p), n
    _assert_optim_equal(optim, two_process_run["one_fsdp_optim"])
    # 2 -> 1: the run's newest checkpoint (step 2) in one process
    shutil.copytree(tmp_path / "two" / "fsdp", tmp_path / "two_to_one")
    warnings = []
    shrunk = StarPOTrainer(_trainer_config(tmp_path / "two_to_one", two_process_run["model"], sharding="fsdp"),
                           resume=True, log=warnings.append)
    assert shrunk.step == 2
    _, params2, critic2 = r0["second"]
    for n, p in params2.items():
        assert torch.equal(_full(shrunk.actor)[n], p), n
    for n, p in critic2.items():
        assert torch.equal(_full(shrunk.critic)[n], p), n
    _assert_optim_equal(_full_optim(shrunk), r0["second_optim"])


def test_torchrun_cli_two_processes_fsdp(tmp_path):
    """``torchrun --nproc_per_node=2 -m ragen_envs.starpo --set sharding=fsdp``: a real
    2-process run (gloo) trains, evaluates, writes sharded checkpoints and its outputs once,
    from rank 0; the final model is one save_pretrained directory."""
    import shutil
    import subprocess
    import sys

    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.diagnostics import read_metrics

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:  # torch always installs it next to the interpreter
        pytest.fail("torchrun not found next to the interpreter")
    model = build_tiny_checkpoint(tmp_path / "model", hidden_size=32, num_layers=1, intermediate_size=64)
    out = tmp_path / "run"
    sets = ["num_groups=2", "group_size=4", "max_new_tokens=6", "keep_ratio=1.0", "mini_batch_size=8", "micro_batch_size=2",
            "eval_every=2", "eval_episodes=4", "probe_every=0", "save_every=1", "log_samples=0", "plots=false",
            "sharding=fsdp"]
    cmd = [torchrun, "--standalone", "--nproc_per_node=2", "-m", "ragen_envs.starpo", "ragen/Sokoban-v0",
           "--model", str(model), "--steps", "2", "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert sum("torch.distributed: 2 processes (gloo)" in line for line in lines) == 1
    assert sum(line.startswith("step    1 |") for line in lines) == 1  # rank 0 logs, once
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[-1]["final"] and "eval/success" in rows[0]
    assert rows[0]["update/trajectories"] == 8  # both ranks' groups in the update
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_000002"
    assert sorted(p.name for p in (out / "checkpoints" / "step_000002" / "dcp").glob("*.distcp")) == [
        "__0_0.distcp", "__1_0.distcp"]  # each rank wrote its shards
    from transformers import AutoModelForCausalLM

    final = AutoModelForCausalLM.from_pretrained(out / "model")  # one plain model, full weights
    from ragen_envs.starpo.policy import load_policy

    assert sum(p.numel() for p in final.parameters()) == sum(p.numel() for p in load_policy(model).parameters())
    # ... holding the weights of the last sharded checkpoint's actor
    import torch.distributed.checkpoint as dcp

    ref = final.state_dict()
    saved = {"actor": {k: torch.empty_like(v) for k, v in ref.items()}}
    dcp.load(saved, checkpoint_id=str(out / "checkpoints" / "step_000002" / "dcp"), no_dist=True)
    for k, v in ref.items():
        assert torch.equal(saved["actor"][k], v), k
