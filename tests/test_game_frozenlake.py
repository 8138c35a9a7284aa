"""Tests for ragen_envs.games.frozenlake: reference parity, dynamics and the planner."""

from __future__ import annotations

import random
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
from reference import load_fixtures
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_envs.games.frozenlake import (
    ACTIONS,
    DOWN,
    LEFT,
    RIGHT,
    UP,
    FrozenLake,
    FrozenLakeStep,
    best_action,
    generate_map,
    optimal_policy,
)

ACTION_BY_NAME = {"Left": LEFT, "Down": DOWN, "Right": RIGHT, "Up": UP}


def gen(seed: int) -> np.random.Generator:
    """The reference generator: what gymnasium.utils.seeding.np_random(seed) builds."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))


def render(game: FrozenLake) -> str:
    """RAGEN's text grid: P player, _ frozen/start, O hole, G goal, X in hole, √ on goal."""
    symbols = {"S": "_", "F": "_", "H": "O", "G": "G"}
    on_player = {"S": "P", "F": "P", "H": "X", "G": "\u221a"}
    desc = game.desc
    rows = []
    for r in range(game.size):
        row = []
        for c in range(game.size):
            table = on_player if (r, c) == game.position else symbols
            row.append(table[str(desc[r, c])])
        rows.append("".join(row))
    return "\n".join(rows)


def _load_records():
    data = load_fixtures()
    return [] if data is None else data["FrozenLake"]


RECORDS = _load_records()


# --------------------------------------------------------------------------- parity


def test_fixture_covers_seeds_0_to_99():
    if not RECORDS:
        pytest.skip("reference fixtures not available")
    assert sorted(r["seed"] for r in RECORDS) == list(range(100))


@pytest.mark.parametrize("record", RECORDS, ids=[f"seed{r['seed']}" for r in RECORDS])
def test_reference_episode_parity(record):
    seed = record["seed"]
    desc = generate_map(seed)
    game = FrozenLake(desc, slippery=True)
    rng = gen(seed)
    game.reset(rng)
    assert render(game) == record["initial"]
    for i, expected in enumerate(record["steps"]):
        result = game.step(ACTION_BY_NAME[expected["action"]], rng)
        where = f"seed {seed} step {i}"
        assert render(game) == expected["obs"], where
        assert result.reward == expected["reward"], where
        assert result.terminated == expected["done"], where
        assert result.success == expected["success"], where
        assert result.moved == expected["effective"], where
        assert game.done == expected["done"], where


def test_spec_example_seed_123():
    # ragen_spec.md §1.5, measured example.
    game = FrozenLake(generate_map(123))
    game.reset(gen(123))
    assert render(game) == "____\n_OOP\nGO__\nO___"


@pytest.mark.parametrize("seed", [0, 1, 7, 123, 2**31 + 5])
def test_generator_matches_gymnasium_seeding(seed):
    seeding = pytest.importorskip("gymnasium.utils.seeding")
    ours, theirs = gen(seed), seeding.np_random(seed)[0]
    assert type(ours.bit_generator) is type(theirs.bit_generator)
    assert ours.bit_generator.state == theirs.bit_generator.state
    np.testing.assert_array_equal(ours.random(50), theirs.random(50))
    np.testing.assert_array_equal(ours.integers(4, size=20), theirs.integers(4, size=20))


@pytest.mark.parametrize("seed", range(12))
def test_dynamics_match_gymnasium_frozenlake(seed):
    """Our game and gymnasium's FrozenLakeEnv agree step by step on the same stream."""
    frozen_lake = pytest.importorskip("gymnasium.envs.toy_text.frozen_lake")
    desc = generate_map(seed)
    for slippery in (True, False):
        env = frozen_lake.FrozenLakeEnv(desc=["".join(r) for r in desc], is_slippery=slippery)
        actions = random.Random(seed).choices(ACTIONS, k=200)
        state, _ = env.reset(seed=seed)
        game = FrozenLake(desc, slippery=slippery)
        rng = gen(seed)
        game.reset(rng)
        for a in actions:
            assert state == game.position[0] * game.size + game.position[1]
            if game.done:
                state, _ = env.reset(seed=None)  # consumes one draw of env.np_random
                game.reset(rng)
                continue
            state, reward, terminated, _, _ = env.step(a)
            result = game.step(a, rng)
            assert reward == result.reward
            assert terminated == result.terminated
        assert env.np_random.bit_generator.state == rng.bit_generator.state


