"""Sokoban (and its LargeSokoban / SokobanNewVocab variants) as a multi-turn text environment."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..games import sokoban as sk
from ..protocol import ActionOutcome
from .checks import check_int
from .base import CoordinateStateMixin, TextGameEnv

__all__ = ["SokobanEnv", "SYMBOL_SETS", "OBSERVATION_FORMATS", "FRAME_STYLES", "coordinate_text"]

ACTION_NAMES = ("Up", "Down", "Left", "Right")
_ACTION_IDS = {"Up": sk.UP, "Down": sk.DOWN, "Left": sk.LEFT, "Right": sk.RIGHT}
# Symbols for codes 0..6: wall, empty floor, empty target, box on target, box, player,
# player on target.
SYMBOL_SETS = {
    "default": ("#", "_", "O", "√", "X", "P", "S"),
    "newvocab": ("W", ".", "G", "C", "B", "A", "@"),
}
_MEANINGS = ("wall", "empty", "target", "box on target", "box", "player", "player on target")

INSTRUCTION = (
    "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets. "
    "When you are right next to a box, you can push it by moving in the same direction. You cannot push "
    "a box through a wall, and you cannot pull a box. The answer should be a sequence of actions, like "
    "<answer>Right || Right || Up</answer>"
)
# The newest reference's SimpleSokoban / LargerSokoban instruction (mll-lab-nu/RAGEN 20daedc,
# config/envs.yaml): the same sentences as a YAML block, one a line, the trailing spaces and
# the final newline kept.
RAGEN2_INSTRUCTION = (
    "You are solving the Sokoban puzzle. \n"
    "You are the player and you need to push all boxes to targets. \n"
    "When you are right next to a box, you can push it by moving in the same direction. \n"
    "You cannot push a box through a wall, and you cannot pull a box. \n"
    "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>\n"
)
# Its CoordSokoban instruction (the same file); it says "(5, 5)" whatever the room size.
COORD_INSTRUCTION = (
    "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.\n"
    "You are provided with a symbol grid and the zero-indexed coordinates of the player, each box, and each "
    "target. \n"
    "Coordinates range from the top-left corner (0, 0) to the bottom-right corner (5, 5). \n"
    "When you are exactly next to a box, you can push it by moving in the same direction. \n"
    "You cannot push a box through a wall, and you cannot pull a box.\n"
    "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>.\n"
)
INSTRUCTION_STYLES = {"paper": INSTRUCTION, "ragen2": RAGEN2_INSTRUCTION}
OBSERVATION_FORMATS = ("grid", "coord", "grid_coord")
# rgb_array frames: "default" (renderers.sokoban: drawn, 64-px cells) or "reference" (renderers.
# sokoban_sprites: gym-sokoban's 16-px tiles, the reference's VisualSimpleSokoban frames)
FRAME_STYLES = ("default", "reference")
# Coordinate lines in the reference's order: label, the cell codes (grid_bytes) it lists.
_COORD_LINES = (("Targets", (2, 3, 6)), ("Boxes", (4,)), ("Boxes on target", (3,)), ("Player", (5,)),
                ("Player on target", (6,)))


def _cells_with(cells: bytes, code: int) -> list[int]:
    """The row-major indices of ``code`` in ``cells`` (a few per room: bytes.find is C-speed)."""
    found, i = [], cells.find(code)
    while i >= 0:
        found.append(i)
        i = cells.find(code, i + 1)
    return found


def coordinate_text(cells: bytes, rows: int, cols: int) -> str:
    """The reference's coordinate lines for a room given as row-major cell codes (the game's
    ``grid_bytes()``: 0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player, 6 player on
    target) of ``rows`` x ``cols``.

    ``Board size: R rows x C cols (zero-indexed).``, then ``Targets`` (every target cell,
    also those under a box or the player), ``Boxes`` (off target), ``Boxes on target``,
    ``Player``, ``Player on target``, each a row-major list of ``(row, col)``; a line with no
    cell is left out; walls are not listed.
    """
    lines = [f"Board size: {rows} rows x {cols} cols (zero-indexed)."]
    for label, codes in _COORD_LINES:
        where = _cells_with(cells, codes[0]) if len(codes) == 1 else sorted(
            i for code in codes for i in _cells_with(cells, code))
        if where:
            lines.append(f"{label}: " + ", ".join(f"({i // cols}, {i % cols})" for i in where))
    return "\n".join(lines)


def _symbol_table(symbols: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(symbols, str) and symbols in SYMBOL_SETS:
        table = SYMBOL_SETS[symbols]
    else:
        table = tuple(symbols)
    if len(table) != 7 or any(not isinstance(c, str) or len(c) != 1 or c.isspace() for c in table):
        raise ValueError(
            f"symbols must be one of {sorted(SYMBOL_SETS)} or 7 single non-space characters "
            f"(wall, empty, target, box on target, box, player, player on target), got {symbols!r}"
        )
    if len(set(table)) != 7:
        raise ValueError(f"symbols must be 7 distinct characters, got {symbols!r}")
    return table


class SokobanEnv(CoordinateStateMixin, TextGameEnv):
    """Sokoban: push every box onto a target; boxes can be pushed, never pulled.

    ## Description
    The levels are the reference implementation's for the same seed: gym-sokoban's room
    generator with RAGEN's pull-only reverse play and random player moves, drawn from
    private ``random.Random(seed)`` / ``numpy.random.RandomState(seed)`` generators (see
    ``ragen_envs.games.sokoban``). Seeds where that generation fails are retried with
    ``retry_seed(seed, k) = (seed + k * 1_000_003) % 2**32``, k = 1, 2, ... (deterministic).

    ## Action Space
    Any string (`Text`). ``<think>...</think><answer>Up || Left</answer>``: up to
    ``max_actions_per_turn`` of ``Up, Down, Left, Right`` (case-insensitive) per reply.

    ## Observation Space
    `UnicodeText(65536)` (any Unicode text up to 65,536 characters): the reference prompt. The grid has one character per cell: ``#`` wall, ``_``
    empty, ``O`` target, ``√`` box on target, ``X`` box, ``P`` player, ``S`` player on target
    (``W . G C B A @`` with ``symbols="newvocab"``). ``observation_format``: ``grid`` (that
    grid), ``coord`` (the reference's coordinate lines: board size, targets, boxes, boxes on
    target, player or player on target) or ``grid_coord`` (both, as the reference's
    CoordSokoban).

    ## Starting State
    The generated level of ``reset(seed=...)``; ``ragen_envs.EVAL_SEEDS`` are the paper's.

    ## Rewards
    Per action: -0.1, +1 when a box reaches a target, -1 when one leaves a target, +10 when all
    boxes are placed (a solving push of one box pays 10.9). Per turn: the sum, plus the format
    penalty (-0.1) for a malformed reply or any unknown action.

    ## Episode End
    Terminated when all boxes are on targets. Truncated when the turn budget (5) or the action
    budget (10) runs out first.

    ## Information
    The protocol keys (``ragen_envs.protocol.INFO_KEYS``) and ``boxes_on_target`` (int).

    ## Arguments
    ``gym.make("ragen/Sokoban-v0", dim_room=(6, 6), num_boxes=1, search_depth=300,
    symbols="default", legend_symbols=None, max_turns=5, max_actions=10,
    max_actions_per_turn=5, think=True, prompt_style="reference", format_penalty=-0.1,
    max_tokens=100, observation_format="grid", instruction_style="paper", frame_style="default",
    render_mode=None)``.
    ``legend_symbols`` draws the prompt's legend with another symbol set:
    ``ragen/SokobanNewVocab-v0`` with ``legend_symbols="default"`` reproduces the reference's
    legend bug. ``frame_style``: the ``rgb_array`` picture, ``default`` (drawn, 64 px a cell)
    or ``reference`` (gym-sokoban's 16-px tiles as the reference draws them: 96x96 for 6x6,
    no pygame needed). ``instruction_style``: ``paper`` (the paper's one-line instruction) or
    ``ragen2`` (the newest reference's: the same sentences one a line); either coordinate
    format uses the reference's CoordSokoban instruction.

    ## Version History
    * v0: initial release (protocol 1.0).
    * LargeSokoban-v1: LargeSokoban-v0 with the newest reference's instruction text
      (mll-lab-nu/RAGEN 20daedc, envs.yaml ``LargerSokoban``); the same levels.
    * CoordSokoban-v0: Sokoban-v0 with ``observation_format="grid_coord"`` (the reference's
      CoordSokoban tag: coordinate lines above the grid, its instruction, 120 tokens).
    """

    instruction = INSTRUCTION

    def __init__(
        self,
        *,
        dim_room: Sequence[int] = (6, 6),
        num_boxes: int = 1,
        search_depth: int = 300,
        symbols: str | Sequence[str] = "default",
        legend_symbols: str | Sequence[str] | None = None,
        observation_format: str = "grid",
        instruction_style: str = "paper",
        frame_style: str = "default",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if frame_style not in FRAME_STYLES:
            raise ValueError(f"frame_style must be one of {list(FRAME_STYLES)}, got {frame_style!r}")
        self.frame_style = frame_style
        if observation_format not in OBSERVATION_FORMATS:
            raise ValueError(f"observation_format must be one of {list(OBSERVATION_FORMATS)}, got {observation_format!r}")
        if not isinstance(instruction_style, str) or instruction_style not in INSTRUCTION_STYLES:
            raise ValueError(f"instruction_style must be one of {list(INSTRUCTION_STYLES)}, got {instruction_style!r}")
        self.observation_format = observation_format
        self.instruction_style = instruction_style
        # the reference has one coordinate instruction (its CoordSokoban tag's) for both coordinate formats
        self.instruction = INSTRUCTION_STYLES[instruction_style] if observation_format == "grid" else COORD_INSTRUCTION
        try:
            rows, cols = (int(v) for v in dim_room)
        except (TypeError, ValueError):
            raise ValueError(f"dim_room must be two integers (rows, cols), got {dim_room!r}") from None
        if not (4 <= rows <= 100 and 4 <= cols <= 100):  # <= 100: the grid text fits the observation space
            raise ValueError(f"dim_room must be two integers in [4, 100], got {dim_room!r}")
        num_boxes = check_int("num_boxes", num_boxes, 1)
        search_depth = check_int("search_depth", search_depth, 1)
        self.dim_room = (rows, cols)
        self.num_boxes = num_boxes
        self.search_depth = search_depth
        self.symbols = _symbol_table(symbols)
        self.legend_symbols = self.symbols if legend_symbols is None else _symbol_table(legend_symbols)
        # code byte -> symbol: one C-speed translate draws the grid (the hot path of a turn)
        self._code_table = {code: sym for code, sym in enumerate(self.symbols)}
        self._row_slices = tuple(slice(r * cols, (r + 1) * cols) for r in range(rows))
        self.game: sk.Sokoban | None = None

    def _action_names(self) -> Sequence[str]:
        return ACTION_NAMES

    def _legend(self) -> Mapping[str, str]:
        return dict(zip(self.legend_symbols, _MEANINGS))

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        level = sk.generate_level_with_retry(
            layout_seed,
            rows=self.dim_room[0],
            cols=self.dim_room[1],
            num_boxes=self.num_boxes,
            search_depth=self.search_depth,
        )
        self.level = level
        self.game = sk.Sokoban(level)

    def _run_action(self, name: str) -> ActionOutcome:
        reward, moved, solved = self.game.advance(_ACTION_IDS[name])  # game.step without its SokobanStep
        return ActionOutcome(reward, solved, solved, moved)

    def _frame(self) -> np.ndarray:
        if self.frame_style == "reference":
            from renderers.sokoban_sprites import draw as draw_tiles

            return draw_tiles(self.game.grid_codes())
        from renderers.sokoban import draw

        return draw(self.game.grid_codes())

    def _coordinate_lines(self) -> str:
        return coordinate_text(self.game.grid_bytes(), *self.dim_room)

    def _grid_text(self) -> str:
        cells = self.game.grid_bytes().decode("latin-1").translate(self._code_table)
        return "\n".join(map(cells.__getitem__, self._row_slices))  # C-speed rows, no comprehension

    def expert_actions(self) -> list[str]:
        n = min(self.budget.max_actions_per_turn, self.budget.actions_left)
        plan = sk.solve(self.game)
        if not plan:
            return [ACTION_NAMES[0]]  # unsolvable from here: any legal move keeps the format
        return [ACTION_NAMES[a] for a in plan[:n]]

    def _extra_info(self, info):
        info["boxes_on_target"] = int(self.game.boxes_on_target)
