"""The tiny models' chat template for TRL (issue 43 items 5 and 6): Qwen2.5's tool layout, so
TRL's ``environment_factory`` loop takes a local model as it is, and ``{% generation %}``
markers, so ``SFTTrainer(assistant_only_loss=True)`` trains on exactly the replies of a
``ragen export`` dataset; ``ragen sft --format tools`` writes the transcript TRL's loop
renders, and after it the model calls ``act`` in TRL's own loop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("trl")
import datasets  # noqa: E402

import ragen_envs  # noqa: E402,F401
from ragen_envs.cli import main as cli_main  # noqa: E402
from ragen_envs.lm.chat import load_tokenizer  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64}
OLD_CHATML = ("{% for message in messages %}"
              "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
              "{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
ENV = "ragen/Sokoban-v0"
TOOL_KW = {"max_turns": 3}


@pytest.fixture(scope="module")
def tool_tok():
    """A small tiny tokenizer with the tool layout's phrases (as ``build_tiny_policy(tools=True)``)."""
    import gymnasium as gym

    from ragen_envs.agents import make_agent
    from ragen_envs.eval import run_episode
    from ragen_envs.integrations.trl import tool_phrases
    from ragen_envs.models import build_tiny_tokenizer, protocol_phrases

    env = gym.make(ENV, **TOOL_KW)
    corpus = []
    for seed in range(4):
        ep = run_episode(env, make_agent("expert", env=env), 900 + seed)
        corpus += [ep.system_prompt, ep.final_observation] + [x for t in ep.turns for x in (t.observation, t.response)]
    return build_tiny_tokenizer(corpus, vocab_size=300, split_digits=True,
                                phrases=protocol_phrases(ENV, **TOOL_KW) + tool_phrases(ENV, **TOOL_KW))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tool_tok):
    """A tiny model saved with that tokenizer (the template every tiny model gets)."""
    from ragen_envs.models import build_tiny_model

    path = tmp_path_factory.mktemp("model") / "tiny"
    tool_tok.save_pretrained(path)
    build_tiny_model(tool_tok, **TINY).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A ``ragen export`` dataset of three expert episodes on Sokoban (2 turns at most)."""
    from ragen_envs.agents import make_agent
    from ragen_envs.eval import evaluate

    root = tmp_path_factory.mktemp("export")
    evaluate(lambda env, seed: make_agent("expert", env=env), ["ragen/Sokoban-v0"], [123, 124, 125], root / "run",
             concurrency=1, env_kwargs={"max_turns": 2}, progress=False)
    assert cli_main(["export", str(root / "run"), "--out", str(root / "data.jsonl")]) == 0
    return root / "data.jsonl"


def _spans(ids, mask):
    """The runs of ids where ``mask`` is 1."""
    out, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(int(i))
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


def test_the_template_renders_plain_chatml_without_tools(tiny_model):
    """Byte for byte the template of 3bc4a51 for conversations without tools (rollouts,
    saved runs and the protocol depend on it)."""
    tok = load_tokenizer(tiny_model)
    convs = [
        [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"},
         {"role": "assistant", "content": "<think>a</think><answer>Up</answer>"}, {"role": "user", "content": "u\n2"}],
        [{"role": "user", "content": "only"}],
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}],
        [{"role": "system", "content": ""}, {"role": "user", "content": "a"}, {"role": "system", "content": "late"}],
    ]
    for conv in convs:
        for gen in (False, True):
            assert tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen) == \
                tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, chat_template=OLD_CHATML)


def test_tool_conversations_render_as_qwen2_5_does(tiny_model):
    from trl.chat_template_utils import (get_training_chat_template, is_chat_template_prefix_preserving,
                                         is_chat_template_stop_token_trained, qwen2_5_chat_template,
                                         supports_tool_calling)

    from ragen_envs.integrations.trl import make_environment_factory

    tok = load_tokenizer(tiny_model)
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    assert is_chat_template_stop_token_trained(tok) and get_training_chat_template(tok) is None
    act = make_environment_factory("ragen/Sokoban-v0")().act
    call = {"type": "function", "function": {"name": "act", "arguments": {"reply": '<think>é "x"\n</think>'}}}
    two = [call, {"type": "function", "function": {"name": "act", "arguments": {"reply": "b"}}}]
    conv = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "obs"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "act", "content": "o1"}, {"role": "tool", "name": "act", "content": "o2"},
            {"role": "assistant", "content": "hm", "tool_calls": two},
            {"role": "tool", "name": "act", "content": "o3"}, {"role": "assistant", "content": "done"}]
    for gen in (False, True):  # with a system message (Qwen2.5 adds its own default one otherwise)
        assert tok.apply_chat_template(conv, tools=[act], tokenize=False, add_generation_prompt=gen) == \
            tok.apply_chat_template(conv, tools=[act], tokenize=False, add_generation_prompt=gen,
                                    chat_template=qwen2_5_chat_template)
    out = tok.apply_chat_template(conv, tools=[act], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    first = '<tool_call>\n{"name": "act", "arguments": {"reply": "<think>é \\"x\\"\\n</think>"}}\n</tool_call>'
    assert [tok.decode(s) for s in _spans(out["input_ids"], out["assistant_masks"])] == [
        first + "<|im_end|>",
        "hm\n" + first + '\n<tool_call>\n{"name": "act", "arguments": {"reply": "b"}}\n</tool_call><|im_end|>',
        "done<|im_end|>"]


def test_sft_trainer_assistant_only_loss_trains_exactly_the_replies(tiny_model, exported, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    ds = datasets.load_dataset("json", data_files=str(exported), split="train", cache_dir=str(tmp_path / "hf"))
    tok = AutoTokenizer.from_pretrained(tiny_model)
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), train_dataset=ds, processing_class=tok,
                         args=SFTConfig(output_dir=str(tmp_path / "trl"), max_steps=1, per_device_train_batch_size=3,
                                        use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
                                        max_length=None, assistant_only_loss=True))
    assert trainer.chat_template is None  # TRL found the markers: no template swapped in
    for row, done in zip(ds, trainer.train_dataset):
        ids = done["input_ids"]
        assert ids == tok.apply_chat_template(row["messages"], tokenize=True, return_dict=True)["input_ids"]
        # what docs/integrations.md tells a ChatML user: on these rows it renders as Qwen2.5's own template
        assert tok.apply_chat_template(row["messages"], tokenize=False) == \
            tok.apply_chat_template(row["messages"], tokenize=False, chat_template=qwen2_5_chat_template)
        replies = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        assert len(replies) >= 1
        trained = [label != -100 for label in done["labels"]]  # TRL's labels: -100 where no loss is taken
        assert [tok.decode(s) for s in _spans(ids, trained)] == [r + "<|im_end|>" for r in replies]
    result = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert result.global_step == 1 and len(losses) == 1 and 0 < losses[0] < 100


def _expert_tool_episode(seed):
    """An expert episode played through ``act`` (grounded replies, 2 actions each)."""
    from ragen_envs.integrations.trl import make_environment_dataset, make_environment_factory
    from ragen_envs.starpo.expert import expert_reply_fn

    row = make_environment_dataset(ENV, [seed], **TOOL_KW)[0]
    env = make_environment_factory(ENV, **TOOL_KW)()
    observations, replies = [env.reset(**row)], []
    reply = expert_reply_fn("grounded", 2)
    while not env.done:
        replies.append(reply(env._env, None))
        observations.append(env.act(replies[-1]))
    return row, env, observations, replies


def test_the_tools_transcript_is_the_one_trls_loop_renders(tool_tok):
    """Piece by piece through TRL's own code: its prompt tokenization (``_tokenize_prompts``),
    its reply parsing (``parse_response``: each written span is exactly one ``act(reply)`` call,
    the last none) and its tool-result ids (``GRPOTrainer._get_tool_suffix_ids``)."""
    from types import SimpleNamespace

    from trl import GRPOTrainer
    from trl.chat_template_utils import parse_response

    from ragen_envs.integrations.trl import ToolCallFormat, tool_transcript
    from ragen_envs.lm.masks import mask_spans

    tok = tool_tok
    fmt = ToolCallFormat(tok, ENV, **TOOL_KW)
    row, env, observations, replies = next(ep for ep in map(_expert_tool_episode, range(11, 40))
                                           if len(ep[3]) >= 2 and ep[1].success)
    ids, mask = tool_transcript(fmt, env.system_prompt, observations, replies)
    assert len(ids) == len(mask)
    prompt = row["prompt"][:-1] + [{"role": "user", "content": observations[0]}]  # as TRL appends reset's text
    trl_prompt = tok.apply_chat_template(conversation=[prompt], tools=[env.act], chat_template=None,
                                         add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"][0]
    trainer = SimpleNamespace(processing_class=tok, _tokenizer=tok, chat_template=None, chat_template_kwargs={},
                              _is_vlm=False)
    written = mask_spans(mask)
    assert written[0][0] == len(trl_prompt) and ids[:len(trl_prompt)] == list(trl_prompt)
    assert len(written) == len(replies) + 1
    for k, (a, b) in enumerate(written):
        assert ids[b - 1] == tok.eos_token_id  # every message ends with the end-of-turn token
        parsed = parse_response(tok, ids[a:b], prefix=ids[:a], tools=[env.act])
        if k < len(replies):
            assert [c["function"] for c in parsed["tool_calls"]] == [{"name": "act", "arguments": {"reply": replies[k]}}]
            assert parsed["content"] == ""
            end = written[k + 1][0]
            tool = [{"role": "tool", "name": "act", "content": observations[k + 1]}]
            assert ids[b:end] == GRPOTrainer._get_tool_suffix_ids(trainer, tool)
        else:
            assert "tool_calls" not in parsed and b == len(ids)  # the last message calls nothing: TRL's loop ends
    # and the whole text is the chat template's rendering of the conversation TRL records
    conv = list(prompt)
    for reply, obs in zip(replies, observations[1:]):
        conv += [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "act", "arguments": {"reply": reply}}}]},
            {"role": "tool", "name": "act", "content": obs}]
    conv.append({"role": "assistant", "content": ""})
    assert tok.decode(ids) + "\n" == tok.apply_chat_template(conv, tools=[env.act], tokenize=False)  # "\n": the template's, after the end


def test_expert_episodes_become_the_transcript_of_their_replies_through_act(tool_tok):
    """``ragen sft --format tools`` plays the expert in the protocol format and lays each
    episode out again: the same ids as playing its replies through ``act`` itself."""
    from ragen_envs.integrations.trl import (ToolCallFormat, make_environment_dataset, make_environment_factory,
                                             tool_transcript)
    from ragen_envs.lm.chat import ChatFormat
    from ragen_envs.starpo import sft
    from ragen_envs.starpo.expert import expert_trajectories

    fmt = ToolCallFormat(tool_tok, ENV, **TOOL_KW)
    for t in expert_trajectories(ENV, ChatFormat(tool_tok, "<think>"), range(20, 24), actions_per_turn=2,
                                 env_kwargs=TOOL_KW):
        laid = sft._as_tool_trajectory(t, fmt)
        env = make_environment_factory(ENV, **TOOL_KW)()
        observations = [env.reset(**make_environment_dataset(ENV, [t.episode.seed], **TOOL_KW)[0])]
        replies = [turn.response for turn in t.episode.turns]
        observations += [env.act(r) for r in replies]
        assert env.done and env.rewards == pytest.approx(t.turn_rewards) and laid.turn_rewards == t.turn_rewards
        ids, mask = tool_transcript(fmt, env.system_prompt, observations, replies)
        assert (laid.token_ids, laid.loss_mask) == (ids, mask)
        assert len(laid.turn_ends) == len(replies) + 1 and laid.episode is t.episode


def test_tool_call_format_refuses_a_template_without_tools(tool_tok):
    from ragen_envs.integrations.trl import ToolCallFormat

    plain = copy_tokenizer(tool_tok)
    plain.chat_template = OLD_CHATML
    with pytest.raises(ValueError, match="cannot render tool calls"):
        ToolCallFormat(plain, ENV, **TOOL_KW)


def copy_tokenizer(tok):
    import copy

    return copy.deepcopy(tok)


def _doc_blocks():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text()
    before, after = doc.split("<!-- test: trl-environment-factory-cpu -->", 1)
    shell = before.rsplit("```bash\n", 1)[1].split("```", 1)[0]
    code = after.split("```python\n", 1)[1].split("```", 1)[0]
    return shell, code


@pytest.mark.slow
def test_after_the_documented_warm_start_trls_loop_steps_the_env(tmp_path, monkeypatch, capsys):
    """docs/integrations.md's CPU recipe as written: ``ragen sft --format tools``, then
    ``GRPOTrainer(environment_factory=...)``. Most rollouts of TRL's own loop call ``act``
    (before the warm start none does), and the rewards TRL logs equal a local replay of the
    replies ``act`` received through ``gym.make``."""
    import shlex

    import gymnasium as gym

    shell, code = _doc_blocks()
    monkeypatch.chdir(tmp_path)
    (line,) = [x for x in shell.strip().splitlines() if x.strip()]
    argv = shlex.split(line)
    assert argv[:2] == ["ragen", "sft"] and "--format" in argv and "tools" in argv
    assert cli_main(argv[1:]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "through TRL's tool loop" in printed and "called act" in printed
    ns: dict = {}
    exec(compile(code, "docs/integrations.md", "exec"), ns)
    trainer = ns["trainer"]
    assert trainer.state.global_step == 2
    envs = trainer.environments
    logged = list(trainer._logs["rewards"]["RagenSokobanV0"])
    assert len(logged) == len(envs) == 8
    called = sum(len(e.replies) > e.unplayed_turns for e in envs)
    assert called >= 6, [e.replies for e in envs]  # most rollouts stepped the env through act
    replayed = []
    for e in envs:
        env = gym.make("ragen/Sokoban-v0", max_turns=2)
        env.reset(seed=e.seed)
        total, done = 0.0, False
        for reply in e.replies:  # the calls' replies, then the unplayed turns as ""
            assert not done
            _, r, term, trunc, _ = env.step(reply)
            total, done = total + r, term or trunc
        assert done
        replayed.append(total)
    assert logged == pytest.approx(replayed)
