"""Token-in/token-out rollouts keep the protocol: loss masks, template increments, and the
recorded rewards / penalties / counts / episode ends equal a direct replay through the env.
Uses the tiny byte-level BPE tokenizer (a character tokenizer would hide re-tokenisation bugs)."""

from __future__ import annotations

import os

import pytest

# Idle OpenMP threads sleep instead of spinning (only effective if torch is not loaded yet):
# on a shared CPU, spinning threads of several torch processes slow each other down ~10x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ragen_envs  # noqa: E402
from ragen_envs.starpo.policy import ChatFormat, load_policy, load_tokenizer, sample_replies  # noqa: E402
from ragen_envs.starpo.rollout import ModelResponder, ScriptedResponder, collect_rollouts  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from ragen_envs.models import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), hidden_size=32, num_layers=1, intermediate_size=64)
    return load_tokenizer(path), load_policy(path)


class ListResponder:
    """Replies with fixed token ids per turn (the same for every live trajectory)."""

    def __init__(self, turns_ids):
        self.turns_ids, self.k = turns_ids, 0

    def __call__(self, prompts, envs):
        ids = self.turns_ids[min(self.k, len(self.turns_ids) - 1)]
        self.k += 1
        return [(list(ids), True) for _ in prompts]


def test_two_turn_trajectory_mask_template_and_rewards(tiny):
    tok, _ = tiny
    fmt = ChatFormat(tok, "<think>")
    replies = ["<think>down first</think><answer>Down</answer>", "<think>then</think><answer>Left || Up</answer>"]
    it = iter(replies)
    traj = collect_rollouts("ragen/Sokoban-v0", 123, 1, 1, ScriptedResponder(fmt, lambda env, ids: next(it)), fmt)[0]
    reply_ids = [fmt.encode(r[len("<think>"):]) + [fmt.eot_id] for r in replies]
    # the loss mask is 1 exactly on the replies' ids, end-of-turn token included
    spans = traj.reply_token_spans()
    assert [traj.token_ids[a:b] for a, b in spans] == reply_ids
    assert sum(traj.loss_mask) == sum(len(r) for r in reply_ids)
    assert traj.turn_ends == [b - 1 for _, b in spans]
    assert all(traj.token_ids[e] == fmt.eot_id for e in traj.turn_ends)
    # the whole sequence is the chat template of the conversation (nothing re-tokenized)
    ep = traj.episode
    messages = [{"role": "system", "content": ep.system_prompt}]
    for turn in ep.turns:
        messages += [{"role": "user", "content": turn.observation}, {"role": "assistant", "content": turn.response}]
    rendered = tok.apply_chat_template(messages, tokenize=False)
    assert tok.decode(traj.token_ids) + "\n" == rendered
    # prompt tokens before each reply: the template prefix + the forced "<think>" (never trained)
    assert traj.token_ids[spans[0][0] - len(fmt.prefix_ids) : spans[0][0]] == fmt.prefix_ids
    # rewards, success, ends as the env gives them
    env = gym.make("ragen/Sokoban-v0")
    env.reset(seed=123)
    r1 = env.step(replies[0])
    r2 = env.step(replies[1])
    assert traj.turn_rewards == [r1[1], r2[1]]
    assert traj.success and ep.terminated and not ep.truncated
    assert [t.response for t in ep.turns] == replies


def test_sampled_ids_are_kept_even_when_not_the_canonical_tokenisation(tiny):
    """The reason for token-in/token-out: a model may sample "...f" + "t" where the tokenizer
    would write "Left"; re-tokenizing the decoded text would train on ids never sampled."""
    tok, _ = tiny
    fmt = ChatFormat(tok, "<think>")
    sampled = fmt.encode("go</think><answer>Lef") + fmt.encode("t</answer>") + [fmt.eot_id]
    canonical = fmt.encode("go</think><answer>Left</answer>") + [fmt.eot_id]
    assert sampled != canonical and tok.decode(sampled) == tok.decode(canonical)
    traj = collect_rollouts("ragen/Sokoban-v0", 123, 1, 1, ListResponder([sampled]), fmt)[0]
    a, b = traj.reply_token_spans()[0]
    assert traj.token_ids[a:b] == sampled
    assert traj.episode.turns[0].response == "<think>go</think><answer>Left</answer>"
    assert traj.episode.turns[0].info["actions"] == ["Left"]


@st.composite
def _reply(draw, vocab_size):
    kind = draw(st.sampled_from(["answer", "garbage", "ids"]))
    if kind == "answer":
        words = draw(st.lists(st.sampled_from(["Up", "down", "LEFT", "Right", "jump", "up.", ""]), max_size=7))
        return "text", "<think>" + draw(st.text("abc <>/", max_size=8)) + "</think><answer>" + " || ".join(words) + "</answer>"
    if kind == "garbage":
        return "text", "<think>" + draw(st.text(max_size=30))
    return "ids", draw(st.lists(st.integers(0, vocab_size - 1), min_size=1, max_size=12))


