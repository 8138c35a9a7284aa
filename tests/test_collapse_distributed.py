"""RAGEN-2's gradient report (``gradient_analysis_mode``) under several processes: the real
``StarPOTrainer.train_step`` in 2 gloo processes on fixed rollouts logs the
``grad_norm/<bucket>/*`` numbers one process logs on the same kept batch, for every
``sharding`` (none / ddp / fsdp), and a rank holding no row of a mini-batch takes part
without hanging."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.starpo import distributed as D  # noqa: E402

SHARDINGS = ("none", "ddp", "fsdp")
# 4 groups x 3 rollouts, all kept; 3 quantile buckets of 1, 1 and 2 groups = 3, 3 and 6 rows.
# float64: the sums over 2 ranks and over one process agree to ~1e-16, far inside REL.
BASE = dict(steps=1, num_groups=4, group_size=3, max_new_tokens=8, keep_ratio=1.0, eval_every=0, probe_every=0,
            save_every=0, log_samples=0, plots=False, dtype="float64", kl_coef=0.01, entropy_coef=0.001,
            gradient_analysis_mode=True, gradient_analysis_every=1, gradient_analysis_num_buckets=3,
            env_kwargs={"max_turns": 1})  # (one turn: short rows, a fast test)
CASES = {  # name: (config, shardings run in 2 processes)
    # mini-batches of 4 over 2 ranks: shares 2 + 2, a bucket of 3 rows 2 + 1 (ddp / fsdp pad rank 1),
    # bucket_3's 6 rows cut 4 + 2: the norm averaged over 2 mini-batches
    "split": (dict(mini_batch_size=4, micro_batch_size=1), SHARDINGS),
    # mini-batches of 1 row: rank 1 holds no row of any mini-batch of any bucket (and of the update)
    "rank1_no_rows": (dict(mini_batch_size=1, micro_batch_size=2), SHARDINGS),
    # LoRA adapters (the norm over the adapters only) and checkpointed layers, under the wrappers
    "lora_checkpointing": (dict(mini_batch_size=4, micro_batch_size=2, lora_rank=4, gradient_checkpointing=True),
                           ("ddp", "fsdp")),
}
RUNS = [(case, mode) for case, (_, modes) in CASES.items() for mode in modes]
REL, ABS = 1e-9, 1e-12
HANG_S = 420  # a hung collective fails the test instead of blocking it (gloo's own timeout is 30 min)


def _config(out, model, case, **overrides):
    from ragen_envs.starpo.config import make_config

    return make_config("grpo", out_dir=str(out), model=str(model), **{**BASE, **CASES[case][0], **overrides})


def _report_row(trainer, trajs):
    """One train_step on fixed rollouts (this rank's block of ``trajs``); the logged row
    without timings."""
    import copy

    mine = set(D.shard_groups(trainer.cfg.num_groups))
    trainer.rollout = lambda base_seed: [copy.deepcopy(t) for t in trajs if t.group in mine]
    row = trainer.train_step()
    return {k: v for k, v in row.items() if not k.startswith(("time/", "perf/"))}


def _worker(rank, world, init_file, out, model, trajs_file, result_dir):
    torch.set_num_threads(1)
    D.init_distributed(init_method=f"file://{init_file}", rank=rank, world_size=world)
    clean = False
    try:
        from ragen_envs.starpo.trainer import StarPOTrainer

        trajs = torch.load(trajs_file, weights_only=False)
        rows = {}
        for case, mode in RUNS:
            trainer = StarPOTrainer(_config(f"{out}/{case}_{mode}", model, case, sharding=mode), log=lambda _m: None)
            rows[case, mode] = _report_row(trainer, trajs)
        torch.save(rows, f"{result_dir}/rank{rank}.pt")
        clean = True
    finally:
        D.shutdown(clean)


def _spawn_with_deadline(fn, args, nprocs, seconds):
    """``mp.spawn`` that fails (and ends its own processes) after ``seconds`` instead of
    waiting forever on a collective one rank never joins."""
    import torch.multiprocessing as mp

    ctx = mp.spawn(fn, args=args, nprocs=nprocs, join=False)
    deadline = time.monotonic() + seconds
    while not ctx.join(timeout=max(deadline - time.monotonic(), 0.1)):
        if time.monotonic() >= deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            pytest.fail(f"the {nprocs}-process run did not finish in {seconds} s (a hung collective)")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gradreport2")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers: on a loaded machine more threads only wait on each other
    try:
        one = _one_process(tmp)
    finally:
        torch.set_num_threads(threads)
    (tmp / "res").mkdir()
    _spawn_with_deadline(_worker, (2, str(tmp / "init"), str(tmp / "two"), str(tmp / "model"), str(tmp / "trajs.pt"),
                                   str(tmp / "res")), 2, HANG_S)
    two = [torch.load(tmp / "res" / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    return one, two


def _one_process(tmp):
    """Fixed rollouts (saved for the workers) and the one-process rows on them."""
    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.trainer import StarPOTrainer

    model = build_tiny_checkpoint(tmp / "model", hidden_size=32, num_layers=1, intermediate_size=64)
    trajs = StarPOTrainer(_config(tmp / "collect", model, "split"), log=lambda _m: None).rollout(123_456)
    g = torch.Generator().manual_seed(0)
    for t in trajs:  # an untrained model fails everywhere: give the groups distinct return spreads
        t.turn_rewards[-1] += float(torch.rand(1, generator=g)) * (t.group + 1)
    torch.save(trajs, tmp / "trajs.pt")
    return {case: _report_row(StarPOTrainer(_config(tmp / f"one_{case}", model, case), log=lambda _m: None), trajs)
            for case in CASES}


@pytest.mark.parametrize("case,mode", RUNS)
def test_gradient_report_two_processes_equals_one_process(runs, case, mode):
    one, (r0, r1) = runs
    ref, row = one[case], r0[case, mode]
    report = sorted(k for k in ref if k.startswith("grad_norm/"))
    # all + 3 buckets, each with task / entropy / kl norms, losses, counts and std stats
    assert {k.split("/")[1] for k in report} == {"all", "bucket_1", "bucket_2", "bucket_3"}
    assert [ref[f"grad_norm/{b}/sample_count"] for b in ("all", "bucket_1", "bucket_2", "bucket_3")] == [12, 3, 3, 6]
    for b in ("all", "bucket_1", "bucket_2", "bucket_3"):
        for c in ("task", "entropy", "kl"):
            assert ref[f"grad_norm/{b}/{c}"] > 0, (b, c)
    # the same keys and numbers in 2 processes (the rest of the row too: the update after the
    # report is the one-process update), and both ranks agree
    assert sorted(row) == sorted(ref)
    for key, v in ref.items():
        if isinstance(v, float):
            assert row[key] == pytest.approx(v, rel=REL, abs=ABS), (case, mode, key)
        else:
            assert row[key] == v, (case, mode, key)
        assert r1[case, mode][key] == row[key], (case, mode, key)
