"""Hostile replies: linear-time parsing equal to the old regexes, bounded env steps, JSON-safe info.

The old regex implementations are kept here as oracles: the linear scanners in
``protocol/parsing.py`` and ``webshop/engine.py`` must return exactly what they returned.
"""

from __future__ import annotations

import json
import time
from dataclasses import astuple

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragen_envs
from ragen_envs.protocol import parse_answer
from ragen_envs.protocol import reasoning as R
from ragen_envs.webshop.engine import parse_action

ALL_IDS = [spec.id for spec in ragen_envs.ENV_SPECS]


from old_parsers import old_parse_action, old_parse_answer, old_reasoning_report  # noqa: E402


# --------------------------------------------------------------------------- generated replies
# Alphabets biased towards what the scanners look for: tags and their fragments, whitespace of
# every kind \s knows (and some it does not), separators, action names, brackets, surrogates.
TAG_UNITS = ["<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>", "<think", "</",
             "think>", "answer>", "<", ">", "/", "||", "|", " ", "\n", "\t", "\r", "\x0b", "\x0c", "\x1c",
             "\x85", "\xa0", "\u2003", "\u3000", "\u200b", "a", "x", "Up", "up", "DOWN", "Left", "right",
             "go", ".", "[", "]", "\ud800", "İ"]
ACTION_UNITS = ["search", "click", "[", "]", "[[", "]]", "a", " ", "\n", "\r", "b0", "buy now", "<", "|", "\ud83d",
                "é", "x]", "[x"]
NAME_SETS = [None, ("Up", "Down", "Left", "Right"), ("up",), ("a", "x", "go"), ("Left", "|")]


def _joined(units: list[str], max_size: int) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(units), max_size=max_size).map("".join)


SPACES = [" ", "\n", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2003", "\u2028", "\u3000",
          "\u200b", "\ufeff", "x"]
_junk = _joined(TAG_UNITS, 8)
# Near-miss replies: think part, a run of (maybe not) whitespace, answer part, in varied orders.
structured = st.lists(
    st.one_of(
        st.tuples(st.just("<think>"), _junk, st.just("</think>"), _joined(SPACES, 4), st.just("<answer>"), _junk,
                  st.sampled_from(["</answer>", "", "</answer"])).map("".join),
        _junk,
    ),
    min_size=1, max_size=4,
).map("".join)
replies = st.one_of(_joined(TAG_UNITS, 40), _joined(TAG_UNITS, 200), st.text(max_size=60), structured,
                    st.lists(st.one_of(st.sampled_from(TAG_UNITS), st.text(max_size=5)), max_size=30).map("".join))
actions = st.one_of(_joined(ACTION_UNITS, 30), st.text(alphabet="[]a\n ", max_size=40), st.text(max_size=40))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies, st.sampled_from(NAME_SETS), st.booleans(), st.integers(1, 5))
def test_parse_answer_equals_the_regex_parser(text, names, think, max_actions):
    assert astuple(parse_answer(text, names, think, max_actions)) == astuple(old_parse_answer(text, names, think, max_actions))


@pytest.mark.parametrize("text", [
    "<think>a</think> \n<answer>Up</answer>",
    "<think>a</think>x<answer>Up</answer><think>b</think><answer>Down</answer>",
    "<think>a</think>\x1c<answer>Up</answer>",  # \x1c is \s and str.isspace
    "<think>a</think>\u200b<answer>Up</answer>",  # zero-width space is neither
    "<think><think>a</think><answer></think><answer>Up</answer>",
    "<think>a</think><answer>b<think>c</think><answer>d</answer>",
    "<think>a</think><answer>b",
    "<think>a</think><answer></answer></think><answer>x</answer>",
    "</answer><think>a</think><answer>",
    "<think></answer></think><answer>Up</answer>",
    "<answer>Up</answer>",
    "<answer><answer>Up</answer></answer>",
])
@pytest.mark.parametrize("think", [True, False])
def test_parse_answer_edge_cases_equal_the_regex(text, think):
    names = ("Up", "Down")
    assert astuple(parse_answer(text, names, think)) == astuple(old_parse_answer(text, names, think))


