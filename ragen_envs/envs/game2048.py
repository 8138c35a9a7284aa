"""2048 (the newest reference's ``game_2048``) as a multi-turn text environment."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..games import game2048 as g
from ..protocol import ActionOutcome
from .base import TextGameEnv
from .checks import check_bool, check_int, check_number

__all__ = ["Game2048Env", "state_text"]

# The reference's env_instruction (config/envs.yaml), verbatim, with the YAML block's final newline.
INSTRUCTION = (
    "You are playing the 2048 game on a 4x4 grid. Merge equal tiles by sliding Up, Right, Down, or Left.\n"
    "If a move is invalid (no tiles move), a small penalty is applied. Respond with a single action.\n"
    "Example: <answer>Up</answer>\n"
)


def state_text(grid: np.ndarray, score: int) -> str:
    """The reference's rendering of a board (its ``render()``): the rows, the valid actions
    as ``number(name)``, the goal, the score and the question."""
    lines = ["Current 2048 Grid:"]
    for i, row in enumerate(grid.tolist(), 1):
        lines.append(f"Row {i}: [{', '.join(str(int(v)) for v in row)}]")
    valid = g.valid_actions(grid)
    actions = ", ".join(f"{a}({g.ACTIONS[a]})" for a in valid) if valid else "None"
    lines += ["", f"Valid Actions: {actions}.", "Goal: Merge same numbers to reach 2048.", f"Current Score: {score}",
              "What is your next move?"]
    return "\n".join(lines)


class Game2048Env(TextGameEnv):
    """2048: slide the tiles, merge equal ones, keep the board from filling up.

    ## Description
    An ``N x N`` board (``size``, 4). The start and every tile that appears after a move are
    the reference's for the same seed (``ragen_envs.games.game2048``): the spawns come from
    ``numpy.random.default_rng(seed)``, a 2 with probability ``two_prob`` (0.9), else a 4.
    ``reset(options={"noise_seed": k})`` draws the spawns after the start from its own stream
    instead. The expert is a two-move expectimax.

    ## Action Space
    Any string (`Text`). ``<think>...</think><answer>Up</answer>``: ``Up``, ``Right``,
    ``Down`` or ``Left`` (any case), one per reply (``max_actions_per_turn`` 1, the
    reference's configuration).

    ## Observation Space
    `Text`: the protocol prompt; the state is the reference's text: ``Row k: [...]`` lines,
    the valid actions as ``0(Up)``, the goal, ``Current Score`` and "What is your next move?".

    ## Starting State
    Two tiles on an empty board.

    ## Rewards
    Per move (the reference's log reward): ``0.1 * log2(m + 1)`` for a move whose merges make
    tiles summing to ``m`` (0 when nothing merges); ``log_reward=False``: ``m``. A move that
    moves nothing: ``invalid_move_reward`` (-0.1, as the instruction promises; the
    reference's log reward pays 0.0 there: ``invalid_move_reward=0.0`` reproduces it). Per
    turn: plus the format penalty (-0.1) for a malformed reply or a word that is not a move.

    ## Episode End
    Terminated when no move is valid. Truncated when the turn budget (800) or the action
    budget (700) runs out. Success: a tile of ``target_tile`` (2048) or more on the board
    (practically never within 700 moves: each adds a 2 or a 4, so the tiles then sum to
    about 1,550).

    ## Information
    The protocol keys, ``score`` (the sum of all merged tiles) and ``max_tile``.

    ## Arguments
    ``gym.make("ragen/2048-v0", size=4, two_prob=0.9, log_reward=True,
    invalid_move_reward=-0.1, target_tile=2048, max_turns=800, max_actions=700,
    max_actions_per_turn=1, think=True, prompt_style="reference", format_penalty=-0.1,
    max_tokens=8192, render_mode=None)``

    ## Version History
    * v0: initial release (protocol 1.0).
    """

    instruction = INSTRUCTION

    def __init__(
        self,
        *,
        size: int = 4,
        two_prob: float = 0.9,
        log_reward: bool = True,
        invalid_move_reward: float = -0.1,
        target_tile: int = 2048,
        max_turns: int = 800,
        max_actions: int = 700,
        max_actions_per_turn: int = 1,
        max_tokens: int = 8192,
        **kwargs,
    ) -> None:
        super().__init__(max_turns=max_turns, max_actions=max_actions, max_actions_per_turn=max_actions_per_turn,
                         max_tokens=max_tokens, **kwargs)
        self.size = g.check_size(size)
        self.two_prob = check_number("two_prob", two_prob, 0.0, 1.0)
        self.log_reward = check_bool("log_reward", log_reward)
        self.invalid_move_reward = check_number("invalid_move_reward", invalid_move_reward)
        self.target_tile = check_int("target_tile", target_tile, 2)
        self._action_of = {name: i for i, name in enumerate(g.ACTIONS)}
        self.game: g.Game2048 | None = None

    def _action_names(self) -> Sequence[str]:
        return g.ACTIONS

    def _legend(self) -> Mapping[str, str] | None:
        return None  # the reference gives none: the state says what it shows

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        grid, rng = g.new_board(layout_seed, self.size, self.two_prob)
        spawns = rng if self.noise_seed is None else noise_rng  # the reference: one stream for all
        self.game = g.Game2048(grid, spawns, self.two_prob, self.log_reward, self.invalid_move_reward)

    def _run_action(self, name: str) -> ActionOutcome:
        step = self.game.step(self._action_of[name])
        return ActionOutcome(step.reward, step.over, step.max_tile >= self.target_tile, step.moved)

    def _state_text(self) -> str:
        return state_text(self.game.grid, self.game.score)

    def _frame(self) -> np.ndarray:
        from renderers.game2048 import draw

        return draw(self.game.grid)

    def expert_actions(self) -> list[str]:
        action = g.best_action(self.game.grid, two_prob=self.two_prob)
        return [g.ACTIONS[0 if action is None else action]]

    def _extra_info(self, info: dict) -> None:
        info["score"] = int(self.game.score)
        info["max_tile"] = self.game.max_tile