class MixedResponder:
    def __init__(self, fmt, draws):
        self.fmt, self.draws, self.k = fmt, draws, 0

    def __call__(self, prompts, envs):
        out = []
        for _ in prompts:
            kind, value = self.draws[self.k % len(self.draws)]
            self.k += 1
            if kind == "text":
                out.append((self.fmt.encode(value[len(self.fmt.prefix):]) + [self.fmt.eot_id], True))
            else:  # arbitrary sampled ids, possibly special tokens, possibly cut at the length limit
                ids = [i for i in value if i != self.fmt.eot_id] or [5]
                out.append((ids, False))
        return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_recorded_episodes_equal_direct_env_replay(tiny, data):
    tok, _ = tiny
    env_id = data.draw(st.sampled_from(["ragen/Sokoban-v0", "ragen/FrozenLake-v0", "ragen/Bandit-v0"]))
    shared = data.draw(st.booleans())
    seed = data.draw(st.integers(0, 10_000))
    draws = data.draw(st.lists(_reply(len(tok)), min_size=1, max_size=12))
    fmt = ChatFormat(tok, "<think>")
    trajs = collect_rollouts(env_id, seed, 2, 2, MixedResponder(fmt, draws), fmt, shared_noise=shared)
    for t in trajs:
        ep = t.episode
        # loss mask = exactly the reply ids (+ nothing else); one span per turn
        spans = t.reply_token_spans()
        assert len(spans) == len(ep.turns) == len(t.turn_rewards) == len(t.turn_ends)
        for (a, b), turn, end in zip(spans, ep.turns, t.turn_ends):
            ids = t.token_ids[a:b]
            body = ids[:-1] if ids[-1] == fmt.eot_id else ids
            assert turn.response == "<think>" + tok.decode(body, skip_special_tokens=False)
            assert end == b - 1
        # direct replay through the env gives the same rewards, penalties, counts and ends
        env = gym.make(env_id)
        opts = None if ep.noise_seed is None else {"noise_seed": ep.noise_seed}
        env.reset(seed=ep.seed, options=opts)
        assert ep.seed == seed + t.group
        for k, turn in enumerate(ep.turns):
            _, reward, term, trunc, info = env.step(turn.response)
            assert reward == t.turn_rewards[k] == turn.reward
            for key in ("format_penalty", "game_reward", "n_executed", "n_valid", "success", "actions", "reasoning"):
                assert info[key] == turn.info[key], key
            last = k == len(ep.turns) - 1
            assert (term or trunc) == last
        assert (ep.terminated, ep.truncated) == (term, trunc)
        env.close()


def test_shared_noise_groups_share_the_stream(tiny):
    tok, _ = tiny
    fmt = ChatFormat(tok, "<think>")
    reply = "<think>x</think><answer>Down || Right || Down || Right || Up</answer>"
    same = collect_rollouts("ragen/FrozenLake-v0", 7, 1, 4, ScriptedResponder(fmt, lambda e, i: reply), fmt, shared_noise=True)
    assert len({tuple(tuple(tu.info["position"]) for tu in t.episode.turns) for t in same}) == 1
    assert all(t.episode.noise_seed is None for t in same)
    indep = collect_rollouts("ragen/FrozenLake-v0", 7, 1, 4, ScriptedResponder(fmt, lambda e, i: reply), fmt, shared_noise=False)
    assert len({t.episode.noise_seed for t in indep}) == 4


def test_model_sampling_is_seeded_and_truncation_is_closed(tiny):
    tok, model = tiny
    fmt = ChatFormat(tok, "<think>")
    prompts = [fmt.first("sys", "Turn 1: hello"), fmt.first("sys", "Turn 1: a longer prompt here")]
    a = sample_replies(model, prompts, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=6, temperature=1.0,
                       generator=torch.Generator().manual_seed(3))
    b = sample_replies(model, prompts, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=6, temperature=1.0,
                       generator=torch.Generator().manual_seed(3))
    assert a == b
    assert all(len(ids) <= 6 and (stopped == (ids[-1] == fmt.eot_id)) for ids, stopped in a)
    gen = torch.Generator().manual_seed(0)
    trajs = collect_rollouts("ragen/Sokoban-v0", 5, 1, 2, ModelResponder(model, fmt, tok.pad_token_id, 4, 1.0, gen), fmt)
    for t in trajs:
        for (a_, b_), end in zip(t.reply_token_spans(), t.turn_ends):
            assert end == b_ - 1
            if t.token_ids[end] != fmt.eot_id:  # cut at the limit: an unsampled eot closes the turn
                assert t.token_ids[b_] == fmt.eot_id and t.loss_mask[b_] == 0
        assert t.truncated_replies == sum(t.token_ids[e] != fmt.eot_id for e in t.turn_ends)


def test_chat_format_rejects_templates_that_rewrite_history(tiny):
    tok, _ = tiny
    fmt = ChatFormat(tok, "")
    original = tok.chat_template
    try:
        # a template that drops earlier assistant turns (as some reasoning-model templates do)
        tok.chat_template = (
            "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
            "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
        )
        msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
                {"role": "assistant", "content": "d"}]
        with pytest.raises(ValueError, match="append-only"):
            fmt.append(msgs, "e")
    finally:
        tok.chat_template = original
    with pytest.raises(ValueError, match="assistant"):
        fmt.append([{"role": "user", "content": "a"}], "b")


def test_eval_seeds_layout(tiny):
    tok, _ = tiny
    fmt = ChatFormat(tok, "<think>")
    trajs = collect_rollouts("ragen/Bandit-v0", ragen_envs.EVAL_SEEDS[0], 3, 1,
                             ScriptedResponder(fmt, lambda e, i: "<think>risk</think><answer>Dragon</answer>"), fmt)
    assert [t.episode.seed for t in trajs] == [123, 124, 125]
    assert all(t.success for t in trajs)


def test_mask_spans_by_hand():
    from ragen_envs.lm.masks import mask_spans

    assert mask_spans([0, 1, 1, 0, 1]) == [(1, 3), (4, 5)]
    assert mask_spans([]) == [] and mask_spans([0, 0]) == [] and mask_spans([1, 1]) == [(0, 2)]
