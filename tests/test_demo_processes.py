"""The demo across processes (issue 23 goal 2): data-parallel SFT makes the one-process
micro-batched step bit for bit, the expert data's and the held-out check's shares add up to
the one-process ones, and ``make demo``'s worker processes run end to end (and fail in one
line)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The quick demo's tokenizer + model, and a format for answer-only Sokoban replies."""
    from ragen_envs.starpo.demo import QUICK, build_demo_model
    from ragen_envs.starpo.policy import ChatFormat, load_tokenizer

    path = build_demo_model(tmp_path_factory.mktemp("tiny") / "m", QUICK)
    return path, ChatFormat(load_tokenizer(path), "<answer>")


def test_expert_shards_merge_into_the_one_process_episodes(tiny):
    from ragen_envs.starpo.expert import expert_trajectories, merge_expert_shards

    _, fmt = tiny
    seeds = range(200, 223)  # chunks of 5: 5, 5, 5, 5, 3
    kw = {"actions_per_turn": 2, "env_kwargs": {"think": False}, "chunk": 5}
    whole = expert_trajectories("ragen/Sokoban-v0", fmt, seeds, **kw)
    for n in (2, 3, 6):  # 6 shares of 5 chunks: the last one is empty
        shares = [expert_trajectories("ragen/Sokoban-v0", fmt, seeds, shard=(k, n), **kw) for k in range(n)]
        # chunk i (5 seeds, the last one 3) belongs to share i mod n
        assert [len(s) for s in shares] == [sum(5 if i < 4 else 3 for i in range(k, 5, n)) for k in range(n)]
        merged = merge_expert_shards(shares, seeds, chunk=5)
        assert [t.episode.seed for t in merged] == list(seeds)
        assert [t.token_ids for t in merged] == [t.token_ids for t in whole]
    with pytest.raises(ValueError, match="too few"):
        merge_expert_shards([whole[:5], []], seeds, chunk=5)
    halves = [expert_trajectories("ragen/Sokoban-v0", fmt, seeds, shard=(k, 2), **kw) for k in range(2)]
    with pytest.raises(ValueError, match="take"):
        merge_expert_shards([halves[0] + whole[:1], halves[1]], seeds, chunk=5)
    with pytest.raises(ValueError, match="shard"):
        expert_trajectories("ragen/Sokoban-v0", fmt, seeds, shard=(2, 2), **kw)


def test_validation_blocks_cover_the_layouts_once():
    from ragen_envs.starpo.sft import validation_blocks

    assert validation_blocks(30_000, 512, 2) == [(30_000, 256), (30_256, 256)]
    assert validation_blocks(10, 7, 3) == [(10, 3), (13, 2), (15, 2)]
    assert validation_blocks(5, 4, 1) == [(5, 4)]
    for bad in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="validation_parts"):
            validation_blocks(0, 4, bad)


def test_validation_in_parts_plays_each_block_with_its_own_stream(monkeypatch):
    """parts=2: block j (its first seed, its size) sampled from a generator seeded stream + j, and
    the rate is the solved layouts of all blocks over all layouts."""
    from types import SimpleNamespace

    import ragen_envs.starpo.rollout as rollout
    import ragen_envs.starpo.sampler as sampler
    from ragen_envs.starpo.sft import validation_success

    calls = []

    class Responder:
        def __init__(self, model, fmt, pad_id, max_new_tokens, temperature, gen, **_):
            self.seed = gen.initial_seed()

    def collect(env_id, start, n, group_size, responder, fmt, env_kwargs=None):
        calls.append((start, n, responder.seed))
        return [SimpleNamespace(success=(start + i) % 3 == 0) for i in range(n)]

    monkeypatch.setattr(sampler, "CachedResponder", Responder)
    monkeypatch.setattr(rollout, "collect_rollouts", collect)
    rate = validation_success(None, None, 0, "ragen/Sokoban-v0", seed_start=100, episodes=7, max_new_tokens=8,
                              stream=7, parts=2)
    assert calls == [(100, 4, 7), (104, 3, 8)]
    assert rate == 2 / 7  # seeds 102 and 105
    calls.clear()
    assert validation_success(None, None, 0, "x", seed_start=100, episodes=7, max_new_tokens=8) == 2 / 7
    assert calls == [(100, 7, 1)]


SFT_STEPS = dict(steps=4, batch_size=8, lr=2e-3, warmup=1, context_coef=0.5, seed=5)


def _sft_worker(rank, world, init_file, model_dir, out_file, micro, opts=None):
    """Four SFT steps of the tiny model on 24 expert episodes, 1 thread; the weights' sha256 and
    the logged losses to ``out_file`` (rank 0). ``opts``: ``time_budget_s`` for train_sft, and
    ``frozen_clock_rank``: a rank whose clock never moves."""
    opts = opts or {}
    torch.set_num_threads(1)
    if opts.get("frozen_clock_rank") == rank:
        import time

        time.monotonic = lambda: 0.0
    from ragen_envs.starpo import distributed as D
    from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer
    from ragen_envs.starpo.sft import expert_trajectories, train_sft

    if world > 1:
        D.init_distributed(init_method=f"file://{init_file}", rank=rank, world_size=world)
    done = False
    try:
        tok = load_tokenizer(model_dir)
        data = expert_trajectories("ragen/Sokoban-v0", ChatFormat(tok, "<answer>"), range(10_000, 10_024),
                                   actions_per_turn=2, env_kwargs={"think": False})
        model = load_policy(model_dir)
        rows = []
        train_sft(model, data, pad_id=tok.pad_token_id, micro_batch_size=micro, log=rows.append, log_every=1,
                  time_budget_s=opts.get("time_budget_s"), **SFT_STEPS)
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().numpy().tobytes())
        digests = D.all_gather_objects(h.hexdigest())
        if rank == 0:
            with open(out_file, "w") as f:
                json.dump({"digests": digests, "losses": [r["loss"] for r in rows], "steps": [r["step"] for r in rows],
                           "grad_norms": [r["grad_norm"] for r in rows]}, f)
        D.barrier()
        done = True
    finally:
        if world > 1:
            if done:  # as the demo's workers: skip gloo's teardown once the work is done
                os._exit(0)
            D.shutdown(clean=False)


