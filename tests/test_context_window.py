"""Context windows (``context_window_mode`` / ``max_context_window``, RAGEN-2's names):
what the model reads each turn in full, limited_multi_turn and single_turn, the per-turn
training samples of the windowed modes, GRPO over episodes, the config's one-line errors,
``ragen train`` with each mode, and a resumed run keeping its mode.

The expected texts are written out by hand from the reference's builders
(mll-lab-nu/RAGEN@20daedc ``ragen/llm_agent/ctx_manager.py`` and
``ragen/llm_agent/memory/simple_memory.py``), with the instruction kept at the start of the
first user message (this protocol's layout) instead of the reference's system message.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # (before torch loads: idle threads sleep on a shared CPU)

from ragen_envs.protocol.context import (
    require_windowable,
    check_context_window,
    context_messages,
    single_turn_content,
    split_observation,
    window_start,
)
from ragen_envs.protocol.episode import history_reply

# three turns of a made-up game in the protocol's layout (docs/protocol.md §2)
OBS = [
    "INSTR\n\nTurn 1:\nState:\nA\nYou have 3 actions left. END\n",
    "Reward:\n0.5\n\nTurn 2:\nState:\nB\nYou have 2 actions left. END\n",
    "Reward:\n0\n\nTurn 3:\nState:\nC\nC2\nYou have 1 actions left. END\n",
]
RESP = ["r1", "r2"]
SYS = {"role": "system", "content": "SYS"}


def _user(text):
    return {"role": "user", "content": text}


def _asst(text):
    return {"role": "assistant", "content": text}


def test_window_start_by_hand():
    assert [window_start(t, 2) for t in range(4)] == [0, 0, 1, 2]
    assert [window_start(t, 1) for t in range(3)] == [0, 1, 2]
    assert [window_start(t, -1) for t in range(3)] == [0, 0, 0]
    assert window_start(5, 3) == 3


def test_full_is_the_whole_conversation():
    assert context_messages(OBS, RESP, 2, "full", -1, "SYS") == [
        SYS, _user(OBS[0]), _asst("r1"), _user(OBS[1]), _asst("r2"), _user(OBS[2])]


def test_limited_multi_turn_keeps_the_last_k_turns():
    # k = 2: turns 1-2 are the whole history; at turn 3 the window is turns 2-3, its first
    # user message the instruction + turn 2's block (turn 1's "Reward:" line goes with turn 1)
    assert context_messages(OBS, RESP, 1, "limited_multi_turn", 2, "SYS") == [
        SYS, _user(OBS[0]), _asst("r1"), _user(OBS[1])]
    assert context_messages(OBS, RESP, 2, "limited_multi_turn", 2, "SYS") == [
        SYS, _user("INSTR\n\nTurn 2:\nState:\nB\nYou have 2 actions left. END\n"), _asst("r2"),
        _user("Reward:\n0\n\nTurn 3:\nState:\nC\nC2\nYou have 1 actions left. END\n")]
    # k = 1: the current state only
    assert context_messages(OBS, RESP, 2, "limited_multi_turn", 1, "SYS") == [
        SYS, _user("INSTR\n\nTurn 3:\nState:\nC\nC2\nYou have 1 actions left. END\n")]
    # k >= turns and k = -1: full exactly
    for k in (3, 9, -1):
        assert context_messages(OBS, RESP, 2, "limited_multi_turn", k, "SYS") == context_messages(OBS, RESP, 2, system_prompt="SYS")


def test_single_turn_summary_and_current_state():
    first = "INSTR\n(Turn 1):\nState:\nA\nYou have 3 actions left. END\n"
    for k in (-1, 1, 2):
        assert context_messages(OBS, RESP, 0, "single_turn", k, "SYS") == [SYS, _user(first)]
    assert context_messages(OBS, RESP, 2, "single_turn", -1, "SYS") == [SYS, _user(
        "INSTR\nSummary: 2 step(s) completed so far. Showing the last 2 turn(s) with state/action/reward details. "
        "Recent turns:\n---\n"
        "Turn 1 State:\nA\nTurn 1 Action: r1\nTurn 1 Reward: 0.5\n---\n"
        "Turn 2 State:\nB\nTurn 2 Action: r2\nTurn 2 Reward: 0\n---\n"
        "\nCurrent Turn (Turn 3):\nState:\nC\nC2\nYou have 1 actions left. END\n")]
    assert context_messages(OBS, RESP, 2, "single_turn", 2, "SYS") == [SYS, _user(
        "INSTR\nSummary: 2 step(s) completed so far. Showing the last 1 turn(s) with state/action/reward details. "
        "Recent turns:\n---\n"
        "Turn 2 State:\nB\nTurn 2 Action: r2\nTurn 2 Reward: 0\n---\n"
        "\nCurrent Turn (Turn 3):\nState:\nC\nC2\nYou have 1 actions left. END\n")]
    assert context_messages(OBS, RESP, 2, "single_turn", 1, "SYS") == [SYS, _user(
        "INSTR\n(Turn 3):\nState:\nC\nC2\nYou have 1 actions left. END\n")]
    assert single_turn_content(OBS, RESP, 1, 1) == "(Turn 2):\nState:\nB\nYou have 2 actions left. END\n"


def test_split_observation_and_its_errors():
    assert split_observation(OBS[1], 2) == ("Reward:\n0.5\n", OBS[1][len("Reward:\n0.5\n"):])
    assert split_observation(OBS[0], 1)[0] == "INSTR\n"
    with pytest.raises(ValueError, match="no protocol state block") as err:
        split_observation(OBS[1], 3)  # the wrong turn number
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="no protocol state block"):
        split_observation("What is 2+2?", 1)
    with pytest.raises(ValueError, match="needs observations 0..2"):
        context_messages(OBS[:2], RESP, 2, "single_turn", 2)


_text = st.text(alphabet="abcXO_#P \n<>/|", max_size=12)


@settings(max_examples=60, deadline=None)
@given(states=st.lists(_text.filter(lambda x: "\nYou have" not in x), min_size=1, max_size=6),
       replies=st.lists(_text, min_size=6, max_size=6), k=st.sampled_from([-1, 1, 2, 3, 7]), data=st.data())
def test_window_promises(states, replies, k, data):
    """Any episode in the protocol layout: limited_multi_turn shows turns s..t (t - s replies)
    and is full once the window covers the episode; every single_turn prompt is one user
    message that ends with turn t's state block body; k = 1 shows no earlier reply."""
    from ragen_envs.protocol.prompt import reward_message, turn_block

    T = len(states)
    obs = [("RULES\n" if j == 0 else reward_message(j * 0.5)) + turn_block(j + 1, states[j], 9 - j) for j in range(T)]
    t = data.draw(st.integers(0, T - 1))
    s = window_start(t, k)
    limited = context_messages(obs, replies, t, "limited_multi_turn", k)
    assert [m["content"] for m in limited if m["role"] == "assistant"] == replies[s:t]
    assert limited[1]["content"].startswith("RULES\n\nTurn " + str(s + 1) + ":\nState:\n")
    if k == -1 or k > t:
        assert limited == context_messages(obs, replies, t)
    single = context_messages(obs, replies, t, "single_turn", k)
    body = obs[t][obs[t].index(f"\nTurn {t + 1}:\n") + len(f"\nTurn {t + 1}:\n"):]
    assert len(single) == 2 and single[1]["content"].startswith("RULES\n") and single[1]["content"].endswith(body)
    assert single[1]["content"].count(" Action: ") == t - s


