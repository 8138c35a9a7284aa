"""The multi-turn KV-cache sampler (ragen_envs/starpo/sampler.py): same tokens as HF
``generate`` at temperature 0, same tokens as a no-cache recompute over whole multi-turn
rollouts, the same sampled distribution as ``generate`` at temperature 1 / top-p, only the
new tokens prefilled each turn, and valid trajectories through ``collect_rollouts``."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ragen_envs.starpo.policy import ChatFormat, common_prefix_length, load_policy, load_tokenizer
from ragen_envs.lm.sampling import draw_tokens as _draw  # noqa: E402
from ragen_envs.starpo.policy import MIN_SHARED_PREFIX  # noqa: E402
from ragen_envs.starpo.rollout import collect_rollouts  # noqa: E402
from ragen_envs.starpo.sampler import CachedResponder, MultiTurnSampler  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny model with sharper logits (final norm x 8) and an end-of-turn token it
    actually samples (its output row x 5), so replies stop at different lengths."""
    from ragen_envs.models import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), hidden_size=32, num_layers=2, intermediate_size=64)
    tok = load_tokenizer(path)
    fmt = ChatFormat(tok, "<think>")
    model = load_policy(path)
    with torch.no_grad():
        model.model.norm.weight.mul_(8.0)
        model.get_output_embeddings().weight[fmt.eot_id] *= 5.0
    return tok, fmt, model


def _left_pad(prompts, pad):
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad, dtype=torch.long)
    att = torch.zeros((len(prompts), T), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):] = torch.tensor(p)
        att[i, T - len(p):] = 1
    return ids, att


def _hf_generate(model, prompts, pad, eos, max_new_tokens, **kw):
    ids, att = _left_pad(prompts, pad)
    out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new_tokens, eos_token_id=eos,
                         pad_token_id=pad, top_k=0, **kw)
    rows = []
    for r in out[:, ids.shape[1]:].tolist():
        row = []
        for t in r:
            row.append(t)
            if t == eos:
                break
        rows.append(row)
    return rows


def test_greedy_equals_hf_generate(tiny):
    tok, fmt, model = tiny
    prompts = [fmt.first("You are a solver.", f"Turn 1:\nState:\n#_O{'X' * k}\nDo it") for k in range(5)]
    prompts.append(fmt.encode("short prompt"))
    # stop on a token the greedy replies really produce, so rows stop at different steps
    probe = _hf_generate(model, prompts, tok.pad_token_id, -1, 10, do_sample=False)
    stop = probe[0][4]
    ref = _hf_generate(model, prompts, tok.pad_token_id, stop, 10, do_sample=False)
    assert len({len(r) for r in ref}) > 1  # some rows stop early, some run to the limit
    s = MultiTurnSampler(model, eot_id=stop, pad_id=tok.pad_token_id, max_new_tokens=10, temperature=0.0,
                         generator=torch.Generator().manual_seed(0))
    got = s.generate(prompts)
    assert [ids for ids, _ in got] == ref
    assert [stopped for _, stopped in got] == [r[-1] == stop for r in ref]
    # each prompt one by one (no batching, no shared prefix) gives the same
    for p, r in zip(prompts, ref):
        s1 = MultiTurnSampler(model, eot_id=stop, pad_id=tok.pad_token_id, max_new_tokens=10, temperature=0.0,
                              generator=torch.Generator())
        assert s1.generate([p])[0][0] == r


