"""Lights Out: the reference's boards for a seed, the GF(2) solver, the env's text and rewards."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs
from ragen_envs.agents import make_agent
from ragen_envs.eval import run_episode
from ragen_envs.games import lightsout as lo
from ragen_envs.protocol import format_answer


# --------------------------------------------------------------------------- instances
def test_boards_are_the_reference_draws():
    # By hand. Seed 0: default_rng(0).integers(0, 3) gives 2 1 1 0 0 0 0 0 (row, col pairs):
    # presses (2, 1), (1, 0), (0, 0), (0, 0). The two (0, 0) cancel; (2, 1) toggles (2, 1)
    # (1, 1) (2, 0) (2, 2), (1, 0) toggles (1, 0) (0, 0) (2, 0) (1, 1): (1, 1) and (2, 0)
    # twice, so (0, 0) (1, 0) (2, 1) (2, 2) are on. Seed 123: draws 0 2 1 0 2 0 0 0, presses
    # (0, 2) (1, 0) (2, 0) (0, 0): (0, 2) (1, 2) (1, 1) (2, 1) once, (1, 0) three times on.
    rng = np.random.default_rng(0)
    assert [int(rng.integers(0, 3)) for _ in range(8)] == [2, 1, 1, 0, 0, 0, 0, 0]
    rng = np.random.default_rng(123)
    assert [int(rng.integers(0, 3)) for _ in range(8)] == [0, 2, 1, 0, 2, 0, 0, 0]
    pinned = {
        0: [[1, 0, 0], [1, 0, 0], [0, 1, 1]],
        1: [[1, 0, 0], [0, 1, 1], [0, 1, 0]],
        123: [[0, 0, 1], [1, 1, 1], [0, 1, 0]],
    }
    for seed, board in pinned.items():
        assert lo.generate_board(seed).tolist() == board, seed
    assert lo.solve(np.array(pinned[0])) == [(1, 0), (2, 1)]  # the scramble's net presses


def test_a_dark_scramble_is_redrawn_and_depth_zero_stays_dark():
    assert not lo.generate_board(7, 3, 0).any()
    # depth 2 on a 2x2 board: pressing the same cell twice leaves it dark, so some seeds
    # redraw; every board still has a light on
    assert all(lo.generate_board(s, 2, 2).any() for s in range(300))


def test_solver_is_exact_and_minimal():
    rng = np.random.default_rng(5)
    for size in (2, 3, 4, 5):
        for _ in range(30):
            board = np.zeros((size, size), np.int8)
            for _ in range(int(rng.integers(0, 7))):
                lo.press(board, int(rng.integers(size)), int(rng.integers(size)))
            plan = lo.solve(board)
            after = board.copy()
            for r, c in plan:
                lo.press(after, r, c)
            assert not after.any()
            if size <= 4:  # brute force: no shorter press set works
                for k in range(len(plan)):
                    for cells in itertools.combinations(range(size * size), k):
                        trial = board.copy()
                        for i in cells:
                            lo.press(trial, *divmod(i, size))
                        assert trial.any()
    lonely = np.zeros((4, 4), np.int8)
    lonely[0, 0] = 1  # 4x4 has a null space: one corner light alone cannot be turned off
    assert lo.solve(lonely) is None


# --------------------------------------------------------------------------- env
def test_prompt_state_and_rewards():
    env = gym.make("ragen/LightsOut-v0", render_mode="ansi")
    obs, _ = env.reset(seed=123)
    assert "Your available actions are:\n(0, 0), (0, 1), (0, 2), (1, 0)" in obs
    assert "*: light on, .: light off" in obs
    assert "State:\n  0 1 2\n0 . . *\n1 * * *\n2 . * .\n" in obs
    # (2, 2) toggles (2, 2) on, (1, 2) off, (2, 1) off: 5 -> 4 lights
    obs, reward, terminated, truncated, info = env.step(format_answer(["(2, 2)"], "x"))
    assert reward == pytest.approx(1 / 9) and info["lights_on"] == 4 and not terminated
    assert env.render() == "  0 1 2\n0 . . *\n1 * * .\n2 . . *"
    _, reward, *_, info = env.step("<think>x</think><answer>(2,2)</answer>")  # not the cell's name
    assert reward == pytest.approx(-0.1) and info["invalid_actions"] == ["(2,2)"]


def test_solving_press_pays_the_success_reward():
    env = gym.make("ragen/LightsOut-v0", max_actions_per_turn=5)
    env.reset(seed=123)
    plan = [f"({r}, {c})" for r, c in lo.solve(env.unwrapped.game.board)]
    _, reward, terminated, truncated, info = env.step(format_answer(plan, "x"))
    assert terminated and not truncated and info["success"] and info["lights_on"] == 0
    assert reward == pytest.approx(5 / 9 + 1.0)  # the shaped parts sum to 5 lights of 9


def test_expert_solves_every_eval_board_and_bigger_boards():
    env = gym.make("ragen/LightsOut-v0")
    expert = make_agent("expert", env=env)
    for seed in ragen_envs.EVAL_SEEDS:
        episode = run_episode(env, expert, seed)
        assert episode.success and episode.num_actions <= 4, seed  # never more than the scramble
    big = gym.make("ragen/LightsOut-v0", size=5, scramble_depth=8, max_turns=8, max_actions_per_turn=3, max_actions=24)
    expert = make_agent("expert", env=big)
    assert all(run_episode(big, expert, seed).success for seed in range(20))


@pytest.mark.parametrize("kwargs,match", [({"size": 1}, "size"), ({"size": 11}, "size"),
                                          ({"scramble_depth": -1}, "scramble_depth"),
                                          ({"success_reward": float("nan")}, "success_reward")])
def test_bad_kwargs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("ragen/LightsOut-v0", **kwargs)
