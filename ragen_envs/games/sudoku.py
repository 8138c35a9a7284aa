"""Sudoku: pure mechanics (no text), the reference's puzzles for a seed and its rewards, and an
exact solver.

A ``size x size`` grid (9, or 4 for a small board) of boxes ``b x b`` (``b = sqrt(size)``);
0 is an empty cell. A placement puts a number ``1..size`` on a cell that was empty in the
puzzle (it may replace a number placed earlier); it is valid when the number appears nowhere
else in the cell's row, column and box. Givens (the puzzle's numbers) never change.

**Puzzles from a seed** (the newest reference's ``generate_sudoku_puzzle``, reproduced draw by
draw): ``R = random.Random(seed)`` (the reference seeds Python's global generator with the
same seed, which draws the same numbers). The solution is filled cell by cell in row-major
order by depth-first search: entering a cell shuffles ``[1..size]`` with ``R.shuffle`` and
tries the numbers in that order, backtracking when none fits. Then the ``size * size`` cells
(row-major) are shuffled with ``R.shuffle`` and the first ``int(size * size * f)`` emptied,
``f`` = 0.4 (easy), 0.5 (medium), 0.6 (hard). Nothing checks that the solution is unique
(most 9x9 puzzles have one; :func:`count_solutions` says).

**Rewards** (the reference's): a valid placement pays ``placement_reward`` (1.0) when it is the
solution's number, half of it otherwise, plus ``completion_bonus`` (10.0) when it completes a
grid without conflicts (any such grid: the solution need not be unique). Anything else (a
given cell, a conflict, a step the env could not read) pays ``invalid_reward`` (-0.1) and
changes nothing. Every step counts towards ``max_steps`` (81); the game ends when the grid is
solved or, after a valid placement, when ``max_steps`` steps have been taken.

**Solver** (the expert's): candidates as bit masks, propagation of naked and hidden singles,
then depth-first search on the cell with the fewest candidates (:func:`solve`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DIFFICULTIES",
    "SIZES",
    "Placement",
    "Sudoku",
    "box_size",
    "conflicts",
    "count_solutions",
    "expert_placements",
    "is_solved",
    "new_puzzle",
    "solve",
    "valid_numbers",
]

SIZES = (4, 9)
# the fraction of cells the reference empties: int(size * size * fraction) cells
DIFFICULTIES = {"easy": 0.4, "medium": 0.5, "hard": 0.6}


def check_size(size) -> int:
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or int(size) not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    return int(size)


def check_difficulty(difficulty) -> str:
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {tuple(DIFFICULTIES)}, got {difficulty!r}")
    return difficulty


def box_size(size: int) -> int:
    """The side of a box: ``sqrt(size)`` (3 for 9, 2 for 4)."""
    return int(round(size ** 0.5))


def removed_count(size: int, difficulty: str) -> int:
    """How many cells the reference empties: ``int(size * size * fraction)`` (easy 9x9: 32,
    medium: 40, hard: 48; easy 4x4: 6)."""
    return int(size * size * DIFFICULTIES[difficulty])


def _fill(rng: random.Random, size: int) -> list[int]:
    """The reference's solution grid (row-major list): one shuffle per cell entered."""
    b = box_size(size)
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    grid = [0] * (size * size)
    numbers = list(range(1, size + 1))

    def fill(k: int) -> bool:
        if k == size * size:
            return True
        r, c = divmod(k, size)
        x = (r // b) * b + c // b
        order = numbers[:]
        rng.shuffle(order)
        used = rows[r] | cols[c] | boxes[x]
        for n in order:
            bit = 1 << n
            if used & bit:
                continue
            grid[k] = n
            rows[r] |= bit
            cols[c] |= bit
            boxes[x] |= bit
            if fill(k + 1):
                return True
            grid[k] = 0
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[x] ^= bit
        return False

    fill(0)
    return grid


def new_puzzle(seed: int, size: int = 9, difficulty: str = "easy") -> tuple[np.ndarray, np.ndarray]:
    """The reference's ``(puzzle, solution)`` for ``seed`` (see the module docstring)."""
    size, difficulty = check_size(size), check_difficulty(difficulty)
    rng = random.Random(seed)
    solution = _fill(rng, size)
    cells = list(range(size * size))
    rng.shuffle(cells)
    puzzle = solution[:]
    for k in cells[:removed_count(size, difficulty)]:
        puzzle[k] = 0
    shape = (size, size)
    return np.array(puzzle, dtype=np.int64).reshape(shape), np.array(solution, dtype=np.int64).reshape(shape)


# ------------------------------------------------------------------------------ rules
def _in_box(grid: np.ndarray, row: int, col: int) -> np.ndarray:
    b = box_size(grid.shape[0])
    r0, c0 = row // b * b, col // b * b
    return grid[r0:r0 + b, c0:c0 + b]


def clashes(grid: np.ndarray, row: int, col: int, num: int) -> tuple[bool, bool, bool]:
    """Whether ``num`` already appears in the row, the column and the box of ``(row, col)``
    (the cell itself included, as the reference checks)."""
    return bool((grid[row, :] == num).any()), bool((grid[:, col] == num).any()), bool((_in_box(grid, row, col) == num).any())


def valid_numbers(grid: np.ndarray, row: int, col: int) -> list[int]:
    """The numbers a placement on the empty cell ``(row, col)`` may use, ascending; ``[]`` for
    a filled cell (the reference's ``get_valid_numbers``)."""
    if grid[row, col] != 0:
        return []
    used = set(grid[row, :].tolist()) | set(grid[:, col].tolist()) | set(_in_box(grid, row, col).ravel().tolist())
    return [n for n in range(1, grid.shape[0] + 1) if n not in used]


def conflicts(grid: np.ndarray) -> set[tuple[int, int]]:
    """Every filled cell whose number appears again in its row, column or box."""
    size = grid.shape[0]
    flat = grid.ravel().tolist()
    out: set[int] = set()
    for unit in _tables(size)[1]:
        first: dict[int, int] = {}
        for k in unit:
            v = flat[k]
            if v:
                if v in first:
                    out.add(first[v])
                    out.add(k)
                else:
                    first[v] = k
    return {divmod(k, size) for k in out}


def is_solved(grid: np.ndarray) -> bool:
    """Every cell filled and no conflict."""
    return bool((grid != 0).all()) and not conflicts(grid)


@dataclass(frozen=True)
class Placement:
    """The result of one step.

    ``kind``: ``"correct"`` (the solution's number), ``"valid"`` (valid, not the solution's),
    ``"given"`` (a puzzle cell), ``"conflict"`` (the number is already in the row, column or
    box: ``in_row`` / ``in_col`` / ``in_box``; ``valid`` lists what the cell takes) or
    ``"unread"`` (a step the env could not read as a placement)."""

    kind: str
    reward: float
    solved: bool
    done: bool
    in_row: bool = False
    in_col: bool = False
    in_box: bool = False
    valid: tuple[int, ...] = ()

    @property
    def effective(self) -> bool:
        return self.kind in ("correct", "valid")


class Sudoku:
    """One puzzle with the reference's rewards and step counter."""

    def __init__(self, puzzle: np.ndarray, solution: np.ndarray, *, placement_reward: float = 1.0,
                 invalid_reward: float = -0.1, completion_bonus: float = 10.0, max_steps: int = 81) -> None:
        self.initial = np.array(puzzle, dtype=np.int64)
        self.solution = np.array(solution, dtype=np.int64)
        size = self.initial.shape[0]
        if self.initial.shape != (size, size) or self.solution.shape != (size, size):
            raise ValueError(f"a Sudoku grid must be square, got {self.initial.shape} and {self.solution.shape}")
        check_size(size)
        self.size = size
        self.grid = self.initial.copy()
        self.placement_reward = float(placement_reward)
        self.invalid_reward = float(invalid_reward)
        self.completion_bonus = float(completion_bonus)
        self.max_steps = int(max_steps)
        self.num_steps = 0

    def unread(self) -> Placement:
        """A step that places nothing (the env could not read it): counted, ``invalid_reward``."""
        self.num_steps += 1
        return Placement("unread", self.invalid_reward, False, False)

    def place(self, row: int, col: int, num: int) -> Placement:
        """Put ``num`` (1..size) on ``(row, col)`` (0-based) when the rules allow it."""
        size = self.size
        if not (0 <= row < size and 0 <= col < size and 1 <= num <= size):
            raise ValueError(f"a placement needs row and col in [0, {size}) and num in [1, {size}], "
                             f"got {(row, col, num)}")
        self.num_steps += 1
        if self.initial[row, col] != 0:
            return Placement("given", self.invalid_reward, False, False)
        in_row, in_col, in_box = clashes(self.grid, row, col, num)
        if in_row or in_col or in_box:
            return Placement("conflict", self.invalid_reward, False, False, in_row, in_col, in_box,
                             tuple(valid_numbers(self.grid, row, col)))
        self.grid[row, col] = num
        correct = num == self.solution[row, col]
        reward = self.placement_reward if correct else self.placement_reward * 0.5
        solved = is_solved(self.grid)
        if solved:
            reward += self.completion_bonus
        return Placement("correct" if correct else "valid", reward, solved, solved or self.num_steps >= self.max_steps)


# ------------------------------------------------------------------------------ solver
def _peers(size: int) -> list[list[int]]:
    b = box_size(size)
    out = []
    for k in range(size * size):
        r, c = divmod(k, size)
        ps = {r * size + j for j in range(size)} | {i * size + c for i in range(size)}
        ps |= {(r // b * b + i) * size + c // b * b + j for i in range(b) for j in range(b)}
        ps.discard(k)
        out.append(sorted(ps))
    return out


def _units(size: int) -> list[list[int]]:
    b = box_size(size)
    rows = [[r * size + c for c in range(size)] for r in range(size)]
    cols = [[r * size + c for r in range(size)] for c in range(size)]
    boxes = [[(br * b + i) * size + bc * b + j for i in range(b) for j in range(b)] for br in range(b) for bc in range(b)]
    return rows + cols + boxes


_TABLES: dict[int, tuple[list[list[int]], list[list[int]]]] = {}


def _tables(size: int):
    if size not in _TABLES:
        _TABLES[size] = (_peers(size), _units(size))
    return _TABLES[size]


def _propagate(cands: list[int], size: int) -> bool:
    """Naked singles (a cell with one candidate removes it from its peers) and hidden singles (a
    number with one place in a unit goes there), to a fixed point, in place; False on a
    contradiction (a cell with no candidate, a number with no place)."""
    peers, units = _tables(size)
    full = (1 << (size + 1)) - 2
    changed = True
    while changed:
        changed = False
        for k in range(size * size):
            m = cands[k]
            if m == 0:
                return False
            if m & (m - 1) == 0:
                for p in peers[k]:
                    if cands[p] & m:
                        cands[p] &= ~m
                        if cands[p] == 0:
                            return False
                        changed = True
        for unit in units:
            seen = once = 0
            for k in unit:
                m = cands[k]
                once = (once & ~m) | (m & ~seen)
                seen |= m
            if seen != full:
                return False
            for k in unit:
                hit = cands[k] & once
                if hit and cands[k] != hit:
                    if hit & (hit - 1):
                        return False  # two numbers that each have only this cell
                    cands[k] = hit
                    changed = True
    return True


def _candidates(grid: np.ndarray) -> list[int] | None:
    """Candidate masks (bit n: number n) of every cell, the filled ones fixed; None when two
    filled cells already clash."""
    size = grid.shape[0]
    peers, _ = _tables(size)
    full = (1 << (size + 1)) - 2
    flat = grid.ravel().tolist()
    cands = [full if v == 0 else 1 << v for v in flat]
    for k, v in enumerate(flat):
        if v:
            for p in peers[k]:
                if flat[p] == v:
                    return None
                cands[p] &= ~(1 << v)
    return cands


def _search(cands: list[int], size: int, limit: int, found: list[list[int]]) -> None:
    if not _propagate(cands, size):
        return
    best, best_count = -1, size + 1
    for k, m in enumerate(cands):
        if m & (m - 1):
            count = bin(m).count("1")
            if count < best_count:
                best, best_count = k, count
    if best < 0:
        found.append([m.bit_length() - 1 for m in cands])
        return
    m = cands[best]
    while m and len(found) < limit:
        bit = m & -m
        m ^= bit
        child = cands[:]
        child[best] = bit
        _search(child, size, limit, found)


def _solutions(grid: np.ndarray, limit: int) -> list[list[int]]:
    grid = np.asarray(grid)
    cands = _candidates(grid)
    if cands is None:
        return []
    found: list[list[int]] = []
    _search(cands, grid.shape[0], limit, found)
    return found


def solve(grid: np.ndarray) -> np.ndarray | None:
    """A completion of ``grid`` (its filled cells kept) that breaks no rule, or None when there
    is none; exact (propagation, then depth-first search on the fewest candidates, the
    smaller number first)."""
    found = _solutions(grid, 1)
    return None if not found else np.array(found[0], dtype=np.int64).reshape(np.shape(grid))


def count_solutions(grid: np.ndarray, limit: int = 2) -> int:
    """How many completions ``grid`` has, counting up to ``limit``."""
    return len(_solutions(grid, limit))


def expert_placements(grid: np.ndarray, initial: np.ndarray, count: int) -> list[tuple[int, int, int]]:
    """Up to ``count`` placements ``(row, col, num)`` (0-based) that lead to a solved grid.

    When the grid (placed numbers kept) has a completion: its numbers, the empty cells with
    the fewest candidates first (a cell with one candidate has the same number in every
    completion, so on a puzzle with several solutions these are the surest). Otherwise (an
    earlier placement blocks every completion) the givens' completion, a misplaced cell at a
    time, each placement valid when made; a blocked repair falls back to any valid number for
    a misplaced cell, and an empty list means nothing valid is left to place."""
    grid = np.array(grid, dtype=np.int64)
    target = solve(grid)
    out: list[tuple[int, int, int]] = []
    if target is not None:
        while len(out) < count:
            empty = [(len(valid_numbers(grid, r, c)), r, c) for r, c in zip(*np.nonzero(grid == 0))]
            if not empty:
                break
            _, r, c = min(empty)
            out.append((int(r), int(c), int(target[r, c])))
            grid[r, c] = target[r, c]
        return out
    target = solve(np.asarray(initial))
    if target is None:
        return out
    while len(out) < count:
        wrong = [(int(r), int(c)) for r, c in zip(*np.nonzero(grid != target))]
        move = next(((r, c, int(target[r, c])) for r, c in wrong if not any(clashes(grid, r, c, int(target[r, c])))),
                    None)
        if move is None:  # blocked: change a misplaced number to anything valid
            move = next(((r, c, n) for r, c in wrong if grid[r, c] for n in range(1, grid.shape[0] + 1)
                         if not any(clashes(grid, r, c, n))), None)
        if move is None:
            break
        out.append(move)
        grid[move[0], move[1]] = move[2]
    return out
