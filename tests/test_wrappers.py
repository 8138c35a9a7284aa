"""VocabularyWrapper: remapped legend, grid, actions and parser; seeded draws; bad input."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.agents import make_agent
from ragen_envs.wrappers import ACTION_WORD_POOL, COMPASS_ACTIONS, SYMBOL_POOL, VocabularyWrapper

SOKOBAN_SYMBOLS = {"#": "W", "_": ".", "O": "G", "√": "C", "X": "B", "P": "A", "S": "@"}
FROZENLAKE_SYMBOLS = {"P": "a", "_": "~", "O": "0", "G": "*", "X": "x", "√": "!"}
CASES = [
    ("ragen/Sokoban-v0", SOKOBAN_SYMBOLS),
    ("ragen/FrozenLake-v0", FROZENLAKE_SYMBOLS),
]


def _grid(obs: str) -> str:
    """The state block of the latest turn in an observation."""
    return obs.rsplit("State:\n", 1)[1].split("\nYou have", 1)[0]


def _reply(*actions: str) -> str:
    return f"<think>x</think><answer>{' || '.join(actions)}</answer>"


# --------------------------------------------------------------------------- given mappings
@pytest.mark.parametrize("env_id, symbols", CASES)
def test_given_mapping_changes_legend_grid_and_actions(env_id, symbols):
    plain = gym.make(env_id)
    plain_obs, _ = plain.reset(seed=123)
    env = VocabularyWrapper(gym.make(env_id), symbols=symbols, actions=COMPASS_ACTIONS)
    obs, _ = env.reset(seed=123)
    base = env.unwrapped
    assert list(base.legend()) == [symbols[s] for s in plain.unwrapped.legend()]
    assert list(base.legend().values()) == list(plain.unwrapped.legend().values())
    assert list(base.action_names()) == [COMPASS_ACTIONS[n] for n in plain.unwrapped.action_names()]
    assert _grid(obs) == _grid(plain_obs).translate(str.maketrans(symbols))
    legend_line = ", ".join(f"{s}: {m}" for s, m in base.legend().items())
    assert legend_line in obs
    assert ", ".join(COMPASS_ACTIONS[n] for n in plain.unwrapped.action_names()) in obs
    assert env.symbol_map == symbols and env.action_map == COMPASS_ACTIONS
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("env_id, symbols", CASES)
def test_parser_accepts_new_names_and_rejects_old(env_id, symbols):
    env = VocabularyWrapper(gym.make(env_id), symbols=symbols, actions=COMPASS_ACTIONS)
    env.reset(seed=123)
    _, _, terminated, truncated, info = env.step(_reply("Up"))
    assert not info["format_ok"] and info["invalid_actions"] == ["Up"]
    assert info["format_penalty"] == pytest.approx(-0.1) and info["n_executed"] == 0
    assert not (terminated or truncated)
    obs, _, _, _, info = env.step(_reply("north", "WEST"))
    assert info["format_ok"] and info["n_valid"] == 2 and info["format_penalty"] == 0.0
    assert info["invalid_actions"] == [] and info["n_executed"] >= 1
    assert env.observation_space.contains(obs)


def test_expert_solves_sokoban_through_the_wrapper():
    env = VocabularyWrapper(gym.make("ragen/Sokoban-v0"), symbols=SOKOBAN_SYMBOLS, seed=3, rename_actions=True)
    agent = make_agent("expert", env=env)
    obs, info = env.reset(seed=123)
    messages = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": obs}]
    for _ in range(5):
        reply = agent.act(messages)
        obs, reward, terminated, truncated, info = env.step(reply)
        assert info["format_ok"], reply
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
        if terminated or truncated:
            break
    assert terminated and info["success"]
    assert set(info["actions"]) <= set(env.action_map.values())


def test_wrapped_env_passes_check_env():
    env = VocabularyWrapper(gym.make("ragen/FrozenLake-v0"), seed=1, rename_actions=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=False)
    obs, _ = env.reset(seed=4)
    assert env.observation_space.contains(obs) and env.unwrapped.action_names() == tuple(env.action_map.values())


# --------------------------------------------------------------------------- seeded vocabularies
@pytest.mark.parametrize("env_id", ["ragen/Sokoban-v0", "ragen/FrozenLake-v0", "ragen/SokobanNewVocab-v0"])
def test_seeded_vocabulary_is_deterministic_and_valid(env_id):
    a = VocabularyWrapper(gym.make(env_id), seed=11, rename_actions=True)
    b = VocabularyWrapper(gym.make(env_id), seed=11, rename_actions=True)
    assert a.symbol_map == b.symbol_map and a.action_map == b.action_map
    assert a.reset(seed=200)[0] == b.reset(seed=200)[0]
    old = set(a.symbol_map)
    new = list(a.symbol_map.values())
    assert len(set(new)) == len(new) and all(c in SYMBOL_POOL and not c.isspace() for c in new)
    assert not old & set(new)
    names = list(a.action_map.values())
    assert len(set(names)) == len(names) and set(names) <= set(ACTION_WORD_POOL)
    assert not {n.lower() for n in a.action_map} & {n.lower() for n in names}


def test_seeded_vocabulary_differs_across_seeds():
    maps = [VocabularyWrapper(gym.make("ragen/Sokoban-v0"), seed=s, rename_actions=True) for s in range(5)]
    assert len({tuple(m.symbol_map.values()) for m in maps}) == 5
    assert len({tuple(m.action_map.values()) for m in maps}) >= 4


def test_seed_without_rename_keeps_action_names_and_given_entries_win():
    env = VocabularyWrapper(gym.make("ragen/Sokoban-v0"), symbols={"P": "Y"}, actions={"Up": "Jump"}, seed=2)
    assert env.symbol_map["P"] == "Y" and "Y" not in [v for k, v in env.symbol_map.items() if k != "P"]
    assert env.action_map == {"Up": "Jump", "Down": "Down", "Left": "Left", "Right": "Right"}


def test_reset_reapplies_the_vocabulary():
    env = VocabularyWrapper(gym.make("ragen/FrozenLake-v0"), symbols=FROZENLAKE_SYMBOLS)
    env.unwrapped.set_vocabulary(None, None)
    env.reset(seed=1)
    assert list(env.unwrapped.legend()) == list(FROZENLAKE_SYMBOLS.values())


def test_spec_records_the_wrapper_and_rebuilds_it():
    env = VocabularyWrapper(gym.make("ragen/FrozenLake-v0"), seed=7, rename_actions=True)
    spec = env.spec
    assert spec.additional_wrappers[-1].name == "VocabularyWrapper"
    assert spec.additional_wrappers[-1].kwargs == {"symbols": None, "actions": None, "seed": 7, "rename_actions": True}
    again = gym.make(spec)
    assert isinstance(again, VocabularyWrapper)
    assert again.symbol_map == env.symbol_map and again.action_map == env.action_map
    assert again.reset(seed=123)[0] == env.reset(seed=123)[0]
    assert gym.make(gym.envs.registration.EnvSpec.from_json(spec.to_json())).symbol_map == env.symbol_map


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("env_id", ["ragen/Bandit-v0", "ragen/BanditRev-v0"])
def test_bandit_has_no_grid_legend(env_id):
    with pytest.raises(ValueError, match="no grid legend"):
        VocabularyWrapper(gym.make(env_id), seed=0)


def test_non_ragen_env_is_rejected():
    with pytest.raises(ValueError, match="ragen_envs environment"):
        VocabularyWrapper(gym.make("CartPole-v1"), seed=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "nothing to remap"),
        ({"symbols": {"Q": "z"}}, "not in this env's legend"),
        ({"symbols": {"#": "ab"}}, "single printable"),
        ({"symbols": {"#": " "}}, "single printable"),
        ({"symbols": {"#": "_"}}, "distinct"),
        ({"symbols": "#W"}, "mapping"),
        ({"actions": {"Up": "Down"}}, "differ ignoring case"),
        ({"actions": {"Jump": "Hop"}}, "unknown actions"),
        ({"actions": {"Up": "a || b"}}, "'\\|\\|'"),
        ({"seed": -1}, "seed"),
        ({"seed": "1"}, "seed"),
        ({"rename_actions": True}, "seed"),
        ({"seed": 1, "rename_actions": "yes"}, "rename_actions"),
    ],
)
def test_bad_input_raises_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        VocabularyWrapper(gym.make("ragen/Sokoban-v0"), **kwargs)