# --------------------------------------------------------------------------- maps


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), size=st.integers(2, 7), p=st.floats(0.3, 1.0))
def test_generated_maps_are_valid(seed, size, p):
    desc = generate_map(seed, size=size, p=p)
    assert desc.shape == (size, size) and desc.dtype == np.dtype("<U1")
    assert set(np.unique(desc)) <= {"S", "F", "H", "G"}
    assert (desc == "S").sum() == 1 and (desc == "G").sum() == 1
    # Some path exists: the deterministic planner reaches G with certainty in size*size moves.
    values, _ = optimal_policy(desc, size * size, slippery=False)
    start = tuple(np.argwhere(desc == "S")[0])
    assert values[size * size][start] == 1.0
    np.testing.assert_array_equal(desc, generate_map(seed, size=size, p=p))


def test_all_frozen_when_p_is_one():
    desc = generate_map(5, size=5, p=1.0)
    assert (desc == "H").sum() == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seed": -1},
        {"seed": 1.5},
        {"seed": True},
        {"seed": 0, "size": 1},
        {"seed": 0, "size": 0},
        {"seed": 0, "size": 2.0},
        {"seed": 0, "p": 0.0},
        {"seed": 0, "p": 1.01},
        {"seed": 0, "p": -0.2},
        {"seed": 0, "p": float("nan")},
    ],
)
def test_generate_map_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        generate_map(**kwargs)


# --------------------------------------------------------------------------- game


def test_desc_is_a_copy_and_validated():
    game = FrozenLake(["SF", "HG"])
    d = game.desc
    d[0, 1] = "H"
    assert game.desc[0, 1] == "F"
    assert game.size == 2 and game.position == (0, 0) and game.cell == "S"
    for bad in (["SS", "FG"], ["FF", "FG"], ["SF", "HX"], ["SFF", "HG"], ["S"], [["SF"]]):
        with pytest.raises(ValueError):
            FrozenLake(bad)


def test_step_errors():
    game = FrozenLake(["SG", "FF"], slippery=False)
    rng = gen(0)
    with pytest.raises(RuntimeError):
        game.step(RIGHT, rng)  # before reset
    game.reset(rng)
    for bad in (-1, 4, 1.0, "Up", None, True):
        with pytest.raises(ValueError):
            game.step(bad, rng)
    result = game.step(np.int64(RIGHT), rng)
    assert result == FrozenLakeStep(reward=1.0, terminated=True, moved=True, success=True, direction=RIGHT)
    assert game.done and game.success and not game.in_hole
    with pytest.raises(RuntimeError):
        game.step(LEFT, rng)
    game.reset(rng)
    assert game.position == (0, 0) and not game.done


def test_hole_and_border():
    game = FrozenLake(["SH", "FG"], slippery=False)
    rng = gen(1)
    game.reset(rng)
    bump = game.step(UP, rng)
    assert bump == FrozenLakeStep(reward=0.0, terminated=False, moved=False, success=False, direction=UP)
    fall = game.step(RIGHT, rng)
    assert fall.terminated and not fall.success and fall.reward == 0.0 and fall.moved
    assert game.in_hole and game.done and game.cell == "H"


def test_draw_counts():
    """reset uses exactly one draw and step one draw, slippery or not."""
    for slippery in (True, False):
        game = FrozenLake(["FFF", "FSF", "FFF"], slippery=slippery)
        rng, mirror = gen(42), gen(42)
        game.reset(rng)
        mirror.random()
        assert rng.bit_generator.state == mirror.bit_generator.state
        for _ in range(5):
            game.reset(rng)
            game.step(DOWN, rng)
            mirror.random(2)
        assert rng.bit_generator.state == mirror.bit_generator.state


def test_slip_frequencies():
    """Each of the three outcomes has frequency 1/3 ± 0.015 (fixed seed, so deterministic)."""
    game = FrozenLake(["FFF", "FSF", "FFF"], slippery=True)
    rng = gen(2024)
    n = 30_000
    counts = {a: {} for a in ACTIONS}
    for i in range(n):
        game.reset(rng)
        action = ACTIONS[i % 4]
        result = game.step(action, rng)
        assert result.moved and not result.terminated
        dr, dc = game.position[0] - 1, game.position[1] - 1
        assert (dr, dc) == {LEFT: (0, -1), DOWN: (1, 0), RIGHT: (0, 1), UP: (-1, 0)}[result.direction]
        rel = (result.direction - action) % 4
        counts[action][rel] = counts[action].get(rel, 0) + 1
    total = {rel: sum(c.get(rel, 0) for c in counts.values()) for rel in (0, 1, 2, 3)}
    assert total[2] == 0  # never the opposite direction
    for rel in (3, 0, 1):  # (a-1)%4, a, (a+1)%4
        assert abs(total[rel] / n - 1 / 3) < 0.015, total
    for action in ACTIONS:  # and per action, with a looser bound for the smaller sample
        for rel in (3, 0, 1):
            assert abs(counts[action][rel] / (n / 4) - 1 / 3) < 0.03, counts