# ----------------------------------------------------------------------------- against the reference
REFERENCE = None


def _reference_cases():
    import gzip
    from pathlib import Path

    global REFERENCE
    if REFERENCE is None:
        path = Path(__file__).parent / "fixtures" / "ragen2" / "context_windows.json.gz"
        with gzip.open(path, "rt") as f:
            REFERENCE = json.load(f)
    return REFERENCE


def _as_ours(messages, instruction):
    """The reference's messages in this protocol's layout: the instruction moves from the
    system message to the start of the first user message."""
    system, first, *rest = messages
    assert system["content"] == "You're a helpful assistant. " + instruction
    return [{"role": "system", "content": "You're a helpful assistant. "},
            {"role": "user", "content": instruction + first["content"]}, *rest]


def test_matches_the_reference_context_manager():
    """tests/fixtures/ragen2/context_windows.json.gz (record_context.py): the reference's
    ContextManager run on random histories, every mode and k in -1, 1, 2, 3 — the messages
    of each turn's prompt and of each per-turn training sample."""
    from ragen_envs.protocol.prompt import reward_message, turn_block

    data = _reference_cases()
    instruction = data["instruction"]
    assert {(c["mode"], c["k"]) for c in data["cases"]} >= {("single_turn", -1), ("limited_multi_turn", 2)}
    checked = 0
    for case in data["cases"]:
        T = len(case["states"])
        obs = [(instruction if j == 0 else reward_message(case["rewards"][j - 1]))
               + turn_block(j + 1, case["states"][j], case["actions_left"][j]) for j in range(T)]
        resp = case["responses"]
        for t in range(T):
            ours = context_messages(obs[: t + 1], resp[:t], t, case["mode"], case["k"])
            assert ours == _as_ours(case["infer"][t], instruction), (case["mode"], case["k"], t)
            if case["train"] is not None:  # a sample: the prompt of turn t + its reply
                assert ours + [_asst(resp[t])] == _as_ours(case["train"][t], instruction), (case["mode"], case["k"], t)
            checked += 1
    assert checked > 150


