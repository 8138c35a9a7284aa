"""The registered environments: Gymnasium conformance, instance parity, seeding, vectors."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from reference import load_fixtures
from gymnasium.utils.env_checker import check_env

import ragen_envs
import ragen_envs.envs
from ragen_envs.agents import make_agent
from ragen_envs.eval import run_episode
from ragen_envs.protocol import INFO_KEYS, RESET_INFO_KEYS, format_answer

ENV_IDS = [s.id for s in ragen_envs.ENV_SPECS]
EXTRA_INFO = {
    "ragen/Bandit-v0": {"arm", "high_risk"},
    "ragen/BanditRev-v0": {"arm", "high_risk"},
    "ragen/Sokoban-v0": {"boxes_on_target"},
    "ragen/LargeSokoban-v0": {"boxes_on_target"},
    "ragen/LargeSokoban-v1": {"boxes_on_target"},
    "ragen/CoordSokoban-v0": {"boxes_on_target"},
    "ragen/SokobanNewVocab-v0": {"boxes_on_target"},
    "ragen/SokobanPOMDP-v0": {"boxes_on_target"},
    "ragen/FrozenLake-v0": {"position"},
    "ragen/FrozenLake-v1": {"position"},
    "ragen/CoordFrozenLake-v0": {"position"},
    "ragen/LightsOut-v0": {"lights_on"},
    "ragen/RubiksCube-v0": set(),
    "ragen/2048-v0": {"score", "max_tile"},
    "ragen/Sudoku-v0": {"cells_filled", "cells_remaining"},
    "ragen/SudokuMedium-v0": {"cells_filled", "cells_remaining"},
    "ragen/Countdown-v0": {"target", "numbers", "numbers_ok", "correct"},
    "ragen/WebShop-v0": {"page_type", "available_actions", "action_available", "purchased", "end_of_page",
                         "reward_breakdown", "instruction", "goal_index", "split", "backend", "catalog_id"},
}


def _fixtures():
    data = load_fixtures()
    if data is None:
        pytest.skip("reference fixtures not found")
    return data


# --------------------------------------------------------------------------- Gymnasium
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_with_warnings_as_errors(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=False)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_keys_are_the_documented_ones(env_id):
    env = gym.make(env_id)
    _, info = env.reset(seed=5)
    assert set(info) == set(RESET_INFO_KEYS)
    _, _, _, _, info = env.step("<think>x</think><answer>Up</answer>")
    assert set(info) == set(INFO_KEYS) | EXTRA_INFO[env_id]
    for key, (typ, _) in INFO_KEYS.items():
        assert isinstance(info[key], typ), (key, info[key])
    for key in EXTRA_INFO[env_id]:
        assert key in env.unwrapped.__doc__  # documented in the class docstring


def test_make_without_prior_import():
    code = "import gymnasium as gym; e = gym.make('ragen_envs:ragen/Sokoban-v0'); print(e.reset(seed=1)[1]['seed'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_import_loads_only_core_dependencies():
    code = (
        "import sys, ragen_envs, gymnasium as gym; gym.make('ragen/Sokoban-v0').reset(seed=0);"
        "print(sorted(m for m in ('torch','transformers','pygame','openai','pettingzoo') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_eval_seeds_are_the_reference_validation_seeds():
    assert ragen_envs.EVAL_SEEDS == tuple(range(123, 379))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_after_end_raises_clear_error(env_id):
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    done = False
    while not done:
        *_, terminated, truncated, _ = env.step("garbage")
        done = terminated or truncated
    with pytest.raises(RuntimeError, match="reset"):
        env.step("garbage")


@pytest.mark.parametrize(
    "env_id,kwargs,match",
    [
        ("ragen/Sokoban-v0", {"dim_room": (2, 9)}, "dim_room"),
        ("ragen/Sokoban-v0", {"symbols": "#_"}, "symbols"),
        ("ragen/Sokoban-v0", {"max_turns": 0}, "max_turns"),
        ("ragen/FrozenLake-v0", {"p": 0}, "p "),
        ("ragen/Bandit-v0", {"high_name": "phoenix"}, "differ"),
        ("ragen/Bandit-v0", {"prompt_style": "x"}, "prompt_style"),
    ],
)
def test_bad_kwargs_give_clear_errors(env_id, kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make(env_id, **kwargs)


def test_bad_render_mode():
    with pytest.raises(ValueError, match="render_mode"):
        ragen_envs.envs.FrozenLakeEnv(render_mode="rgb")


def test_bad_reset_arguments():
    env = gym.make("ragen/FrozenLake-v0")
    with pytest.raises(ValueError, match="noise_seed"):
        env.reset(seed=1, options={"noise_seed": -3})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(seed=1, options={"level": 3})


# --------------------------------------------------------------------------- instance parity
SOKOBAN_VARIANTS = {"Sokoban": "ragen/Sokoban-v0", "LargeSokoban": "ragen/LargeSokoban-v0",
                    "SokobanNewVocab": "ragen/SokobanNewVocab-v0", "FrozenLake": "ragen/FrozenLake-v0"}


@pytest.mark.parametrize("name", list(SOKOBAN_VARIANTS))
def test_instance_parity_with_reference(name):
    """Every fixture record: initial grid and every single-action step equal the reference's."""
    records = _fixtures()[name]
    env = gym.make(SOKOBAN_VARIANTS[name], max_turns=100, max_actions=100, render_mode="ansi")
    checked = 0
    for rec in records:
        if rec.get("fallback"):
            continue
        env.reset(seed=rec["seed"])
        assert env.render() == rec["initial"], rec["seed"]
        for step in rec["steps"]:
            _, _, terminated, truncated, info = env.step(format_answer([step["action"]], "x"))
            assert env.render() == step["obs"], (rec["seed"], step)
            assert info["game_reward"] == step["reward"]
            assert terminated == step["done"] and not truncated
            assert info["success"] == step["success"]
            assert info["action_is_effective"] == step["effective"]
            if terminated:
                break
        checked += 1
    assert checked >= 90


