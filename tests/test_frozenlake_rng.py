"""The FrozenLake map sampler's plain-Python draws equal numpy's (games/frozenlake_rng.py) and
the maps equal the numpy rejection sampler they replaced (rng.choice with p, two integers calls)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ragen_envs.games import frozenlake as fl
from ragen_envs.games.frozenlake_rng import MapRandom, generate_state64, seed_pool

SEEDS = [0, 1, 2, 7, 123, 2**31 + 5, 2**32 - 1, 2**32, 10**12, 2**64 + 3, 2**130 + 17]


def _numpy_map(seed: int, size: int, p: float) -> np.ndarray:
    """The sampler as it was written with numpy (the reference's rejection loop)."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[p, 1.0 - p]).astype("<U1")
        start = tuple(int(x) for x in rng.integers(size, size=2))
        goal = tuple(int(x) for x in rng.integers(size, size=2))
        if start == goal:
            continue
        board[start], board[goal] = "S", "G"
        if fl._reaches_goal(["".join(row) for row in board.tolist()], start):
            return board


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_sequence_pool_and_state_equal_numpys(seed):
    ss = np.random.SeedSequence(seed)
    assert seed_pool(seed) == ss.pool.tolist()
    assert generate_state64(seed_pool(seed), 4) == ss.generate_state(4, np.uint64).tolist()


@pytest.mark.parametrize("seed", SEEDS)
def test_draws_equal_numpys_generator(seed):
    """random() and integers(k), interleaved, incl. ranges where Lemire's method redraws often
    (k = 2**31 + 1 redraws about half the time) and the kept high 32-bit half."""
    g = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
    m = MapRandom(seed)
    pick = random.Random(seed)
    for _ in range(200):
        if pick.random() < 0.4:
            assert m.random() == g.random()
        else:
            k = pick.choice([2, 3, 4, 5, 7, 32, 2**31 + 1, 3 * 2**30, 2**32 - 1, pick.randint(2, 2**32 - 1)])
            assert m.below(k) == int(g.integers(k))


@pytest.mark.parametrize("size,p", [(4, 0.8), (2, 0.5), (3, 0.7), (5, 0.3), (8, 0.9), (6, 1.0), (7, 0.123456789)])
def test_maps_equal_the_numpy_sampler(size, p):
    for seed in range(60):
        want = _numpy_map(seed, size, p)
        got = fl.generate_map(seed, size, p)
        assert got.dtype == want.dtype and got.shape == want.shape and (got == want).all(), (seed, size, p)
        assert fl.map_rows(seed, size, p) == tuple("".join(row) for row in want.tolist())


def test_from_rows_is_the_constructor_on_row_strings():
    rows = fl.map_rows(11)
    a, b = fl.FrozenLake.from_rows(rows), fl.FrozenLake(fl.generate_map(11))
    assert a.rows == b.rows and a.position == b.position and a.size == b.size
    assert a.desc.dtype == b.desc.dtype and (a.desc == b.desc).all()
    for bad in (["SF"], ["SF", "HGX"], ["SX", "FG"], ["FF", "HG"], ["SS", "FG"], "SFHG"):
        with pytest.raises(ValueError):
            fl.FrozenLake.from_rows(bad)


def test_hole_threshold_is_numpys_choice_boundary():
    """A draw at the threshold is H and the one just below is F, as rng.choice decides."""
    for p in (0.8, 0.3, 0.123456789, 1.0):
        c0 = fl._hole_threshold(p)
        cdf = np.cumsum([p, 1.0 - p])
        cdf /= cdf[-1]
        assert int(cdf.searchsorted(c0, side="right")) == (1 if c0 < 1.0 else 2)
        assert int(cdf.searchsorted(np.nextafter(c0, 0.0), side="right")) == 0