THINK_UNITS = ["go", "push", "I", "the", "box", "boxes", "target", "wall", "is", "left", "right", "above", "below",
               "up", "Up", "DOWN", "Left", "Dragon", "phoenix", " ", " ", ". ", ".", ";", "!", "?", "\n", ",", "x",
               "K", "İ", "Σ"]
LEGEND = {"#": "wall", "_": "empty", "O": "target", "X": "box", "√": "box on target", "P": "player"}
GRIDS = ["#P#\n#X#\n#O#", "#####\n#_X_#\n#OP_#\n#####", "X__\n___\n__O", "P", "abc"]


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(THINK_UNITS), max_size=40).map(" ".join), st.sampled_from(NAME_SETS),
       st.sampled_from([[], ["Up"], ["Left", "Up"]]), st.sampled_from(GRIDS))
def test_reasoning_report_equals_the_unmemoised_one(think, names, answer, grid):
    assert R.reasoning_report(think, answer, names, grid, LEGEND) == old_reasoning_report(think, answer, names, grid, LEGEND)


@settings(max_examples=1000, deadline=None)
@given(actions)
def test_parse_action_equals_the_regex(action):
    assert parse_action(action) == old_parse_action(action)


@pytest.mark.parametrize("action", ["search[a]", "click[x]", "[a]", "a[]", "a[b", "ab]", "a[b]]", "a[[b]", "a[b]c]",
                                    "a]b[c]", "a[b]\nc[d]", "a\n[b]", "[[]]", "x[]]", "a[b\n]", "a[\nb]", "", "[", "]"])
def test_parse_action_edge_cases_equal_the_regex(action):
    assert parse_action(action) == old_parse_action(action)


def test_non_str_replies_are_refused():
    with pytest.raises(TypeError, match="must be a str"):
        parse_answer(["<think>x</think><answer>Up</answer>"], ("Up",))
    with pytest.raises(TypeError, match="must be a str"):
        parse_answer(None, ("Up",))


# --------------------------------------------------------------------------- time
# Repeated units that made the regexes backtrack (cubic for the first, quadratic for the rest).
HOSTILE_UNITS = ["<think></think><answer>", "<think>", "<think>a</think>", "</think>", "<answer>", "[", "||",
                 "<think></think> ", "go up. box left.\n"]