@pytest.mark.parametrize("mode,k,message", [
    ("window", -1, "context_window_mode must be one of full, limited_multi_turn, single_turn, got 'window'"),
    ("limited_multi_turn", 0, "max_context_window must be -1 \\(no limit\\) or an integer >= 1, got 0"),
    ("single_turn", -2, "max_context_window must be -1"),
    ("single_turn", 2.0, "max_context_window must be -1"),
    ("single_turn", True, "max_context_window must be -1"),
    ("full", 3, "max_context_window=3 needs context_window_mode limited_multi_turn or single_turn"),
])
def test_check_context_window_errors_are_one_line(mode, k, message):
    with pytest.raises(ValueError, match=message) as err:
        check_context_window(mode, k)
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- config and CLI
def test_config_fields_defaults_and_errors():
    from ragen_envs.starpo.config import StarPOConfig, make_config

    cfg = StarPOConfig()
    assert (cfg.context_window_mode, cfg.max_context_window) == ("full", -1)  # today's behaviour
    assert make_config("grpo", context_window_mode="single_turn", max_context_window=2).context_window_mode == "single_turn"
    for kwargs, message in [
        ({"context_window_mode": "sliding"}, "context_window_mode must be one of"),
        ({"context_window_mode": "limited_multi_turn", "max_context_window": 0}, "max_context_window must be -1"),
        ({"max_context_window": 2}, "max_context_window=2 needs context_window_mode"),
        ({"context_window_mode": "single_turn", "reward_placement": "turn"}, "reward_placement must be 'trajectory'"),
    ]:
        with pytest.raises(ValueError, match=message) as err:
            StarPOConfig(**kwargs)
        assert "\n" not in str(err.value)


def test_cli_errors_are_one_line(capsys, tmp_path):
    from ragen_envs.cli import main

    for sets, message in [(["context_window_mode=last_two"], "context_window_mode must be one of"),
                          (["context_window_mode=single_turn", "max_context_window=0"], "max_context_window must be -1")]:
        args = ["train", "ragen/Sokoban-v0", "--preset", "grpo", "--steps", "1", "--out", str(tmp_path / "run")]
        for s in sets:
            args += ["--set", s]
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("ragen train: error:") and message in err and "\n" not in err
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- GRPO over episodes
def test_grpo_counts_each_episode_once():
    torch = pytest.importorskip("torch")
    from ragen_envs.starpo.core import compute_advantages, episode_scores

    # one group of 2 episodes: returns 1 (3 turns) and 0 (1 turn). Over episodes: mean 0.5,
    # sample std 0.7071 -> advantages +0.7071 / -0.7071 on every turn of each (not the
    # 4-row statistics mean 0.75, std 0.5)
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 1.0, 1.0, 0.0])
    mask = torch.ones(4, 3)
    episodes = torch.tensor([0, 0, 0, 1])
    assert episode_scores(rewards.sum(1), episodes).tolist() == [1.0, 0.0]
    adv, _ = compute_advantages("grpo", token_rewards=rewards, values=torch.zeros_like(mask), mask=mask, turn_ends=None,
                                group_size=2, gamma=1.0, lam=1.0, gamma_high=1.0, eps=1e-6, episodes=episodes)
    assert adv[:, 0].tolist() == pytest.approx([0.7071, 0.7071, 0.7071, -0.7071], abs=1e-4)
    adv, _ = compute_advantages("grpo", token_rewards=rewards, values=torch.zeros_like(mask), mask=mask, turn_ends=None,
                                group_size=2, gamma=1.0, lam=1.0, gamma_high=1.0, eps=1e-6, episodes=episodes,
                                norm_by_std=False)
    assert adv[:, 0].tolist() == pytest.approx([0.5, 0.5, 0.5, -0.5])
    with pytest.raises(ValueError, match="number every episode"):
        episode_scores(torch.tensor([1.0, 2.0]), torch.tensor([0, 2]))


