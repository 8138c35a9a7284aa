"""TRL's GRPOTrainer on ragen/Sokoban-v0 through the rollout function: 2 real steps on the CPU
with a tiny local model; the rewards TRL logs equal replaying the completions through the env;
the loss mask covers exactly the sampled tokens; groups share one initial state."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest
import torch

import ragen_envs  # noqa: F401
from ragen_envs.integrations import trl as rtrl
from ragen_envs.lm.chat import ChatFormat, load_tokenizer
from ragen_envs.lm.masks import mask_spans
from ragen_envs.starpo.tiny import build_tiny_policy

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ENV = "ragen/Sokoban-v0"
ENV_KWARGS = {"max_turns": 2}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("trl") / "tiny"
    return build_tiny_policy(path, ENV, ENV_KWARGS, hidden_size=32, num_layers=1, intermediate_size=64)


def test_prompts_carry_the_initial_state():
    p = rtrl.episode_prompt(ENV, 7, 11, {"max_turns": 3})
    assert rtrl.parse_episode_prompt(p) == rtrl.EpisodeSpec(ENV, 7, 11, {"max_turns": 3})
    assert rtrl.parse_episode_prompt([{"role": "user", "content": p}]).seed == 7
    ds = rtrl.make_dataset(ENV, [3, 4], noise_seeds=[None, 9])
    assert [rtrl.parse_episode_prompt(x).seed for x in ds["prompt"]] == [3, 4]
    assert rtrl.parse_episode_prompt(ds["prompt"][1]).noise_seed == 9
    for bad in ("solve sokoban", rtrl.PROMPT_TAG + "{", rtrl.PROMPT_TAG + '{"seed": 1}', 3):
        with pytest.raises(ValueError, match="episode prompt|make_dataset"):
            rtrl.parse_episode_prompt(bad)
    with pytest.raises(ValueError, match="unknown environment"):
        rtrl.episode_prompt("ragen/Nope-v0", 1)
    with pytest.raises(ValueError, match="seed"):
        rtrl.episode_prompt(ENV, -1)


def _replay(spec: rtrl.EpisodeSpec, completion_ids, env_mask, fmt: ChatFormat):
    """Step a fresh env with the replies read back from the completion (the mask's spans)."""
    env = gym.make(spec.env_id, **dict(spec.env_kwargs))
    env.reset(seed=spec.seed, options=None if spec.noise_seed is None else {"noise_seed": spec.noise_seed})
    total, obs_seen, done = 0.0, [], False
    for a, b in mask_spans(env_mask):
        assert not done, "tokens after the episode ended"
        ids = completion_ids[a:b]
        body = ids[:-1] if ids[-1] == fmt.eot_id else ids
        obs, r, term, trunc, _ = env.step(fmt.prefix + fmt.tok.decode(body, skip_special_tokens=False))
        total += r
        done = term or trunc
        obs_seen.append(obs)
    assert done
    env.close()
    return total


def _length(completions, completion_ids, **kwargs):
    """A second reward with spread inside a group (an untrained model's replies are all
    malformed, so the env return alone has no spread and the gradient would be 0)."""
    return [len(set(c)) / 100.0 for c in completion_ids]


def _keep_rewards_callback():
    from transformers import TrainerCallback

    class KeepRewards(TrainerCallback):
        def __init__(self, sink):
            self.sink = sink
            self.trainer = None

        def on_step_end(self, args, state, control, **kwargs):
            self.sink.append(list(self.trainer._logs["rewards"]["env_return_reward"]))

    return KeepRewards


def test_grpo_trainer_two_steps_through_the_rollout_func(tiny, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    _KeepRewards = _keep_rewards_callback()

    tok = load_tokenizer(tiny)
    fmt = ChatFormat(tok, "<think>")
    played: list[list[rtrl.PlayedEpisode]] = []
    sampled: list[tuple[tuple[int, ...], list[int]]] = []  # (prompt ids, reply ids) as the sampler saw them

    rollout = rtrl.make_rollout_func(prefix="<think>", max_new_tokens=16, temperature=1.0, seed=3,
                                     on_episodes=played.append)

    # record what the sampler returned, to check the mask against it
    from ragen_envs.lm import sampler as sampler_mod

    real_generate = sampler_mod.MultiTurnSampler.generate

    def recording_generate(self, prompts, **kwargs):
        out = real_generate(self, prompts, **kwargs)
        sampled.extend((tuple(p), list(ids)) for p, (ids, _) in zip(prompts, out))
        return out

    sampler_mod.MultiTurnSampler.generate = recording_generate
    outputs = []
    logged_steps: list[list[float]] = []  # the per-completion rewards TRL logged, step by step

    def rollout_func(prompts, trainer):
        out = rollout(prompts, trainer)
        outputs.append((list(prompts), out))
        return out

    try:
        config = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                            max_steps=2, learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=True,
                            save_strategy="no", max_completion_length=512, beta=0.0, seed=0,
                            dataloader_num_workers=0, log_completions=False)
        trainer = GRPOTrainer(model=str(tiny), processing_class=tok, reward_funcs=[rtrl.env_return_reward, _length],
                              args=config, train_dataset=rtrl.make_dataset(ENV, range(100, 108), env_kwargs=ENV_KWARGS),
                              rollout_func=rollout_func, callbacks=[_KeepRewards(logged_steps)])
        for cb in trainer.callback_handler.callbacks:
            if isinstance(cb, _KeepRewards):
                cb.trainer = trainer
        before = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.train()
    finally:
        sampler_mod.MultiTurnSampler.generate = real_generate

    assert len(outputs) == 2 and trainer.state.global_step == 2
    logged = [r for step in logged_steps for r in step]
    replayed = []
    for (prompts, out), eps in zip(outputs, played):
        specs = [rtrl.parse_episode_prompt(p) for p in prompts]
        # groups of num_generations consecutive prompts share one initial state
        for g in range(0, len(specs), 4):
            assert len({(s.seed, s.noise_seed) for s in specs[g:g + 4]}) == 1
            assert len({tuple(out["prompt_ids"][i]) for i in range(g, g + 4)}) == 1
        for i, spec in enumerate(specs):
            cids, mask = out["completion_ids"][i], out["env_mask"][i]
            assert len(cids) == len(mask) and cids[-1] == fmt.eot_id
            replayed.append(_replay(spec, cids, mask, fmt))
            assert out["env_return"][i] == pytest.approx(eps[i].episode_return)
    assert logged == pytest.approx(replayed)
    # the masked tokens are exactly the sampled ones: each span is the reply the sampler drew
    # for the prompt made of everything before it
    pool = {}
    for prompt, ids in sampled:
        pool.setdefault(prompt, []).append(ids)
    n_spans = 0
    for _, out in outputs:
        for pids, cids, mask in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"]):
            for a, b in mask_spans(mask):
                pool[tuple(pids + cids[:a])].remove(cids[a:b])  # ValueError if it was not sampled there
                n_spans += 1
    assert n_spans == len(sampled) and not any(pool.values())
    # the trainer really updated the model
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))


