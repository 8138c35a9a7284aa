"""Partially observed Sokoban: Sokoban-v0's levels, seen through a small window around the player."""

from __future__ import annotations

import numpy as np

from ..games import sokoban_pomdp as pomdp
from .checks import check_bool
from .sokoban import INSTRUCTION as SOKOBAN_INSTRUCTION
from .sokoban import SokobanEnv

__all__ = ["SokobanPOMDPEnv"]


class SokobanPOMDPEnv(SokobanEnv):
    """Sokoban seen through a window: the player sees only the cells around itself.

    ## Description
    The reference's POMDP Sokoban (``partial_obs``): the same levels, dynamics and rewards
    as ``ragen/Sokoban-v0`` for the same seed (the same generator and kwargs), but the state
    shows only the ``(2 * window + 1) x (2 * window + 1)`` cells centred on the player (3x3
    by default, the reference's ``partial_obs_window=1``). Cells beyond the board's edge are
    drawn as walls. A footer gives the player's board position (``show_position``, as the
    reference), the actions taken and the boxes on targets, so an agent can build a map in
    its reasoning.

    ## Action Space
    As ``ragen/Sokoban-v0``: up to ``max_actions_per_turn`` of ``Up, Down, Left, Right``.

    ## Observation Space
    `Text`: the Sokoban prompt plus a sentence on the window. The state is the window grid
    (Sokoban's symbols) and the line
    ``Position: (row, col) | Step: {actions taken} | Boxes on target: {k}/{n}``.

    ## Starting State
    Sokoban-v0's level of ``reset(seed=...)``.

    ## Rewards
    As ``ragen/Sokoban-v0``.

    ## Episode End
    As ``ragen/Sokoban-v0``.

    ## Information
    The protocol keys (``ragen_envs.protocol.INFO_KEYS``) and ``boxes_on_target`` (int).
    ``info["reasoning"]`` grades no grounded claims here: the state text is not a bare grid.

    ## Expert
    Privileged: it plans on the full state (Sokoban-v0's BFS) and sends the actions; it does
    not infer the board from the windows, so its success is Sokoban-v0's (the window only
    changes what a model sees).

    ## Arguments
    ``gym.make("ragen/SokobanPOMDP-v0", window=1, show_position=True, dim_room=(6, 6),
    num_boxes=1, search_depth=300, symbols="default", ...)`` and every other
    ``ragen/Sokoban-v0`` kwarg. ``render_mode="rgb_array"`` draws the whole board with the
    unseen cells under fog.

    ## Version History
    * v0: initial release (protocol 1.0).
    """

    def __init__(self, *, window: int = 1, show_position: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        if self.observation_format != "grid":
            raise ValueError(f"observation_format must be 'grid' here (the window is a grid), got {self.observation_format!r}")
        if self.frame_style != "default":
            raise ValueError(f"frame_style must be 'default' here (its frames draw the fog), got {self.frame_style!r}")
        self.window = pomdp._check_radius(window)
        self.show_position = check_bool("show_position", show_position)
        size = 2 * self.window + 1
        seen = (
            f" You only see the {size}x{size} cells centred on yourself; cells beyond the edge of the board "
            "look like walls."
        )
        if self.show_position:
            seen += " Below the view you are told your position (row, column) on the board, counted from 0."
        self.instruction = SOKOBAN_INSTRUCTION + seen

    def _state_text(self) -> str:
        codes = pomdp.window_codes(self.game, self.window)
        table = self._code_table  # code -> symbol, as Sokoban-v0 draws its grid
        return "\n".join("".join(table[int(c)] for c in row) for row in codes)

    def state_text(self) -> str:
        # The footer is prose: only the grid goes through a vocabulary remapping.
        grid = super().state_text()
        row, col = self.game.player
        position = f"Position: ({row}, {col}) | " if self.show_position else ""
        return (f"{grid}\n{position}Step: {self.budget.actions_used} | "
                f"Boxes on target: {self.game.boxes_on_target}/{self.game.num_boxes}")

    def _reasoning_state(self) -> str:
        # the window and its footer, as before coordinate formats existed (the footer keeps the
        # claims unchecked); never Sokoban's whole board, which this env does not show
        return self.state_text()

    def _frame(self) -> np.ndarray:
        from renderers.sokoban import draw_fogged

        return draw_fogged(self.game.grid_codes(), pomdp.visible_mask(self.game, self.window))
