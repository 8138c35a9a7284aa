"""Weight averaging of checkpoints (``average_last``, :func:`average_state_dicts`,
:func:`average_actors`): the formula on hand-computed values, the refusals, and a run whose
``model_avg`` holds the mean of its last step checkpoints' actors."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.starpo import checkpoint as C  # noqa: E402
from ragen_envs.starpo.config import make_config  # noqa: E402

TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64}


def test_average_of_three_states_by_hand():
    a = {"w": torch.tensor([1.0, 2.0]), "pos": torch.tensor([0, 1])}
    b = {"w": torch.tensor([2.0, 4.0]), "pos": torch.tensor([0, 1])}
    c = {"w": torch.tensor([6.0, 0.0]), "pos": torch.tensor([0, 1])}
    avg = C.average_state_dicts(iter([a, b, c]))  # a generator works: one state at a time
    assert avg["w"].tolist() == [3.0, 2.0] and avg["w"].dtype == torch.float32  # (1+2+6)/3, (2+4+0)/3
    assert avg["pos"].tolist() == [0, 1] and avg["pos"].dtype == torch.int64


def test_average_sums_in_float64_before_casting_back():
    # in float32, 1e8 + 1 rounds to 1e8, so a float32 running sum of 1e8, 1, -1e8 gives 0, not 1
    states = [{"w": torch.tensor([v], dtype=torch.float32)} for v in (1e8, 1.0, -1e8)]
    avg = C.average_state_dicts(states)["w"]
    assert avg.item() == pytest.approx(1 / 3, rel=1e-7)
    assert avg.dtype == torch.float32
    half = C.average_state_dicts([{"w": torch.tensor([1.0], dtype=torch.bfloat16)}, {"w": torch.tensor([2.0], dtype=torch.bfloat16)}])
    assert half["w"].dtype == torch.bfloat16 and half["w"].item() == 1.5


@pytest.mark.parametrize("other,message", [
    ({"w": torch.zeros(2), "extra": torch.zeros(1)}, "different tensors"),
    ({"w": torch.zeros(3)}, r"is \(3,\)"),
    ({"w": torch.zeros(2, dtype=torch.float64)}, "torch.float64"),
])
def test_mismatched_states_are_refused_by_name(other, message):
    with pytest.raises(ValueError, match=message):
        C.average_state_dicts([{"w": torch.zeros(2)}, other])


def test_unequal_integer_buffers_and_no_states_are_refused():
    with pytest.raises(ValueError, match="non-float tensor 'ids' differs"):
        C.average_state_dicts([{"ids": torch.tensor([0, 1])}, {"ids": torch.tensor([0, 2])}])
    with pytest.raises(ValueError, match="at least one"):
        C.average_state_dicts([])


def test_average_actors_writes_a_loadable_model_with_the_mean_weights(tmp_path):
    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.policy import load_policy

    dirs = []
    for k in range(2):
        d = build_tiny_checkpoint(tmp_path / f"m{k}", seed=k, **TINY)
        dirs.append(d)
    dest = C.average_actors(dirs, tmp_path / "avg")
    got, m0, m1 = (load_policy(p).state_dict() for p in (dest, *dirs))
    for name, t in got.items():
        torch.testing.assert_close(t, ((m0[name].double() + m1[name].double()) / 2).float(), rtol=0, atol=0)
    assert (dest / "tokenizer.json").exists() and not (tmp_path / "avg.tmp").exists()
    with pytest.raises(C.CheckpointError, match="not a model directory"):
        C.average_actors([tmp_path], tmp_path / "bad")


@pytest.mark.parametrize("kw,message", [
    ({"average_last": 3, "keep_checkpoints": 2}, "keep_checkpoints >= 3"),
    ({"average_last": 2, "keep_checkpoints": 2, "save_every": 0}, "save_every > 0"),
    ({"average_last": -1}, "average_last must be an integer >= 0"),
    ({"average_last": 2, "keep_checkpoints": 2, "sharding": "fsdp"}, "full-weight checkpoints"),
])
def test_config_refuses_an_average_it_could_not_make(kw, message):
    with pytest.raises(ValueError, match=message):
        make_config("starpo-s", **kw)


def test_a_run_writes_model_avg_from_its_last_checkpoints(tmp_path):
    from ragen_envs.models import build_tiny_checkpoint
    from ragen_envs.starpo.policy import load_policy
    from ragen_envs.starpo.trainer import StarPOTrainer

    model = build_tiny_checkpoint(tmp_path / "m", **TINY)
    lines = []
    cfg = make_config("starpo-s", out_dir=str(tmp_path / "run"), model=str(model), steps=3, num_groups=2, group_size=4,
                      max_new_tokens=8, eval_every=0, probe_every=0, mini_batch_size=4, micro_batch_size=4,
                      actor_lr=1e-2, critic_lr=1e-3, log_samples=0, plots=False, tiny_model=TINY,
                      save_every=1, keep_checkpoints=3, average_last=2)
    StarPOTrainer(cfg, log=lines.append).train()
    run = tmp_path / "run"
    s2, s3 = (load_policy(run / "checkpoints" / f"step_00000{k}" / "actor").state_dict() for k in (2, 3))
    avg = load_policy(run / "model_avg").state_dict()
    assert any(not torch.equal(s2[n], s3[n]) for n in s2)  # the steps moved the weights: the test can fail
    for name in avg:
        torch.testing.assert_close(avg[name], ((s2[name].double() + s3[name].double()) / 2).float(), rtol=0, atol=0)
    assert (run / "model_avg" / "ragen_protocol.json").exists()  # loadable as hf:run/model_avg
    assert any(line.startswith("model_avg: the average of the actors at steps 2, 3") for line in lines)
