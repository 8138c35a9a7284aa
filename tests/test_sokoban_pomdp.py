"""Partially observed Sokoban: Sokoban-v0's instances, the window, the footer, the expert."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs
from ragen_envs.agents import make_agent
from ragen_envs.eval import run_episode
from ragen_envs.games import sokoban_pomdp as pomdp
from ragen_envs.protocol import format_answer


def test_same_instances_and_steps_as_sokoban_v0():
    full, part = gym.make("ragen/Sokoban-v0").unwrapped, gym.make("ragen/SokobanPOMDP-v0").unwrapped
    for seed in (0, 7, 123, 200, 378, 2**32 - 1):
        full.reset(seed=seed)
        part.reset(seed=seed)
        assert np.array_equal(full.game.grid_codes(), part.game.grid_codes()), seed
        for reply in (format_answer(["Up", "Left", "Down"], "x"), format_answer(["Right", "Right"], "x")):
            a, b = full.step(reply), part.step(reply)
            assert a[1:4] == b[1:4] and np.array_equal(full.game.grid_codes(), part.game.grid_codes())
            if a[2] or a[3]:
                break


def test_window_and_footer_of_seed_123():
    # Sokoban-v0 seed 123 is (by hand, the rows of the full board):
    #   ######  ######  #O####  #XP###  #__###  ######   -> the player at (3, 2).
    env = gym.make("ragen/SokobanPOMDP-v0", render_mode="ansi")
    obs, _ = env.reset(seed=123)
    assert "You only see the 3x3 cells centred on yourself" in obs
    assert env.render() == "O##\nXP#\n__#\nPosition: (3, 2) | Step: 0 | Boxes on target: 0/1"
    env.step(format_answer(["Down"], "x"))  # the player steps to (4, 2)
    assert env.render() == "X_#\n_P#\n###\nPosition: (4, 2) | Step: 1 | Boxes on target: 0/1"
    wide = gym.make("ragen/SokobanPOMDP-v0", window=3, show_position=False, render_mode="ansi")
    wide.reset(seed=123)
    rows = wide.render().split("\n")
    # rows 0..6 and columns -1..5 of the board: column -1 and row 6 lie outside, seen as wall
    assert rows[:7] == ["#######", "#######", "##O####", "##XP###", "##__###", "#######", "#######"]
    assert rows[7] == "Step: 0 | Boxes on target: 0/1"


def test_vocabulary_changes_the_grid_not_the_footer():
    env = gym.make("ragen/SokobanPOMDP-v0").unwrapped
    env.set_vocabulary(symbols={"P": "A", "#": "W"})
    env.reset(seed=123)
    assert env.state_text() == "OWW\nXAW\n__W\nPosition: (3, 2) | Step: 0 | Boxes on target: 0/1"


def test_expert_plans_on_the_full_state_and_solves_every_eval_level():
    env = gym.make("ragen/SokobanPOMDP-v0")
    expert = make_agent("expert", env=env)
    for seed in ragen_envs.EVAL_SEEDS[:64]:  # the full 256 are in BENCHMARKS.md (100 %)
        assert run_episode(env, expert, seed).success, seed


def test_visible_mask_matches_the_window():
    env = gym.make("ragen/SokobanPOMDP-v0", window=2).unwrapped
    env.reset(seed=5)
    mask = pomdp.visible_mask(env.game, 2)
    r, c = env.game.player
    assert mask.sum() == np.count_nonzero(mask[max(r - 2, 0):r + 3, max(c - 2, 0):c + 3])
    assert mask[r, c]


@pytest.mark.parametrize("window", [0, 9, 1.5, True])
def test_bad_window(window):
    with pytest.raises(ValueError, match="window"):
        gym.make("ragen/SokobanPOMDP-v0", window=window)
