"""2048: pure mechanics (no text), the reference's tile spawns and rewards, and an
expectimax player.

The board is an ``N x N`` grid (4 by default) of tiles (powers of two) and empty cells (0).
A move slides every tile as far as it goes towards one side; two equal tiles that meet merge
into their sum, once per move, the pair nearest that side first (``[2, 2, 2, 2]`` left gives
``[4, 4, 0, 0]``). A move that changes nothing is invalid: no tile is spawned.

**Boards and spawns from a seed** (the reference's ``Game2048Env``, reproduced draw by draw):
``G = numpy.random.default_rng(seed)``; a spawn lists the empty cells row by row, takes cell
``G.integers(0, count)``, then puts a 2 if ``G.random() < two_prob`` (0.9), else a 4 (no
draw when the board is full). The start is two spawns on an empty board; every valid move
is followed by one spawn from the same generator (so the same seed and moves give the same
game).

**Rewards** (the reference's, ``use_log_reward``): a valid move pays ``0.1 * log2(m + 1)``
where ``m`` is the sum of the tiles its merges made (0 when nothing merged); without the log
reward, ``m`` itself. An invalid move pays ``invalid_move_reward``. The game is over when no
move is valid.

**Expert**: expectimax over the exponents of the tiles (``log2``), the spawns weighted by
their probabilities, the leaves scored by a heuristic that favours empty cells, possible
merges and rows and columns that rise or fall steadily (:func:`best_action`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "ACTIONS",
    "Game2048",
    "Game2048Step",
    "MAX_SIZE",
    "best_action",
    "is_over",
    "move",
    "new_board",
    "spawn",
    "valid_actions",
]

ACTIONS = ("Up", "Right", "Down", "Left")  # the reference's action numbers 0..3
MAX_SIZE = 8


def check_size(size) -> int:
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or not 2 <= size <= MAX_SIZE:
        raise ValueError(f"size must be an integer in [2, {MAX_SIZE}], got {size!r}")
    return int(size)


@lru_cache(maxsize=1 << 16)
def slide(line: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """One line of tile values slid towards index 0: ``(new line, sum of the merged tiles)``."""
    tiles = [v for v in line if v]
    out, merged, i = [], 0, 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(2 * tiles[i])
            merged += 2 * tiles[i]
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return tuple(out) + (0,) * (len(line) - len(out)), merged


def move(grid: np.ndarray, action: int) -> tuple[np.ndarray, int, bool]:
    """``(new grid, sum of merged tiles, whether anything moved)``; ``grid`` is not changed.
    Up and Down slide the columns towards the top / bottom, Left and Right the rows."""
    if not isinstance(action, (int, np.integer)) or isinstance(action, bool) or not 0 <= action < 4:
        raise ValueError(f"action must be an integer in [0, 4), got {action!r}")
    rows = [tuple(r) for r in grid.tolist()]
    lines = rows if action in (1, 3) else list(zip(*rows))  # 0 Up, 1 Right, 2 Down, 3 Left
    towards_end = action in (1, 2)
    out, merged = [], 0
    for line in lines:
        if towards_end:
            slid, m = slide(line[::-1])
            slid = slid[::-1]
        else:
            slid, m = slide(line)
        out.append(slid)
        merged += m
    if action in (0, 2):
        out = list(zip(*out))
    return np.array(out, dtype=np.int64), merged, out != rows


def valid_actions(grid: np.ndarray) -> list[int]:
    """The actions that change the board, in order."""
    return [a for a in range(4) if move(grid, a)[2]]


def is_over(grid: np.ndarray) -> bool:
    """No empty cell and no move changes the board."""
    return not (grid == 0).any() and not valid_actions(grid)


def spawn(grid: np.ndarray, rng: np.random.Generator, two_prob: float = 0.9) -> tuple[int, int, int] | None:
    """Put a new tile on a random empty cell, in place (see the module docstring for the
    draws); ``(row, col, value)``, or None when the board is full (no draw)."""
    rows, cols = np.nonzero(grid == 0)
    if rows.size == 0:
        return None
    k = int(rng.integers(0, rows.size))
    value = 2 if rng.random() < two_prob else 4
    grid[rows[k], cols[k]] = value
    return int(rows[k]), int(cols[k]), value


def new_board(seed: int, size: int = 4, two_prob: float = 0.9) -> tuple[np.ndarray, np.random.Generator]:
    """The reference's starting board for ``seed`` and its generator, ready for the next spawn."""
    size = check_size(size)
    rng = np.random.default_rng(seed)
    grid = np.zeros((size, size), dtype=np.int64)
    spawn(grid, rng, two_prob)
    spawn(grid, rng, two_prob)
    return grid, rng


@dataclass(frozen=True)
class Game2048Step:
    """The result of one move."""

    reward: float
    moved: bool
    merged: int  # the sum of the tiles its merges made
    over: bool  # no move is valid any more
    max_tile: int


