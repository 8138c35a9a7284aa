"""The 2x2 Rubik's Cube (the newest reference's ``rubikscube``) as a multi-turn text environment."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..games import rubikscube as rc
from ..protocol import ActionOutcome
from .base import TextGameEnv
from .checks import check_bool, check_int, check_number

__all__ = ["RubiksCubeEnv", "COLOUR_LETTERS"]

COLOUR_LETTERS = "WOGRBY"  # colour c (the solved colour of face c, faces U L F R B D)
_FACE_LABELS = ("Up (U):    ", "Left (L):  ", "Front (F): ", "Right (R): ", "Back (B):  ", "Down (D):  ")

# The reference's env_instruction (config/envs.yaml), verbatim, with the YAML block's final newline.
INSTRUCTION = (
    "You are solving a 2x2 Rubik's Cube (Pocket Cube). The goal is to restore the cube so that each of the "
    "faces consists of a single, unique color.\n"
    "Available actions use standard Singmaster notation for face rotations: U, U', D, D', L, L', R, R', F, F', B, B'.\n"
    "- Faces: U (Up), D (Down), L (Left), R (Right), F (Front), B (Back).\n"
    "- Modifiers: A letter alone means 90\u00b0 clockwise (e.g., 'R'). A letter with prime (') means 90\u00b0 "
    "counter-clockwise (e.g., \"R'\").\n"
    'Respond with a sequence of actions separated by "||".\n'
    "Example: <answer>U</answer>\n"
)


def state_text(state: np.ndarray, step: int, max_steps: int) -> str:
    """The reference's rendering of a cube in play (its ``render(done=False)``): a header, the
    step counter, each face's two rows of colour letters, the action list and the question."""
    letters = [COLOUR_LETTERS[int(c)] for c in state]
    lines = ["=== Rubik's Cube 2x2 State ===", f"Step: {step}/{max_steps}", ""]
    for face, label in enumerate(_FACE_LABELS):
        a, b, c, d = letters[4 * face:4 * face + 4]
        lines.append(f"{label}[{a}, {b}]\n [{c}, {d}]")
    lines += ["", "Available Actions:", ", ".join(rc.MOVE_NAMES), "\nWhat is your next move?"]
    return "\n".join(lines)


class RubiksCubeEnv(TextGameEnv):
    """The 2x2 Rubik's Cube (Pocket Cube): turn faces until every face shows one colour.

    ## Description
    A 2x2 cube scrambled by ``scramble_depth`` (1) random quarter turns drawn as the reference
    draws them (``numpy.random.default_rng(seed).integers(1, 13)`` per turn), so every seed
    gives the reference's cube (``ragen_envs.games.rubikscube``). The reference's B turn is
    not a real cube turn; ``reference_b_turn=True`` plays it, the default plays the real one
    (the scrambles of depth 1 are the same either way). The expert is exactly optimal: a
    breadth-first search over the 3,674,160 states (built on first use, about a second).

    ## Action Space
    Any string (`Text`). ``<think>...</think><answer>R || U'</answer>``: Singmaster quarter
    turns ``U U' D D' L L' R R' F F' B B'`` (any case), up to ``max_actions_per_turn`` (4, as
    the reference's configuration) per reply separated by ``||``.

    ## Observation Space
    `Text`: the protocol prompt; the state is the reference's text: the step counter
    (actions so far / ``max_actions``), each face as two rows of colour letters
    (W O G R B Y), the action list and "What is your next move?".

    ## Starting State
    The scrambled cube of ``reset(seed=...)`` (a scramble that undoes itself starts solved).

    ## Rewards
    ``success_reward`` (1.0) for the turn that leaves every face one colour (the cube may be
    turned as a whole), 0 otherwise; the format penalty (-0.1) for a malformed reply or any
    piece that is not a turn.

    ## Episode End
    Terminated when solved. Truncated when the turn budget (25) or the action budget (20,
    the reference's ``max_steps``) runs out.

    ## Information
    The protocol keys (``ragen_envs.protocol.INFO_KEYS``).

    ## Arguments
    ``gym.make("ragen/RubiksCube-v0", scramble_depth=1, success_reward=1.0,
    reference_b_turn=False, max_turns=25, max_actions=20, max_actions_per_turn=4, think=True,
    prompt_style="reference", format_penalty=-0.1, max_tokens=96, render_mode=None)``

    ## Version History
    * v0: initial release (protocol 1.0).
    """

    instruction = INSTRUCTION

    def __init__(
        self,
        *,
        scramble_depth: int = 1,
        success_reward: float = 1.0,
        reference_b_turn: bool = False,
        max_turns: int = 25,
        max_actions: int = 20,
        max_actions_per_turn: int = 4,
        max_tokens: int = 96,
        **kwargs,
    ) -> None:
        super().__init__(max_turns=max_turns, max_actions=max_actions, max_actions_per_turn=max_actions_per_turn,
                         max_tokens=max_tokens, **kwargs)
        self.scramble_depth = check_int("scramble_depth", scramble_depth, 0)
        self.success_reward = check_number("success_reward", success_reward)
        self.reference_b_turn = check_bool("reference_b_turn", reference_b_turn)
        self._moves = rc.REFERENCE_MOVES if self.reference_b_turn else rc.MOVES
        self._action_of = {name: i for i, name in enumerate(rc.MOVE_NAMES)}
        self.game: rc.RubiksCube | None = None
        self._history: list[int] = []  # every turn since the solved cube: the scramble, then play

    def _action_names(self) -> Sequence[str]:
        return rc.MOVE_NAMES

    def _legend(self) -> Mapping[str, str] | None:
        return None  # the state names its colours by letter; the reference gives no legend

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        state, turns = rc.scramble(layout_seed, self.scramble_depth, self._moves)
        self.game = rc.RubiksCube(state, self.success_reward, self._moves)
        self._history = list(turns)

    def _run_action(self, name: str) -> ActionOutcome:
        action = self._action_of[name]
        step = self.game.turn(action)
        self._history.append(action)
        return ActionOutcome(step.reward, step.solved, step.solved, True)

    def _state_text(self) -> str:
        return state_text(self.game.state, self.budget.actions_used, self.budget.max_actions)

    def _frame(self) -> np.ndarray:
        from renderers.rubikscube import draw

        return draw(self.game.state)

    def _plan(self) -> list[int]:
        """The expert's plan from here: exact with the real turns; with the reference's B
        turns, the shortest of at most 4 turns, else every turn so far undone."""
        if not self.reference_b_turn:
            return rc.solve(self.game.state)
        plan = rc.solve_by_search(self.game.state, self._moves, max_depth=4)
        if plan is None:
            plan = [a ^ 1 for a in reversed(self._history)]  # U <-> U', ...: each turn undone
        return plan

    def expert_actions(self) -> list[str]:
        n = min(self.budget.max_actions_per_turn, self.budget.actions_left)
        plan = self._plan()
        if not plan:  # the scramble undid itself: a turn away and back
            plan = [0, 1]
        return [rc.MOVE_NAMES[a] for a in plan[:n]]
