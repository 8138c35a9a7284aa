"""The 2x2 Rubik's Cube: the newest reference's cubes and turns for a seed (recorded fixtures),
its state text, the exact solver, the env's rewards and budgets."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs
from ragen_envs.agents import make_agent
from ragen_envs.envs.rubikscube import COLOUR_LETTERS, state_text
from ragen_envs.eval import run_episode
from ragen_envs.games import rubikscube as rc
from ragen_envs.protocol import format_answer

FIXTURE = Path(__file__).parent / "fixtures" / "ragen2" / "rubikscube.json.gz"


@lru_cache(maxsize=1)
def reference() -> dict:
    """mll-lab-nu/RAGEN 20daedc's RubiksCube2x2Env run unchanged (tests/fixtures/ragen2/
    record_reference.py): seeds 0..999 at scramble
    depth 1 (envs.yaml) and 0..199 at depth 5 (its config class), 20 scripted turns each (the
    reference's actions 1..12), the stickers after each, rewards, done, and the rendered text
    of the first seeds."""
    with gzip.open(FIXTURE, "rt") as f:
        return json.load(f)


def letters(state) -> str:
    return "".join(COLOUR_LETTERS[int(c)] for c in state)


def episodes():
    for depth, key in ((1, "depth1"), (5, "depth5")):
        for rec in reference()[key]:
            yield depth, rec


# --------------------------------------------------------------------------- instances
def test_scrambles_and_turns_are_the_references():
    assert reference()["colours"] == COLOUR_LETTERS
    count = 0
    for depth, rec in episodes():
        state, _ = rc.scramble(rec["seed"], depth, rc.REFERENCE_MOVES)
        assert letters(state) == rec["start"], rec["seed"]
        for action, after, reward, done in zip(rec["actions"], rec["states"], rec["rewards"], rec["done"]):
            state = rc.apply_move(state, action - 1, rc.REFERENCE_MOVES)  # theirs number turns from 1
            assert letters(state) == after, (rec["seed"], action)
            assert reward == (1.0 if rc.is_solved(state) else 0.0)
            count += 1
    assert count > 20_000


def test_the_real_turns_differ_from_the_reference_only_in_b():
    # The default move set: every depth-1 cube is the reference's (B from the solved cube
    # looks the same either way), and each episode agrees up to its first B or B' turn.
    b_turns = {rc.MOVE_NAMES.index("B"), rc.MOVE_NAMES.index("B'")}
    assert (rc.MOVES[:10] == rc.REFERENCE_MOVES[:10]).all()
    for depth, rec in episodes():
        state, turns = rc.scramble(rec["seed"], depth)
        if not b_turns & set(turns[1:]):  # a B first, from the solved cube, looks the same
            assert letters(state) == rec["start"], rec["seed"]
        else:
            continue
        for action, after in zip(rec["actions"], rec["states"]):
            state = rc.apply_move(state, action - 1)
            if action - 1 in b_turns:
                break
            assert letters(state) == after, rec["seed"]
    # the reference's B pulls pieces apart: after R then B no corner shows the D, B and L
    # colours together any more, which no turn of a real cube can do
    state = rc.apply_move(rc.apply_move(rc.SOLVED, 6, rc.REFERENCE_MOVES), 10, rc.REFERENCE_MOVES)
    with pytest.raises(ValueError, match="not a reachable cube state"):
        rc.state_index(state)
    real = rc.apply_move(rc.apply_move(rc.SOLVED, 6), 10)
    assert rc.distance(real) == 2


def test_state_text_is_the_references():
    checked = 0
    for depth, rec in episodes():
        if "texts" not in rec:
            continue
        state, _ = rc.scramble(rec["seed"], depth, rc.REFERENCE_MOVES)
        assert state_text(state, 0, 20) == rec["texts"][0]
        for step, (action, text, done) in enumerate(zip(rec["actions"], rec["texts"][1:], rec["done"]), 1):
            state = rc.apply_move(state, action - 1, rc.REFERENCE_MOVES)
            if not done:  # a finished episode shows no state in the protocol (the observation is the reward)
                assert state_text(state, step, 20) == text
                checked += 1
    assert checked > 400


# --------------------------------------------------------------------------- solver
def test_distance_table_is_the_known_2x2_distribution():
    # quarter-turn metric, one corner held: the published counts (God's number 14)
    counts = np.bincount(rc.distance_table()).tolist()
    assert counts == [1, 6, 27, 120, 534, 2256, 8969, 33058, 114149, 360508, 930588, 1350852, 782536, 90280, 276]
    assert sum(counts) == rc.NUM_STATES


def test_solve_is_optimal_and_solves():
    rng = np.random.default_rng(3)
    for _ in range(30):
        state = rc.SOLVED.copy()
        for a in rng.integers(0, 12, size=int(rng.integers(0, 5))):
            state = rc.apply_move(state, int(a))
        plan = rc.solve(state)
        brute = rc.solve_by_search(state, rc.MOVES, max_depth=len(plan))
        assert len(brute) == len(plan) == rc.distance(state)  # no shorter plan exists
        for a in plan:
            state = rc.apply_move(state, a)
        assert rc.is_solved(state)
    for _ in range(20):  # deep scrambles
        state = rc.SOLVED.copy()
        for a in rng.integers(0, 12, size=40):
            state = rc.apply_move(state, int(a))
        for a in rc.solve(state):
            state = rc.apply_move(state, a)
        assert rc.is_solved(state)


# --------------------------------------------------------------------------- env
def test_reference_episodes_through_the_env():
    # the reference's scripted actions sent 4 per reply give the reference's rewards and end
    env = gym.make("ragen/RubiksCube-v0", reference_b_turn=True)
    for rec in reference()["depth1"][:200]:
        env.reset(seed=rec["seed"])
        names = [rc.MOVE_NAMES[a - 1] for a in rec["actions"]]
        total, done = 0.0, False
        for k in range(0, len(names), 4):
            _, reward, terminated, truncated, info = env.step(format_answer(names[k:k + 4], "x"))
            total += reward
            done = terminated or truncated
            if done:
                break
        assert total == sum(rec["rewards"]) and done and info["success"] == (rec["rewards"][-1] == 1.0), rec["seed"]


def test_prompt_rewards_and_bad_input():
    env = gym.make("ragen/RubiksCube-v0", render_mode="ansi")
    obs, _ = env.reset(seed=0)  # the scramble is B: R's right column is on U's back row
    assert "Your available actions are:\nU, U', D, D', L, L', R, R', F, F', B, B'\nYou can make up to 20 actions" in obs
    assert "State:\n=== Rubik's Cube 2x2 State ===\nStep: 0/20\n\nUp (U):    [R, R]\n [W, W]\n" in obs
    obs, reward, terminated, truncated, info = env.step("<think>x</think><answer>b || Q || B2</answer>")
    assert reward == pytest.approx(-0.1) and info["actions"] == ["B"] and info["invalid_actions"] == ["Q", "B2"]
    assert "Step: 1/20" in obs and not terminated
    _, reward, terminated, _, info = env.step(format_answer(["B'", "B'", "B'", "U"], "x"))  # B B B' B': solved
    assert reward == 1.0 and terminated and info["success"] and info["actions"] == ["B'", "B'"]
    env.reset(seed=0)
    _, reward, *_ = env.step("no tags at all")
    assert reward == pytest.approx(-0.1)


def test_budgets_truncate():
    env = gym.make("ragen/RubiksCube-v0", max_actions=3)
    env.reset(seed=5)
    _, _, terminated, truncated, info = env.step(format_answer(["U", "U", "U", "U"], "x"))
    assert truncated and not terminated and info["n_executed"] == 3


def test_expert_is_optimal_on_the_eval_seeds_and_deeper_scrambles():
    env = gym.make("ragen/RubiksCube-v0")
    expert = make_agent("expert", env=env)
    for seed in ragen_envs.EVAL_SEEDS[:64]:
        episode = run_episode(env, expert, seed)
        assert episode.success and episode.num_actions == 1, seed  # a one-turn scramble
    deep = gym.make("ragen/RubiksCube-v0", scramble_depth=30)
    expert = make_agent("expert", env=deep)
    for seed in range(10):
        deep.reset(seed=seed)
        optimum = rc.distance(deep.unwrapped.game.state)
        episode = run_episode(deep, expert, seed)
        assert episode.success and episode.num_actions == optimum, seed
    ref = gym.make("ragen/RubiksCube-v0", reference_b_turn=True, scramble_depth=3)
    expert = make_agent("expert", env=ref)
    assert all(run_episode(ref, expert, seed).success for seed in range(20))


@pytest.mark.parametrize("kwargs,match", [({"scramble_depth": -1}, "scramble_depth"),
                                          ({"reference_b_turn": "false"}, "reference_b_turn"),
                                          ({"success_reward": float("inf")}, "success_reward")])
def test_bad_kwargs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("ragen/RubiksCube-v0", **kwargs)


def test_picture():
    pytest.importorskip("pygame")
    env = gym.make("ragen/RubiksCube-v0", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    env.step(format_answer(["R'"], "x"))
    assert not np.array_equal(frame, env.render())
