"""FrozenLake game logic: map generation, slippery dynamics and an exact planner.

This module is pure game logic. It renders no text and does not import gymnasium,
but it reproduces the random streams of the RAGEN reference implementation
(``ragen/env/frozen_lake``), which is built on gymnasium's ``FrozenLakeEnv``:

* :func:`generate_map` is RAGEN's rejection sampler. Its generator is built as
  ``np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))``, which is
  what ``gymnasium.utils.seeding.np_random(seed)`` builds.
* :class:`FrozenLake` uses gymnasium's numbering (0 left, 1 down, 2 right, 3 up)
  and makes the same draws. ``reset`` uses one ``rng.random()`` for the start-state
  sample. ``step`` uses one ``rng.random()`` per action, even when the lake is not
  slippery.
* :func:`optimal_policy` / :func:`best_action` give the finite-horizon optimal
  policy for the slippery MDP. Expert agents and tests use it.

The caller supplies every random generator; this module never touches the global
``random`` or ``np.random`` state.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .budget import check_budget
from .frozenlake_rng import MapRandom

__all__ = [
    "LEFT",
    "DOWN",
    "RIGHT",
    "UP",
    "ACTIONS",
    "START",
    "FROZEN",
    "HOLE",
    "GOAL",
    "FrozenLake",
    "FrozenLakeStep",
    "generate_map",
    "slip_thresholds",
    "outcome_probabilities",
    "map_rows",
    "optimal_policy",
    "best_action",
]

# Actions, numbered as in gymnasium.
LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
ACTIONS: tuple[int, ...] = (LEFT, DOWN, RIGHT, UP)

# (row, col) offset of each direction, indexed by action id.
_DELTAS: tuple[tuple[int, int], ...] = ((0, -1), (1, 0), (0, 1), (-1, 0))

# Cell codes (numpy '<U1' strings).
START, FROZEN, HOLE, GOAL = "S", "F", "H", "G"
_CELL_CODES = frozenset((START, FROZEN, HOLE, GOAL))
_TERMINAL = frozenset((HOLE, GOAL))

# Cumulative slip probabilities, computed like gymnasium with its default
# success_rate=1/3: [fail, success, fail] with fail = (1 - 1/3) / 2, then
# np.cumsum. In float64 this is [0.33333333333333337, 0.6666666666666667, 1.0].
# The first threshold is one ulp above float(1/3). We use gymnasium's own values so
# that a draw lying exactly on a boundary gives the same outcome as the reference.
_SUCCESS_RATE = 1.0 / 3.0


def slip_thresholds(success_rate: float = _SUCCESS_RATE) -> tuple[float, float, float]:
    """gymnasium's cumulative outcome probabilities of a slippery action, as floats.

    gymnasium's ``FrozenLakeEnv(success_rate=s)`` lists an action's outcomes as
    ``[(a-1)%4, a, (a+1)%4]`` with probabilities ``[f, s, f]``, ``f = (1.0 - s) / 2.0``,
    and its ``categorical_sample`` takes ``np.cumsum`` of them. The same float operations
    here give the same thresholds to the last bit, so a draw on a boundary goes the same way.
    """
    success_rate = float(success_rate)
    if not 0.0 <= success_rate <= 1.0:  # also rejects NaN
        raise ValueError(f"success_rate must be in [0, 1], got {success_rate}")
    fail_rate = (1.0 - success_rate) / 2.0
    return tuple(float(x) for x in np.cumsum([fail_rate, success_rate, fail_rate]))


_SLIP_CUMSUM: tuple[float, ...] = slip_thresholds(_SUCCESS_RATE)


def outcome_probabilities(success_rate: float = _SUCCESS_RATE) -> tuple[float, float, float]:
    """The probabilities of ``(a-1)%4, a, (a+1)%4`` for a slippery action ``a`` (planning).

    The paper's uniform slip (``success_rate`` 1/3) gives exact thirds, as the planner always
    used; any other rate gives gymnasium's ``[f, s, f]`` with ``f = (1 - s) / 2``.
    """
    if success_rate == _SUCCESS_RATE:
        return (1.0 / 3.0,) * 3
    fail_rate = (1.0 - float(success_rate)) / 2.0
    return (fail_rate, float(success_rate), fail_rate)


def _outcome_directions(action: int, slippery: bool) -> tuple[int, ...]:
    """Return the directions that ``action`` can produce, in gymnasium's order.

    A slippery action ``a`` can move the player in direction ``(a-1)%4``, ``a`` or
    ``(a+1)%4`` (with :func:`outcome_probabilities`). A non-slippery action always moves in
    direction ``a``.
    """
    if slippery:
        return ((action - 1) % 4, action, (action + 1) % 4)
    return (action,)


def _sample_direction(action: int, slippery: bool, u: float) -> int:
    """Map one uniform draw ``u`` in [0, 1) to the direction actually taken.

    This copies gymnasium's ``categorical_sample``, which returns
    ``argmax(cumsum(probs) > u)``. That is the first outcome whose cumulative
    probability is above ``u``, or outcome 0 if none is, which float64 ``u < 1``
    cannot produce.
    """
    table = _SLIP_TABLE[action] if slippery else ((action, 1.0),)
    for direction, threshold in table:
        if threshold > u:
            return direction
    return table[0][0]


# (direction, cumulative threshold) pairs of each slippery action, in gymnasium's order.
_SLIP_TABLE: tuple[tuple[tuple[int, float], ...], ...] = tuple(
    tuple(zip(_outcome_directions(a, True), _SLIP_CUMSUM)) for a in ACTIONS
)


def _move(position: tuple[int, int], direction: int, size: int) -> tuple[int, int]:
    """Move one cell in ``direction``. A move into the border leaves the player in place."""
    dr, dc = _DELTAS[direction]
    # Clamp with comparisons, not min/max calls: this runs once per step (hot path).
    row = position[0] + dr
    row = 0 if row < 0 else size - 1 if row >= size else row
    col = position[1] + dc
    col = 0 if col < 0 else size - 1 if col >= size else col
    return row, col


@lru_cache(maxsize=32)
def _move_table(size: int) -> dict[tuple[int, int], tuple[tuple[int, int], ...]]:
    """``{(row, col): (the cell _move reaches in direction 0, 1, 2, 3)}`` for a map of ``size``
    (fixed per size: one dict lookup per step instead of a call to ``_move``)."""
    return {(r, c): tuple(_move((r, c), d, size) for d in ACTIONS) for r in range(size) for c in range(size)}


# Per action, the three directions of _SLIP_TABLE in its order: (action - 1) % 4, action, (action + 1) % 4.
_SLIP_DIRECTIONS: tuple[tuple[int, int, int], ...] = tuple(_outcome_directions(a, True) for a in ACTIONS)


def _validate_action(action: int) -> int:
    """Return ``action`` as a plain int. Raise ValueError if it is not 0..3."""
    if isinstance(action, (bool, np.bool_)):
        raise ValueError(f"action must be an integer in 0..3, got {action!r}")
    try:
        value = operator.index(action)
    except TypeError:
        raise ValueError(f"action must be an integer in 0..3, got {action!r}") from None
    if value not in ACTIONS:
        raise ValueError(f"action must be an integer in 0..3, got {value}")
    return value


def _as_desc(desc: np.ndarray | Sequence[str]) -> np.ndarray:
    """Check a map and return it as a fresh square '<U1' array.

    The map may be a 2-D array of one-character strings or a sequence of equally
    long row strings (for example ``["SF", "HG"]``). It must be square, at least
    2x2, use only the codes S/F/H/G, and contain exactly one S. A single S makes
    the start position deterministic, so ``reset`` only has to make its one draw.
    """
    arr = np.asarray(desc)
    if arr.ndim == 1 and arr.size > 0 and all(isinstance(row, str) for row in arr.tolist()):
        rows = arr.tolist()
        if len({len(row) for row in rows}) != 1:
            raise ValueError("all map rows must have the same length")
        arr = np.array([list(row) for row in rows])
    if arr.ndim != 2:
        raise ValueError(f"map must be 2-dimensional, got shape {arr.shape}")
    if arr.shape[0] != arr.shape[1] or arr.shape[0] < 2:
        raise ValueError(f"map must be square and at least 2x2, got shape {arr.shape}")
    if arr.dtype.kind == "S":  # gymnasium stores maps as bytes
        arr = np.char.decode(arr, "ascii")
    try:
        out = arr.astype("<U1")
    except (TypeError, ValueError):
        raise ValueError("map cells must be one-character strings") from None
    if not np.array_equal(out, arr.astype(str)):
        raise ValueError("map cells must be one-character strings")
    bad = set(np.unique(out).tolist()) - _CELL_CODES
    if bad:
        raise ValueError(f"unknown cell codes {sorted(bad)}; expected S, F, H, G")
    n_start = int(np.count_nonzero(out == START))
    if n_start != 1:
        raise ValueError(f"map must contain exactly one start cell 'S', found {n_start}")
    return out


# --------------------------------------------------------------------------- maps


def _reaches_goal(rows: Sequence[str], start: tuple[int, int]) -> bool:
    """Return True if a 4-neighbour walk over non-H cells leads from ``start`` to a G.

    ``rows`` is the map as row strings. The reference used a depth-first search; only
    reachability matters for accepting a map, so any complete search accepts the same maps
    (this one walks flat cell indices with a neighbour table cached per size).
    """
    size = len(rows)
    text = "".join(rows)
    neighbours = _neighbours(size)
    first = start[0] * size + start[1]
    seen = {first}
    todo = [first]
    while todo:
        cell = todo.pop()
        if text[cell] == GOAL:
            return True
        for nxt in neighbours[cell]:
            if nxt not in seen and text[nxt] != HOLE:
                seen.add(nxt)
                todo.append(nxt)
    return False


@lru_cache(maxsize=32)
def _neighbours(size: int) -> tuple[tuple[int, ...], ...]:
    """For each flat cell index ``r * size + c``, the flat indices one move away (``_move`` in
    every direction, the cell itself left out: a move into the border stays put)."""
    out = []
    for row in range(size):
        for col in range(size):
            here = (row, col)
            out.append(tuple(r * size + c for r, c in (_move(here, d, size) for d in ACTIONS) if (r, c) != here))
    return tuple(out)


@lru_cache(maxsize=64)
def _hole_threshold(p: float) -> float:
    """The smallest uniform draw that ``rng.choice(["F", "H"], p=[p, 1 - p])`` maps to H.

    numpy's ``Generator.choice`` with ``p`` and replacement computes ``cdf = cumsum(p)``,
    ``cdf /= cdf[-1]``, draws ``u = rng.random(shape)`` and picks index
    ``cdf.searchsorted(u, side="right")`` (the number of ``cdf`` entries <= u). Here
    ``cdf = [c0, 1.0]`` and ``u < 1``, so the cell is H exactly when ``u >= c0``; c0 is
    computed here with numpy's own operations, so it is numpy's value to the last bit.
    """
    cdf = np.cumsum(np.array([p, 1.0 - p], dtype=np.float64))
    cdf /= cdf[-1]
    return float(cdf[0])


def generate_map(seed: int, size: int = 4, p: float = 0.8) -> np.ndarray:
    """Generate RAGEN's random FrozenLake map for ``seed``. Each call is deterministic.

    This is the reference rejection sampler, with generator
    ``M = Generator(PCG64(SeedSequence(seed)))`` (what
    ``gymnasium.utils.seeding.np_random(seed)`` builds). Each attempt:

    1. ``board = M.choice(["F", "H"], (size, size), p=[p, 1 - p])``;
    2. ``start = M.integers(size, size=2)``; ``goal = M.integers(size, size=2)``;
    3. if ``start != goal``, write S and G and accept the board when a 4-neighbour
       path over non-H cells joins them. Otherwise draw all of it again.

    Args:
        seed: non-negative integer seed (gymnasium rejects negative seeds too).
        size: side length, at least 2. With size 1, start always equals goal and
            the loop would never end.
        p: probability that a cell is frozen, in (0, 1].

    Returns:
        A ``(size, size)`` array of dtype '<U1' with one S and one G.
    """
    return np.array([list(row) for row in map_rows(seed, size, p)], dtype="<U1")


def map_rows(seed: int, size: int = 4, p: float = 0.8) -> tuple[str, ...]:
    """:func:`generate_map`'s map as one string per row (``("SFFF", "FHFH", ...)``).

    The same draws in the same order, without numpy arrays: ``rng.choice`` is replaced by
    the draws it makes (``rng.random((size, size))``, C order) and its threshold (see
    :func:`_hole_threshold`), every draw is computed in Python ints
    (:class:`~ragen_envs.games.frozenlake_rng.MapRandom`, equal to numpy's), and the map is
    kept as Python strings. Same arguments and errors as :func:`generate_map`.
    """
    if isinstance(seed, (bool, np.bool_)):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    try:
        seed = operator.index(seed)
    except TypeError:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}") from None
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    if isinstance(size, (bool, np.bool_)):
        raise ValueError(f"size must be an integer >= 2, got {size!r}")
    try:
        size = operator.index(size)
    except TypeError:
        raise ValueError(f"size must be an integer >= 2, got {size!r}") from None
    if size < 2:
        raise ValueError(f"size must be an integer >= 2, got {size}")
    p = float(p)
    if not 0.0 < p <= 1.0:  # also rejects NaN
        raise ValueError(f"p (probability of a frozen cell) must be in (0, 1], got {p}")

    if size >= 2**16:  # the draws below assume size < 2**32; such a map would not fit in memory anyway
        raise ValueError(f"size must be < 65536, got {size}")
    draws = MapRandom(seed)
    random, below = draws.random, draws.below
    hole_from = _hole_threshold(p)
    cells_per_map = range(size * size)
    while True:
        check_budget()
        cells = [HOLE if random() >= hole_from else FROZEN for _ in cells_per_map]
        start = (below(size), below(size))
        goal = (below(size), below(size))
        if start == goal:
            continue
        cells[start[0] * size + start[1]] = START
        cells[goal[0] * size + goal[1]] = GOAL
        rows = tuple("".join(cells[r * size:(r + 1) * size]) for r in range(size))
        if _reaches_goal(rows, start):
            return rows


# --------------------------------------------------------------------------- game


@dataclass(frozen=True, init=False)
class FrozenLakeStep:
    """Result of one :meth:`FrozenLake.step`.

    Attributes:
        reward: 1.0 when the step reaches G, otherwise 0.0 (gymnasium's default
            reward schedule).
        terminated: the player entered a hole or the goal.
        moved: the position changed. A slip counts as a move; a bump into the
            border does not. This is RAGEN's ``action_is_effective``.
        success: the player is now on G.
        direction: the direction actually taken, which differs from the action
            after a slip.
    """

    reward: float
    terminated: bool
    moved: bool
    success: bool
    direction: int

    # frozen dataclass, own __init__: writing __dict__ directly costs half of the generated
    # per-field object.__setattr__, and this is built on every action (the hot path).
    def __init__(self, reward: float, terminated: bool, moved: bool, success: bool, direction: int) -> None:
        d = self.__dict__
        d["reward"], d["terminated"], d["moved"], d["success"], d["direction"] = (
            reward, terminated, moved, success, direction)


class FrozenLake:
    """One FrozenLake episode on a fixed map with gymnasium's dynamics.

    The caller passes the noise generator to every ``reset`` and ``step``, so the
    game keeps no random state. Passing ``gymnasium.utils.seeding.np_random(seed)[0]``
    (or an equivalent PCG64 generator) gives the reference stream.
    """

    def __init__(self, desc: np.ndarray | Sequence[str], slippery: bool = True,
                 success_rate: float = _SUCCESS_RATE) -> None:
        desc = _as_desc(desc)
        # The map as row strings: per-step cell lookups on str are far cheaper than on numpy.
        self._setup(tuple("".join(row) for row in desc.tolist()), slippery, success_rate)
        self._desc = desc

    @classmethod
    def from_rows(cls, rows: Sequence[str], slippery: bool = True,
                  success_rate: float = _SUCCESS_RATE) -> "FrozenLake":
        """The game on a map given as row strings (what :func:`map_rows` returns), checked by
        the same rules as the constructor's but in plain Python: a reset then touches no
        numpy array (the ``desc`` array is built when first asked for)."""
        rows = tuple(rows) if not isinstance(rows, str) else ()
        size = len(rows)
        if size < 2 or not all(type(row) is str and len(row) == size for row in rows):
            raise ValueError(f"map rows must be >= 2 strings of that same length, got {rows!r}")
        text = "".join(rows)
        bad = set(text) - _CELL_CODES
        if bad:
            raise ValueError(f"unknown cell codes {sorted(bad)}; expected S, F, H, G")
        if text.count(START) != 1:
            raise ValueError(f"map must contain exactly one start cell 'S', found {text.count(START)}")
        game = cls.__new__(cls)
        game._setup(rows, slippery, success_rate)
        game._desc = None
        return game

    def _setup(self, rows: tuple[str, ...], slippery: bool, success_rate: float) -> None:
        # gymnasium's thresholds for this rate (the default's are computed once, at import)
        self._thresholds = _SLIP_CUMSUM if success_rate == _SUCCESS_RATE else slip_thresholds(success_rate)
        self._success_rate = float(success_rate)
        self._rows = rows
        self._size = len(rows)
        self._slippery = bool(slippery)
        at = "".join(rows).index(START)
        self._start = divmod(at, self._size)
        self._moves = _move_table(self._size)
        self._position = self._start
        self._started = False

    # -- dynamics ---------------------------------------------------------

    def reset(self, rng: np.random.Generator) -> None:
        """Put the player back on S, using exactly one ``rng.random()`` draw.

        gymnasium samples the start state from the one-hot distribution over S
        cells, which uses one draw. We make the same draw so that the slips that
        follow line up with the reference. With a single S the result is always S.
        """
        rng.random()
        self._position = self._start
        self._started = True

    def step(self, action: int, rng: np.random.Generator) -> FrozenLakeStep:
        """Apply ``action`` (0 left, 1 down, 2 right, 3 up), using one ``rng.random()`` draw.

        Raises:
            ValueError: the action is not an integer in 0..3.
            RuntimeError: ``reset`` has not been called, or the episode has ended.
        """
        if type(action) is not int or not 0 <= action <= 3:  # skip the call in the common case
            action = _validate_action(action)
        direction, moved, cell = self.advance(action, rng)
        goal = cell == GOAL
        # Positional (cheaper than keywords): reward, terminated, moved, success, direction.
        return FrozenLakeStep(1.0 if goal else 0.0, cell in _TERMINAL, moved, goal, direction)

    def advance(self, action: int, rng: np.random.Generator) -> tuple[int, bool, str]:
        """:meth:`step` for an ``action`` already known to be an int in 0..3, without a result
        object: the same checks and the same one ``rng.random()`` draw; returns ``(direction
        taken, moved, code of the cell now under the player)`` (the text env's hot path)."""
        if not self._started:
            raise RuntimeError("call reset(rng) before step()")
        previous = self._position
        rows = self._rows
        if rows[previous[0]][previous[1]] in _TERMINAL:
            raise RuntimeError("the episode has terminated; call reset(rng) first")
        u = float(rng.random())
        if self._slippery:  # _sample_direction, inlined: the first threshold above u (hot path)
            left, ahead, right = _SLIP_DIRECTIONS[action]
            t0, t1, t2 = self._thresholds
            direction = left if t0 > u else ahead if t1 > u else right if t2 > u else left
        else:
            direction = action
        self._position = position = self._moves[previous][direction]
        return direction, position != previous, rows[position[0]][position[1]]

    # -- state ------------------------------------------------------------

    @property
    def position(self) -> tuple[int, int]:
        """The player's (row, col)."""
        return self._position

    @property
    def cell(self) -> str:
        """The code of the cell under the player: 'S', 'F', 'H' or 'G'."""
        row, col = self._position
        return self._rows[row][col]

    @property
    def desc(self) -> np.ndarray:
        """A copy of the map ('<U1' array)."""
        if self._desc is None:
            self._desc = np.array([list(row) for row in self._rows], dtype="<U1")
        return self._desc.copy()

    @property
    def rows(self) -> tuple[str, ...]:
        """The map as one string per row, e.g. ``('SFFF', 'FHFH', 'FFFH', 'HFFG')``."""
        return self._rows

    @property
    def size(self) -> int:
        """Side length of the square map."""
        return self._size

    @property
    def slippery(self) -> bool:
        """Whether moves slip."""
        return self._slippery

    @property
    def success_rate(self) -> float:
        """The probability that a slippery action goes the intended way (gymnasium's
        ``success_rate``; each perpendicular direction takes half of the rest)."""
        return self._success_rate

    @property
    def done(self) -> bool:
        """The player is on a hole or on the goal."""
        return self.cell in _TERMINAL

    @property
    def success(self) -> bool:
        """The player is on the goal."""
        return self.cell == GOAL

    @property
    def in_hole(self) -> bool:
        """The player is in a hole."""
        return self.cell == HOLE


# --------------------------------------------------------------------------- planning


def _successor_table(desc: np.ndarray) -> np.ndarray:
    """Return an int array of shape (n*n, 4): the flat index reached from each cell in each direction."""
    size = desc.shape[0]
    table = np.empty((size * size, 4), dtype=np.intp)
    for row in range(size):
        for col in range(size):
            for direction in ACTIONS:
                r, c = _move((row, col), direction, size)
                table[row * size + col, direction] = r * size + c
    return table


def optimal_policy(
    desc: np.ndarray | Sequence[str], horizon: int, slippery: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Finite-horizon value iteration for the chance of reaching G within ``horizon`` actions.

    Write ``V_h(s)`` for the highest probability of reaching G from cell ``s`` with
    ``h`` actions left. Then::

        V_h(s) = 1                                      if s is G  (already reached)
        V_h(s) = 0                                      if s is H
        V_0(s) = 0                                      otherwise
        V_h(s) = max_a  sum_{d in D(a)} P(d | a) * V_{h-1}(T(s, d))    (h >= 1)

    ``D(a) = {(a-1)%4, a, (a+1)%4}`` with ``P = 1/3`` each when slippery, and
    ``D(a) = {a}`` with ``P = 1`` otherwise. ``T(s, d)`` moves one cell in
    direction ``d`` and stays put at the border.

    Why integers: every ``V_h`` is a multiple of ``k^-h``, where ``k`` is the
    number of outcomes (3 or 1). So the recursion runs exactly on
    ``W_h = k^h * V_h``, in int64 (or Python ints for long horizons), and converts
    to float at the end. Two actions whose exact values are equal then really tie,
    and the tie goes to the lowest action index (LEFT, DOWN, RIGHT, UP). Float
    rounding does not pick the winner.

    Args:
        desc: the map (see :class:`FrozenLake` for accepted forms).
        horizon: number of actions available, >= 0.
        slippery: plan for the slippery (1/3 each) or the deterministic dynamics.

    Returns:
        ``(values, policy)``, both of shape ``(horizon + 1, size, size)``.
        ``values[h, r, c]`` is ``V_h`` at cell (r, c) (float64). ``policy[h, r, c]``
        is the best action there with ``h`` actions left (int64). ``policy[0]`` and
        the policy on H/G cells are 0 (any action is optimal there).
    """
    desc = _as_desc(desc)
    if isinstance(horizon, (bool, np.bool_)):
        raise ValueError(f"horizon must be a non-negative integer, got {horizon!r}")
    try:
        horizon = operator.index(horizon)
    except TypeError:
        raise ValueError(f"horizon must be a non-negative integer, got {horizon!r}") from None
    if horizon < 0:
        raise ValueError(f"horizon must be a non-negative integer, got {horizon}")

    size = desc.shape[0]
    flat = desc.ravel()
    is_goal = flat == GOAL
    is_terminal = is_goal | (flat == HOLE)
    successors = _successor_table(desc)
    k = 3 if slippery else 1
    # outcome_dirs[a] lists the directions action a can produce.
    outcome_dirs = np.array([_outcome_directions(a, slippery) for a in ACTIONS])
    # next_cell[s, a, j] = flat index reached from s by the j-th outcome of a.
    next_cell = successors[:, outcome_dirs]

    # int64 holds k**h exactly while k**horizon < 2**62. Longer slippery
    # horizons (more than 39 actions) fall back to Python ints in object arrays.
    dtype = np.int64 if k**horizon < 2**62 else object
    w = np.where(is_goal, 1, 0).astype(dtype)  # W_0
    values = np.zeros((horizon + 1, size * size), dtype=np.float64)
    policy = np.zeros((horizon + 1, size * size), dtype=np.int64)
    values[0] = is_goal
    for h in range(1, horizon + 1):
        q = w[next_cell].sum(axis=2)  # q[s, a] = k^h * Q_h(s, a), exact
        best = np.argmax(q, axis=1)  # first maximum = lowest action index
        w = q[np.arange(size * size), best]
        w[is_goal] = k**h
        w[is_terminal & ~is_goal] = 0
        best[is_terminal] = 0
        policy[h] = best
        scale = k**h
        # Python int / int is correctly rounded even for huge ints.
        values[h] = [int(x) / scale for x in w] if dtype is object else w / scale
    return values.reshape(horizon + 1, size, size), policy.reshape(horizon + 1, size, size)


# Planner results, keyed by (map bytes, map shape, slippery). Each entry keeps the
# longest horizon computed so far: V_h and the policy at h do not depend on the
# total horizon, so one table answers every shorter query.
_PLAN_CACHE: OrderedDict[tuple[bytes, tuple[int, ...], bool], np.ndarray] = OrderedDict()
_PLAN_CACHE_SIZE = 256


def best_action(
    desc: np.ndarray | Sequence[str],
    position: tuple[int, int],
    actions_left: int,
    slippery: bool = True,
) -> int:
    """Return the optimal action at ``position`` with ``actions_left`` actions remaining.

    This is ``optimal_policy(desc, actions_left, slippery)[1][actions_left][position]``,
    with the policy table cached per map (LRU, 256 maps). An expert agent that calls
    it every step therefore runs value iteration only once per map.

    Raises:
        ValueError: ``actions_left < 1`` or ``position`` is off the map.
    """
    if isinstance(actions_left, (bool, np.bool_)):
        raise ValueError(f"actions_left must be an integer >= 1, got {actions_left!r}")
    try:
        actions_left = operator.index(actions_left)
    except TypeError:
        raise ValueError(f"actions_left must be an integer >= 1, got {actions_left!r}") from None
    if actions_left < 1:
        raise ValueError(f"actions_left must be an integer >= 1, got {actions_left}")

    arr = np.asarray(desc)
    key = None
    if arr.dtype == np.dtype("<U1") and arr.ndim == 2:  # fast path: already canonical
        key = (arr.tobytes(), arr.shape, bool(slippery))
    else:
        arr = _as_desc(arr)
        key = (arr.tobytes(), arr.shape, bool(slippery))

    policy = _PLAN_CACHE.get(key)
    if policy is None or policy.shape[0] <= actions_left:
        # Grow the horizon geometrically so that rising budgets do not recompute each time.
        horizon = max(actions_left, 2 * (policy.shape[0] - 1) if policy is not None else 0)
        policy = optimal_policy(arr, horizon, slippery)[1]
        _PLAN_CACHE[key] = policy
        if len(_PLAN_CACHE) > _PLAN_CACHE_SIZE:
            _PLAN_CACHE.popitem(last=False)
    else:
        _PLAN_CACHE.move_to_end(key)

    row, col = (operator.index(x) for x in position)
    size = policy.shape[1]
    if not (0 <= row < size and 0 <= col < size):
        raise ValueError(f"position {position!r} is off the {size}x{size} map")
    return int(policy[actions_left, row, col])
