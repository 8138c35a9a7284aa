"""The verl agent loop, in the verl venv (.venv-verl, `make test-verl`), on the CPU with a fake
server manager returning scripted token ids: the merged token stream, the response mask and
the reward equal the project's own token-in/token-out rollout of the same replies and the
env replayed directly."""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap, _agent_loop_registry
from verl.workers.rollout.replica import TokenOutput

import ragen_envs  # noqa: F401
from ragen_envs.agents import make_agent
from ragen_envs.integrations import verl as rverl
from ragen_envs.integrations.episodes import EpisodeSpec, spec_from_row
from ragen_envs.models import build_tiny_tokenizer, protocol_corpus
from ragen_envs.lm.chat import ChatFormat
from ragen_envs.lm.masks import mask_spans
from ragen_envs.starpo.rollout import collect_rollouts

PREFIX = "<think>"


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer(protocol_corpus(range(4)), vocab_size=600)


class FakeServerManager:
    """verl's server manager as the agent loop sees it: ``await generate(...) -> TokenOutput``,
    answering from a script of ``(ids, stopped)`` replies; log-probs -(position + 1) / 100."""

    def __init__(self, script):
        self.script = list(script)
        self.prompts = []
        self.params = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.prompts.append(list(prompt_ids))
        self.params.append(dict(sampling_params))
        ids = self.script.pop(0)
        assert len(ids) <= sampling_params["max_tokens"]
        return TokenOutput(token_ids=ids, log_probs=[-(i + 1) / 100 for i in range(len(ids))])


def _loop(tok, server, response_length=4096, max_new_tokens=64):
    """The loop built the way verl's worker builds it: hydra.utils.instantiate on the YAML entry."""
    import hydra
    import yaml

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": response_length}},
                               "data": {}})
    entry = OmegaConf.create({**yaml.safe_load(rverl.AGENT_LOOP_YAML)[0], "max_new_tokens": max_new_tokens})
    return hydra.utils.instantiate(entry, trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tok,
                                   processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data))


def _expert_script(spec: EpisodeSpec, fmt: ChatFormat, mangle=None):
    """The expert's replies for this initial state as reply ids (what a server returns)."""
    env = gym.make(spec.env_id, **dict(spec.env_kwargs))
    env.reset(seed=spec.seed, options=None if spec.noise_seed is None else {"noise_seed": spec.noise_seed})
    agent = make_agent("expert", env=env)
    script, done, k = [], False, 0
    while not done:
        text = agent.act([])
        assert text.startswith(PREFIX)
        ids = fmt.encode(text[len(PREFIX):]) + [fmt.eot_id]
        ids = mangle(k, ids) if mangle else ids
        script.append(ids)
        _, _, term, trunc, _ = env.step(PREFIX + fmt.tok.decode([t for t in ids if t != fmt.eot_id], skip_special_tokens=False))
        done, k = term or trunc, k + 1
    env.close()
    return script


def _run(loop, row):
    return asyncio.run(loop.run({"temperature": 1.0}, **row))


def test_registered_and_yaml():
    assert _agent_loop_registry[rverl.AGENT_NAME]["_target_"] == "ragen_envs.integrations.verl.RagenAgentLoop"
    import yaml

    assert yaml.safe_load(rverl.AGENT_LOOP_YAML) == [{"name": "ragen_agent", "_target_": "ragen_envs.integrations.verl.RagenAgentLoop",
                                                      "prefix": "<think>", "max_new_tokens": 100}]


