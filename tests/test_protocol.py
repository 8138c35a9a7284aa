"""The protocol's promises: parsing rules, prompt text, budgets, penalty (docs/protocol.md)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.protocol import (
    FORMAT_PENALTY,
    SYSTEM_PROMPT,
    Episode,
    Turn,
    chat_messages,
    format_answer,
    instruction_prefix,
    parse_answer,
    reward_message,
    turn_block,
)

NAMES = ("Up", "Down", "Left", "Right")


# --------------------------------------------------------------------------- parsing
def test_parse_reference_rules():
    p = parse_answer("<think>plan</think>\n <answer> up ||  || LEFT|| jump </answer> tail", NAMES)
    assert p.matched and p.think == "plan"
    assert p.pieces == ("up", "LEFT", "jump")
    assert p.actions == ("Up", "Left")
    assert p.invalid == ("jump",)
    assert not p.format_ok


def test_parse_first_match_only():
    p = parse_answer("<think>a</think><answer>Up</answer><think>b</think><answer>Down</answer>", NAMES)
    assert p.actions == ("Up",) and p.think == "a"


def test_parse_extra_actions_dropped_without_penalty():
    text = "<think>t</think><answer>" + " || ".join(["Up"] * 7) + "</answer>"
    p = parse_answer(text, NAMES, max_actions=5)
    assert p.actions == ("Up",) * 5 and p.format_ok
    assert p.answer == "Up || Up || Up || Up || Up"


def test_parse_think_off_and_missing_think():
    assert parse_answer("<answer>Down</answer>", NAMES, think=False).actions == ("Down",)
    assert not parse_answer("<answer>Down</answer>", NAMES, think=True).matched
    assert parse_answer("<think>x</think><answer>Down</answer>", NAMES, think=False).actions == ("Down",)


@pytest.mark.parametrize(
    "text",
    ["", "Up", "<think>x</think>", "<think>x</think><answer></answer>", "<think>x</think><answer> || </answer>",
     "<think>x</think><answer>up left</answer>", "<answer>Up</answer><think>x</think>"],
)
def test_malformed_replies_are_not_ok(text):
    assert not parse_answer(text, NAMES).format_ok


def test_free_text_actions():
    p = parse_answer("<think>x</think><answer>search[red shoes]</answer>", None)
    assert p.actions == ("search[red shoes]",) and p.format_ok


def test_stray_tags_removed():
    p = parse_answer("<think><think>x</think><answer>Up<|im_end|></answer>", NAMES)
    assert p.think == "x" and p.actions == ("Up",)


@given(st.text())
def test_any_string_parses_without_error(text):
    p = parse_answer(text, NAMES)
    assert p.format_ok == (p.matched and bool(p.pieces) and not p.invalid)
    assert len(p.pieces) <= 5
    assert len(p.actions) + len(p.invalid) == len(p.pieces)


@given(
    st.lists(st.sampled_from(NAMES + ("up", "DOWN", "left")), min_size=1, max_size=5),
    st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=40),
    st.booleans(),
)
def test_well_formed_round_trip(actions, think_text, think):
    p = parse_answer(format_answer(actions, think_text, think), NAMES, think=think)
    assert p.format_ok
    assert [a.lower() for a in p.actions] == [a.lower() for a in actions]


# --------------------------------------------------------------------------- prompt text
SOKOBAN_123_TURN1 = (
    "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets. "
    "When you are right next to a box, you can push it by moving in the same direction. You cannot push a "
    "box through a wall, and you cannot pull a box. The answer should be a sequence of actions, like "
    "<answer>Right || Right || Up</answer>\n"
    "The meaning of each symbol in the state is:\n"
    "#: wall, _: empty, O: target, √: box on target, X: box, P: player, S: player on target\n"
    "Your available actions are:\n"
    "Up, Down, Left, Right\n"
    'You can make up to 10 actions, separated by the action separator " || "\n'
    "\n"
    "Turn 1:\n"
    "State:\n"
    "######\n######\n#O####\n#XP###\n#__###\n######\n"
    "You have 10 actions left. Always output: <think> [Your thoughts] </think> <answer> [your answer] </answer> "
    "with no extra text. Strictly follow this format. Max response length: 100 words (tokens).\n"
)
SOKOBAN_123_TURN2 = (
    "Reward:\n-0.2\n"
    "\n"
    "Turn 2:\n"
    "State:\n"
    "######\n######\n#O####\n#X_###\n#P_###\n######\n"
    "You have 8 actions left. Always output: <think> [Your thoughts] </think> <answer> [your answer] </answer> "
    "with no extra text. Strictly follow this format. Max response length: 100 words (tokens).\n"
)


def test_reference_worked_example_sokoban_123():
    """ragen_spec.md §2.1: the exact text after the reply 'Down || Left' on seed 123."""
    env = gym.make("ragen/Sokoban-v0")
    obs, info = env.reset(seed=123)
    assert obs == SOKOBAN_123_TURN1
    assert info["system_prompt"] == SYSTEM_PROMPT == "You're a helpful assistant. "
    obs, reward, terminated, truncated, info = env.step("<think>…</think><answer>Down || Left</answer>")
    assert obs == SOKOBAN_123_TURN2
    assert reward == pytest.approx(-0.2) and not terminated and not truncated


def test_reward_line_shows_python_float_sums_and_zero():
    env = gym.make("ragen/Sokoban-v0")
    env.reset(seed=123)
    obs, *_ , info = env.step("<think>x</think><answer>Right || Right || Right</answer>")
    assert obs.startswith("Reward:\n-0.30000000000000004\n")  # three blocked moves, as the reference
    obs, reward, *_ , info = env.step("no tags at all")
    assert obs.startswith("Reward:\n0\n") and reward == FORMAT_PENALTY
    assert info["game_reward"] == 0.0 and info["format_penalty"] == FORMAT_PENALTY


def test_think_off_prompt():
    block = turn_block(1, "S", 3, think=False)
    assert "Always output: <answer> [your answer] </answer> with no extra text." in block
    assert "<think>" not in block


def test_minimal_style_and_bad_style():
    assert turn_block(2, "G", 4, style="minimal") == "\nTurn 2:\nState:\nG\nYou have 4 actions left.\n"
    with pytest.raises(ValueError, match="prompt style"):
        turn_block(1, "G", 4, style="fancy")


def test_instruction_prefix_without_legend_or_actions():
    assert instruction_prefix("", None, (), 1) == ""
    assert reward_message(0) == "Reward:\n0\n"


def test_chat_messages_layout():
    msgs = chat_messages(["o1", "o2", "o3"], ["r1", "r2"])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    with pytest.raises(ValueError):
        chat_messages(["o1"], ["r1", "r2"])


def test_episode_messages_reformat_and_round_trip():
    info = {"matched": True, "think": "t", "answer": "Up", "success": False, "n_executed": 1}
    ep = Episode("ragen/Sokoban-v0", 1, turns=[Turn("obs", "<think>t</think> <answer>Up</answer> junk", -0.1, info)])
    assert ep.messages()[-1]["content"] == "<think>t</think><answer>Up</answer>"
    assert ep.messages(reformat=False)[-1]["content"].endswith("junk")
    assert Episode.from_dict(ep.to_dict()) == ep


# --------------------------------------------------------------------------- env-level promises
ENV_IDS = [s.id for s in ragen_envs.ENV_SPECS]
replies = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from(["Up", "down", "Left", "RIGHT", "Dragon", "phoenix", "Trader", "Librarian",
                              "Down", "jump", ""]), max_size=7).map(lambda a: format_answer(a, "t")),
)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), answers=st.lists(replies, min_size=1, max_size=8))
def test_any_reply_is_legal_and_penalised_iff_malformed(env_id, seed, answers):
    env = gym.make(env_id)
    base = env.unwrapped
    env.reset(seed=seed)
    turns = actions = 0
    for text in answers:
        obs, reward, terminated, truncated, info = env.step(text)
        parsed = parse_answer(text, base.action_names(), base.think, base.budget.max_actions_per_turn)
        assert (info["format_penalty"] != 0) == (not parsed.format_ok)
        assert reward == pytest.approx(info["game_reward"] + info["format_penalty"])
        turns += 1
        actions += info["n_executed"]
        assert info["n_executed"] <= info["n_valid"] <= info["n_parsed"] <= base.budget.max_actions_per_turn
        assert turns <= base.budget.max_turns and actions <= base.budget.max_actions
        assert info["turn"] == turns and info["actions_left"] == base.budget.max_actions - actions
        assert info["action_is_valid"] == (info["n_executed"] > 0)
        budget_out = turns == base.budget.max_turns or actions == base.budget.max_actions
        if terminated or truncated:
            assert not (terminated and truncated)
            assert terminated or budget_out
            assert "Turn" not in obs
            break
        assert not budget_out
        assert obs.startswith("Reward:\n") and f"Turn {turns + 1}:" in obs