def test_two_process_sft_is_the_one_process_micro_batched_step_bit_for_bit(tiny, tmp_path):
    """Each rank back-propagates one micro-batch of 4 of every batch of 8; the all-reduce adds the
    two gradients, as one process accumulating them does. Both sides run in fresh 1-thread
    processes (the same kernels), so the weights must agree exactly; the plain 8-episode step
    (no micro-batches) sums in another order and is the control that the comparison can fail."""
    import torch.multiprocessing as mp

    path, _ = tiny
    results = {}
    for name, world, micro in (("one", 1, 4), ("two", 2, 4), ("whole", 1, None)):
        out = tmp_path / f"{name}.json"
        mp.spawn(_sft_worker, args=(world, str(tmp_path / f"init_{name}"), str(path), str(out), micro), nprocs=world,
                 join=True)
        results[name] = json.loads(out.read_text())
    one, two, whole = results["one"], results["two"], results["whole"]
    assert len(set(two["digests"])) == 1  # both ranks hold the same weights
    assert two["digests"][0] == one["digests"][0]
    assert two["grad_norms"] == one["grad_norms"] and len(one["grad_norms"]) == SFT_STEPS["steps"]
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-6)  # (a sum of two floats in another order)
    assert whole["digests"][0] != one["digests"][0]
    assert whole["losses"] == pytest.approx(one["losses"], rel=1e-3)  # the same training, other rounding


def test_two_process_quick_demo_end_to_end(tmp_path, capsys):
    """``make demo``'s path: main() spawns the 2 workers; rank 0 writes every file once."""
    from ragen_envs.starpo.demo import QUICK, main

    assert QUICK["processes"] == 2
    assert main(["--quick", "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "2 processes, 1 torch thread(s) each" in out
    report = json.loads((tmp_path / "d" / "demo.json").read_text())
    assert report["processes"] == 2 and report["torch_threads"] == 1
    assert [c["step"] for c in report["sft_run"]["validation"]] == [4, 7]
    assert report["over_streams"]["streams"] == len(QUICK["eval_streams"])
    assert len((tmp_path / "d" / "episodes.jsonl").read_text().splitlines()) == QUICK["eval_episodes"]
    assert len((tmp_path / "d" / "sft" / "sft_validation.jsonl").read_text().splitlines()) == 2  # not once per rank
    assert (tmp_path / "d" / "starpo" / "model" / "config.json").exists()


def test_a_failing_demo_process_ends_the_demo_in_one_line(tmp_path, capsys):
    from ragen_envs.starpo.demo import QUICK, run_processes

    bad = {**QUICK, "sft": {**QUICK["sft"], "lr_schedule": "bogus"}}
    assert run_processes(tmp_path / "d", bad, 2, 1) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: a demo process failed: ValueError: unknown lr schedule 'bogus'")


def test_the_demo_refuses_a_process_count_below_one(capsys):
    from ragen_envs.starpo.demo import main

    assert main(["--processes", "0", "--quick"]) == 2
    assert "--processes must be >= 1" in capsys.readouterr().err


def test_with_processes_shares_every_sft_step_and_check_between_the_ranks(capsys):
    from ragen_envs.starpo.demo import DEMO, QUICK, main, with_processes

    four = with_processes(DEMO, 4)
    assert four["processes"] == 4 and four["sft"]["micro_batch_size"] == DEMO["sft"]["batch_size"] // 4
    assert four["sft"]["validation_parts"] == 4 and four["rl"] == DEMO["rl"]
    one = with_processes({**QUICK, "processes": 2}, 1)  # one process keeps the multi-process SFT settings
    assert one["processes"] == 1 and one["sft"] == QUICK["sft"]
    with pytest.raises(ValueError, match="must divide"):
        with_processes(DEMO, 3)
    assert main(["--processes", "3", "--quick"]) == 2
    assert "--processes: 3 processes must divide the SFT batch of 8" in capsys.readouterr().err


def test_a_time_budget_ends_every_rank_at_the_same_step(tiny, tmp_path):
    """Rank 0's clock decides: with a budget rank 0 has spent after one step and a rank 1 whose
    clock stands still, both stop after step 0 (a rank left in the next all-reduce would wait
    forever: the test gives up after 120 s)."""
    import time

    import torch.multiprocessing as mp

    path, _ = tiny
    out = tmp_path / "budget.json"
    ctx = mp.start_processes(_sft_worker, args=(2, str(tmp_path / "init"), str(path), str(out), 4,
                                                {"time_budget_s": 0.0, "frozen_clock_rank": 1}),
                             nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + 120
    try:
        while not ctx.join(timeout=1):
            assert time.monotonic() < deadline, "a rank is stuck: the ranks stopped at different steps"
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.terminate()
    res = json.loads(out.read_text())
    assert res["steps"] == [0] and len(set(res["digests"])) == 1
