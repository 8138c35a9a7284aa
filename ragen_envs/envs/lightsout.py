"""Lights Out (the reference's newest game) as a multi-turn text environment."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..games import lightsout as lo
from ..protocol import ActionOutcome
from .checks import check_bool, check_int, check_number
from .base import TextGameEnv

__all__ = ["LightsOutEnv", "cell_name"]

LEGEND = {"*": "light on", ".": "light off"}
_SYMBOLS = np.array([".", "*"])  # index = the light's state

INSTRUCTION = (
    "You are solving the Lights Out puzzle. The board is a grid of lights. Pressing a cell toggles it and "
    "the cells directly above, below, left and right of it. Turn all the lights off. Name a cell by its "
    "zero-indexed (row, column), as the row and column numbers around the board show it. The answer should "
    "be the cells to press, like <answer>(0, 1)</answer>"
)


def cell_name(row: int, col: int) -> str:
    """The action name of a cell: ``(row, col)``, zero-indexed."""
    return f"({row}, {col})"


class LightsOutEnv(TextGameEnv):
    """Lights Out: press cells to turn every light off.

    ## Description
    An ``N x N`` board (``size``, 3 by default) of lights. Pressing a cell toggles it and its
    orthogonal neighbours. Boards are the reference implementation's for the same seed:
    ``scramble_depth`` (4) random presses on a dark board from
    ``numpy.random.default_rng(seed)``, redrawn (up to 20 times) while the board stays dark
    (``ragen_envs.games.lightsout``). A board made by presses is solvable by them, so every
    board is solvable; the expert solves it exactly (GF(2) elimination, fewest presses).

    ## Action Space
    Any string (`Text`). ``<think>...</think><answer>(0, 1)</answer>``: a cell as
    ``(row, col)``, zero-indexed, written exactly so (case and the spaces around the
    answer do not matter, the comma and the one space after it do). Up to
    ``max_actions_per_turn`` cells per reply, separated by ``||`` (1 by default, as in the
    reference's configuration).

    ## Observation Space
    `Text`: the protocol prompt (the available actions list every cell). The state is the board with column numbers on top and row
    numbers on the left; ``*`` is a light on, ``.`` a light off.

    ## Starting State
    The generated board of ``reset(seed=...)``; never all dark when ``scramble_depth > 0``.

    ## Rewards
    Per press (the reference's): ``(lights on before - lights on after) / N**2`` with
    ``shaped_reward=True``, plus ``success_reward`` (1.0) for the press that turns the last
    light off. Per turn: the sum, plus the format penalty (-0.1) for a malformed reply or
    any piece that is not a cell.

    ## Episode End
    Terminated when every light is off. Truncated when the turn budget (8) or the action
    budget (8; the reference ends its episode after 8 presses) runs out first.

    ## Information
    The protocol keys (``ragen_envs.protocol.INFO_KEYS``) and ``lights_on`` (int, lights on
    after the turn).

    ## Arguments
    ``gym.make("ragen/LightsOut-v0", size=3, scramble_depth=4, shaped_reward=True,
    success_reward=1.0, max_turns=8, max_actions=8, max_actions_per_turn=1, think=True,
    prompt_style="reference", format_penalty=-0.1, max_tokens=100, render_mode=None)``

    ## Version History
    * v0: initial release (protocol 1.0).
    """

    instruction = INSTRUCTION

    def __init__(
        self,
        *,
        size: int = 3,
        scramble_depth: int = 4,
        shaped_reward: bool = True,
        success_reward: float = 1.0,
        max_turns: int = 8,
        max_actions: int = 8,
        max_actions_per_turn: int = 1,
        **kwargs,
    ) -> None:
        super().__init__(max_turns=max_turns, max_actions=max_actions, max_actions_per_turn=max_actions_per_turn, **kwargs)
        self.size = lo._check_size(size)
        self.scramble_depth = check_int("scramble_depth", scramble_depth, 0)
        self.shaped_reward = check_bool("shaped_reward", shaped_reward)
        self.success_reward = check_number("success_reward", success_reward)
        self._names = tuple(cell_name(r, c) for r in range(self.size) for c in range(self.size))
        self._cells = {name: divmod(i, self.size) for i, name in enumerate(self._names)}
        self.game: lo.LightsOut | None = None

    def _action_names(self) -> Sequence[str]:
        return self._names

    def _legend(self) -> Mapping[str, str]:
        return LEGEND

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        board = lo.generate_board(layout_seed, self.size, self.scramble_depth)
        self.game = lo.LightsOut(board, self.shaped_reward, self.success_reward)

    def _run_action(self, name: str) -> ActionOutcome:
        step = self.game.press(*self._cells[name])
        return ActionOutcome(step.reward, step.solved, step.solved, True)

    def _state_text(self) -> str:
        header = "  " + " ".join(str(c) for c in range(self.size))
        rows = [f"{r} " + " ".join(_SYMBOLS[self.game.board[r]]) for r in range(self.size)]
        return "\n".join([header, *rows])

    def _frame(self) -> np.ndarray:
        from renderers.lightsout import draw

        return draw(self.game.board)

    def expert_actions(self) -> list[str]:
        n = min(self.budget.max_actions_per_turn, self.budget.actions_left)
        plan = lo.solve(self.game.board)
        if not plan:  # solved already (cannot happen mid-episode) or unsolvable: keep the format
            return [self._names[0]]
        return [cell_name(r, c) for r, c in plan[:n]]

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info["lights_on"] = self.game.lights_on
        return obs, reward, terminated, truncated, info
