"""The SFT curriculum: the first steps on each episode's first turns (``first_turns``,
``train_sft(curriculum_turns=, curriculum_steps=)``)."""

import pytest
import torch

from ragen_envs.starpo.rollout import Trajectory
from ragen_envs.starpo.sft import first_turns, train_sft

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
