"""Sudoku (the newest reference's ``sudoku``: SimpleSudoku, MediumSudoku) as a multi-turn text
environment."""

from __future__ import annotations

import re
import unicodedata
from typing import Mapping, Sequence

import numpy as np

from ..games import sudoku as sd
from ..protocol import ActionOutcome
from .base import TextGameEnv
from .checks import check_int, check_number

__all__ = ["SudokuEnv", "ParsedPlacement", "feedback_text", "parse_placement", "state_text"]

# The reference's env_instruction (config/envs.yaml, SimpleSudoku and MediumSudoku alike),
# verbatim, with the YAML block's final newline.
INSTRUCTION = (
    "You are solving a Sudoku puzzle. Fill in the grid so that every row, column, and 3x3 box contains the "
    "numbers 1-9 without repetition.\n"
    "Initial cells are shown in [brackets] and cannot be modified. Empty cells are shown as dots (.).\n"
    "Place numbers one at a time using the format: <answer>place 5 at row 2 col 3</answer> or "
    "<answer>2,3,5</answer>\n"
    "The environment will provide feedback on valid/invalid moves and show conflicts if any occur.\n"
)

# The reference's placement spellings, tried in this order, each found anywhere in the
# lowercased piece (its ``re.search``). ``(?<!\d)`` before a leading number: the reference's
# leftmost match starts a number at its first digit anyway (a match from inside a digit run
# exists exactly when one from its start does), and without it a long run of digits costs
# quadratic time.
_PATTERNS = tuple(re.compile(p) for p in (
    r"place\s+(\d+)\s+at\s+row\s+(\d+)\s+col\s+(\d+)",
    r"place\s+(\d+)\s+at\s+\((\d+),\s*(\d+)\)",
    r"place\s+(\d+)\s+at\s+(\d+),\s*(\d+)",
    r"(?<!\d)(\d+)\s+at\s+(\d+),\s*(\d+)",
    r"\((\d+),\s*(\d+),\s*(\d+)\)",
    r"(?<!\d)(\d+),\s*(\d+),\s*(\d+)",
))
# The longest text the feedback echoes from a reply (a piece, a number): the action space's
# length. Longer ones are cut there and end in "..." (the reference echoes them whole).
MAX_ECHO = 4096


def _echo(text: str) -> str:
    return text if len(text) <= MAX_ECHO else text[:MAX_ECHO] + "..."


def _number(digits: str) -> tuple[int, str]:
    """A ``\\d+`` match (any script's decimal digits) as ``(value, shown)``: ``shown`` is its
    decimal in ASCII without leading zeros (Python's ``str(int(digits))``); ``value`` is
    capped at ``10**9`` (out of every range here) so no long number is converted."""
    if digits.isascii() and len(digits) <= 9:
        value = int(digits)
        return value, str(value)
    shown = "".join(str(unicodedata.decimal(ch)) for ch in digits).lstrip("0") or "0"
    return (int(shown) if len(shown) <= 9 else 10**9), _echo(shown)


class ParsedPlacement:
    """One answer piece read as a placement: ``row``, ``col`` (0-based) and ``num``, or
    ``error`` (the reference's message) when it is not one."""

    __slots__ = ("row", "col", "num", "error")

    def __init__(self, row: int = -1, col: int = -1, num: int = -1, error: str = "") -> None:
        self.row, self.col, self.num, self.error = row, col, num, error

    @property
    def ok(self) -> bool:
        return not self.error


def parse_placement(piece: str, size: int = 9) -> ParsedPlacement:
    """The reference's ``parse_action``: the first of its six spellings found in the stripped,
    lowercased piece gives three numbers, read as ``num, row, col`` when the piece contains
    ``place`` or ``at`` anywhere, else as ``row, col, num``; rows and columns are 1-based. The
    checks (row, then column, then number in range) and their messages are the reference's."""
    text = piece.strip().lower()
    for pattern in _PATTERNS:
        match = pattern.search(text)
        if match is None:
            continue
        (a, a_shown), (b, b_shown), (c, c_shown) = (_number(g) for g in match.groups())
        if "place" in text or "at" in text:
            num, row, col, shown = a, b, c, (a_shown, b_shown, c_shown)
        else:
            row, col, num, shown = a, b, c, (c_shown, a_shown, b_shown)
        if not 1 <= row <= size:
            return ParsedPlacement(error=f"Row {shown[1]} is out of range (1-{size})")
        if not 1 <= col <= size:
            return ParsedPlacement(error=f"Column {shown[2]} is out of range (1-{size})")
        if not 1 <= num <= size:
            return ParsedPlacement(error=f"Number {shown[0]} is out of range (1-{size})")
        return ParsedPlacement(row - 1, col - 1, num)
    return ParsedPlacement(error=f"Could not parse action: '{_echo(text)}'. Expected format: 'place 5 at row 2 col 3' "
                                 f"or '2,3,5'")