def test_bandit_parity_with_reference():
    for rec in _fixtures()["Bandit"]:
        for key in ("arm1", "arm2"):
            env = gym.make("ragen/Bandit-v0", low_payout=0.1, render_mode="ansi")  # recorded with 0.1
            obs, _ = env.reset(seed=rec["seed"])
            assert rec["initial"] in obs
            expected = rec[key]
            _, reward, terminated, _, info = env.step(format_answer([expected["name"]], "x"))
            assert env.render() == expected["obs"] and reward == expected["reward"]
            assert info["success"] == expected["success"] and terminated


def test_newvocab_legend_and_reference_bug_flag():
    new = gym.make("ragen/SokobanNewVocab-v0")
    obs, _ = new.reset(seed=0)
    assert "W: wall, .: empty, G: target, C: box on target, B: box, A: player, @: player on target" in obs
    buggy = gym.make("ragen/SokobanNewVocab-v0", legend_symbols="default")
    obs_b, _ = buggy.reset(seed=0)
    assert "#: wall, _: empty, O: target" in obs_b and "WWWWWW" in obs_b


# --------------------------------------------------------------------------- seeding and noise
def test_noise_seed_keeps_layout_and_changes_slips():
    env = gym.make("ragen/FrozenLake-v0", render_mode="ansi")
    env.reset(seed=7)
    layout = env.render()
    outcomes = set()
    for k in range(12):
        env.reset(seed=7, options={"noise_seed": k})
        assert env.render() == layout
        env.step(format_answer(["Left", "Left", "Up"], "x"))
        outcomes.add(env.render())
    assert len(outcomes) > 1
    # noise_seed equal to the seed is the default stream
    a, b = gym.make("ragen/FrozenLake-v0").unwrapped, gym.make("ragen/FrozenLake-v0").unwrapped
    a.reset(seed=11)
    b.reset(seed=11, options={"noise_seed": 11})
    for _ in range(3):
        ra = a.step(format_answer(["Down", "Right"], "x"))
        rb = b.step(format_answer(["Down", "Right"], "x"))
        assert ra[:4] == rb[:4]
        if ra[2] or ra[3]:
            break


def test_bandit_noise_seed_keeps_arm_order():
    env = gym.make("ragen/Bandit-v0")
    obs0, _ = env.reset(seed=3)
    payouts = set()
    for k in range(40):
        obs, _ = env.reset(seed=3, options={"noise_seed": k})
        assert obs == obs0
        payouts.add(env.step(format_answer(["Dragon"], "x"))[1])
    assert payouts == {0.0, 1.0}


def test_unseeded_resets_continue_a_seeded_sequence():
    a, b = gym.make("ragen/Sokoban-v0", render_mode="ansi"), gym.make("ragen/Sokoban-v0", render_mode="ansi")
    a.reset(seed=99)
    b.reset(seed=99)
    for _ in range(3):
        a.reset()
        b.reset()
        assert a.render() == b.render()


_TRANSCRIPT = """
import hashlib, gymnasium as gym, ragen_envs
from ragen_envs.agents import make_agent
from ragen_envs.eval import run_episode
h = hashlib.sha256()
for spec in ragen_envs.ENV_SPECS:
    env = gym.make(spec.id)
    agent = make_agent("random", env=env, seed=1)
    for seed in (0, 24, 37, 123, 200):
        ep = run_episode(env, agent, seed)
        h.update(repr([(t.observation, t.response, t.reward, sorted(t.info.items())) for t in ep.turns]).encode())
print(h.hexdigest())
"""


def test_same_seed_same_episode_across_processes_and_hash_seeds():
    digests = set()
    for hash_seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", _TRANSCRIPT], capture_output=True, text=True, env=env, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


