"""Lights Out: pure mechanics (no text), the reference's board generator and an exact solver.

The board is an ``N x N`` grid of lights (1 on, 0 off). Pressing a cell toggles it and its
up / down / left / right neighbours; the puzzle is solved when every light is off.

**Boards from a seed** (the reference's ``LightsOutEnv.reset``, reproduced draw by draw):
``G = numpy.random.default_rng(seed)`` (PCG64; the same stream as Gymnasium's
``seeding.np_random(seed)``). Up to 20 tries: clear the board, then ``scramble_depth`` times
press the cell ``(G.integers(0, N), G.integers(0, N))`` (row first); stop as soon as a light
is on (or at once when ``scramble_depth == 0``). If after 20 tries every light is still off,
press the centre ``(N // 2, N // 2)``. A board made by presses is solvable by the same
presses, so every generated board is solvable.

**Solver**: pressing is addition over GF(2) and presses commute, so a board ``b`` is solved
by the press set ``x`` with ``A x = b`` (``A`` = the press matrix, one column per cell).
:func:`solve` runs Gaussian elimination over GF(2) (rows as Python int bit masks), then
searches the null space of ``A`` (dimension 0 for most ``N``; 4 for ``N = 4``, 2 for
``N = 5``) for the solution with the fewest presses: the exact optimum.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "LightsOut",
    "LightsOutStep",
    "MAX_SIZE",
    "generate_board",
    "press",
    "solve",
]

MAX_SIZE = 10
_TRIES = 20


def _check_size(size: int) -> int:
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or not 2 <= size <= MAX_SIZE:
        raise ValueError(f"size must be an integer in [2, {MAX_SIZE}], got {size!r}")
    return int(size)


def press(board: np.ndarray, row: int, col: int) -> None:
    """Toggle ``(row, col)`` and its orthogonal neighbours in place."""
    n_rows, n_cols = board.shape
    for r, c in ((row, col), (row - 1, col), (row + 1, col), (row, col - 1), (row, col + 1)):
        if 0 <= r < n_rows and 0 <= c < n_cols:
            board[r, c] ^= 1


def generate_board(seed: int, size: int = 3, scramble_depth: int = 4) -> np.ndarray:
    """The reference's board for ``seed`` (see the module docstring): ``(size, size)`` int8."""
    size = _check_size(size)
    if not isinstance(scramble_depth, (int, np.integer)) or isinstance(scramble_depth, bool) or scramble_depth < 0:
        raise ValueError(f"scramble_depth must be an integer >= 0, got {scramble_depth!r}")
    rng = np.random.default_rng(seed)
    board = np.zeros((size, size), dtype=np.int8)
    for _ in range(_TRIES):
        board.fill(0)
        for _ in range(scramble_depth):
            row = int(rng.integers(0, size))
            col = int(rng.integers(0, size))
            press(board, row, col)
        if scramble_depth == 0 or board.any():
            break
    if scramble_depth > 0 and not board.any():
        press(board, size // 2, size // 2)
    return board


@lru_cache(maxsize=None)
def _elimination(size: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Reduced row echelon form of the press matrix, recorded as a recipe.

    Returns ``(ops, pivots, null_basis)``: ``ops`` is, for each pivot row in order, the
    bit mask of original equations whose sum is that row (so the same recipe reduces any
    right-hand side); ``pivots`` the pivot column of each such row; ``null_basis`` bit
    masks spanning the null space of the press matrix. The matrix is symmetric, so a board
    is solvable iff it is orthogonal (mod 2) to every null-space vector.
    """
    n = size * size
    rows = []  # equation i: which presses toggle cell i (the matrix is symmetric)
    for i in range(n):
        r, c = divmod(i, size)
        mask = 0
        for rr, cc in ((r, c), (r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= rr < size and 0 <= cc < size:
                mask |= 1 << (rr * size + cc)
        rows.append([mask, 1 << i])  # [coefficients, which original equations were summed]
    pivots: list[int] = []
    rank = 0
    for col in range(n):
        pick = next((k for k in range(rank, n) if rows[k][0] >> col & 1), None)
        if pick is None:
            continue
        rows[rank], rows[pick] = rows[pick], rows[rank]
        for k in range(n):
            if k != rank and rows[k][0] >> col & 1:
                rows[k][0] ^= rows[rank][0]
                rows[k][1] ^= rows[rank][1]
        pivots.append(col)
        rank += 1
    pivot_set = set(pivots)
    null_basis = []
    for free in (c for c in range(n) if c not in pivot_set):
        vec = 1 << free
        for k, col in enumerate(pivots):
            if rows[k][0] >> free & 1:
                vec |= 1 << col
        null_basis.append(vec)
    return tuple(rows[k][1] for k in range(rank)), tuple(pivots), tuple(null_basis)


def _parity(x: int) -> int:
    return bin(x).count("1") & 1


def solve(board: np.ndarray) -> list[tuple[int, int]] | None:
    """The fewest presses that turn every light off, row-major; None if unsolvable."""
    board = np.asarray(board)
    if board.ndim != 2 or board.shape[0] != board.shape[1]:
        raise ValueError(f"board must be square, got shape {board.shape}")
    size = _check_size(board.shape[0])
    b = 0
    for i, v in enumerate(board.ravel().tolist()):
        if v:
            b |= 1 << i
    ops, pivots, null_basis = _elimination(size)
    if any(_parity(b & m) for m in null_basis):
        return None
    x = 0
    for recipe, col in zip(ops, pivots):
        if _parity(recipe & b):
            x |= 1 << col
    best = x  # ties: the smallest bit mask, so the plan is a fixed function of the board
    for combo in range(1, 1 << len(null_basis)):
        y = x
        for j, vec in enumerate(null_basis):
            if combo >> j & 1:
                y ^= vec
        if (bin(y).count("1"), y) < (bin(best).count("1"), best):
            best = y
    return [divmod(i, size) for i in range(size * size) if best >> i & 1]


@dataclass(frozen=True)
class LightsOutStep:
    """The result of one press."""

    reward: float
    solved: bool
    lights_before: int
    lights_after: int


class LightsOut:
    """One Lights Out board with the reference's rewards.

    Each press pays ``(lights_before - lights_after) / N**2`` when ``shaped_reward`` is True
    (the reference's default), plus ``success_reward`` (1.0) when it turns the last light off.
    """

    def __init__(self, board: np.ndarray, shaped_reward: bool = True, success_reward: float = 1.0) -> None:
        board = np.array(board, dtype=np.int8)
        if board.ndim != 2 or board.shape[0] != board.shape[1]:
            raise ValueError(f"board must be square, got shape {board.shape}")
        _check_size(board.shape[0])
        if not np.isin(board, (0, 1)).all():
            raise ValueError("board cells must be 0 (off) or 1 (on)")
        self.board = board
        self.shaped_reward = bool(shaped_reward)
        self.success_reward = float(success_reward)
        self.presses = 0

    @property
    def size(self) -> int:
        return self.board.shape[0]

    @property
    def lights_on(self) -> int:
        return int(self.board.sum())

    @property
    def solved(self) -> bool:
        return not self.board.any()

    def press(self, row: int, col: int) -> LightsOutStep:
        if not (0 <= row < self.size and 0 <= col < self.size):
            raise ValueError(f"cell ({row}, {col}) is outside the {self.size}x{self.size} board")
        before = self.lights_on
        press(self.board, row, col)
        after = self.lights_on
        self.presses += 1
        solved = after == 0
        reward = 0.0
        if self.shaped_reward:
            reward += (before - after) / float(self.size * self.size)
        if solved:
            reward += self.success_reward
        return LightsOutStep(reward, solved, before, after)