def feedback_text(parsed: ParsedPlacement, result: sd.Placement, size: int = 9) -> str:
    """The reference's feedback line(s) for one step."""
    if not parsed.ok:
        return f"\u274c Invalid action format: {parsed.error}"
    r, c, n = parsed.row + 1, parsed.col + 1, parsed.num
    if result.kind == "given":
        return f"\u274c Cannot modify initial cell at ({r},{c})"
    if result.kind == "conflict":
        b = sd.box_size(size)
        where = [w for w, hit in ((f"row {r}", result.in_row), (f"column {c}", result.in_col),
                                  (f"box ({parsed.row // b + 1},{parsed.col // b + 1})", result.in_box)) if hit]
        text = f"\u274c Invalid placement: {n} conflicts with {', '.join(where)}"
        if result.valid:
            text += f"\n   Valid numbers for ({r},{c}): {list(result.valid)}"
        return text
    if result.kind == "correct":
        text = f"\u2713 Correct! Placed {n} at ({r},{c})"
    else:
        text = f"\u26a0 Placed {n} at ({r},{c}) - Valid but not optimal"
    if result.solved:
        text += "\n\U0001f389 Congratulations! Puzzle solved!"
    return text


def grid_text(grid: np.ndarray, initial: np.ndarray, clashing: set[tuple[int, int]]) -> str:
    """The reference's grid: ``[N]`` a given, `` N `` a placed number, ``*N*`` a number in
    conflict, `` . `` an empty cell; ``| `` between boxes, a line of dashes between bands."""
    size = grid.shape[0]
    b = sd.box_size(size)
    rows, givens = grid.tolist(), initial.tolist()
    lines = []
    for i in range(size):
        if i and i % b == 0:
            lines.append("-" * (size * 3 + b - 1))
        row = ""
        for j in range(size):
            if j and j % b == 0:
                row += "| "
            v = rows[i][j]
            if v == 0:
                row += " . "
            elif givens[i][j] != 0:
                row += f"[{v}]"
            elif (i, j) in clashing:
                row += f"*{v}*"
            else:
                row += f" {v} "
        lines.append(row.rstrip())
    return "\n".join(lines)


def state_text(game: sd.Sudoku, feedback: str = "") -> str:
    """The reference's ``render()`` with ``render_format: with_feedback``, ``show_conflicts``
    and ``show_valid_numbers``: the grid, the legend, the last step's feedback, the cells in
    conflict, the valid numbers of each empty cell once at most 10 are left, the progress and
    the step counter."""
    grid, initial = game.grid, game.initial
    clashing = sd.conflicts(grid)
    out = ["=" * 50, "SUDOKU PUZZLE", "=" * 50, grid_text(grid, initial, clashing), "",
           "Legend: [N]=initial cell, N=user-placed, *N*=conflict, .=empty"]
    if feedback:
        out += ["", feedback]
    if clashing:
        out += ["", "\u26a0 CONFLICTS DETECTED:"]
        out += [f"  - Cell ({r + 1},{c + 1}): {int(grid[r, c])}" for r, c in sorted(clashing)]
    empty = list(zip(*np.nonzero(grid == 0)))
    if empty and len(empty) <= 10:
        out += ["", "\U0001f4a1 VALID NUMBERS FOR EMPTY CELLS:"]
        for r, c in empty:
            valid = sd.valid_numbers(grid, int(r), int(c))
            if valid:
                out.append(f"  - ({r + 1},{c + 1}): {valid}")
    filled, given = int(np.count_nonzero(grid)), int(np.count_nonzero(initial))
    out += ["", f"Progress: {filled}/{grid.size} cells filled ({given} initial, {filled - given} placed)",
            f"Steps: {game.num_steps}/{game.max_steps}"]
    return "\n".join(out)