# --------------------------------------------------------------------------- vector groups
def test_make_vec_groups_share_initial_states():
    vec = ragen_envs.make_vec("ragen/Sokoban-v0", 6, group_size=3)
    obs, info = vec.reset(seed=123)
    assert obs[0] == obs[1] == obs[2] and obs[3] == obs[4] == obs[5] and obs[0] != obs[3]
    assert list(info["seed"]) == [123, 123, 123, 124, 124, 124]
    vec.close()


def test_make_vec_async_returns_real_text():
    vec = ragen_envs.make_vec("ragen/FrozenLake-v0", 4, group_size=2, vectorization_mode="async")
    obs, _ = vec.reset(seed=5)
    assert all("Turn 1:" in o for o in obs)
    obs, *_ = vec.step(tuple(format_answer(["Up"], "x") for _ in range(4)))
    assert all(o.startswith("Reward:") for o in obs)
    vec.close()
    for shared_memory in (True, False):  # both exact (the observation space's own shared memory)
        vec = ragen_envs.make_vec("ragen/FrozenLake-v0", 2, vectorization_mode="async",
                                  vector_kwargs={"shared_memory": shared_memory})
        assert vec.reset(seed=5)[0][0] == gym.make("ragen/FrozenLake-v0").reset(seed=5)[0]
        vec.close()


def _group_outcomes(shared_noise: bool, seed: int) -> list[str]:
    vec = ragen_envs.make_vec("ragen/FrozenLake-v0", 8, group_size=8, shared_noise=shared_noise)
    vec.reset(seed=seed)
    obs, *_ = vec.step(tuple(format_answer(["Left", "Up", "Right"], "x") for _ in range(8)))
    vec.close()
    return list(obs)


def test_shared_noise_gives_common_random_numbers():
    for seed in range(5):
        assert len(set(_group_outcomes(True, seed))) == 1
    assert any(len(set(_group_outcomes(False, seed))) > 1 for seed in range(5))


def test_make_vec_bad_arguments():
    with pytest.raises(ValueError, match="group_size"):
        ragen_envs.make_vec("ragen/Sokoban-v0", 4, group_size=3)
    with pytest.raises(ValueError, match="vectorization_mode"):
        ragen_envs.make_vec("ragen/Sokoban-v0", 4, vectorization_mode="ray")


# --------------------------------------------------------------------------- agents
def test_expert_solves_every_eval_sokoban_level_within_budget():
    env = gym.make("ragen/Sokoban-v0")
    expert = make_agent("expert", env=env)
    for seed in ragen_envs.EVAL_SEEDS:
        episode = run_episode(env, expert, seed)
        assert episode.success, seed  # every EVAL_SEEDS level needs <= 10 actions (BFS)
        assert episode.num_actions <= 10


def test_expert_frozenlake_matches_its_exact_success_probability():
    env = gym.make("ragen/FrozenLake-v0")
    expert = make_agent("expert", env=env)
    for seed in (123, 130, 201):
        env.reset(seed=seed)
        predicted = env.unwrapped.success_probability()
        wins = sum(run_episode(env, expert, seed, noise_seed=k).success for k in range(600))
        assert abs(wins / 600 - predicted) < 0.06, (seed, wins / 600, predicted)


def test_expert_bandit_always_picks_the_better_arm():
    for env_id in ("ragen/Bandit-v0", "ragen/BanditRev-v0"):
        env = gym.make(env_id)
        expert = make_agent("expert", env=env)
        assert all(run_episode(env, expert, s).success for s in range(50))


def test_make_agent_errors():
    with pytest.raises(ValueError, match="env="):
        make_agent("expert")
    with pytest.raises(ValueError, match="unknown agent"):
        make_agent("gpt", env=gym.make("ragen/Sokoban-v0"))


def test_make_vec_unseeded_resets_keep_groups_aligned():
    vec = ragen_envs.make_vec("ragen/Sokoban-v0", 4, group_size=2)
    vec.reset(seed=50)
    vec.step(tuple(format_answer([a], "x") for a in ("Up", "Down", "Left", "Right")))
    obs, info = vec.reset()
    assert obs[0] == obs[1] and obs[2] == obs[3] and obs[0] != obs[2]
    assert info["seed"][0] == info["seed"][1] == ragen_envs.vector.episode_seed(50, 1)
    vec.close()


def test_make_vec_explicit_noise_seed_is_split_per_member_without_shared_noise():
    vec = ragen_envs.make_vec("ragen/FrozenLake-v0", 3, group_size=3, shared_noise=False)
    _, info = vec.reset(seed=4, options={"noise_seed": 9})
    assert len(set(info["noise_seed"])) == 3
    assert info["noise_seed"][1] == ragen_envs.vector.member_noise_seed(9, 1)
    vec.close()
