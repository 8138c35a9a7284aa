"""Issue 19 item 5, the verl path (in .venv-verl): tests/parity.py's scripted replies (expert,
random, malformed; 20 seeds of each id in its CASES) through verl's
agent loop with a fake server manager that returns each reply's token ids. verl keeps the
token stream, per-turn scores and the episode's reward: the per-turn rewards, return and turn
count equal the local episode, and every observation text appears verbatim in the tokens the
model is shown."""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.workers.rollout.replica import TokenOutput

from parity import CASES, reference_episodes
from ragen_envs.integrations import verl as rverl
from ragen_envs.lm.chat import ChatFormat
from ragen_envs.lm.masks import mask_spans
from ragen_envs.models import build_tiny_tokenizer, protocol_corpus


class ScriptedServer:
    def __init__(self, script):
        self.script = list(script)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        ids = self.script.pop(0)
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids))


def _spell(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if any(
        0xD800 <= ord(c) <= 0xDFFF for c in text) else text


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer(protocol_corpus(range(4)), vocab_size=600)


@pytest.mark.parametrize("env_id,kwargs,noise", CASES, ids=[c[0].split("/")[1] for c in CASES])
def test_verl_agent_loop_equals_the_local_episodes(tok, env_id, kwargs, noise):
    import hydra
    import yaml

    fmt = ChatFormat(tok, "")
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 1 << 16, "response_length": 1 << 16}},
                               "data": {}})
    for ref in reference_episodes(env_id, kwargs, noise):
        script = [fmt.encode(_spell(r)) + [fmt.eot_id] for r in ref.replies]
        # prefix "" (the replies carry their own tags) and a cap no reply reaches
        entry = OmegaConf.create({**yaml.safe_load(rverl.AGENT_LOOP_YAML)[0], "prefix": "",
                                  "max_new_tokens": max(len(s) for s in script) + 1})
        loop = hydra.utils.instantiate(entry, trainer_config=DictConfigWrap(config), server_manager=ScriptedServer(script),
                                       tokenizer=tok, processor=None, dataset_cls=None,
                                       data_config=DictConfigWrap(config.data))
        row = rverl.make_rows(env_id, [ref.seed], [ref.noise_seed], kwargs)[0]
        out = asyncio.run(loop.run({"temperature": 1.0}, **row))
        where = f"verl: {env_id} seed {ref.seed}"
        assert out.extra_fields["env_turns"] == len(ref.turns), where
        assert out.extra_fields["turn_scores"] == [t.reward for t in ref.turns], where
        assert out.reward_score == pytest.approx(ref.episode_return, abs=1e-9), where
        shown = tok.decode(out.prompt_ids, skip_special_tokens=False)
        assert ref.system_prompt in shown and ref.first_observation in shown, where
        spans = mask_spans(out.response_mask)
        assert len(spans) == len(ref.turns), where
        for k, (a, b) in enumerate(spans[:-1]):  # the env's tokens after turn k's reply
            env_part = tok.decode(out.response_ids[b:spans[k + 1][0]], skip_special_tokens=False)
            assert ref.turns[k].observation in env_part, f"{where} turn {k}"