def test_not_slippery_always_moves_as_told():
    game = FrozenLake(["FFF", "FSF", "FFF"], slippery=False)
    rng = gen(3)
    for i in range(200):
        game.reset(rng)
        assert game.step(ACTIONS[i % 4], rng).direction == ACTIONS[i % 4]


def test_no_global_rng_consumed():
    np_state = np.random.get_state()
    py_state = random.getstate()
    desc = generate_map(11)
    game = FrozenLake(desc)
    rng = gen(11)
    game.reset(rng)
    for a in (LEFT, DOWN, RIGHT, UP) * 3:
        if game.done:
            break
        game.step(a, rng)
    optimal_policy(desc, 10)
    best_action(desc, (0, 0), 10)
    after = np.random.get_state()
    assert np_state[0] == after[0]
    np.testing.assert_array_equal(np_state[1], after[1])
    assert np_state[2:] == after[2:]
    assert py_state == random.getstate()


# --------------------------------------------------------------------------- planning


def test_value_iteration_tiny_paper_map():
    # S F      S=(0,0), F=(0,1), H=(1,0), G=(1,1); G is diagonal to S.
    # H G
    values, policy = optimal_policy(["SF", "HG"], 3)
    S, F = (0, 0), (0, 1)
    # One action left: from S nothing reaches G; from F, LEFT/DOWN/RIGHT each have one
    # outcome (of three) into G -> 1/3, tie broken to LEFT.
    assert values[1][S] == 0.0 and policy[1][S] == LEFT
    assert values[1][F] == pytest.approx(1 / 3, abs=0) and policy[1][F] == LEFT
    # Two left: from S, DOWN/RIGHT/UP reach F with 1/3 (then 1/3) -> 1/9, tie -> DOWN.
    # From F: RIGHT = (G + F + F)/3 = (1 + 2/3)/3 = 5/9 beats LEFT/DOWN = 4/9.
    assert values[2][S] == pytest.approx(1 / 9, rel=1e-15) and policy[2][S] == DOWN
    assert values[2][F] == pytest.approx(5 / 9, rel=1e-15) and policy[2][F] == RIGHT
    # Three left: from S, UP = (S + S + F)/3 = (2/9 + 5/9)/3 = 7/27 beats DOWN = 6/27.
    assert values[3][S] == pytest.approx(7 / 27, rel=1e-15) and policy[3][S] == UP
    # Terminal cells.
    assert (values[:, 1, 1] == 1.0).all() and (values[:, 1, 0] == 0.0).all()
    assert (policy[:, 1, :] == 0).all() and (policy[0] == 0).all()
    assert values.shape == policy.shape == (4, 2, 2)


def test_value_iteration_goal_adjacent():
    # S G
    # F F
    values, policy = optimal_policy(["SG", "FF"], 2)
    # DOWN, RIGHT and UP each have one outcome into G; LEFT has none. Tie -> DOWN.
    assert values[1][0, 0] == pytest.approx(1 / 3, rel=1e-15) and policy[1][0, 0] == DOWN
    values, policy = optimal_policy(["SG", "FF"], 2, slippery=False)
    assert values[1][0, 0] == 1.0 and policy[1][0, 0] == RIGHT
    assert best_action(["SG", "FF"], (0, 0), 1, slippery=False) == RIGHT


def test_value_iteration_out_of_reach():
    desc = ["SFFF", "FFFF", "FFFF", "FFFG"]  # G is 6 moves from S
    for slippery in (True, False):
        values, _ = optimal_policy(desc, 8, slippery=slippery)
        assert (values[:6, 0, 0] == 0.0).all()
        assert values[6, 0, 0] > 0.0
    values, _ = optimal_policy(desc, 8, slippery=False)
    assert values[6, 0, 0] == 1.0
    # G sealed off by holes: never reachable.
    values, _ = optimal_policy(["SFF", "FHH", "FHG"], 30)
    assert (values[:, 0, 0] == 0.0).all()
    values, _ = optimal_policy(["SF", "HG"], 0)
    assert values.shape == (1, 2, 2) and values[0, 1, 1] == 1.0 and values[0, 0, 0] == 0.0


def _exact_q(desc, pos, action, h):
    size = len(desc)
    total = Fraction(0)
    for d in ((action - 1) % 4, action, (action + 1) % 4):
        dr, dc = ((0, -1), (1, 0), (0, 1), (-1, 0))[d]
        nxt = (min(max(pos[0] + dr, 0), size - 1), min(max(pos[1] + dc, 0), size - 1))
        total += Fraction(1, 3) * _exact_v(desc, nxt, h - 1)
    return total