# ----------------------------------------------------------------------------- token level (tiny tokenizer)
SOKOBAN = {"max_turns": 4, "prompt_style": "minimal"}
REPLIES = ["<think>a</think> <answer>Left</answer>", "<think>b</think><answer>Up || Up</answer>",
           "<think>c</think>nothing", "<think>d</think><answer>Down</answer>"]
INSTR = ("You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets. When you "
         "are right next to a box, you can push it by moving in the same direction. You cannot push a box through a "
         "wall, and you cannot pull a box. The answer should be a sequence of actions, like <answer>Right || Right || "
         "Up</answer>\nThe meaning of each symbol in the state is:\n#: wall, _: empty, O: target, √: box on target, "
         "X: box, P: player, S: player on target\nYour available actions are:\nUp, Down, Left, Right\nYou can make up "
         "to 10 actions, separated by the action separator \" || \"\n")
S1 = "######\n###_P#\n#__X_#\n#_O__#\n#____#\n######"
S2 = "######\n###P_#\n#__X_#\n#_O__#\n#____#\n######"  # after Left; Up || Up hit the wall: S3 = S4 = S2


def _chat(*messages):
    """The tiny tokenizer's ChatML, written out."""
    return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in messages)


SYSTEM = ("system", "You're a helpful assistant. ")
GEN = "<|im_start|>assistant\n<think>"
B1 = f"\nTurn 1:\nState:\n{S1}\nYou have 10 actions left.\n"
B2 = f"\nTurn 2:\nState:\n{S2}\nYou have 9 actions left.\n"
B3 = f"\nTurn 3:\nState:\n{S2}\nYou have 7 actions left.\n"
B4 = f"\nTurn 4:\nState:\n{S2}\nYou have 7 actions left.\n"
O2, O3, O4 = "Reward:\n-0.1\n" + B2, "Reward:\n-0.2\n" + B3, "Reward:\n0\n" + B4


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ragen_envs.models import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("m"), hidden_size=32, num_layers=1, intermediate_size=64)


@pytest.fixture(scope="module")
def fmt(tiny_model):
    from ragen_envs.starpo.policy import ChatFormat, load_tokenizer

    return ChatFormat(load_tokenizer(tiny_model), "<think>")


def _play(fmt, mode="full", k=-1):
    from ragen_envs.starpo.rollout import ScriptedResponder, collect_rollouts

    it = iter(REPLIES)
    responder = ScriptedResponder(fmt, lambda env, ids: next(it))
    return collect_rollouts("ragen/Sokoban-v0", 5, 1, 1, responder, fmt, env_kwargs=SOKOBAN,
                            context_window_mode=mode, max_context_window=k)[0]


def _dec(fmt, ids):
    return fmt.tok.decode(ids, skip_special_tokens=False)


def test_full_is_unchanged_and_the_default(fmt):
    t = _play(fmt)
    assert t.turn_prompts == [] and len(t.episode.turns) == 4
    ep = t.episode
    assert [x.observation for x in ep.turns] == [INSTR + B1, O2, O3, O4]
    # the one sequence of before: the whole conversation, replies as sampled
    convo = _chat(SYSTEM, ("user", INSTR + B1), ("assistant", REPLIES[0]), ("user", O2), ("assistant", REPLIES[1]),
                  ("user", O3), ("assistant", REPLIES[2]), ("user", O4), ("assistant", REPLIES[3]))
    assert _dec(fmt, t.token_ids) + "\n" == convo
    explicit = _play(fmt, "full", -1)
    assert (explicit.token_ids, explicit.loss_mask, explicit.turn_ends) == (t.token_ids, t.loss_mask, t.turn_ends)


