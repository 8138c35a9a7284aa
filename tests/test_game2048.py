"""2048: the newest reference's boards, spawns, moves and rewards for a seed (recorded
fixtures), its state text, the expectimax expert, the env's rewards and budgets."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from ragen_envs.agents import make_agent
from ragen_envs.envs.game2048 import state_text
from ragen_envs.eval import run_episode
from ragen_envs.games import game2048 as g
from ragen_envs.protocol import format_answer

FIXTURE = Path(__file__).parent / "fixtures" / "ragen2" / "game2048.json.gz"


@lru_cache(maxsize=1)
def reference() -> dict:
    """mll-lab-nu/RAGEN 20daedc's Game2048Env run unchanged (tests/fixtures/ragen2/
    record_reference.py; default config: 4x4,
    two_prob 0.9, log reward): seeds 0..999 with 30 scripted actions each (0 Up, 1 Right,
    2 Down, 3 Left; invalid ones included), the board, reward, done and score after each,
    the rendered text of seeds 0..19; and seeds 0..5 played to game over (the first valid
    action in order)."""
    with gzip.open(FIXTURE, "rt") as f:
        return json.load(f)


def replay(rec: dict) -> int:
    """Replay one recorded episode with the reference's rewards; the number of invalid moves."""
    grid, rng = g.new_board(rec["seed"])
    assert grid.ravel().tolist() == rec["start"], rec["seed"]
    game = g.Game2048(grid, rng, invalid_move_reward=0.0)  # the reference's log reward pays 0 for those
    invalid = 0
    for action, grid_after, reward, done, score in zip(rec["actions"], rec["grids"], rec["rewards"], rec["done"],
                                                       rec["score"]):
        step = game.step(action)
        invalid += not step.moved
        assert game.grid.ravel().tolist() == grid_after, (rec["seed"], action)
        assert step.reward == reward and step.over == done and game.score == score, (rec["seed"], action)
    return invalid


def test_boards_spawns_moves_and_rewards_are_the_references():
    invalid = sum(replay(rec) for rec in reference()["scripted"][:250])
    assert invalid > 100  # the scripts do try moves that move nothing


@pytest.mark.slow
def test_all_thousand_recorded_seeds():
    assert sum(replay(rec) for rec in reference()["scripted"]) > 1000


def test_games_played_to_the_end_are_the_references():
    for rec in reference()["to_the_end"]:
        grid, rng = g.new_board(rec["seed"])
        game = g.Game2048(grid, rng, invalid_move_reward=0.0)
        for action, reward in zip(rec["actions"], rec["rewards"]):
            step = game.step(action)
            assert step.reward == reward
        assert step.over and game.grid.ravel().tolist() == rec["final"] and not rec["success"]
        assert state_text(game.grid, game.score) == rec["last_text"]  # "Valid Actions: None."


def test_state_text_is_the_references():
    checked = 0
    for rec in reference()["scripted"]:
        if "texts" not in rec:
            continue
        grid, rng = g.new_board(rec["seed"])
        game = g.Game2048(grid, rng)
        assert state_text(game.grid, game.score) == rec["texts"][0]
        for action, text in zip(rec["actions"], rec["texts"][1:]):
            game.step(action)
            assert state_text(game.grid, game.score) == text
            checked += 1
    assert checked >= 500


def test_slides_merge_once_nearest_the_wall_first():
    assert g.slide((2, 2, 2, 2)) == ((4, 4, 0, 0), 8)
    assert g.slide((4, 0, 4, 8)) == ((8, 8, 0, 0), 8)
    assert g.slide((2, 2, 4, 0)) == ((4, 4, 0, 0), 4)
    grid = np.array([[2, 2, 4, 0], [0, 0, 0, 0], [2, 0, 0, 0], [2, 0, 0, 4]])
    right, merged, moved = g.move(grid, 1)
    assert right[0].tolist() == [0, 0, 4, 4] and right[3].tolist() == [0, 0, 2, 4] and merged == 4 and moved
    down, merged, _ = g.move(grid, 2)
    assert down[:, 0].tolist() == [0, 0, 2, 4] and merged == 4
    assert not g.move(np.array([[2, 4], [4, 2]]), 0)[2] and g.is_over(np.array([[2, 4], [4, 2]]))


def test_the_integer_board_search_is_the_plain_one():
    # the expert's fast 4x4 path (bit-packed rows, table lookups) against the plain tuple search
    rng = np.random.default_rng(0)
    left, right, value = g._row_tables()
    for k in range(30):
        grid = np.zeros((4, 4), np.int64)
        for _ in range(int(rng.integers(2, 14))):
            g.spawn(grid, rng)
        exps = tuple(int(v).bit_length() - 1 if v else 0 for v in grid.ravel())
        b = sum(e << (4 * i) for i, e in enumerate(exps))
        for a in range(4):
            assert g._after4(b, a, left, right) == sum(e << (4 * i) for i, e in enumerate(g._after(exps, 4, a)))
            new, _, moved = g.move(grid, a)
            assert (g._after(exps, 4, a) != exps) == moved
        assert g._value4(b, value) == pytest.approx(g._value(exps, 4))
        if k % 6 == 0:  # the two-move search is slow on the plain path
            fast, plain = g._best4(b, 2, 0.9, (left, right, value)), g._best(exps, 4, 2, 0.9)
            assert fast[1] == pytest.approx(plain[1])