class NoCacheResponder:
    """The reference: every token of every turn recomputed from the whole sequence (no KV
    cache, one row at a time), drawing with the sampler's ``_draw`` on the same live rows in
    the same order, so the generator is consumed identically."""

    def __init__(self, model, eot_id, max_new_tokens, temperature, generator, batch_size=None):
        self.model, self.eot_id, self.max_new_tokens = model, eot_id, max_new_tokens
        self.temperature, self.generator, self.batch_size = temperature, generator, batch_size

    @torch.no_grad()
    def __call__(self, prompts, envs):
        out = []
        step = self.batch_size or len(prompts)
        for start in range(0, len(prompts), step):
            out += self._batch([list(p) for p in prompts[start:start + step]])
        return out

    def _batch(self, prompts):
        replies = [[] for _ in prompts]
        stopped = [False] * len(prompts)
        live = list(range(len(prompts)))
        for k in range(self.max_new_tokens):
            logits = torch.stack([self.model(input_ids=torch.tensor([prompts[i] + replies[i]])).logits[0, -1]
                                  for i in live])
            tok = _draw(logits.float(), self.temperature, 1.0, self.generator)
            still = []
            for r, i in enumerate(live):
                replies[i].append(int(tok[r]))
                if int(tok[r]) == self.eot_id:
                    stopped[i] = True
                elif k < self.max_new_tokens - 1:
                    still.append(i)
            live = still
            if not live:
                break
        return list(zip(replies, stopped))


@pytest.mark.parametrize("temperature,batch_size", [(0.0, None), (1.0, None), (1.0, 3)])
def test_multiturn_rollouts_equal_no_cache_recompute(tiny, temperature, batch_size):
    tok, fmt, model = tiny
    kw = dict(shared_noise=True)
    cached = CachedResponder(model, fmt, tok.pad_token_id, 12, temperature, torch.Generator().manual_seed(7),
                             batch_size=batch_size)
    a = collect_rollouts("ragen/Sokoban-v0", 40, 2, 3, cached, fmt, **kw)
    ref = NoCacheResponder(model, fmt.eot_id, 12, temperature, torch.Generator().manual_seed(7), batch_size)
    b = collect_rollouts("ragen/Sokoban-v0", 40, 2, 3, ref, fmt, **kw)
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    assert [t.loss_mask for t in a] == [t.loss_mask for t in b]
    assert sum(len(t.episode.turns) for t in a) > len(a)  # really multi-turn
    if temperature > 0:
        assert any(t.truncated_replies < len(t.episode.turns) for t in a)  # some replies stop on eot

    # every token was fed to the model exactly once: the shared prefix once, then per
    # trajectory everything up to (not including) its last sampled token
    st = cached.sampler.stats
    firsts = [t.token_ids[: t.reply_token_spans()[0][0]] for t in a]
    P = common_prefix_length(firsts)
    P = P if P >= MIN_SHARED_PREFIX else 0
    fed = 0
    for t in a:
        last_reply_end = t.turn_ends[-1]  # index of the last sampled token
        fed += last_reply_end - P
    n_replies = sum(len(t.episode.turns) for t in a)
    assert st["generated_tokens"] == sum(t.num_reply_tokens for t in a)
    assert st["prefill_tokens"] + st["generated_tokens"] - n_replies == P + fed
    assert st["reused_tokens"] > 0
    assert cached.sampler.cached_trajectories == 0 or cached.sampler.cached_trajectories <= len(a)


@pytest.mark.parametrize("mode,k", [("limited_multi_turn", 2), ("limited_multi_turn", 1), ("single_turn", 2),
                                    ("single_turn", -1)])
def test_windowed_rollouts_equal_no_cache_recompute(tiny, mode, k):
    """context_window_mode: a turn's prompt is no longer the last one extended, so the
    sampler must not reuse a cache that does not match it: the same tokens as recomputing
    every token from the whole prompt (the same generator draws)."""
    tok, fmt, model = tiny
    kw = dict(env_kwargs={"max_turns": 3}, context_window_mode=mode, max_context_window=k)
    cached = CachedResponder(model, fmt, tok.pad_token_id, 8, 1.0, torch.Generator().manual_seed(11))
    a = collect_rollouts("ragen/Sokoban-v0", 40, 1, 3, cached, fmt, **kw)
    ref = NoCacheResponder(model, fmt.eot_id, 8, 1.0, torch.Generator().manual_seed(11))
    b = collect_rollouts("ragen/Sokoban-v0", 40, 1, 3, ref, fmt, **kw)
    assert [t.turn_prompts for t in a] == [t.turn_prompts for t in b]
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    assert all(len(t.turn_prompts) == len(t.episode.turns) >= 3 for t in a)  # really multi-turn
    # the windows really differ from the growing sequence after the first turns
    assert all(t.turn_prompts[2] != t.token_ids[: t.reply_token_spans()[2][0]] for t in a)
    if mode == "limited_multi_turn" and k == 2:
        assert cached.sampler.stats["reused_tokens"] > 0  # turn 2 still extends turn 1's sequence


