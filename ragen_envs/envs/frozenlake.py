"""FrozenLake (random 4x4 maps, slippery ice) as a multi-turn text environment."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..games import frozenlake as fl
from ..games.frozenlake_planner import turn_planner
from ..protocol import ActionOutcome
from .checks import check_bool, check_int, check_number
from .base import CoordinateStateMixin, TextGameEnv

__all__ = ["FrozenLakeEnv"]

ACTION_NAMES = ("Left", "Down", "Right", "Up")  # gymnasium's 0..3
LEGEND = {
    "P": "player",
    "_": "empty",
    "O": "hole",
    "G": "goal",
    "X": "player in hole",
    "√": "player on goal",
}
# The reference's instruction, typos ("Forbid the whole") included.
INSTRUCTION = (
    "You are solving the FrozenLake puzzle. Forbid the whole and go to the target. You may move to the "
    "unintended direction due to the slippery ice. Example answer format: <think>To forbid the hole and go "
    "to the target, I should go left then go up.</think><answer>Left || Up</answer>"
)
# The reference's CoordFrozenLake instruction (config/envs.yaml, a YAML block: its final
# newline included); it says "(5, 5)" whatever the size.
COORD_INSTRUCTION = (
    "You are solving the FrozenLake puzzle. The observation includes both a symbol grid and zero-indexed "
    "coordinates for the start, goal, player, and any holes.\n"
    "Coordinates range from the top-left corner (0, 0) to the bottom-right corner (5, 5).\n"
    "Beware that the ice is slippery, so the agent might slide and end up in an unintended tile.\n"
    "Respond with a sequence of actions such as <answer>Left || Up || Up</answer>.\n"
)
OBSERVATION_FORMATS = ("grid", "coord", "grid_coord")
# The player's label in the coordinate lines, by the cell under the player.
_PLAYER_LABEL = {"G": "Player on goal", "H": "Player in hole"}
_CELL_TEXT = {"S": "_", "F": "_", "H": "O", "G": "G"}
_CELL_TABLE = str.maketrans(_CELL_TEXT)
_PLAYER_TEXT = {"H": "X", "G": "√"}  # what the player's cell shows; "P" on any other cell
_ACTION_IDS = {name: i for i, name in enumerate(ACTION_NAMES)}
_TERMINAL_CELLS = frozenset("HG")  # hole and goal end the game


def coordinate_text(rows: Sequence[str], position: tuple[int, int]) -> str:
    """The reference's coordinate lines for a map (row strings, S/F/H/G) and the player's cell.

    ``Board size: R rows x C cols (zero-indexed).``, then ``Start``, ``Goal``, the player
    (``Player``, ``Player on goal`` or ``Player in hole`` by the cell under it) and ``Holes``
    (row by row), each as ``(row, col)`` pairs; a line with no cell is left out.
    """
    cells = {"S": [], "G": [], "H": []}
    for r, row in enumerate(rows):
        for c, code in enumerate(row):
            if code in cells:
                cells[code].append(f"({r}, {c})")
    row, col = position
    player = _PLAYER_LABEL.get(rows[row][col], "Player")
    lines = [f"Board size: {len(rows)} rows x {len(rows[0])} cols (zero-indexed)."]
    for label, found in (("Start", cells["S"]), ("Goal", cells["G"]), (player, [f"({row}, {col})"]),
                         ("Holes", cells["H"])):
        if found:
            lines.append(f"{label}: {', '.join(found)}")
    return "\n".join(lines)


class FrozenLakeEnv(CoordinateStateMixin, TextGameEnv):
    """FrozenLake: cross slippery ice to the goal without falling into a hole.

    ## Description
    A ``size`` x ``size`` map (4x4) where each cell is frozen with probability ``p`` (0.8),
    with start and goal at two distinct random cells, redrawn until a path exists; the map
    of a seed is the reference implementation's. On slippery ice each action goes in the
    intended direction with probability ``success_rate`` and in either perpendicular one with
    half of the rest: 1/3 each in v0 (the paper's code); in v1 (the newest reference,
    p 0.9) 0.8 ahead and 0.1 to each side.

    ## Action Space
    Any string (`Text`). ``<think>...</think><answer>Left || Up</answer>``: up to
    ``max_actions_per_turn`` of ``Left, Down, Right, Up`` (case-insensitive) per reply.

    ## Observation Space
    `UnicodeText(65536)`: the reference prompt; the grid uses ``P`` player, ``_`` frozen, ``O`` hole,
    ``G`` goal, ``X`` player in a hole, ``√`` player on the goal. ``observation_format``:
    ``grid`` (that grid), ``coord`` (the reference's coordinate lines: board size, start,
    goal, player, holes) or ``grid_coord`` (both, as the reference's CoordFrozenLake).

    ## Starting State
    The player on the start cell of the seed's map. Slips are drawn from the env's noise
    stream: the generator of ``reset(seed=...)`` (one draw at reset, one per action), or of
    ``options["noise_seed"]`` when given (the map still comes from ``seed``).

    ## Rewards
    1.0 for reaching the goal, 0.0 otherwise; plus the format penalty (-0.1) per malformed
    turn.

    ## Episode End
    Terminated on a hole or the goal. Truncated when the turn budget (5) or the action budget
    (10) runs out first.

    ## Information
    The protocol keys (``ragen_envs.protocol.INFO_KEYS``) and ``position`` (list [row, col]).

    ## Arguments
    ``gym.make("ragen/FrozenLake-v0", size=4, p=0.8, slippery=True, success_rate=1/3,
    observation_format="grid", max_turns=5, max_actions=10, max_actions_per_turn=5, think=True, prompt_style="reference",
    format_penalty=-0.1, max_tokens=100, render_mode=None)``

    ## Version History
    * v0: initial release (protocol 1.0).
    * v1: the newest reference's defaults (mll-lab-nu/RAGEN b45d28c): ``p=0.9``,
      ``success_rate=0.8``; maps, slips and texts equal its env's (checked on seeds 0..999).
    * CoordFrozenLake-v0: v1 with ``observation_format="grid_coord"`` (the reference's
      CoordFrozenLake tag: coordinate lines above the grid, its instruction, 120 tokens).
    """

    instruction = INSTRUCTION

    def __init__(self, *, size: int = 4, p: float = 0.8, slippery: bool = True,
                 success_rate: float = 1.0 / 3.0, observation_format: str = "grid", **kwargs) -> None:
        super().__init__(**kwargs)
        if observation_format not in OBSERVATION_FORMATS:
            raise ValueError(f"observation_format must be one of {list(OBSERVATION_FORMATS)}, got {observation_format!r}")
        self.observation_format = observation_format
        # the reference has one coordinate instruction (its CoordFrozenLake tag's) for both coordinate formats
        self.instruction = INSTRUCTION if observation_format == "grid" else COORD_INSTRUCTION
        self.size = check_int("size", size, 2, 32)
        self.p = check_number("p (probability of a frozen cell)", p, 0.0, 1.0, low_open=True)
        self.slippery = check_bool("slippery", slippery)
        self.success_rate = check_number("success_rate (probability of the intended move)", success_rate, 0.0, 1.0)
        self.game: fl.FrozenLake | None = None

    def _action_names(self) -> Sequence[str]:
        return ACTION_NAMES

    def _legend(self) -> Mapping[str, str]:
        return LEGEND

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        self.game = fl.FrozenLake.from_rows(fl.map_rows(layout_seed, self.size, self.p), self.slippery,
                                            self.success_rate)
        self.game.reset(noise_rng)

    def _run_action(self, name: str) -> ActionOutcome:
        # game.advance is game.step without its FrozenLakeStep (one object fewer an action).
        _, moved, cell = self.game.advance(_ACTION_IDS[name], self._noise_rng)
        goal = cell == "G"
        return ActionOutcome(1.0 if goal else 0.0, cell in _TERMINAL_CELLS, goal, moved)

    def _frame(self) -> np.ndarray:
        from renderers.frozenlake import draw

        return draw(self.game.desc, self.game.position)

    def _coordinate_lines(self) -> str:
        return coordinate_text(self.game.rows, self.game.position)

    def _grid_text(self) -> str:
        game = self.game
        row, col = game.position
        rows = game.rows
        # One translate of the whole map, then the player's character spliced in (hot path).
        text = "\n".join(rows).translate(_CELL_TABLE)
        at = row * (len(rows[0]) + 1) + col
        return text[:at] + _PLAYER_TEXT.get(rows[row][col], "P") + text[at + 1 :]

    def expert_actions(self) -> list[str]:
        """The optimal open-loop actions for this turn (exact dynamic programme)."""
        planner = turn_planner(self.game.desc, self.budget.max_actions_per_turn, self.slippery, self.success_rate)
        macro = planner.best_macro(self.game.position, self.budget.turns_left, self.budget.actions_left)
        return [ACTION_NAMES[a] for a in macro] or [ACTION_NAMES[0]]

    def success_probability(self) -> float:
        """The expert's probability of success from the current state (exact)."""
        planner = turn_planner(self.game.desc, self.budget.max_actions_per_turn, self.slippery, self.success_rate)
        row, col = self.game.position
        return float(planner.value(self.budget.turns_left, self.budget.actions_left)[row * self.size + col])

    def _extra_info(self, info):
        info["position"] = list(self.game.position)
