"""The shared token-sampling engine (:mod:`ragen_envs.lm.engine`): padding, the top-p nucleus,
per-row settings and generators, and the running batch that rows join and leave."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ragen_envs.lm.engine import RunningBatch, _nucleus, draw_rows, draw_tokens, left_pad  # noqa: E402


def test_left_pad_right_aligns_each_sequence():
    ids, mask = left_pad([[5, 6], [7]], pad=0)
    assert ids.tolist() == [[5, 6], [0, 7]] and mask.tolist() == [[1, 1], [0, 1]]


def test_the_nucleus_keeps_the_token_that_crosses_top_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert torch.allclose(_nucleus(probs, 0.7), torch.tensor([[0.5, 0.3, 0.0, 0.0]]))
    exact = torch.tensor([[0.125, 0.5, 0.125, 0.25]])  # binary fractions: the sums are exact
    # mass before 0.125 (the third in order) is 0.75, not above 0.75: kept; the last one's is 0.875: dropped
    kept = _nucleus(exact, 0.75)
    assert sorted(kept[0].tolist()) == [0.0, 0.125, 0.25, 0.5] and kept[0, 1] == 0.5 and kept[0, 3] == 0.25


def test_per_row_settings_draw_as_the_scalar_path_does():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1))
    scalar = draw_tokens(logits, 0.7, 0.9, torch.Generator().manual_seed(4))
    rows = draw_tokens(logits, torch.full((6, 1), 0.7), torch.full((6, 1), 0.9), torch.Generator().manual_seed(4))
    assert scalar.tolist() == rows.tolist()
    assert draw_tokens(logits, 0.0, 1.0, None).tolist() == logits.argmax(-1).tolist()


def test_a_row_with_its_own_generator_draws_the_same_alone_or_in_a_batch():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(2))
    shared = torch.Generator().manual_seed(9)
    alone = draw_rows(logits[2:3], [0.8], [0.95], [torch.Generator().manual_seed(3)])
    mixed = draw_rows(logits, [1.0, 0.0, 0.8, 1.3, 0.5], [1.0, 1.0, 0.95, 0.5, 1.0],
                      [shared, shared, torch.Generator().manual_seed(3), shared, shared])
    assert mixed[2] == alone[0]
    assert mixed[1] == int(logits[1].argmax())  # temperature 0: greedy


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from ragen_envs.models import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path_factory.mktemp("engine") / "tiny")
    return AutoModelForCausalLM.from_pretrained(path).eval()


@torch.no_grad()
def test_a_joining_row_gets_the_logits_it_gets_alone_and_leavers_free_their_columns(tiny):
    a, b, c = [5, 6, 7], [8, 9, 10, 11, 12], [13, 14]
    solo = RunningBatch(tiny, 0, "cpu")
    solo.admit([c], ["c"])
    want = [solo.logits[0].clone()]
    solo.step([3])
    want.append(solo.logits[0].clone())

    batch = RunningBatch(tiny, 0, "cpu")
    batch.admit([a, b], ["a", "b"])
    assert batch.width == 5
    batch.step([1, 2])
    batch.step([1, 2])
    assert batch.width == 7
    batch.admit([c], ["c"])  # joins two rows that have decoded for two steps
    assert batch.rows == ["a", "b", "c"] and batch.width == 7
    assert torch.allclose(batch.logits[2], want[0], atol=1e-5)
    batch.step([1, 2, 3])
    assert torch.allclose(batch.logits[2], want[1], atol=1e-5)
    batch.keep([2])  # a and b leave: c's 3 real tokens are all that is left
    assert batch.rows == ["c"] and batch.width == 3 and batch.next_pos.tolist() == [3]
    batch.keep([])
    assert len(batch) == 0 and batch.cache is None