def test_finished_trajectories_leave_the_cache_and_prompts_may_reorder(tiny):
    tok, fmt, model = tiny
    s = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=5, temperature=1.0,
                         generator=torch.Generator().manual_seed(1))
    prompts = [fmt.first("sys", f"Turn 1: state {k}") for k in range(4)]
    r1 = s.generate(prompts)
    assert s.cached_trajectories == 4
    nxt = [p + ids + ([] if stop else [fmt.eot_id]) + fmt.encode("more") for p, (ids, stop) in zip(prompts, r1)]
    # trajectory 1 ended, the others come back in another order
    order = [3, 0, 2]
    before = dict(s.stats)
    r2 = s.generate([nxt[i] for i in order])
    assert s.cached_trajectories == 3
    new_tokens = sum(len(nxt[i]) - (len(prompts[i]) + len(r1[i][0]) - 1) for i in order)
    assert s.stats["prefill_tokens"] - before["prefill_tokens"] == new_tokens
    # the same as a fresh sampler without any cache, generator in the same state
    fresh = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=5, temperature=0.0,
                             generator=torch.Generator())
    greedy_cached = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=5,
                                     temperature=0.0, generator=torch.Generator())
    first = greedy_cached.generate(prompts)
    # cached rows, a brand-new prompt and a prompt exactly equal to a cached history (its
    # cache is trimmed by one token to get the last logits), in one batch
    exact = prompts[1] + first[1][0][:-1]
    assert len(exact) > len(prompts[1])
    mixed = [nxt[i] for i in order] + [fmt.first("sys", "Turn 1: a new one"), exact]
    before = dict(greedy_cached.stats)
    assert greedy_cached.generate(mixed) == fresh.generate(mixed)
    # only `exact` finds a cache (the others were sampled at T=1, not greedily): it reuses
    # all but its last token; the new prompts share their common prefix once
    news = mixed[:-1]
    P = common_prefix_length(news)
    P = P if P >= MIN_SHARED_PREFIX else 0
    reused = greedy_cached.stats["reused_tokens"] - before["reused_tokens"]
    prefilled = greedy_cached.stats["prefill_tokens"] - before["prefill_tokens"]
    assert reused == len(exact) - 1 + P * len(news)
    assert prefilled + reused == sum(len(m) for m in mixed) + P
    assert len(r2) == 3 and all(1 <= len(ids) <= 5 for ids, _ in r2)


# ----------------------------------------------------------------------------- statistics
def _chi2_two_sample(a: torch.Tensor, b: torch.Tensor, min_count: int = 20) -> tuple[float, int]:
    """Two-sample chi-square statistic of two count vectors over the same categories
    (categories with a pooled count < min_count lumped together); returns (stat, dof)."""
    pooled = a + b
    big = pooled >= min_count
    ca = torch.cat([a[big], a[~big].sum().view(1)]).double()
    cb = torch.cat([b[big], b[~big].sum().view(1)]).double()
    keep = (ca + cb) > 0
    ca, cb = ca[keep], cb[keep]
    na, nb = ca.sum(), cb.sum()
    k1, k2 = math.sqrt(nb / na), math.sqrt(na / nb)
    stat = float((((k1 * ca - k2 * cb) ** 2) / (ca + cb)).sum())
    return stat, int(keep.sum()) - 1


