"""TRL's GRPOTrainer on ragen/Sokoban-v0 by both multi-turn paths, 2 real steps each on the CPU
with a tiny local model. The rollout function: the rewards TRL logs equal replaying the
completions through the env; the loss mask covers exactly the sampled tokens; groups share one
initial state. The environment factory: TRL's own tool loop steps the env through ``act``
calls (scripted replies), the tool results are the env's text, the rewards TRL logs equal a
replay of the calls; the tool schema, chat template, penalties, refusals and budgets."""

from __future__ import annotations

import inspect
import json
import os
import re

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


# ----------------------------------------------------------------- environment_factory path
TOOL_ENV_KWARGS = {"max_turns": 3}
CALL_RE = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)


OLD_CHATML = ("{% for message in messages %}"
              "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
              "{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _tool_tokenizer(path):
    return rtrl.install_tool_chat_template(load_tokenizer(path))


def test_act_schema_is_what_transformers_and_trl_extract():
    from transformers.utils import get_json_schema

    cls = rtrl.make_environment_factory(ENV, **TOOL_ENV_KWARGS)
    env = cls()
    # TRL's rule: every public function of the class but reset / get_reward is a tool
    public = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_")]
    assert sorted(public) == ["act", "get_reward", "reset"] and cls.__name__ == "RagenSokobanV0"
    schema = get_json_schema(env.act)["function"]
    assert schema["name"] == "act"
    assert schema["parameters"] == {
        "type": "object", "required": ["reply"],
        "properties": {"reply": {"type": "string", "description": schema["parameters"]["properties"]["reply"]["description"]}},
    }
    assert "<think> [Your thoughts] </think> <answer> [your answer] </answer>" in schema["parameters"]["properties"]["reply"]["description"]
    assert schema["description"] and schema["return"]["type"] == "string"
    nothink = get_json_schema(rtrl.make_environment_factory(ENV, think=False)().act)["function"]
    assert nothink["parameters"]["properties"]["reply"]["description"].endswith("<answer> [your answer] </answer>")
    with pytest.raises(ValueError, match="unknown environment"):
        rtrl.make_environment_factory("ragen/Nope-v0")
    with pytest.raises(ValueError, match="max_turns"):
        rtrl.make_environment_factory(ENV, max_turns=0)
    with pytest.raises(TypeError, match="make_environment_factory"):
        rtrl.RagenToolEnv()


def test_tool_chat_template_is_what_trl_accepts_and_parses(tiny):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling

    plain = load_tokenizer(tiny)
    plain.chat_template = OLD_CHATML  # a tiny model saved before its template rendered tools
    plain.response_template = None
    assert not supports_tool_calling(plain)  # the plain ChatML template TRL refuses
    tok = _tool_tokenizer(tiny)
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    built = load_tokenizer(tiny)  # the tiny models are built with it and keep it when saved
    assert built.chat_template == rtrl.TOOL_CHAT_TEMPLATE and built.response_template == rtrl.TOOL_RESPONSE_TEMPLATE
    env = rtrl.make_environment_factory(ENV, **TOOL_ENV_KWARGS)()
    row = rtrl.make_environment_dataset(ENV, [5], **TOOL_ENV_KWARGS)[0]
    obs = env.reset(**row)
    msgs = row["prompt"][:-1] + [{"role": "user", "content": obs}]
    # no tools: the same text as the ChatML template (the rollout-function path is unchanged)
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == \
        plain.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    prompt = tok.apply_chat_template(msgs, tools=[env.act], tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\n" + row["prompt"][0]["content"] + "\n\n# Tools\n")
    assert '"name": "act"' in prompt and prompt.endswith("<|im_start|>user\n" + obs + "<|im_end|>\n<|im_start|>assistant\n")
    reply = "<think>box \"left\"\n</think><answer>Left</answer>"
    text = "Let me move.\n" + _call("act", {"reply": reply}) + "\n" + _call("act", {"reply": "Up"}) + "<|im_end|>"
    parsed = parse_response(tok, tok(text)["input_ids"], prefix=tok(prompt)["input_ids"], tools=[env.act])
    assert parsed["content"] == "Let me move."
    assert [c["function"] for c in parsed["tool_calls"]] == [{"name": "act", "arguments": {"reply": reply}},
                                                           {"name": "act", "arguments": {"reply": "Up"}}]
    # rendering the parsed message back gives the model's text (what TRL's tool loop relies on)
    back = tok.apply_chat_template(msgs + [parsed], tools=[env.act], tokenize=False)
    assert back == prompt + text + "\n"
    bad = parse_response(tok, tok('<tool_call>\n{"name": "act", "argu<|im_end|>')["input_ids"], prefix=tok(prompt)["input_ids"])
    assert "tool_calls" not in bad
    class _NoChatML:
        def get_vocab(self):
            return {"<s>": 0}

    with pytest.raises(ValueError, match="ChatML"):
        rtrl.install_tool_chat_template(_NoChatML())


def _call(name, arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _local(env_id, row, replies, env_kwargs):
    """A local env played with ``replies`` then empty replies to the episode's end."""
    env = gym.make(env_id, **env_kwargs)
    noise = row.get("noise_seed", -1)
    obs, _ = env.reset(seed=row["seed"], options=None if noise in (None, -1) else {"noise_seed": noise})
    seen, rewards, done = [obs], [], False
    replies = list(replies)
    while not done:
        o, r, term, trunc, _ = env.step(replies.pop(0) if replies else "")
        seen.append(o)
        rewards.append(r)
        done = term or trunc
    env.close()
    return seen, rewards


@pytest.mark.parametrize("env_id,kwargs,noise", [(ENV, {}, None), ("ragen/FrozenLake-v0", {}, 7),
                                                 ("ragen/Bandit-v0", {}, 3), ("ragen/WebShop-v0", {}, None)])
def test_act_plays_the_protocol_turn_by_turn(env_id, kwargs, noise):
    cls = rtrl.make_environment_factory(env_id, **kwargs)
    for seed in (11, 12):
        row = rtrl.make_environment_dataset(env_id, [seed], None if noise is None else [noise], **kwargs)[0]
        env = cls()
        first = env.reset(**row)
        expert = env._env.unwrapped._expert_reply_actions()
        fmt = "<think>plan</think><answer>{}</answer>"
        replies = ["Left Up", fmt.format(" || ".join(expert[:2])), fmt.format(" || ".join(expert[2:5])) if expert[2:] else "x"]
        results = []
        for r in replies:
            if env.done:
                break
            results.append(env.act(r))
        seen, rewards = _local(env_id, row, replies[:len(results)], kwargs)
        assert [first] + results == seen[:len(results) + 1]  # the env's text, verbatim
        assert env.rewards == rewards[:len(results)] and env.rewards[0] == pytest.approx(-0.1)  # format penalty
        assert env.get_reward() == pytest.approx(sum(rewards))
        assert env.get_reward() == pytest.approx(sum(rewards))  # once finished, asking again changes nothing
        assert env.observations == seen and env.replies[:len(results)] == replies[:len(results)]
        assert env.unplayed_turns == len(rewards) - len(results)


def test_finished_episodes_refuse_calls_and_budgets_hold():
    cls = rtrl.make_environment_factory(ENV, max_turns=3, max_actions=4)
    env = cls()
    with pytest.raises(RuntimeError, match="reset"):
        env.act("x")
    with pytest.raises(RuntimeError, match="reset"):
        env.get_reward()
    row = rtrl.make_environment_dataset(ENV, [21], max_turns=3, max_actions=4)[0]
    env.reset(**row)
    # the action budget (4) ends the episode after two turns of 3 actions (the 2nd runs 1 of them)
    env.act("<think>a</think><answer>Up || Down || Up</answer>")
    assert not env.done
    env.act("<think>a</think><answer>Down || Up || Down</answer>")
    assert env.done and [i["n_executed"] for i in env.infos] == [3, 1]
    with pytest.raises(RuntimeError, match="the episode is over"):
        env.act("<think>a</think><answer>Up</answer>")
    assert len(env.rewards) == 2 and env.get_reward() == pytest.approx(sum(env.rewards)) and env.unplayed_turns == 0
    # the turn budget: a rollout that never calls act is charged every unplayed turn
    env.reset(**row)
    assert env.get_reward() == pytest.approx(3 * -0.1) and env.unplayed_turns == 3 and env.replies == [""] * 3
    with pytest.raises(TypeError, match="string"):
        env.reset(**row)
        env.act(3)
    assert env.rewards == []  # a refused call is no turn
    # reset starts over, whatever the previous episode did
    assert env.reset(**row) == _local(ENV, row, [], {"max_turns": 3, "max_actions": 4})[0][0]
    assert not env.done and env.rewards == []


def test_reset_places_the_system_prompt_and_reads_the_seeds():
    cls = rtrl.make_environment_factory("ragen/FrozenLake-v0")
    env = cls()
    ds = rtrl.make_environment_dataset("ragen/FrozenLake-v0", [4, 4], noise_seeds=[None, 9])
    assert ds["noise_seed"] == [-1, 9] and ds[0]["prompt"][0]["role"] == "system"
    local = gym.make("ragen/FrozenLake-v0")
    obs, info = local.reset(seed=4)
    assert env.reset(**ds[0]) == obs and env.system_prompt == info["system_prompt"]
    # no system message (TRL's placeholder prompt without a dataset): system prompt + observation
    assert env.reset(seed=4, prompt=[{"role": "user", "content": ""}]) == info["system_prompt"] + obs
    assert env.reset(seed=4) == info["system_prompt"] + obs
    # the noise seed reaches the env: the same slips as a local env with that noise seed
    env.reset(**ds[1])
    replies = ["<answer>Left || Left || Down || Down || Right</answer>"] * 2
    for r in replies:
        env.act(r)
    _, rewards = _local("ragen/FrozenLake-v0", ds[1], replies, {})
    assert env.get_reward() == pytest.approx(sum(rewards))
    for bad, msg in [([{"role": "user", "content": "play"}], "empty user message"),
                     ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": ""}], "system prompt"),
                     ("a string prompt", "conversational")]:
        with pytest.raises(ValueError, match=msg):
            env.reset(seed=4, prompt=bad)
        with pytest.raises(RuntimeError, match="reset"):  # no half-started episode
            env.act("<answer>Left</answer>")
    with pytest.raises(ValueError, match="seed"):
        rtrl.make_environment_dataset("ragen/FrozenLake-v0", [-1])


class _ScriptedGenerate:
    """Stands in for ``model.generate`` inside TRL's own generation and tool loop: the i-th
    rollout of each group follows script i (the 4 members of a group differ, so their
    returns spread). A call's rows are identified by the sequence they continue. Replies end
    with the end-of-turn token as a model's would; TRL does everything else (tool-call
    parsing, running ``act``, tool-result tokens, masks, rewards, the update)."""

    def __init__(self, tok, plans, group_size):
        self.tok, self.plans, self.group_size = tok, plans, group_size  # plans: first observation -> expert actions
        self.script_of: dict[tuple, int] = {}
        self.n_calls = 0

    def __call__(self, input_ids, attention_mask, **kwargs):
        self.n_calls += 1
        rows = [ids[m.bool()].tolist() for ids, m in zip(input_ids, attention_mask)]
        outs = []
        for i, ids in enumerate(rows):
            continued = [k for k in self.script_of if tuple(ids[:len(k)]) == k]
            script = self.script_of[max(continued, key=len)] if continued else i % self.group_size
            out = self.tok(self._reply(script, self.tok.decode(ids)), add_special_tokens=False)["input_ids"]
            out.append(self.tok.eos_token_id)
            self.script_of[tuple(ids + out)] = script
            outs.append(out)
        width = max(map(len, outs))
        pad = self.tok.pad_token_id
        tail = torch.tensor([o + [pad] * (width - len(o)) for o in outs], dtype=input_ids.dtype)
        return torch.cat([input_ids, tail], dim=1)

    def _reply(self, script, text):
        first_obs = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
        results = text.split("<tool_response>\n")[1:]
        turn = len(results)
        over = bool(results) and results[-1].startswith("{'error'")
        if script == 0:  # the expert's plan, 4 actions a call, until act refuses: then stop
            if over:
                return "Solved or out of turns."
            plan = self.plans[first_obs][4 * turn:4 * turn + 4] or ["Up"]
            return "Pushing.\n" + _call("act", {"reply": f"<think>plan</think><answer>{' || '.join(plan)}</answer>"})
        if script == 1:  # two calls in one message (a malformed one first), then stop
            if turn == 0:
                return "Two tries.\n" + _call("act", {"reply": "Left Up"}) + "\n" + \
                    _call("act", {"reply": "<think>x</think><answer>Down</answer>"})
            return "I stop here."
        if script == 2:  # never calls the tool
            return "I would rather not play."
        if turn == 0:  # a failed call (wrong argument), then one turn, then stop
            return _call("act", {"answer": "<think>x</think><answer>Right</answer>"})
        if turn == 1:
            return _call("act", {"reply": "<think>y</think><answer>Right || Up</answer>"})
        return "Enough."


def _replay_tool_rollout(text, seed, noise_seed, env_kwargs):
    """Re-play a rollout from its completion text alone: each ``act`` call with a string
    ``reply`` while the episode runs is a turn; empty replies finish the episode."""
    env = gym.make(ENV, **env_kwargs)
    obs, _ = env.reset(seed=seed, options=None if noise_seed in (None, -1) else {"noise_seed": noise_seed})
    results, total, done = [], 0.0, False
    for body in CALL_RE.findall(text):
        call = json.loads(body)
        args = call.get("arguments", {})
        if call.get("name") != "act" or set(args) != {"reply"} or not isinstance(args["reply"], str) or done:
            results.append(None)  # a tool error, no turn
            continue
        o, r, term, trunc, _ = env.step(args["reply"])
        results.append(o)
        total += r
        done = term or trunc
    while not done:
        _, r, term, trunc, _ = env.step("")
        total += r
        done = term or trunc
    return obs, results, total


def test_grpo_trainer_two_steps_through_the_environment_factory(tiny, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    tok = _tool_tokenizer(tiny)
    seeds = list(range(300, 304))
    dataset = rtrl.make_environment_dataset(ENV, seeds, **TOOL_ENV_KWARGS)
    factory = rtrl.make_environment_factory(ENV, **TOOL_ENV_KWARGS)
    plans = {}
    for s in seeds:
        e = gym.make(ENV, **TOOL_ENV_KWARGS)
        first, _ = e.reset(seed=s)
        plans[first] = e.unwrapped._expert_reply_actions()
    seen = []  # what TRL hands the reward functions: prompts, completions, ids, the row's columns

    def record(prompts, completions, completion_ids, seed, noise_seed, environments, **kwargs):
        # runs before TRL's get_reward column: the envs have played only the tool calls yet
        seen.extend(zip(prompts, completions, completion_ids, seed, noise_seed, [len(e.rewards) for e in environments]))
        return [0.0] * len(prompts)

    name = factory.__name__
    logged = []

    from transformers import TrainerCallback

    class KeepRewards(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            logged.append(list(trainer._logs["rewards"][name]))

    config = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                        max_steps=2, learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=True,
                        save_strategy="no", max_completion_length=1536, beta=0.0, seed=0,
                        dataloader_num_workers=0, log_completions=False, max_tool_calling_iterations=6)
    trainer = GRPOTrainer(model=str(tiny), processing_class=tok, reward_funcs=[record], args=config,
                          train_dataset=dataset, environment_factory=factory, callbacks=[KeepRewards()])
    assert [t.__name__ for t in trainer._env_tools[None]] == ["act"]
    scripted = _ScriptedGenerate(tok, plans, group_size=4)
    trainer.model.generate = scripted
    batches = []  # what TRL trains on: completion ids and its loss masks
    real_score = trainer._generate_and_score_completions

    def keep_batch(inputs):
        out = real_score(inputs)
        batches.append({k: out[k].clone() for k in ("completion_ids", "completion_mask", "tool_mask")})
        return out

    trainer._generate_and_score_completions = keep_batch
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()

    assert trainer.state.global_step == 2 and len(seen) == 16 and scripted.n_calls > 2
    logged = [r for step in logged for r in step]
    replayed, played_turns = [], 0
    for g in range(0, 16, 4):
        assert len({s[3] for s in seen[g:g + 4]}) == 1  # a group: one layout seed
    for prompt, completion, cids, seed, noise_seed, n_played in seen:
        text = tok.decode(cids, skip_special_tokens=False)
        first, results, total = _replay_tool_rollout(text, seed, noise_seed, TOOL_ENV_KWARGS)
        # the model saw the env's system prompt and first observation, unchanged
        assert prompt[0] == {"role": "system", "content": dataset[0]["prompt"][0]["content"]}
        assert prompt[-1] == {"role": "user", "content": first}
        # TRL's tool messages are the env's observations verbatim (or act's error)
        tool_msgs = [m["content"] for m in completion if m["role"] == "tool"]
        assert len(tool_msgs) == len(results)
        for got, want in zip(tool_msgs, results):
            assert got == want if want is not None else got.startswith("{'error'")
        assert n_played == sum(r is not None for r in results)
        played_turns += n_played
        replayed.append(total)
    assert logged == pytest.approx(replayed)
    # the loss leaves out exactly the tool messages: every untrained span is one observation
    # (or act's error) with the template around it; every reply token is trained
    expected = []  # per run of tool messages (one per assistant message that called tools)
    for _, completion, *_ in seen:
        run = []
        for m in completion + [{"role": "assistant"}]:
            if m["role"] == "tool":
                run.append("\n<tool_response>\n" + m["content"] + "\n</tool_response>")
            elif run:  # Qwen2.5's layout: a run of tool results is one user message
                expected.append("\n<|im_start|>user" + "".join(run) + "<|im_end|>\n<|im_start|>assistant\n")
                run = []
    untrained = []
    for b in batches:
        for ids, cmask, tmask in zip(b["completion_ids"], b["completion_mask"], b["tool_mask"]):
            n = int(cmask.sum())
            for a, e in mask_spans([1 - int(x) for x in tmask[:n]]):
                untrained.append(tok.decode(ids[a:e].tolist(), skip_special_tokens=False))
            trained = tok.decode([int(t) for t, m in zip(ids[:n], tmask[:n]) if m], skip_special_tokens=False)
            assert "<tool_response>" not in trained
    assert untrained == expected
    assert played_turns >= 16  # the env was stepped through tool calls
    assert max(replayed) > 5  # the expert script solved puzzles through act
    assert any("the episode is over" in m["content"] for _, c, *_ in seen for m in c if m["role"] == "tool")
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))


def test_the_documented_cpu_snippet_runs(tmp_path, monkeypatch):
    """The documented GRPOTrainer block, on an untrained stand-in for its warm start, with a
    32-token completion cap (an untrained model writes to the cap: 512 tokens take minutes).
    The warm start itself, and that the env is then stepped: tests/test_trl_tools_format.py
    (slow)."""
    from pathlib import Path

    import trl

    from ragen_envs.models import build_tiny_checkpoint

    real_config = trl.GRPOConfig
    monkeypatch.setattr(trl, "GRPOConfig", lambda **kw: real_config(**{**kw, "max_completion_length": 32}))

    doc = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text()
    block = doc.split("<!-- test: trl-environment-factory-cpu -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    build_tiny_checkpoint("runs/sft-tools/model", hidden_size=32, num_layers=1)
    ns: dict = {}
    exec(compile(block, "docs/integrations.md", "exec"), ns)
    trainer = ns["trainer"]
    assert trainer.state.global_step == 2
    logged = list(trainer._logs["rewards"]["RagenSokobanV0"])
    assert len(logged) == 8 and logged == pytest.approx([e.episode_return for e in trainer.environments])
    assert all(e.done for e in trainer.environments)