class Game2048:
    """One game with the reference's rewards. ``rng`` draws the spawns after each valid move
    (the reference: the generator that made the board)."""

    def __init__(self, grid: np.ndarray, rng: np.random.Generator, two_prob: float = 0.9, log_reward: bool = True,
                 invalid_move_reward: float = -0.1) -> None:
        grid = np.array(grid, dtype=np.int64)
        if grid.ndim != 2 or grid.shape[0] != grid.shape[1]:
            raise ValueError(f"a 2048 board must be square, got shape {grid.shape}")
        check_size(grid.shape[0])
        self.grid = grid
        self.rng = rng
        self.two_prob = float(two_prob)
        self.log_reward = bool(log_reward)
        self.invalid_move_reward = float(invalid_move_reward)
        self.score = 0  # the sum of every merged tile so far (the reference's score)

    @property
    def max_tile(self) -> int:
        return int(self.grid.max())

    def step(self, action: int) -> Game2048Step:
        new, merged, moved = move(self.grid, action)
        if not moved:
            return Game2048Step(self.invalid_move_reward, False, 0, False, self.max_tile)
        self.grid = new
        spawn(self.grid, self.rng, self.two_prob)
        self.score += merged
        if self.log_reward:
            reward = 0.1 * math.log2(merged + 1.0) if merged > 0 else 0.0
        else:
            reward = float(merged)
        return Game2048Step(reward, True, merged, is_over(self.grid), self.max_tile)


# ------------------------------------------------------------------------------ expert
# Heuristic weights (a leaf's value, per row and per column, on tile exponents): empty cells
# and adjacent equal tiles are worth keeping, a line that rises and falls is penalised by how
# much (exponents to a power, so big tiles out of order cost most), and so are big tiles.
_EMPTY, _MERGES, _MONO, _MONO_POWER, _SUM, _SUM_POWER, _BASE = 270.0, 700.0, 47.0, 4.0, 11.0, 3.5, 200_000.0


@lru_cache(maxsize=1 << 16)
def _slide_exp(line: tuple[int, ...]) -> tuple[int, ...]:
    """A line of exponents slid towards index 0 (merging ``k, k`` into ``k + 1``)."""
    tiles = [v for v in line if v]
    out, i = [], 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] + 1)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return tuple(out) + (0,) * (len(line) - len(out))


@lru_cache(maxsize=1 << 16)
def _line_value(line: tuple[int, ...]) -> float:
    empty = sum(1 for v in line if v == 0)
    merges, prev, run = 0, 0, 0
    for v in line:
        if v == 0:
            continue
        if v == prev:
            run += 1
        elif run:
            merges += 1 + run
            run = 0
        prev = v
    if run:
        merges += 1 + run
    left = right = 0.0
    for a, b in zip(line, line[1:]):
        pa, pb = a ** _MONO_POWER, b ** _MONO_POWER
        if a > b:
            left += pa - pb
        else:
            right += pb - pa
    big = sum(v ** _SUM_POWER for v in line)
    return _BASE + _EMPTY * empty + _MERGES * merges - _MONO * min(left, right) - _SUM * big


def _rows(board: tuple[int, ...], n: int) -> list[tuple[int, ...]]:
    return [board[i * n:(i + 1) * n] for i in range(n)]


def _cols(board: tuple[int, ...], n: int) -> list[tuple[int, ...]]:
    return [board[c::n] for c in range(n)]


def _value(board: tuple[int, ...], n: int) -> float:
    return sum(_line_value(line) for line in _rows(board, n)) + sum(_line_value(line) for line in _cols(board, n))


def _after(board: tuple[int, ...], n: int, action: int) -> tuple[int, ...]:
    """The exponent board after ``action`` (before the spawn)."""
    if action in (1, 3):  # rows
        lines = _rows(board, n)
        if action == 1:
            lines = [_slide_exp(line[::-1])[::-1] for line in lines]
        else:
            lines = [_slide_exp(line) for line in lines]
        return tuple(v for line in lines for v in line)
    cols = _cols(board, n)
    cols = [_slide_exp(c) if action == 0 else _slide_exp(c[::-1])[::-1] for c in cols]
    return tuple(cols[c][r] for r in range(n) for c in range(n))


def _chance(board: tuple[int, ...], n: int, depth: int, two_prob: float) -> float:
    """Expected value after the spawn that follows a move; ``depth`` more moves to search."""
    if depth == 0:
        return _value(board, n)
    empties = [i for i, v in enumerate(board) if v == 0]
    if not empties:
        return _best(board, n, depth, two_prob)[1]
    total = 0.0
    for i in empties:
        for exponent, p in ((1, two_prob), (2, 1.0 - two_prob)):
            if p == 0.0:
                continue
            child = board[:i] + (exponent,) + board[i + 1:]
            total += p * _best(child, n, depth, two_prob)[1]
    return total / len(empties)