@lru_cache(maxsize=None)
def _exact_v(desc, pos, h):
    cell = desc[pos[0]][pos[1]]
    if cell == "G":
        return Fraction(1)
    if cell == "H" or h == 0:
        return Fraction(0)
    return max(_exact_q(desc, pos, a, h) for a in ACTIONS)


@pytest.mark.parametrize("seed", range(6))
def test_value_iteration_matches_exact_expectimax(seed):
    desc_arr = generate_map(seed, size=3, p=0.7)
    desc = tuple("".join(r) for r in desc_arr)
    horizon = 5
    values, policy = optimal_policy(desc_arr, horizon)
    for h in range(1, horizon + 1):
        for r in range(3):
            for c in range(3):
                exact = _exact_v(desc, (r, c), h)
                assert values[h, r, c] == pytest.approx(float(exact), rel=1e-14, abs=0)
                if desc[r][c] in "HG":
                    assert policy[h, r, c] == 0
                    continue
                qs = [_exact_q(desc, (r, c), a, h) for a in ACTIONS]
                assert policy[h, r, c] == qs.index(max(qs))  # lowest index among exact ties


def test_long_horizon_uses_exact_big_integers():
    # Horizon 45 > 39 switches to Python ints; values must agree with a float recursion.
    values, policy = optimal_policy(generate_map(3), 45)
    short_values, short_policy = optimal_policy(generate_map(3), 20)
    np.testing.assert_array_equal(values[:21], short_values)
    np.testing.assert_array_equal(policy[:21], short_policy)
    assert np.all(np.diff(values, axis=0) >= 0)  # more actions never hurt
    assert values.dtype == np.float64 and policy.dtype == np.int64


def test_monte_carlo_matches_values():
    """The planner's policy really achieves values[10][start] (20,000 seeded episodes)."""
    seed = 8
    desc = generate_map(seed)
    values, policy = optimal_policy(desc, 10)
    start = tuple(int(x) for x in np.argwhere(desc == "S")[0])
    target = values[10][start]
    assert 0.2 < target < 0.95  # a non-trivial map, so the check means something
    game = FrozenLake(desc)
    rng = gen(99)
    wins = 0
    episodes = 20_000
    for _ in range(episodes):
        game.reset(rng)
        for left in range(10, 0, -1):
            result = game.step(int(policy[left][game.position]), rng)
            if result.terminated:
                wins += result.success
                break
    assert abs(wins / episodes - target) < 0.01, (wins / episodes, target)


def test_best_action_agrees_with_policy_and_validates():
    desc = generate_map(17)
    _, policy = optimal_policy(desc, 12)
    for h in range(1, 13):
        for r in range(4):
            for c in range(4):
                assert best_action(desc, (r, c), h) == policy[h, r, c]
    # Larger budgets than cached extend the table.
    _, long_policy = optimal_policy(desc, 30)
    assert best_action(desc, (0, 0), 30) == long_policy[30, 0, 0]
    # A list-of-strings map hits the same answers.
    rows = ["".join(r) for r in desc]
    assert best_action(rows, (1, 1), 5) == policy[5, 1, 1]
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError):
            best_action(desc, (0, 0), bad)
    with pytest.raises(ValueError):
        best_action(desc, (4, 0), 3)
    with pytest.raises(ValueError):
        optimal_policy(desc, -1)


class _FixedDraws:
    """A stand-in generator returning chosen uniforms (to probe the slip boundaries)."""

    def __init__(self, draws):
        self._draws = list(draws)

    def random(self):
        return self._draws.pop(0)


def test_slip_boundaries_match_gymnasium_categorical_sample():
    utils = pytest.importorskip("gymnasium.envs.toy_text.utils")
    probs = [(1.0 - 1.0 / 3.0) / 2.0, 1.0 / 3.0, (1.0 - 1.0 / 3.0) / 2.0]
    edge_draws = [0.0, 1 / 3, np.nextafter(1 / 3, 1), 0.5, 2 / 3, np.nextafter(2 / 3, 1), 1 - 2**-53]
    for action in ACTIONS:
        outcomes = [(action - 1) % 4, action, (action + 1) % 4]
        for u in edge_draws:
            expected = outcomes[utils.categorical_sample(probs, _FixedDraws([u]))]
            game = FrozenLake(["FFF", "FSF", "FFF"], slippery=True)
            game.reset(_FixedDraws([0.0]))
            assert game.step(action, _FixedDraws([u])).direction == expected, (action, u)