def test_limited_multi_turn_prompts_token_exact(fmt):
    t = _play(fmt, "limited_multi_turn", 2)
    prompts = [_dec(fmt, p) for p in t.turn_prompts]
    assert prompts == [
        _chat(SYSTEM, ("user", INSTR + B1)) + GEN,
        _chat(SYSTEM, ("user", INSTR + B1), ("assistant", REPLIES[0]), ("user", O2)) + GEN,
        _chat(SYSTEM, ("user", INSTR + B2), ("assistant", REPLIES[1]), ("user", O3)) + GEN,
        _chat(SYSTEM, ("user", INSTR + B3), ("assistant", REPLIES[2]), ("user", O4)) + GEN,
    ]
    # the window's replies are the sampled ids (token-in/token-out), not tokenized again
    full = _play(fmt)
    a, b = full.reply_token_spans()[1]
    assert t.turn_prompts[2][-(len(t.turn_prompts[2]) - len(fmt.first(t.episode.system_prompt, INSTR + B2))):][:b - a] \
        == full.token_ids[a:b]
    # the whole episode still one sequence (the record), as in full
    assert t.token_ids == full.token_ids and t.loss_mask == full.loss_mask
    # k >= the episode's turns: every prompt is full's sequence up to that turn's reply
    wide = _play(fmt, "limited_multi_turn", 4)
    assert wide.turn_prompts == [full.token_ids[:a] for a, _ in full.reply_token_spans()]


def test_single_turn_prompts_token_exact(fmt):
    t = _play(fmt, "single_turn", 2)
    cur = "\nCurrent Turn "
    summary = ("Summary: {n} step(s) completed so far. Showing the last 1 turn(s) with state/action/reward details. "
               "Recent turns:\n---\n")
    # the history shows replies as the reference writes them back (a matched reply rewritten
    # <think>..</think><answer>..</answer>, the space between them gone; an unmatched one raw)
    assert [_dec(fmt, p) for p in t.turn_prompts] == [
        _chat(SYSTEM, ("user", INSTR + f"(Turn 1):\nState:\n{S1}\nYou have 10 actions left.\n")) + GEN,
        _chat(SYSTEM, ("user", INSTR + summary.format(n=1) + f"Turn 1 State:\n{S1}\nTurn 1 Action: <think>a</think>"
                       f"<answer>Left</answer>\nTurn 1 Reward: -0.1\n---\n{cur}(Turn 2):\nState:\n{S2}\n"
                       f"You have 9 actions left.\n")) + GEN,
        _chat(SYSTEM, ("user", INSTR + summary.format(n=2) + f"Turn 2 State:\n{S2}\nTurn 2 Action: <think>b</think>"
                       f"<answer>Up || Up</answer>\nTurn 2 Reward: -0.2\n---\n{cur}(Turn 3):\nState:\n{S2}\n"
                       f"You have 7 actions left.\n")) + GEN,
        _chat(SYSTEM, ("user", INSTR + summary.format(n=3) + f"Turn 3 State:\n{S2}\nTurn 3 Action: <think>c</think>"
                       f"nothing\nTurn 3 Reward: 0\n---\n{cur}(Turn 4):\nState:\n{S2}\nYou have 7 actions left.\n"))
        + GEN,
    ]
    one = _play(fmt, "single_turn", 1)
    assert _dec(fmt, one.turn_prompts[3]) == _chat(
        SYSTEM, ("user", INSTR + f"(Turn 4):\nState:\n{S2}\nYou have 7 actions left.\n")) + GEN