def _best(board: tuple[int, ...], n: int, depth: int, two_prob: float) -> tuple[int, float]:
    """``(best action, its value)`` with ``depth`` moves to search (-1, 0.0 when stuck)."""
    best_action, best_value = -1, 0.0
    for action in range(4):
        nxt = _after(board, n, action)
        if nxt == board:
            continue
        value = _chance(nxt, n, depth - 1, two_prob)
        if best_action < 0 or value > best_value:
            best_action, best_value = action, value
    return best_action, best_value


# The 4x4 board as one integer (the search's hot path): cell (r, c)'s exponent in bits
# 16 r + 4 c .. +3, so a row is 16 bits and a move is four lookups in tables of all 65,536 rows.
_ROW = 0xFFFF


@lru_cache(maxsize=1)
def _row_tables() -> tuple[list[int], list[int], list[float]]:
    """For every 16-bit row (4 exponents, cell 0 in the low bits): the row slid left (towards
    cell 0), slid right, and its heuristic value. Built once (about a second)."""
    left, right, value = [0] * 65536, [0] * 65536, [0.0] * 65536
    for row in range(65536):
        line = tuple((row >> (4 * i)) & 0xF for i in range(4))
        slid = _slide_exp(line)
        if max(slid) > 15:  # 2**16 does not fit a nibble: leave the row as it is (never in play)
            slid = line
        back = _slide_exp(line[::-1])[::-1]
        if max(back) > 15:
            back = line
        left[row] = sum(v << (4 * i) for i, v in enumerate(slid))
        right[row] = sum(v << (4 * i) for i, v in enumerate(back))
        value[row] = _line_value(line)
    return left, right, value


def _transpose(b: int) -> int:
    """Swap rows and columns of a 4x4 nibble board: a 2x2 block swap of nibbles, then of bytes."""
    a1 = b & 0xF0F00F0FF0F00F0F
    a2 = b & 0x0000F0F00000F0F0
    a3 = b & 0x0F0F00000F0F0000
    a = a1 | (a2 << 12) | (a3 >> 12)
    b1 = a & 0xFF00FF0000FF00FF
    b2 = a & 0x00FF00FF00000000
    b3 = a & 0x00000000FF00FF00
    return b1 | (b2 >> 24) | (b3 << 24)


def _slide_rows(b: int, table: list[int]) -> int:
    return (table[b & _ROW] | table[(b >> 16) & _ROW] << 16 | table[(b >> 32) & _ROW] << 32
            | table[(b >> 48) & _ROW] << 48)


def _after4(b: int, action: int, left: list[int], right: list[int]) -> int:
    if action == 3:
        return _slide_rows(b, left)
    if action == 1:
        return _slide_rows(b, right)
    t = _transpose(b)  # columns become rows, the top cell in the low bits
    return _transpose(_slide_rows(t, left if action == 0 else right))


def _value4(b: int, value: list[float]) -> float:
    t = _transpose(b)
    return (value[b & _ROW] + value[(b >> 16) & _ROW] + value[(b >> 32) & _ROW] + value[b >> 48]
            + value[t & _ROW] + value[(t >> 16) & _ROW] + value[(t >> 32) & _ROW] + value[t >> 48])


def _best4(b: int, depth: int, two_prob: float, tables) -> tuple[int, float]:
    """:func:`_best` on the integer board."""
    left, right, value = tables
    best_action, best_value = -1, 0.0
    for action in range(4):
        nxt = _after4(b, action, left, right)
        if nxt == b:
            continue
        v = _chance4(nxt, depth - 1, two_prob, tables)
        if best_action < 0 or v > best_value:
            best_action, best_value = action, v
    return best_action, best_value


def _chance4(b: int, depth: int, two_prob: float, tables) -> float:
    """:func:`_chance` on the integer board."""
    if depth == 0:
        return _value4(b, tables[2])
    total, count = 0.0, 0
    for shift in range(0, 64, 4):
        if (b >> shift) & 0xF:
            continue
        count += 1
        total += two_prob * _best4(b | (1 << shift), depth, two_prob, tables)[1]
        if two_prob < 1.0:
            total += (1.0 - two_prob) * _best4(b | (2 << shift), depth, two_prob, tables)[1]
    if count == 0:
        return _best4(b, depth, two_prob, tables)[1]
    return total / count


def best_action(grid: np.ndarray, depth: int = 2, two_prob: float = 0.9) -> int | None:
    """The expectimax move for ``grid`` looking ``depth`` moves ahead (the first of equally
    good moves in :data:`ACTIONS` order); None when no move is valid."""
    grid = np.asarray(grid)
    n = grid.shape[0]
    exponents = [int(v).bit_length() - 1 if v else 0 for v in grid.ravel().tolist()]
    if n == 4 and max(exponents) <= 15:
        b = sum(e << (4 * i) for i, e in enumerate(exponents))
        action, _ = _best4(b, depth, two_prob, _row_tables())
    else:
        action, _ = _best(tuple(exponents), n, depth, two_prob)
    return None if action < 0 else action
