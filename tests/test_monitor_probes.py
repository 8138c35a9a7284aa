"""The MI proxy and H(Z|X) probes (ragen_envs/starpo/probes.py) on hand-worked numbers."""

import math

import pytest

from ragen_envs.starpo.probes import cond_entropy, distinct_prompts, logsumexp, mi_proxy

# p(z_i | x'_j) for 3 replies under 3 prompts; reply i was sampled under prompt i
P = [[0.5, 0.25, 0.25],
     [0.1, 0.2, 0.3],
     [0.2, 0.2, 0.2]]
L = [[math.log(p) for p in row] for row in P]


def test_mi_proxy_on_a_3x3_matrix_worked_by_hand():
    out = mi_proxy(L, own=[0, 1, 2])
    # reply 0: log 0.5 - log((0.5 + 0.25 + 0.25) / 3) = log 1.5; replies 1, 2: log 0.2 - log 0.2 = 0
    assert out["mi"] == pytest.approx(math.log(1.5) / 3)
    # retrieval: row 0 argmax is its own prompt (1), row 1's argmax is prompt 2 (0),
    # row 2 is a three-way tie that includes its own prompt (1/3)
    assert out["retrieval"] == pytest.approx((1 + 0 + 1 / 3) / 3)
    assert out["mi_max"] == pytest.approx(math.log(3))


def test_mi_proxy_weights_the_mixture_by_how_often_each_prompt_occurs():
    out = mi_proxy(L, own=[0, 1, 2], weights=[2, 1, 1])  # normalised to 0.5 / 0.25 / 0.25
    # reply 0: 0.5 / (0.5*0.5 + 0.25*0.25 + 0.25*0.25) = 0.5 / 0.375 = 4/3
    # reply 1: 0.2 / (0.5*0.1 + 0.25*0.2 + 0.25*0.3) = 0.2 / 0.175 = 8/7; reply 2: 0.2 / 0.2 = 1
    assert out["mi"] == pytest.approx((math.log(4 / 3) + math.log(8 / 7)) / 3)
    assert out["mi_max"] == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(4))


def test_replies_that_ignore_the_state_carry_no_information():
    same = [[math.log(0.3)] * 3 for _ in range(3)]
    out = mi_proxy(same, own=[0, 1, 2])
    assert out["mi"] == pytest.approx(0.0) and out["retrieval"] == pytest.approx(1 / 3)
    one = mi_proxy([[-2.0], [-1.0]], own=[0, 0])  # one distinct prompt: I = 0 by construction
    assert one["mi"] == 0.0 and one["mi_max"] == 0.0


def test_cond_entropy_per_reply_and_per_token():
    own = [math.log(0.5), math.log(0.2), math.log(0.2)]
    out = cond_entropy(own, lengths=[2, 3, 5])
    assert out["per_reply"] == pytest.approx((math.log(2) + 2 * math.log(5)) / 3)
    assert out["per_token"] == pytest.approx((math.log(2) + 2 * math.log(5)) / 10)
    assert math.isnan(cond_entropy([])["per_reply"]) and math.isnan(cond_entropy([-1.0])["per_token"])


def test_distinct_prompts_and_logsumexp():
    uniq, index, weights = distinct_prompts([[1, 2], [3], [1, 2], [1, 2]])
    assert uniq == [[1, 2], [3]] and index == [0, 1, 0, 0] and weights == [0.75, 0.25]
    assert distinct_prompts([]) == ([], [], [])
    assert logsumexp([math.log(1), math.log(3)]) == pytest.approx(math.log(4))
    assert logsumexp([]) == -math.inf and logsumexp([-math.inf, -math.inf]) == -math.inf


def test_bad_input_is_a_one_line_error():
    with pytest.raises(ValueError, match="rows but own"):
        mi_proxy(L, own=[0, 1])
    with pytest.raises(ValueError, match="rectangular"):
        mi_proxy([[0.0, 1.0], [0.0]], own=[0, 0])
    with pytest.raises(ValueError, match="out of range"):
        mi_proxy(L, own=[0, 1, 3])
    with pytest.raises(ValueError, match="weights"):
        mi_proxy(L, own=[0, 1, 2], weights=[1, -1, 1])
    with pytest.raises(ValueError, match="lengths"):
        cond_entropy([-1.0], lengths=[1, 2])
    assert math.isnan(mi_proxy([], own=[])["mi"])


@pytest.mark.slow  # ~30 s alone (the transformers import); the trainer's probe runs it in test_echo_trap's smoke run
def test_cross_score_matches_one_pair_at_a_time():
    """The batched cross-scoring gives each (reply, prompt) pair the log-prob it has alone."""
    import torch

    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ragen_envs.starpo.policy import sequence_logprobs
    from ragen_envs.starpo.probes import cross_score

    # any weights will do: the check is batched vs alone, not a value
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=2, intermediate_size=32)).eval()
    prompts = [[5, 6, 7, 8], [9, 10]]
    replies = [[11, 12, 13], [14], [15, 16]]
    L, E = cross_score(model, prompts, replies, pad_id=0, temperature=0.7, batch_size=4)
    for i, r in enumerate(replies):
        for j, p in enumerate(prompts):
            ids = torch.tensor([p + r])
            msk = torch.tensor([[0] * len(p) + [1] * len(r)])
            with torch.no_grad():
                lp, _ = sequence_logprobs(model, ids, torch.ones_like(ids), msk, temperature=0.7)
            assert L[i][j] == pytest.approx(float(lp.sum()), abs=1e-5)
    assert all(e > 0 for row in E for e in row)