class SudokuEnv(TextGameEnv):
    """Sudoku: fill the grid so that every row, column and box holds each number once.

    ## Description
    A 9x9 puzzle (``size`` 4 gives a 4x4 one) from the reference's generator for the same
    seed (``ragen_envs.games.sudoku``): a random solution, then ``int(81 * f)`` cells emptied,
    ``f`` 0.4 for ``difficulty="easy"`` (``ragen/Sudoku-v0``, the reference's SimpleSudoku:
    32 empty cells), 0.5 for ``"medium"`` (``ragen/SudokuMedium-v0``, MediumSudoku: 40),
    0.6 for ``"hard"``. Many puzzles have more than one solution; any full grid without a
    conflict counts as solved. The expert is an exact solver (propagation of singles, then
    depth-first search). No noise stream is used.

    ## Action Space
    Any string (`Text`). ``<think>...</think><answer>place 5 at row 2 col 3 || 2,3,5</answer>``:
    each piece is one placement in any of the reference's spellings (``place N at row R col
    C``, ``place N at (R,C)``, ``place N at R,C``, ``N at R,C``, ``(R,C,N)``, ``R,C,N``; rows
    and columns from 1), up to ``max_actions_per_turn`` (2, the reference's) per reply. A
    piece that is not a placement, or names a cell or number out of range, is a step that
    changes nothing and pays ``invalid_move_reward``, as in the reference (free text: no
    format penalty for it).

    ## Observation Space
    `Text`: the protocol prompt; the state is the reference's ``with_feedback`` text: the
    grid (``[N]`` given, `` N `` placed, ``*N*`` conflict, `` . `` empty), the legend, the
    last step's feedback (``✓ Correct! ...``, ``❌ ...``), the valid numbers of every empty
    cell once at most 10 are left, ``Progress: ...`` and ``Steps: {steps}/{max_steps}``.

    ## Starting State
    The puzzle of ``reset(seed=...)``.

    ## Rewards
    Per placement (the reference's): ``placement_reward`` (1.0) for the solution's number,
    half of it for another valid number, plus ``completion_bonus`` (10.0) for the placement
    that solves the grid; ``invalid_move_reward`` (-0.1) for a given cell, a conflict or an
    unreadable piece. Per turn: the format penalty (-0.1) for a reply without the
    think/answer format or with an empty answer.

    ## Episode End
    Terminated when the grid is solved, or after a valid placement once ``max_steps`` (81)
    steps were taken. Truncated when the turn budget (5) or the action budget (20;
    ``SudokuMedium-v0``: 30) runs out: the reference's budgets allow at most 10 placements,
    fewer than the 32 (40) empty cells, so no episode can be solved with them.

    ## Information
    The protocol keys, ``cells_filled`` (int) and ``cells_remaining`` (int: empty cells).

    ## Arguments
    ``gym.make("ragen/Sudoku-v0", size=9, difficulty="easy", placement_reward=1.0,
    invalid_move_reward=-0.1, completion_bonus=10.0, max_steps=81, max_turns=5,
    max_actions=20, max_actions_per_turn=2, think=True, prompt_style="reference",
    format_penalty=-0.1, max_tokens=150, render_mode=None)``

    ## Version History
    * v0: initial release (protocol 1.0).
    """

    instruction = INSTRUCTION

    def __init__(
        self,
        *,
        size: int = 9,
        difficulty: str = "easy",
        placement_reward: float = 1.0,
        invalid_move_reward: float = -0.1,
        completion_bonus: float = 10.0,
        max_steps: int = 81,
        max_turns: int = 5,
        max_actions: int = 20,
        max_actions_per_turn: int = 2,
        max_tokens: int = 150,
        **kwargs,
    ) -> None:
        super().__init__(max_turns=max_turns, max_actions=max_actions, max_actions_per_turn=max_actions_per_turn,
                         max_tokens=max_tokens, **kwargs)
        self.size = sd.check_size(size)
        self.difficulty = sd.check_difficulty(difficulty)
        self.placement_reward = check_number("placement_reward", placement_reward)
        self.invalid_move_reward = check_number("invalid_move_reward", invalid_move_reward)
        self.completion_bonus = check_number("completion_bonus", completion_bonus)
        self.max_steps = check_int("max_steps", max_steps, 1)
        self.game: sd.Sudoku | None = None
        self.feedback = ""

    def _action_names(self) -> Sequence[str] | None:
        return None  # free text: each piece is read as a placement

    def _legend(self) -> Mapping[str, str] | None:
        return None  # the state has its own legend line (the reference's)

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        puzzle, solution = sd.new_puzzle(layout_seed, self.size, self.difficulty)
        self.game = sd.Sudoku(puzzle, solution, placement_reward=self.placement_reward,
                              invalid_reward=self.invalid_move_reward, completion_bonus=self.completion_bonus,
                              max_steps=self.max_steps)
        self.feedback = ""

    def _run_action(self, name: str) -> ActionOutcome:
        parsed = parse_placement(name, self.size)
        result = self.game.place(parsed.row, parsed.col, parsed.num) if parsed.ok else self.game.unread()
        self.feedback = feedback_text(parsed, result, self.size)
        return ActionOutcome(result.reward, result.done, result.solved, result.effective)

    def _state_text(self) -> str:
        return state_text(self.game, self.feedback)

    def _frame(self) -> np.ndarray:
        from renderers.sudoku import draw

        return draw(self.game.grid, self.game.initial)

    def expert_actions(self) -> list[str]:
        n = min(self.budget.max_actions_per_turn, self.budget.actions_left)
        moves = sd.expert_placements(self.game.grid, self.game.initial, n)
        if not moves:  # nothing valid is left to place: a harmless no-op
            return ["1,1,1"]
        return [f"{r + 1},{c + 1},{v}" for r, c, v in moves]

    def random_answer(self, rng: np.random.Generator) -> str:
        """A uniformly random placement ``R,C,N`` (each of 1..size) for the random agent."""
        r, c, n = (int(x) for x in rng.integers(1, self.size + 1, size=3))
        return f"{r},{c},{n}"

    def _extra_info(self, info: dict) -> None:
        filled = int(np.count_nonzero(self.game.grid))
        info["cells_filled"] = filled
        info["cells_remaining"] = self.game.grid.size - filled