# --------------------------------------------------------------------------- env
def test_prompt_rewards_and_bad_input():
    env = gym.make("ragen/2048-v0", render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert "Your available actions are:\nUp, Right, Down, Left\nYou can make up to 700 actions" in obs
    assert obs.count("Row 3: [0, 2, 0, 0]\nRow 4: [0, 2, 0, 0]\n\nValid Actions: 0(Up), 1(Right), 2(Down), 3(Left).") == 1
    obs, reward, terminated, _, info = env.step(format_answer(["down"], "x"))  # 2 + 2 -> 4
    assert reward == pytest.approx(0.1 * np.log2(5)) and info["score"] == 4 and info["max_tile"] == 4
    assert "Current Score: 4" in obs and not terminated
    _, reward, *_, info = env.step(format_answer(["Up", "Up"], "x"))  # one action per turn: the first is kept
    assert info["n_executed"] == 1 and info["format_penalty"] == 0.0
    while g.move(env.unwrapped.game.grid, 2)[2]:  # slide down until Down moves nothing
        env.step(format_answer(["Down"], "x"))
    _, reward, _, _, info = env.step(format_answer(["Down"], "x"))
    assert reward == pytest.approx(-0.1) and not info["action_is_effective"]  # an invalid move
    _, reward, *_ = env.step("<answer>0(Up)</answer>")
    assert reward == pytest.approx(-0.1)


def test_reference_rewards_on_request_and_noise_stream():
    env = gym.make("ragen/2048-v0", invalid_move_reward=0.0, log_reward=False)
    env.reset(seed=0)
    _, reward, *_ = env.step(format_answer(["Down"], "x"))
    assert reward == 4.0
    while g.move(env.unwrapped.game.grid, 2)[2]:
        env.step(format_answer(["Down"], "x"))
    _, reward, *_ = env.step(format_answer(["Down"], "x"))
    assert reward == 0.0
    a, b = gym.make("ragen/2048-v0"), gym.make("ragen/2048-v0")
    a.reset(seed=7)
    b.reset(seed=7, options={"noise_seed": 99})
    assert (a.unwrapped.game.grid == b.unwrapped.game.grid).all()  # the start is the layout
    for _ in range(6):
        for env in (a, b):
            env.step(format_answer([g.ACTIONS[g.valid_actions(env.unwrapped.game.grid)[0]]], "x"))
    assert (a.unwrapped.game.grid != b.unwrapped.game.grid).any()


def test_episode_end_and_success():
    env = gym.make("ragen/2048-v0", max_actions=5, target_tile=8)
    env.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, _, terminated, truncated, info = env.step(format_answer([g.ACTIONS[g.valid_actions(env.unwrapped.game.grid)[0]]], "x"))
        done, steps = terminated or truncated, steps + 1
    assert truncated and steps == 5 and info["success"] == (info["max_tile"] >= 8)
    env = gym.make("ragen/2048-v0", size=2)  # a 2x2 board fills at once: it ends by game over
    env.reset(seed=1)
    for _ in range(50):
        _, _, terminated, truncated, info = env.step(format_answer([g.ACTIONS[(g.valid_actions(env.unwrapped.game.grid) or [0])[0]]], "x"))
        if terminated or truncated:
            break
    assert terminated and g.is_over(env.unwrapped.game.grid)


def test_expert_beats_random():
    env = gym.make("ragen/2048-v0", max_actions=150, max_turns=150)
    expert, rand = make_agent("expert", env=env), make_agent("random", env=env, seed=0)
    tiles = {"expert": [], "random": []}
    for seed in (123, 124, 125):
        for name, agent in (("expert", expert), ("random", rand)):
            run_episode(env, agent, seed)
            tiles[name].append(env.unwrapped.game.score)
    assert min(tiles["expert"]) > max(tiles["random"])


@pytest.mark.parametrize("kwargs,match", [({"size": 9}, "size"), ({"two_prob": 1.5}, "two_prob"),
                                          ({"log_reward": 1}, "log_reward"), ({"target_tile": 1}, "target_tile"),
                                          ({"invalid_move_reward": float("nan")}, "invalid_move_reward")])
def test_bad_kwargs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("ragen/2048-v0", **kwargs)


def test_picture():
    pytest.importorskip("pygame")
    env = gym.make("ragen/2048-v0", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.shape == (2 * 8 + 4 * 64, 2 * 8 + 4 * 64, 3)
    env.step(format_answer(["Down"], "x"))
    assert not np.array_equal(frame, env.render())


def test_the_report_draws_no_frames_for_a_700_turn_game(tmp_path):
    """16 framed 700-move games made a 254 MB report; long episodes keep their text states only."""
    from ragen_envs.eval.harness import evaluate
    from ragen_envs.eval.report import MAX_FRAMED_TURNS

    evaluate("expert", ["ragen/Sokoban-v0", "ragen/2048-v0"], [123], tmp_path / "run",
             env_kwargs={"max_turns": 80, "max_actions": 80})
    html = (tmp_path / "run" / "report.html").read_text()
    data = json.loads(html.split('<script type="application/json" id="ragen-data">')[1].split("</script>")[0])
    by_env = {e["env"]: e for e in data["episodes"]}
    assert len(by_env["ragen/2048-v0"]["states"]) - 1 > MAX_FRAMED_TURNS >= len(by_env["ragen/Sokoban-v0"]["states"]) - 1
    assert by_env["ragen/Sokoban-v0"]["frames"] and not by_env["ragen/2048-v0"]["frames"]