def test_windowed_prompts_equal_a_fresh_encode_of_the_messages(fmt):
    """The token-level prompts are the protocol's messages (context_messages) rendered and
    encoded afresh, the forced prefix after them (scripted replies are tokenized text)."""

    for mode, k in [("limited_multi_turn", 1), ("limited_multi_turn", 3), ("single_turn", -1), ("single_turn", 3)]:
        t = _play(fmt, mode, k)
        ep = t.episode
        obs = [x.observation for x in ep.turns]
        resp = [x.response if mode == "limited_multi_turn" else history_reply(x.response, x.info, True) for x in ep.turns]
        for j, prompt in enumerate(t.turn_prompts):
            msgs = context_messages(obs, resp, j, mode, k, ep.system_prompt)
            assert prompt == fmt.encode(fmt.render(msgs, True)) + fmt.prefix_ids, (mode, k, j)


def test_turn_samples_train_only_the_last_reply_with_the_episode_return(fmt):
    from ragen_envs.starpo.rollout import turn_rows

    t = _play(fmt, "limited_multi_turn", 2)
    rows, rewards, episodes = turn_rows([t, t], [[1.0, 0.5, 0.0, -0.5], [0.0, 0.0, 0.0, 0.0]])
    assert episodes == [0, 0, 0, 0, 1, 1, 1, 1] and rewards[:4] == [[1.0]] * 4 and rewards[4:] == [[0.0]] * 4
    for j, row in enumerate(rows[:4]):
        prompt = t.turn_prompts[j]
        reply = fmt.encode(REPLIES[j][len("<think>"):]) + [fmt.eot_id]
        assert row.token_ids == prompt + reply
        assert row.loss_mask == [0] * len(prompt) + [1] * len(reply)
        assert row.turn_ends == [len(row.token_ids) - 1] and row.episode is t.episode
    with pytest.raises(ValueError, match="one prompt per turn"):
        _play(fmt).turn_samples()


ROLLOUT_KEYS = ["step", "group", "member", "kept", "token_ids", "loss_mask", "turn_ends", "truncated_replies", "episode"]


def _prompt_from_window(fmt, row, turn, mode, k):
    """Turn ``turn``'s prompt ids rebuilt from a rollouts.jsonl row (docs/training.md):
    ``token_ids[:b]`` when a = 0, else ``ChatFormat.first(system, the window's first user
    message)`` + ``token_ids[a:b]``."""
    from ragen_envs.protocol import Episode

    s, a, b, n = row["window"][turn]
    ids = row["token_ids"]
    if a == 0:
        return ids[:b]
    ep = Episode.from_dict(row["episode"])
    obs = [x.observation for x in ep.turns]
    resp = [history_reply(x.response, x.info, ep.think) for x in ep.turns]
    first = context_messages(obs, resp, turn, mode, k, ep.system_prompt)[1]["content"]
    return fmt.first(ep.system_prompt, first) + ids[a:b]


@pytest.mark.parametrize("mode,k", [("limited_multi_turn", 1), ("limited_multi_turn", 2), ("limited_multi_turn", -1),
                                    ("single_turn", 1), ("single_turn", 2), ("single_turn", -1)])
def test_rollouts_record_the_window_of_each_turn(fmt, mode, k):
    """rollouts.jsonl of a windowed rollout: per turn [s, a, b, n] rebuilds exactly the prompt
    ids the policy was given (``turn_prompts``); a full row keeps its old keys only."""
    from ragen_envs.eval.store import encode_record
    from ragen_envs.starpo.rollout import Trajectory
    from ragen_envs.trajectories import rollout_record

    t = _play(fmt, mode, k)
    row = json.loads(encode_record(rollout_record(t, 3, True)))
    assert list(row) == ROLLOUT_KEYS + ["context_window", "window"]
    assert row["context_window"] == {"mode": mode, "max_context_window": k} and len(row["window"]) == 4
    starts = [a for a, _ in t.reply_token_spans()]
    for j, (s, a, b, n) in enumerate(row["window"]):
        assert s == window_start(j, k) and b == starts[j] and n == len(t.turn_prompts[j])
        assert _prompt_from_window(fmt, row, j, mode, k) == t.turn_prompts[j], (mode, k, j)
        if mode == "single_turn":
            assert a == b  # encoded fresh: nothing taken from the sequence
        elif s == 0:
            assert a == 0  # the whole sequence so far
        else:
            assert a == starts[s]  # the sampled ids from reply s on
    if (mode, k) == ("limited_multi_turn", 2):
        assert [w[0] for w in row["window"]] == [0, 0, 1, 2] and [w[1] == 0 for w in row["window"]] == [True, True,
                                                                                                           False, False]
    full = json.loads(encode_record(rollout_record(_play(fmt), 3, True)))
    assert list(full) == ROLLOUT_KEYS  # no window fields: a full run's rows as before
    assert rollout_record(Trajectory(group=0, member=0, episode=t.episode), 0, False).keys() == set(ROLLOUT_KEYS)


