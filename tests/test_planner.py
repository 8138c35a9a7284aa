"""The FrozenLake turn planner: exact optimal play under open-loop multi-action turns."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ragen_envs.games import frozenlake as fl
from ragen_envs.games.frozenlake_planner import TurnPlanner, step_matrices


def _brute_open_loop(desc, pos, actions):
    """P(reach G) of one fixed action sequence, by recursion over every slip outcome."""
    if not actions:
        return 0.0
    total = 0.0
    for d in fl._outcome_directions(actions[0], True):
        nxt = fl._move(pos, d, desc.shape[0])
        if desc[nxt] == "G":
            total += 1 / 3
        elif desc[nxt] != "H":
            total += _brute_open_loop(desc, nxt, actions[1:]) / 3
    return total


def test_one_action_per_turn_equals_finite_horizon_value_iteration():
    for seed in range(20):
        desc = fl.generate_map(seed)
        values, _ = fl.optimal_policy(desc, 6)
        planner = TurnPlanner(desc, max_per_turn=1)
        live = ~np.isin(desc.ravel(), ["H", "G"])  # the planner values cells a player can stand on
        np.testing.assert_allclose(planner.value(6, 6)[live], values[6].ravel()[live], atol=1e-12)


def test_single_turn_value_is_best_open_loop_sequence():
    desc = fl.generate_map(3)
    start = tuple(int(v) for v in np.argwhere(desc == "S")[0])
    planner = TurnPlanner(desc, max_per_turn=3)
    best = max(
        _brute_open_loop(desc, start, seq) for k in (1, 2, 3) for seq in itertools.product(range(4), repeat=k)
    )
    s = start[0] * 4 + start[1]
    assert planner.value(1, 3)[s] == pytest.approx(best, abs=1e-12)
    macro = planner.best_macro(start, 1, 3)
    assert _brute_open_loop(desc, start, macro) == pytest.approx(best, abs=1e-12)


def test_tiny_map_hand_values():
    desc = np.array([list("SF"), list("HG")])
    planner = TurnPlanner(desc, max_per_turn=2)
    # From F (0,1) with one action: Down reaches G w.p. 1/3, Left/Right slip down w.p. 1/3 too.
    assert planner.value(1, 1)[1] == pytest.approx(1 / 3)
    # Budgets of zero are worth nothing.
    assert planner.value(0, 5).sum() == 0 and planner.value(5, 0).sum() == 0
    # More turns never hurt.
    assert np.all(planner.value(3, 4) >= planner.value(2, 4) - 1e-12)


def test_step_matrices_rows_are_distributions():
    desc = fl.generate_map(11)
    Q, g = step_matrices(desc)
    totals = Q.sum(axis=2) + g
    live = np.array([c not in ("H", "G") for c in desc.ravel()])
    holes = np.zeros_like(totals)
    for a in range(4):  # the missing mass is exactly the probability of falling in a hole
        for s in np.flatnonzero(live):
            r, c = divmod(s, 4)
            holes[a, s] = sum(desc[fl._move((r, c), d, 4)] == "H" for d in fl._outcome_directions(a, True)) / 3
    np.testing.assert_allclose(totals[:, live] + holes[:, live], 1.0)
    assert np.all(totals[:, ~live] == 0)