@pytest.mark.parametrize("env_id", ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_episode_equals_the_projects_rollout(tok, env_id, seed):
    fmt = ChatFormat(tok, PREFIX)
    row = rverl.make_rows(env_id, [seed])[0]
    spec = spec_from_row(row)
    assert spec == EpisodeSpec(env_id, seed, None, {})
    expert = _expert_script(spec, fmt)
    malformed = fmt.encode("no tags at all") + [fmt.eot_id]
    M = max(len(x) for x in expert + [malformed])  # max_tokens of every request
    junk = fmt.encode("x " * (4 * M))[:M]  # cut at max_tokens: no end-of-turn token
    # server replies: malformed (format penalty), cut, the stop token left out, then the expert
    script = [malformed, junk, expert[0][:-1]] + expert[1:] + expert * 3
    server = FakeServerManager(script)
    out: AgentLoopOutput = _run(_loop(tok, server, max_new_tokens=M), row)

    # the project's own rollout (starpo.rollout.collect_rollouts) of the same replies: a reply of
    # max_tokens ids without the stop token is cut; a shorter one stopped (token left out)
    def as_sampled(ids):
        if ids[-1] == fmt.eot_id:
            return ids, True
        return (ids, False) if len(ids) == M else (ids + [fmt.eot_id], True)

    replies = iter([as_sampled(ids) for ids in script])
    ref = collect_rollouts(env_id, seed, 1, 1, lambda prompts, envs: [next(replies) for _ in prompts], fmt)[0]
    assert out.prompt_ids + out.response_ids == ref.token_ids
    assert [0] * len(out.prompt_ids) + out.response_mask == ref.loss_mask
    assert out.reward_score == pytest.approx(ref.episode_return)
    assert out.extra_fields["turn_scores"] == pytest.approx(ref.turn_rewards)
    assert ref.turn_rewards[0] < 0 and ref.truncated_replies == 1
    assert len(out.response_mask) == len(out.response_ids) == len(out.response_logprobs)
    # every request carried the whole sequence so far; log-probs ride on the returned ids
    spans = mask_spans(out.response_mask)
    assert len(spans) == len(server.prompts) == out.extra_fields["env_turns"]
    for (a, b), prompt, ids in zip(spans, server.prompts, script):
        assert out.response_ids[a:a + len(ids)] == ids
        assert prompt == out.prompt_ids + out.response_ids[:a]
        assert out.response_logprobs[a:a + len(ids)] == pytest.approx([-(i + 1) / 100 for i in range(len(ids))])
    assert all(p["max_tokens"] == M and p["temperature"] == 1.0 for p in server.params)
    # and the env replayed directly from the masked spans gives the same rewards
    assert _replay(spec, out, fmt) == pytest.approx(out.extra_fields["turn_scores"])


def _replay(spec, out, fmt):
    env = gym.make(spec.env_id, **dict(spec.env_kwargs))
    env.reset(seed=spec.seed, options=None if spec.noise_seed is None else {"noise_seed": spec.noise_seed})
    rewards = []
    for a, b in mask_spans(out.response_mask):
        ids = out.response_ids[a:b]
        body = ids[:-1] if ids[-1] == fmt.eot_id else ids
        rewards.append(env.step(PREFIX + fmt.tok.decode(body, skip_special_tokens=False))[1])
    env.close()
    return rewards


def test_noise_seed_and_env_kwargs_reach_the_env(tok):
    fmt = ChatFormat(tok, PREFIX)
    env_id, kwargs = "ragen/FrozenLake-v0", {"max_turns": 3}
    for seed in range(5):
        row = rverl.make_rows(env_id, [seed], noise_seeds=[77 + seed], env_kwargs=kwargs)[0]
        spec = spec_from_row(row)
        assert spec == EpisodeSpec(env_id, seed, 77 + seed, kwargs)
        script = _expert_script(spec, fmt)
        out = _run(_loop(tok, FakeServerManager(script)), row)
        assert _replay(spec, out, fmt) == pytest.approx(out.extra_fields["turn_scores"])
        assert out.extra_fields["env_turns"] == len(script) <= 3
        # the same prompt ids as a fresh env of this state shows
        env = gym.make(env_id, **kwargs)
        obs, info = env.reset(seed=seed, options={"noise_seed": 77 + seed})
        assert out.prompt_ids == fmt.first(info["system_prompt"], obs)


def test_response_length_cuts_the_episode(tok):
    fmt = ChatFormat(tok, PREFIX)
    row = rverl.make_rows("ragen/Sokoban-v0", [4], env_kwargs={"max_turns": 5})[0]
    junk = fmt.encode("<answer>Up</answer>")  # never stops: every reply is cut at max_tokens
    server = FakeServerManager([junk[:8]] * 10)
    out = _run(_loop(tok, server, response_length=60, max_new_tokens=8), row)
    assert len(out.response_ids) <= 60 and out.extra_fields["cut_at_response_length"] is True
    assert all(p["max_tokens"] <= 8 for p in server.params)
    assert out.reward_score == pytest.approx(sum(out.extra_fields["turn_scores"]))


def test_rows_and_config_files(tmp_path):
    paths = rverl.write_config(tmp_path, "ragen/Sokoban-v0", range(3), range(100, 102), {"max_turns": 5})
    import pandas as pd

    df = pd.read_parquet(paths["train"])
    assert list(df["agent_name"]) == ["ragen_agent"] * 3
    specs = [spec_from_row(r) for r in df.to_dict("records")]
    assert [s.seed for s in specs] == [0, 1, 2] and specs[0].env_kwargs == {"max_turns": 5}
    assert json.loads(df["extra_info"][0]["env_kwargs"]) == {"max_turns": 5}
    with pytest.raises(ValueError, match="names no episode"):
        spec_from_row({"foo": 1})


def test_write_config_command(tmp_path, capsys):
    assert rverl.main(["--write-config", str(tmp_path), "--env", "ragen/FrozenLake-v0", "--train-seeds", "3",
                       "--val-seeds", "2", "--env-kwarg", "max_turns=4"]) == 0
    import pandas as pd
    import yaml

    assert yaml.safe_load((tmp_path / "agent_loop.yaml").read_text())[0]["name"] == rverl.AGENT_NAME
    val = [spec_from_row(r) for r in pd.read_parquet(tmp_path / "val.parquet").to_dict("records")]
    assert [(s.env_id, s.seed, dict(s.env_kwargs)) for s in val] == [("ragen/FrozenLake-v0", 1_000_000 + i, {"max_turns": 4})
                                                                    for i in range(2)]
    assert "train.parquet" in capsys.readouterr().out