# ----------------------------------------------------------------------------- ragen train
TRAIN_SETS = ("num_groups=2", "group_size=2", "max_new_tokens=6", "keep_ratio=1.0", "mini_batch_size=8",
              "micro_batch_size=4", "eval_every=0", "probe_every=0", "log_samples=0", "plots=false",
              'env_kwargs={"max_turns": 3, "prompt_style": "minimal"}')


def _train(model, out, mode_sets, steps, extra=()):
    from ragen_envs.cli import main

    args = ["train", "ragen/Sokoban-v0", "--preset", "grpo", "--model", str(model), "--out", str(out),
            "--steps", str(steps)]
    for s in (*TRAIN_SETS, *mode_sets):
        args += ["--set", s]
    return main(args + list(extra))


def _metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"final"' not in line]


@pytest.mark.parametrize("sets", [(), ("context_window_mode=limited_multi_turn", "max_context_window=2"),
                                  ("context_window_mode=single_turn", "max_context_window=1")])
def test_ragen_train_runs_each_mode(tmp_path, tiny_model, capsys, sets):
    out = tmp_path / "run"
    assert _train(tiny_model, out, sets + ("save_every=0", "save_rollouts=true", "eval_every=1", "eval_episodes=2"), 1) == 0, \
        capsys.readouterr().err
    (row,) = _metrics(out)
    assert row["update/trajectories"] == 4
    saved = json.loads((out / "config.json").read_text())
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 4
    if sets:
        assert saved["context_window_mode"] == sets[0].split("=")[1] and row["update/samples"] > 4
        for r in rollouts:  # each turn's window, as the policy saw it
            assert r["context_window"]["mode"] == saved["context_window_mode"]
            assert len(r["window"]) == len(r["episode"]["turns"])
        closing = json.loads((out / "eval" / "summary.json").read_text())["config"]
        assert closing["context_window"] == {"mode": saved["context_window_mode"],
                                             "max_context_window": saved["max_context_window"]}
        assert f"context window {saved['context_window_mode']}, K=" in (out / "eval" / "report.html").read_text()
        from ragen_envs.lm.settings import load_settings

        st = load_settings(out / "model")  # the model folder says how it was trained: ragen eval plays it so
        assert (st.context_window_mode, st.max_context_window) == (saved["context_window_mode"],
                                                                   saved["max_context_window"])
    else:
        assert saved["context_window_mode"] == "full" and "update/samples" not in row
        assert all(list(r) == ROLLOUT_KEYS for r in rollouts)
        assert "context_window" not in json.loads((out / "eval" / "summary.json").read_text())["config"]