def _critical(dof: int) -> float:
    """A generous upper bound of the chi-square quantile 1 - 1e-6 (Wilson-Hilferty)."""
    z = 4.9
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def _counts(rows, position, vocab):
    c = torch.zeros(vocab, dtype=torch.long)
    for r in rows:
        if len(r) > position:
            c[r[position]] += 1
    return c


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_distribution_matches_hf_generate(tiny, temperature, top_p):
    tok, fmt, model = tiny
    n, new = 3000, 3
    prompt = fmt.encode("<think>go down")
    s = MultiTurnSampler(model, eot_id=-1, pad_id=tok.pad_token_id, max_new_tokens=new, temperature=temperature,
                         generator=torch.Generator().manual_seed(11), top_p=top_p)
    ours = [ids for ids, _ in s.generate([prompt] * n)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(12)
        theirs = _hf_generate(model, [prompt] * n, tok.pad_token_id, -1, new, do_sample=True, temperature=temperature,
                              top_p=top_p)
    vocab = len(tok)
    for pos in range(new):
        stat, dof = _chi2_two_sample(_counts(ours, pos, vocab), _counts(theirs, pos, vocab))
        assert dof >= 3
        assert stat < _critical(dof), (pos, stat, dof)
    # the first token against the exact distribution softmax(logits / T) (top-p applied)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1].float() / temperature
    probs = torch.softmax(logits, -1)
    if top_p < 1.0:
        sp, idx = probs.sort(descending=True)
        sp = torch.where(sp.cumsum(0) - sp > top_p, torch.zeros_like(sp), sp)
        probs = torch.zeros_like(probs).scatter(0, idx, sp)
        probs = probs / probs.sum()
    expected = probs * n
    c = _counts(ours, 0, vocab).double()
    big = expected >= 5
    stat = float((((c[big] - expected[big]) ** 2) / expected[big]).sum()
                 + (c[~big].sum() - expected[~big].sum()) ** 2 / max(float(expected[~big].sum()), 1e-9))
    dof = int(big.sum())
    assert stat < _critical(dof), (stat, dof)
    assert c[~(probs > 0)].sum() == 0  # nothing outside the top-p nucleus


def test_distribution_test_detects_a_wrong_temperature(tiny):
    """The statistics test has power: sampling at 1.0 vs generate at 0.5 fails it."""
    tok, fmt, model = tiny
    prompt = fmt.encode("<think>go down")
    s = MultiTurnSampler(model, eot_id=-1, pad_id=tok.pad_token_id, max_new_tokens=1, temperature=1.0,
                         generator=torch.Generator().manual_seed(11))
    ours = [ids for ids, _ in s.generate([prompt] * 3000)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(12)
        theirs = _hf_generate(model, [prompt] * 3000, tok.pad_token_id, -1, 1, do_sample=True, temperature=0.5)
    stat, dof = _chi2_two_sample(_counts(ours, 0, len(tok)), _counts(theirs, 0, len(tok)))
    assert stat > _critical(dof)


# ----------------------------------------------------------------------------- rollouts
def test_collect_rollouts_with_the_cached_responder(tiny):
    tok, fmt, model = tiny

    def run():
        r = CachedResponder(model, fmt, tok.pad_token_id, 8, 1.0, torch.Generator().manual_seed(3))
        return collect_rollouts("ragen/FrozenLake-v0", 9, 2, 2, r, fmt)

    trajs = run()
    assert [t.token_ids for t in trajs] == [t.token_ids for t in run()]  # seeded
    for t in trajs:
        assert len(t.token_ids) == len(t.loss_mask)
        spans = t.reply_token_spans()
        assert len(spans) == len(t.episode.turns) == len(t.turn_rewards) == len(t.turn_ends)
        for (a, b), end, turn in zip(spans, t.turn_ends, t.episode.turns):
            assert end == b - 1 and 1 <= b - a <= 8
            ids = t.token_ids[a:b]
            stopped = ids[-1] == fmt.eot_id
            body = ids[:-1] if stopped else ids
            assert turn.response == "<think>" + tok.decode(body, skip_special_tokens=False)
            if not stopped:
                assert t.token_ids[b] == fmt.eot_id and t.loss_mask[b] == 0
        assert t.truncated_replies == sum(t.token_ids[e] != fmt.eot_id for e in t.turn_ends)
        assert t.episode.terminated or t.episode.truncated


@pytest.mark.parametrize("batch_size", [None, 3])
def test_drop_in_for_the_trainers_model_responder(tiny, batch_size):
    """Same generator seed, same trajectories as the per-turn sampler the trainer uses now
    (the generator is consumed identically), so swapping it in keeps runs reproducible."""
    from ragen_envs.starpo.rollout import ModelResponder

    tok, fmt, model = tiny
    a = collect_rollouts("ragen/Sokoban-v0", 77, 2, 3, CachedResponder(model, fmt, tok.pad_token_id, 10, 1.0,
                         torch.Generator().manual_seed(5), batch_size=batch_size), fmt)
    b = collect_rollouts("ragen/Sokoban-v0", 77, 2, 3, ModelResponder(model, fmt, tok.pad_token_id, 10, 1.0,
                         torch.Generator().manual_seed(5), batch_size=batch_size), fmt)
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    assert [t.turn_rewards for t in a] == [t.turn_rewards for t in b]


def test_partial_batches_keep_other_conversations_cached_and_discard_frees(tiny):
    """The hf: agent's use: each call carries only some live conversations
    (keep_unclaimed=True); a finished one is freed with discard; max_slots bounds memory."""
    from ragen_envs.lm.sampler import SamplingCancelled

    tok, fmt, model = tiny
    a, b = (fmt.first("You are a solver.", f"Turn 1:\nState:\n#_O{'X' * k}") for k in (1, 3))
    s = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=6, temperature=0.0,
                         generator=torch.Generator(), max_slots=3)
    (ra, _), (rb, _) = s.generate([a, b], keep_unclaimed=True)
    assert s.cached_trajectories == 2
    a2 = a + ra + fmt.encode(" next")
    s.stats["reused_tokens"] = 0
    (ra2, _), = s.generate([a2], keep_unclaimed=True)  # b is not in this call: its cache stays
    assert s.cached_trajectories == 2 and s.stats["reused_tokens"] == len(a) + len(ra) - 1
    fresh = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=6, temperature=0.0,
                             generator=torch.Generator())
    assert fresh.generate([a2])[0][0] == ra2  # the cache changes nothing but speed
    assert s.discard(b + rb[:-1]) and not s.discard(b + rb[:-1])
    assert s.cached_trajectories == 1
    for k in range(4):  # max_slots: the oldest go first
        s.generate([fmt.encode(f"other {k} " * 3)], keep_unclaimed=True)
    assert s.cached_trajectories == 3
    # per-call settings, extra stop ids, cancellation
    (short, stopped), = s.generate([a], max_new_tokens=2, keep_unclaimed=True)
    assert len(short) <= 2
    first = fresh.generate([a], max_new_tokens=1)[0][0][0]
    stopper = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=6, temperature=0.0,
                               generator=torch.Generator(), stop_ids=[first])
    assert stopper.generate([a]) == [([first], True)]
    with pytest.raises(SamplingCancelled):
        s.generate([b], should_stop=lambda: True)


def test_a_prompt_with_its_own_generator_draws_the_same_alone_or_in_a_batch(tiny):
    """generators=: each row draws from its prompt's generator, so a prompt's reply does not
    depend on the other prompts of the batch."""
    tok, fmt, model = tiny
    prompts = [fmt.first("You are a solver.", f"Turn 1:\nState:\n#_O{'X' * k}") for k in (1, 2, 3)]

    def sampler():
        return MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=tok.pad_token_id, max_new_tokens=8,
                                temperature=1.0, generator=torch.Generator().manual_seed(0))

    def gen(k):
        return torch.Generator().manual_seed(100 + k)

    together = sampler().generate(prompts, generators=[gen(k) for k in range(3)])
    alone = [sampler().generate([p], generators=[gen(k)])[0] for k, p in enumerate(prompts)]
    assert together == alone
    with pytest.raises(ValueError, match="one per prompt"):
        sampler().generate(prompts, generators=[gen(0)])
