"""Countdown: instances from the seed, the safe exact evaluator, the reference's reward levels."""

from __future__ import annotations

from fractions import Fraction

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs
from ragen_envs.agents import make_agent
from ragen_envs.eval import run_episode
from ragen_envs.games import countdown as cd
from ragen_envs.protocol import format_answer


def test_instances_follow_the_documented_rule():
    # By hand, seed 123: default_rng(123).integers(3, 5) = 3 numbers. First draw: numbers
    # 68 59 6, signs (0 = +) 1 0 0: -68 + 59 + 6 = -3, outside 1..99, drawn again. Second:
    # 19 34 18, signs 0 1 0: 19 - 34 + 18 = 3, accepted.
    rng = np.random.default_rng(123)
    assert int(rng.integers(3, 5)) == 3
    assert rng.integers(1, 100, size=3).tolist() == [68, 59, 6]
    assert rng.integers(0, 2, size=3).tolist() == [1, 0, 0]
    assert rng.integers(1, 100, size=3).tolist() == [19, 34, 18]
    assert rng.integers(0, 2, size=3).tolist() == [0, 1, 0]
    pinned = {123: ((19, 34, 18), 3), 0: ((54, 56, 93, 28), 11), 1: ((51, 75, 95), 31), 124: ((60, 42, 99, 93), 96)}
    for seed, (numbers, target) in pinned.items():
        assert cd.generate_instance(seed) == cd.CountdownInstance(numbers, target), seed
    for seed in range(300):  # the guarantee: a +/- combination of all numbers hits the target
        inst = cd.generate_instance(seed)
        assert 3 <= len(inst.numbers) <= 4 and all(1 <= n <= 99 for n in inst.numbers) and 1 <= inst.target <= 99
        sums = {0}
        for n in inst.numbers:
            sums = {s + n for s in sums} | {s - n for s in sums}
        assert inst.target in sums


@pytest.mark.parametrize("text,value", [("2 + 5 - 3", 4), ("-3 + 5 + 2", 4), ("(1 + 2) * 3", 9), ("7 / 2", Fraction(7, 2)),
                                        ("2 - -3", 5), ("((((4))))", 4), ("6 / (1 - 3/4)", 24), (" 1 +\t2\n", 3), ("(1\n+\t2)", 3)])
def test_evaluate_is_exact(text, value):
    assert cd.evaluate(text) == value


@pytest.mark.parametrize("text", ["", "2 ** 3", "7 // 2", "1 / 0", "1 / (2 - 2)", "(1 + 2", "1 + 2)", "2 3", "2(3)",
                                  "1.5 + 2", "x + 1", "2 + 5 - 3 = 4", "__import__('os')", "(" * 40 + "1" + ")" * 40,
                                  "1" * 7, "1 +" * 200])
def test_evaluate_refuses_what_is_not_plain_bounded_arithmetic(text):
    with pytest.raises(cd.ExpressionError):
        cd.evaluate(text)


def test_reward_levels_are_the_references():
    inst = cd.CountdownInstance((19, 34, 18), 3)
    assert cd.score_answer("19 - 34 + 18", inst) == 1.0
    assert cd.score_answer("19 + 34 - 18", inst) == 0.1  # the numbers, the wrong value
    assert cd.score_answer("19 / (34 - 34) + 18", inst) == 0.0  # 34 twice
    assert cd.score_answer("19 - 34 + 18 = 3", inst) == 0.0  # the "= 3" is a fourth number, as in the reference
    assert cd.score_answer("(19 - 34 + 18", inst) == 0.1  # the numbers, no value
    assert cd.score_answer("34 - 19 - 12", inst) == 0.0
    assert cd.score_answer("19 - 34 + 18", inst, score=2.0, format_score=0.5) == 2.0
    assert cd.score_answer("19 * 18", inst, use_all=False) == 0.1  # a subset is allowed then
    assert cd.score_answer("19 * 19", inst, use_all=False) == 0.0  # but no number twice


def test_env_one_turn_with_the_reference_text():
    env = gym.make("ragen/Countdown-v0", render_mode="ansi")
    obs, _ = env.reset(seed=123)
    assert obs.startswith("You are solving the Countdown puzzle.") and "\nTurn 1:\nState:\nTarget: 3, nums: [19, 34, 18]\n" in obs
    assert "Your available actions" not in obs
    _, reward, terminated, truncated, info = env.step(format_answer(["19 + 34 - 18"], "x"))
    assert reward == 0.1 and terminated and not truncated and not info["success"]
    assert info["numbers_ok"] and not info["correct"] and env.render() == "Your answer get 0.1 points."
    env.reset(seed=123)
    _, reward, terminated, _, info = env.step("no tags")
    assert reward == pytest.approx(-0.1) and terminated and not info["success"]  # the one turn is spent
    env.reset(seed=123)
    _, reward, *_, info = env.step(format_answer(["18 + 19 - 34"], "x"))
    assert reward == 1.0 and info["success"] and info["correct"] and env.render() == "Your answer get 1 points."


def test_expert_solves_every_eval_instance():
    env = gym.make("ragen/Countdown-v0")
    expert = make_agent("expert", env=env)
    assert all(run_episode(env, expert, seed).success for seed in ragen_envs.EVAL_SEEDS)
    assert cd.solve([1, 1, 1], 99) is None
    assert cd.evaluate(cd.solve([4, 1, 8, 7], 24)) == 24


def test_bad_kwargs():
    for kwargs in ({"score": float("inf")}, {"format_score": "0.1"}):
        with pytest.raises(ValueError, match="score"):
            gym.make("ragen/Countdown-v0", **kwargs)


@pytest.mark.parametrize("text", ["054+56", "0+5", "00+5", "0054", "0", "1+\n2", "(1+\n2)", "\n1+2", "1+2\n", " 1+2",
                                  "1\r+2", "(1\r+2)", "1+2\n\n", "\n\n1+2", "\t1+2", "(1+2)\n*3", "((1)\n+2)",
                                  "3 *\n(4 - 1)", "(3 *\n(4 - 1))"])
def test_leading_zeros_and_line_breaks_evaluate_as_the_references_eval(text):
    """The reference scores with Python's eval: a literal with leading zeros (054) and a line
    break outside parentheses are syntax errors there (format score 0.1), so they do not
    evaluate here either (they scored 1.0 before)."""
    from ragen_envs.games.countdown import ExpressionError, evaluate

    try:
        expected = eval(text, {"__builtins__": None}, {})  # noqa: S307 - the reference's rule, on fixed literals
    except SyntaxError:
        expected = None
    try:
        got = evaluate(text)
    except ExpressionError:
        got = None
    assert got == expected


def test_an_answer_over_256_characters_scores_zero():
    """docs/protocol.md once said such an answer gets the format score; it gets 0 (the numbers
    check refuses it first)."""
    from ragen_envs.games.countdown import CountdownInstance, score_answer

    inst = CountdownInstance(numbers=[19, 34, 18], target=3)
    assert score_answer("19 + 18 - 34", inst) == 1.0
    assert score_answer("19 + 18 - 34" + " " * 250, inst) == 0.0