def test_a_resumed_run_keeps_its_mode(tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    mode = ("context_window_mode=single_turn", "max_context_window=2")
    assert _train(tiny_model, out, mode + ("save_every=1",), 1) == 0, capsys.readouterr().err
    capsys.readouterr()
    # without the flags: the saved mode goes on
    assert _train(tiny_model, out, ("save_every=1",), 2, ["--resume"]) == 0, capsys.readouterr().err
    saved = json.loads((out / "config.json").read_text())
    assert (saved["context_window_mode"], saved["max_context_window"]) == ("single_turn", 2)
    assert [r["step"] for r in _metrics(out)] == [0, 1] and all(r["update/samples"] > 4 for r in _metrics(out))
    capsys.readouterr()
    # another mode: refused in one line
    assert _train(tiny_model, out, ("context_window_mode=full", "max_context_window=-1", "save_every=1"), 3,
                  ["--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "context_window_mode" in err and "\n" not in err



def _trainer_config(tiny_model, out, **kw):
    from ragen_envs.starpo.config import make_config

    return make_config("grpo", env_id="ragen/Sokoban-v0", model=str(tiny_model), out_dir=str(out), steps=1,
                       num_groups=2, group_size=2, max_new_tokens=6, keep_ratio=1.0, mini_batch_size=8,
                       micro_batch_size=4, eval_every=0, probe_every=0, save_every=0, log_samples=0, plots=False,
                       env_kwargs={"max_turns": 3, "prompt_style": "minimal"}, **kw)


def test_trainer_gives_grpo_each_rows_episode(tmp_path, tiny_model, monkeypatch):
    from ragen_envs.starpo import core
    from ragen_envs.starpo.trainer import StarPOTrainer

    seen = []
    real = core.ADVANTAGE_ESTIMATORS["grpo"]
    monkeypatch.setitem(core.ADVANTAGE_ESTIMATORS, "grpo", lambda **kw: seen.append(kw) or real(**kw))
    cfg = _trainer_config(tiny_model, tmp_path, context_window_mode="single_turn", max_context_window=1)
    trainer = StarPOTrainer(cfg, log=lambda _m: None)
    turns = [len(t.episode.turns) for t in StarPOTrainer(cfg, log=lambda _m: None).rollout(cfg.train_seed_start)]
    trainer.train()
    (kw,) = seen
    expected = [e for e, n in enumerate(turns) for _ in range(n)]
    assert kw["episodes"].tolist() == expected and kw["token_rewards"].shape[0] == sum(turns) > 4
    # every turn of an episode: the same advantage (its episode's)
    adv, _ = real(**kw)
    per_row = [float(adv[r][kw["mask"][r] > 0][0]) for r in range(len(expected))]
    for e in range(4):
        assert len({round(a, 6) for a, ep in zip(per_row, expected) if ep == e}) == 1


def test_windowed_entropy_metric_averages_an_episodes_turn_samples(tmp_path, tiny_model):
    """With k = -1 every limited_multi_turn prompt is a prefix of the whole sequence, so (a
    causal model) each reply token's entropy is the one it has in the full sequence: the
    per-episode mean over the turn samples equals full mode's per-trajectory mean."""
    from ragen_envs.starpo.trainer import StarPOTrainer

    cfg = _trainer_config(tiny_model, tmp_path, context_window_mode="limited_multi_turn", max_context_window=-1)
    trainer = StarPOTrainer(cfg, log=lambda _m: None)
    trajs = trainer.rollout(cfg.train_seed_start)
    windowed = trainer._mean_entropies(trajs)
    trainer.cfg.context_window_mode = "full"
    whole = trainer._mean_entropies(trajs)
    assert windowed.shape == (4,) and torch_close(windowed, whole)


def torch_close(a, b):
    import torch

    return bool(torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-5))


def test_require_windowable_accepts_the_turn_layout_and_refuses_the_rest_in_one_line():
    obs = "Instruction.\nTurn 1:\nState:\n#P#\nYou have 10 actions left. Reply."
    for mode in ("full", "limited_multi_turn", "single_turn"):
        require_windowable(obs, mode, "ragen/X-v0")
    require_windowable({"image": b""}, "full", "ragen/X-v0")  # full reads anything
    for bad in ("no turn block here", {"image": b""}):
        with pytest.raises(ValueError, match=r"^context_window_mode=single_turn needs .*ragen/X-v0's are not$"):
            require_windowable(bad, "single_turn", "ragen/X-v0")


def test_the_trainer_refuses_a_windowed_mode_on_an_env_without_the_turn_layout():
    import gymnasium as gym

    from ragen_envs.starpo.trainer import _check_env

    class _Plain(gym.Env):
        observation_space = gym.spaces.Text(100)
        action_space = gym.spaces.Text(100)

        def reset(self, *, seed=None, options=None):
            return "a plain observation", {}

    if "test/PlainObs-v0" not in gym.registry:
        gym.register("test/PlainObs-v0", entry_point=_Plain, disable_env_checker=True)
    _check_env("test/PlainObs-v0", {}, 0, "full")
    with pytest.raises(ValueError, match="test/PlainObs-v0's are not"):
        _check_env("test/PlainObs-v0", {}, 0, "limited_multi_turn")