def hostile_replies(size: int) -> list[str]:
    """Per unit: the unit repeated to ``size`` characters, raw and inside a well-formed reply
    (think part, answer part, a WebShop action, a WebShop search query) so that every stage
    of a step sees it."""
    out = []
    for unit in HOSTILE_UNITS:
        body = unit * (size // len(unit))
        out += [body, f"<think>{body}</think><answer>{body}</answer>",
                f"<think>x</think><answer>search{body}</answer>", f"<think>x</think><answer>search[{body}]</answer>"]
    return out


@pytest.fixture(scope="module")
def envs():
    made = {env_id: gym.make(env_id) for env_id in ALL_IDS}
    yield made
    for env in made.values():
        env.close()


def _slowest_step(env, replies: list[str]) -> float:
    worst = 0.0
    for i, reply in enumerate(replies):
        env.reset(seed=i)
        start = time.perf_counter()
        env.step(reply)
        worst = max(worst, time.perf_counter() - start)
    return worst


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_a_megabyte_of_hostile_reply_steps_in_well_under_a_second(envs, env_id):
    # The regex parser needed minutes per such reply (quadratic: ~10^12 steps); a linear step
    # is tens of milliseconds. 1.5 s allows for a loaded 2-core machine.
    assert _slowest_step(envs[env_id], hostile_replies(1 << 20)) < 1.5


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_replies_up_to_the_action_space_length_step_in_100_ms(envs, env_id):
    env = envs[env_id]
    size = env.action_space.max_length
    assert _slowest_step(env, hostile_replies(size)) < 0.1


# --------------------------------------------------------------------------- JSON-safe info
GOOD = {"ragen/Bandit-v0": "Dragon", "ragen/BanditRev-v0": "Dragon", "ragen/FrozenLake-v0": "Left",
        "ragen/LightsOut-v0": "(1, 1)", "ragen/Countdown-v0": "1 + 2 - 3", "ragen/WebShop-v0": "search[shoes]"}


def _good_reply(env_id: str) -> str:
    return f"<think>go</think><answer>{GOOD.get(env_id, 'Up')}</answer>"


def _encodes(obj) -> None:
    json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8")


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_info_of_a_reply_with_lone_surrogates_encodes_as_utf8_json(envs, env_id):
    env = envs[env_id]
    env.reset(seed=0)
    obs, reward, *_, info = env.step("<think>\ud800 go\udfff</think><answer>\udc00Up || \ud83d</answer>")
    _encodes(info)
    _encodes(obs)
    assert info["think"] == "\ufffd go\ufffd" and info["answer"].startswith("\ufffdUp")


# --------------------------------------------------------------------------- smaller promises
@pytest.mark.parametrize("env_id", ALL_IDS)
@pytest.mark.parametrize("bad", [[None], b"<answer>Up</answer>", None, 3])
def test_non_str_actions_are_refused(envs, env_id, bad):
    env = envs[env_id]
    env.reset(seed=0)
    reply = _good_reply(env_id)
    with pytest.raises(TypeError, match="str"):
        env.step([reply] if bad == [None] else bad)
    env.step(reply)  # the episode is untouched: the refused step did not count
    assert env.unwrapped.budget.turns_used == 1


def test_vector_and_pettingzoo_paths_refuse_non_str_actions():
    from ragen_envs.multiagent import parallel_env

    vec = ragen_envs.make_vec("ragen/Bandit-v0", 2)
    vec.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        vec.step([[_good_reply("ragen/Bandit-v0")]] * 2)
    vec.close()
    pz = parallel_env("ragen/Bandit-v0", group_size=2)
    pz.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        pz.step({agent: [_good_reply("ragen/Bandit-v0")] for agent in pz.agents})
    pz.close()


@pytest.mark.parametrize("env_id", ALL_IDS)
@pytest.mark.parametrize("bad_reset", [{"seed": -1}, {"seed": 2**32}, {"seed": "1"}, {"options": {"nope": 1}}])
def test_a_failing_first_reset_leaves_a_working_env(env_id, bad_reset):
    env = gym.make(env_id)
    with pytest.raises(ValueError):
        env.reset(**bad_reset)
    obs, info = env.reset(seed=0)
    assert info["seed"] == 0
    for _ in range(2):  # the second step is the one Gymnasium's checker broke
        *_, terminated, truncated, info = env.step(_good_reply(env_id))
        assert info["turn"] >= 1
        if terminated or truncated:
            env.reset(seed=1)
    env.close()


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_one_seed_rule_for_every_id(envs, env_id):
    env = envs[env_id]
    for bad in (2**32, 2**40, -1):
        with pytest.raises(ValueError, match=r"\[0, 2\*\*32\)"):
            env.reset(seed=bad)
        with pytest.raises(ValueError, match=r"\[0, 2\*\*32\)"):
            env.reset(seed=0, options={"noise_seed": bad})
    _, info = env.reset(seed=2**32 - 1, options={"noise_seed": 2**32 - 1})
    assert info["seed"] == 2**32 - 1


# --------------------------------------------------------------------------- bounded fuzzing
fuzz_replies = st.one_of(replies, st.text(max_size=400), _joined(TAG_UNITS + ACTION_UNITS, 300),
                         st.tuples(st.just("<think>"), _joined(THINK_UNITS, 60), st.just("</think><answer>"),
                                   _joined(ACTION_UNITS + ["Up", "Dragon", "||"], 12),
                                   st.just("</answer>")).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_IDS), st.lists(fuzz_replies, min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_fuzzed_replies_never_raise_and_give_json_info_quickly(envs, env_id, replies_, seed):
    env = envs[env_id]
    env.reset(seed=seed % 1000)  # Sokoban levels are cached per seed: keep the fuzzing cheap
    for reply in replies_:
        start = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(reply)
        assert time.perf_counter() - start < 0.1
        _encodes(info)
        _encodes(obs)
        assert reward == reward and abs(reward) < 10
        if terminated or truncated:
            break
