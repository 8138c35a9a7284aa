"""Sudoku: the newest reference's puzzles for a seed, its placements, rewards and rendered text
(recorded fixtures), the solver and expert, the env's budgets and its handling of bad input."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_envs.agents import make_agent
from ragen_envs.envs.sudoku import MAX_ECHO, parse_placement, state_text, feedback_text
from ragen_envs.eval import run_episode
from ragen_envs.games import sudoku as sd
from ragen_envs.protocol import format_answer

FIXTURE = Path(__file__).parent / "fixtures" / "ragen2" / "sudoku.json.gz"


@lru_cache(maxsize=1)
def reference() -> dict:
    """mll-lab-nu/RAGEN 20daedc's SudokuEnv run unchanged (tests/fixtures/ragen2/record_sudoku.py,
    config/envs.yaml's SimpleSudoku / MediumSudoku: 9x9, with_feedback): the solution and the
    emptied cells of seeds 0..999 for easy, medium and hard (and 200 4x4 ones); scripted
    episodes (20 placements on easy seeds 0..999, 30 on medium 0..199, 20 on 4x4 0..99) with
    reward, done and the changed cell after each, the final grid, and the rendered texts of
    the first seeds; and a few seeds played to the solution."""
    with gzip.open(FIXTURE, "rt", encoding="utf-8") as f:
        return json.load(f)


def mask(grid: np.ndarray) -> str:
    return format(sum(1 << k for k, v in enumerate(grid.ravel().tolist()) if v == 0), "x")


def digits(grid: np.ndarray) -> str:
    return "".join(str(int(v)) for v in grid.ravel())


def check_starts(records, size, difficulties) -> None:
    for rec in records:
        for difficulty in difficulties:
            puzzle, solution = sd.new_puzzle(rec["seed"], size, difficulty)
            assert digits(solution) == rec["solution"], (rec["seed"], difficulty)
            assert mask(puzzle) == rec[difficulty], (rec["seed"], difficulty)


def replay(rec: dict, size: int, difficulty: str) -> tuple[int, int]:
    """Replay one recorded episode through the env's reading of each piece and the game;
    ``(texts compared, steps)``."""
    from ragen_envs.envs.sudoku import parse_placement, feedback_text

    puzzle, solution = sd.new_puzzle(rec["seed"], size, difficulty)
    game = sd.Sudoku(puzzle, solution)
    texts = rec.get("texts")
    compared = 0
    if texts:
        assert state_text(game) == texts[0], rec["seed"]
        compared += 1
    for k, (action, reward, done, changed) in enumerate(zip(rec["actions"], rec["rewards"], rec["done"],
                                                             rec["changed"])):
        before = game.grid.copy()
        parsed = parse_placement(action, size)
        result = game.place(parsed.row, parsed.col, parsed.num) if parsed.ok else game.unread()
        diff = np.flatnonzero(before.ravel() != game.grid.ravel())
        assert (int(diff[0]) if diff.size else -1) == changed, (rec["seed"], action)
        assert result.reward == reward and result.done == done, (rec["seed"], action, result)
        if texts:
            assert state_text(game, feedback_text(parsed, result, size)) == texts[k + 1], (rec["seed"], action)
            compared += 1
    assert digits(game.grid) == rec["final"], rec["seed"]
    return compared, len(rec["actions"])


def test_puzzles_are_the_references():
    check_starts(reference()["starts"][:300], 9, ("easy", "medium", "hard"))
    check_starts(reference()["starts4"], 4, ("easy",))


@pytest.mark.slow
def test_all_thousand_recorded_puzzles():
    check_starts(reference()["starts"], 9, ("easy", "medium", "hard"))


def test_scripted_placements_rewards_and_texts_are_the_references():
    data = reference()
    texts = steps = 0
    for key, size, difficulty, count in (("scripted", 9, "easy", 250), ("scripted_medium", 9, "medium", 60),
                                         ("scripted4", 4, "easy", 100)):
        for rec in data[key][:count]:
            t, s = replay(rec, size, difficulty)
            texts, steps = texts + t, steps + s
    assert texts >= 300 and steps >= 8000
    rewards = [r for rec in data["scripted"][:250] for r in rec["rewards"]]
    assert {-0.1, 0.5, 1.0} <= set(rewards)  # the scripts hit every kind of step


@pytest.mark.slow
def test_all_recorded_episodes():
    data = reference()
    for key, size, difficulty in (("scripted", 9, "easy"), ("scripted_medium", 9, "medium"), ("scripted4", 4, "easy")):
        for rec in data[key]:
            replay(rec, size, difficulty)


def test_solved_episodes_are_the_references():
    for i, rec in enumerate(reference()["solved"]):
        difficulty = "easy" if i < 6 else "medium"
        puzzle, solution = sd.new_puzzle(rec["seed"], 9, difficulty)
        game = sd.Sudoku(puzzle, solution)
        for action, reward, done in zip(rec["actions"], rec["rewards"], rec["done"]):
            parsed = parse_placement(action)
            result = game.place(parsed.row, parsed.col, parsed.num)
            assert result.reward == reward and result.done == done
        assert result.solved and rec["success"] and rec["rewards"][-1] == 11.0
        assert state_text(game, feedback_text(parsed, result)) == rec["last_text"]


# --------------------------------------------------------------------------- reading a piece
@pytest.mark.parametrize("piece,want", [
    ("place 5 at row 2 col 3", (1, 2, 5)),
    ("2,3,5", (1, 2, 5)),
    ("(2, 3,5)", (1, 2, 5)),
    ("5 at 2,3", (1, 2, 5)),
    ("place 5 at (2,3)", (1, 2, 5)),
    ("(2,3,5) that", (2, 4, 2)),  # "at" anywhere turns r,c,n into n,r,c, as in the reference
    ("PLACE 05 AT ROW 02 COL 3", (1, 2, 5)),
    ("2,3,5,7", (1, 2, 5)),
    ("\u0662,\u0663,\u0665", (1, 2, 5)),  # Arabic-Indic digits are \d too
])
def test_the_references_spellings(piece, want):
    p = parse_placement(piece)
    assert p.ok and (p.row, p.col, p.num) == want


@pytest.mark.parametrize("piece,error", [
    ("0,3,5", "Row 0 is out of range (1-9)"),
    ("2,10,5", "Column 10 is out of range (1-9)"),
    ("place 0 at row 2 col 3", "Number 0 is out of range (1-9)"),
    ("2,3," + "9" * 50, "Number " + "9" * 50 + " is out of range (1-9)"),
    ("00000000000000000000003,3,5", None),  # many leading zeros: row 3
    ("Hello", "Could not parse action: 'hello'. Expected format: 'place 5 at row 2 col 3' or '2,3,5'"),
])
def test_bad_pieces_get_the_references_messages(piece, error):
    p = parse_placement(piece)
    if error is None:
        assert p.ok and p.row == 2
    else:
        assert not p.ok and p.error == error


def test_long_pieces_read_in_linear_time_and_echo_at_most_max_echo():
    import time

    for piece in ("1" * 200_000, "1" * 100_000 + " at " + "2" * 100_000, ", ".join(["1"] * 50_000), "(" * 200_000):
        start = time.perf_counter()
        p = parse_placement(piece)
        assert time.perf_counter() - start < 1.0
        assert len(p.error) < MAX_ECHO + 200


# --------------------------------------------------------------------------- solver and expert
def test_solver_and_solution_counts():
    puzzle, solution = sd.new_puzzle(0)
    assert sd.removed_count(9, "easy") == 32 == int(np.count_nonzero(puzzle == 0))
    assert sd.removed_count(9, "medium") == 40 and sd.removed_count(9, "hard") == 48 and sd.removed_count(4, "easy") == 6
    got = sd.solve(puzzle)
    assert sd.is_solved(got) and (got[puzzle != 0] == puzzle[puzzle != 0]).all()
    assert sd.count_solutions(solution) == 1 and sd.count_solutions(np.zeros((4, 4), int), limit=300) == 288
    clash = solution.copy()
    clash[0, 0], clash[0, 1] = clash[0, 1], clash[0, 0]
    assert sd.solve(clash) is None and not sd.is_solved(clash) and {(0, 0), (0, 1)} <= sd.conflicts(clash)
    several = [s for s in range(40) if sd.count_solutions(sd.new_puzzle(s)[0]) > 1]
    assert several  # the reference does not make puzzles unique: some easy ones have several solutions


def test_state_text_marks_conflicts_and_lists_valid_numbers():
    solution = np.array([[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]])
    puzzle = solution.copy()
    puzzle[0, 1:] = puzzle[1, :2] = puzzle[3, 3] = 0  # 6 empty cells
    game = sd.Sudoku(puzzle, solution)
    lines = state_text(game).split("\n")
    assert lines[3:8] == ["[1] . |  .  .", " .  . | [1][2]", "-------------", "[2][1]| [4][3]", "[4][3]| [2] ."]
    # (1,2): row 1 holds 1, column 2 holds 1 and 3, the box 1: so 2 or 4
    assert lines[10:19] == ["", "\U0001f4a1 VALID NUMBERS FOR EMPTY CELLS:", "  - (1,2): [2, 4]", "  - (1,3): [3]",
                            "  - (1,4): [4]", "  - (2,1): [3]", "  - (2,2): [4]", "  - (4,4): [1]", ""]
    assert lines[19:] == ["Progress: 10/16 cells filled (10 initial, 0 placed)", "Steps: 0/81"]
    game.grid[0, 1] = 1  # clashes with the given 1s of its row and box and of its column (play never makes one)
    lines = state_text(game).split("\n")
    assert sd.conflicts(game.grid) == {(0, 0), (0, 1), (2, 1)}
    assert lines[3] == "[1]*1*|  .  ." and lines[6] == "[2][1]| [4][3]"  # givens keep their brackets
    assert lines[8:15] == ["", "Legend: [N]=initial cell, N=user-placed, *N*=conflict, .=empty", "",
                           "\u26a0 CONFLICTS DETECTED:", "  - Cell (1,1): 1", "  - Cell (1,2): 1", "  - Cell (3,2): 1"]


@pytest.mark.parametrize("env_id,empty", [("ragen/Sudoku-v0", 32), ("ragen/SudokuMedium-v0", 40)])
def test_expert_solves_every_puzzle_with_enough_budget(env_id, empty):
    env = gym.make(env_id, max_turns=50, max_actions=100)
    expert = make_agent("expert", env=env)
    for seed in (123, 124, 125, 126):
        result = run_episode(env, expert, seed)
        assert env.unwrapped.success and env.unwrapped.budget.actions_used == empty, seed
        assert result is not None


def test_reference_budgets_leave_no_puzzle_solvable():
    env = gym.make("ragen/Sudoku-v0")
    expert = make_agent("expert", env=env)
    run_episode(env, expert, 123)
    u = env.unwrapped
    assert not u.success and u.budget.actions_used == 10 and u.budget.turns_used == 5  # 5 turns x 2


def test_expert_repairs_a_grid_without_completion():
    puzzle, solution = sd.new_puzzle(123)
    # a valid but wrong number on an empty cell that leaves no completion
    blocked = None
    for r, c in zip(*np.nonzero(puzzle == 0)):
        for n in sd.valid_numbers(puzzle, r, c):
            grid = puzzle.copy()
            grid[r, c] = n
            if n != solution[r, c] and sd.solve(grid) is None:
                blocked = grid
                break
        if blocked is not None:
            break
    assert blocked is not None
    game = sd.Sudoku(puzzle, solution)
    game.grid = blocked
    for _ in range(40):
        (move,) = sd.expert_placements(game.grid, game.initial, 1)
        result = game.place(*move)
        assert result.effective
        if result.solved:
            break
    assert sd.is_solved(game.grid) and game.num_steps == 32  # 31 cells still empty, and the repair


# --------------------------------------------------------------------------- env
def test_prompt_rewards_and_bad_input_are_penalised_no_ops():
    env = gym.make("ragen/Sudoku-v0", render_mode="ansi", max_turns=10)
    obs, _ = env.reset(seed=0)
    assert obs.startswith("You are solving a Sudoku puzzle.") and "Steps: 0/81" in obs
    assert "[8] . [1]| [7][2][5]|  . [6] ." in obs
    grid0 = env.unwrapped.game.grid.copy()
    obs, reward, terminated, truncated, info = env.step(format_answer(["place 3 at row 1 col 2", "1,1,9"], "x"))
    assert reward == pytest.approx(0.9) and info["format_penalty"] == 0.0 and info["n_executed"] == 2
    assert "\u274c Cannot modify initial cell at (1,1)" in obs and "Steps: 2/81" in obs and info["cells_filled"] == 50
    for bad in ("hello", "0,1,1", "1,1,10", "1,1,9", "1,3,3"):  # unreadable, out of range, a given, a conflict
        grid = env.unwrapped.game.grid.copy()
        _, reward, *_, info = env.step(format_answer([bad], "x"))
        assert reward == pytest.approx(-0.1) and not info["action_is_effective"] and info["format_penalty"] == 0.0
        assert (env.unwrapped.game.grid == grid).all()
    _, reward, *_, info = env.step("no tags")  # the protocol's format penalty: nothing runs
    assert reward == pytest.approx(-0.1) and info["format_penalty"] == -0.1 and info["n_executed"] == 0
    assert (env.unwrapped.game.grid != grid0).sum() == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=60) | st.from_regex(r"[ (]*\d{1,3}[ ,]*\d{1,3}[ ,)]*\d{1,3}\)?", fullmatch=True)
                | st.from_regex(r"place \d{1,2} at (row \d{1,2} col \d{1,2}|\(\d,\d\)|\d,\d)", fullmatch=True),
                min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_any_answer_is_a_step_never_an_exception(pieces, seed):
    env = gym.make("ragen/Sudoku-v0", max_actions_per_turn=4)
    env.reset(seed=seed)
    u = env.unwrapped
    givens = u.game.initial.copy()
    reply = format_answer([p.replace("||", "|") for p in pieces], "x")
    _, reward, terminated, truncated, info = env.step(reply)
    assert (u.game.grid[givens != 0] == givens[givens != 0]).all()  # givens never change
    assert not sd.conflicts(u.game.grid)  # no placement ever breaks a rule
    assert info["n_executed"] == u.game.num_steps
    assert reward == pytest.approx(info["game_reward"] + info["format_penalty"])
    assert info["format_penalty"] == (0.0 if info["matched"] and info["n_parsed"] else -0.1)


@pytest.mark.parametrize("kwargs,match", [({"size": 16}, "size"), ({"difficulty": "expert"}, "difficulty"),
                                          ({"placement_reward": float("nan")}, "placement_reward"),
                                          ({"completion_bonus": "10"}, "completion_bonus"),
                                          ({"max_steps": 0}, "max_steps")])
def test_bad_kwargs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("ragen/Sudoku-v0", **kwargs)


def test_small_board_and_the_step_limit():
    env = gym.make("ragen/Sudoku-v0", size=4, max_steps=3, max_turns=10)
    env.reset(seed=5)
    _, _, terminated, _, _ = env.step(format_answer(["9,9,9", "9,9,9"], "x"))  # two unreadable steps: not the end
    assert not terminated
    move = env.unwrapped.expert_actions()[0]
    _, _, terminated, _, info = env.step(format_answer([move], "x"))  # the reference ends after a valid 3rd step
    assert terminated and not info["success"]


def test_picture():
    pytest.importorskip("pygame")
    env = gym.make("ragen/Sudoku-v0", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.shape == (2 * 8 + 9 * 48, 2 * 8 + 9 * 48, 3)
    env.step(format_answer(env.unwrapped.expert_actions(), "x"))
    assert not np.array_equal(frame, env.render())


def test_eval_and_its_report(tmp_path):
    from ragen_envs.eval.harness import evaluate

    evaluate("expert", ["ragen/Sudoku-v0"], [123], tmp_path / "run", env_kwargs={"max_turns": 20, "max_actions": 40})
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    html = (tmp_path / "run" / "report.html").read_text()
    data = json.loads(html.split('<script type="application/json" id="ragen-data">')[1].split("</script>")[0])
    (episode,) = data["episodes"]
    assert episode["env"] == "ragen/Sudoku-v0" and len(episode["states"]) == 17  # the start and 16 turns
    assert "SUDOKU PUZZLE" in episode["states"][0] and "\u2713 Correct!" in episode["states"][1]
    assert "ragen/Sudoku-v0" in json.dumps(summary) and '"success_rate": 1.0' in json.dumps(summary)
    try:
        import pygame  # noqa: F401
    except ImportError:
        return
    assert len(episode["frames"]) == 17  # a picture per state