class _FakeVLLMClient:
    """Returns scripted token ids like TRL's VLLMClient.generate (one completion per prompt)."""

    def __init__(self, replies_ids):
        self.replies, self.calls = list(replies_ids), []

    def generate(self, prompts, n, temperature, top_p, max_tokens, logprobs, generation_kwargs):
        self.calls.append([list(p) for p in prompts])
        ids = [self.replies.pop(0) for _ in prompts]
        return {"completion_ids": ids, "logprobs": [[[-0.5]] * len(x) for x in ids]}


def test_vllm_server_path_with_a_scripted_client(tiny):
    tok = load_tokenizer(tiny)
    fmt = ChatFormat(tok, "<think>")
    env = gym.make(ENV, **ENV_KWARGS)
    env.reset(seed=5)
    expert = env.unwrapped._expert_reply_actions()
    reply = f"</think><answer>{expert[0]}</answer>"
    ids = fmt.encode(reply) + [fmt.eot_id]
    client = _FakeVLLMClient([ids, ids[:-1]])  # 2nd: vLLM left out the stop token

    class _Trainer:
        use_vllm = True
        processing_class = tok

        class vllm_generation:  # noqa: N801
            mode = "server"
            vllm_client = client

    out = rtrl.make_rollout_func(max_new_tokens=64)([rtrl.episode_prompt(ENV, 5, None, ENV_KWARGS)], _Trainer())
    mask, lps = out["env_mask"][0], out["logprobs"][0]
    spans = mask_spans(mask)
    assert [out["completion_ids"][0][a:b] for a, b in spans][0] == ids
    assert all(lp == -0.5 for (a, b) in spans[:1] for lp in lps[a:b])
    assert all(lps[j] == 0.0 for j in range(len(mask)) if mask[j] == 0)
    assert client.calls[1][0] == out["prompt_ids"][0] + out["completion_ids"][0][:spans[1][0]]
    env2 = gym.make(ENV, **ENV_KWARGS)
    env2.reset(seed=5)
    _, r1, *_ = env2.step("<think>" + reply)
    _, r2, *_ = env2.step("<think>" + reply)  # the 2nd reply decodes to the same text
    assert out["env_return"][0] == pytest.approx(_replay(rtrl.EpisodeSpec(ENV, 5, None, ENV_KWARGS), out["completion_ids"][0], mask, fmt))
    assert out["env_return"][0] == pytest.approx(r1 + r2) and out["env_turns"][0] == 2
    with pytest.raises(ValueError, match="vllm_mode='server'"):
        _Trainer.vllm_generation.mode = "colocate"
        rtrl.make_rollout_func()([rtrl.episode_prompt(ENV, 5)], _Trainer())
