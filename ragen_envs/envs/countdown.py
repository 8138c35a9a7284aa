"""Countdown (numbers and a target, one answer) as a one-turn text environment."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..games import countdown as cd
from ..protocol import ActionOutcome
from .checks import check_bool, check_number
from .base import TextGameEnv

__all__ = ["CountdownEnv"]

# The reference's instruction (config/envs.yaml, tag Countdown), verbatim.
INSTRUCTION = (
    "You are solving the Countdown puzzle. You should use the num list to create an equation that equals "
    "the target. Example answer format: <think> To find an equation using [3, 5, 2] to get 4. Let's check "
    "2 + 5 = 7, 7 - 3 = 4. So the answer is 2 + 5 - 3 = 4. </think><answer>2 + 5 - 3</answer>"
)


def _shown(x: float) -> str:
    """A reward as the reference prints it: ``1`` and ``0`` for whole numbers, ``0.1`` else."""
    return str(int(x)) if float(x).is_integer() else str(x)


class CountdownEnv(TextGameEnv):
    """Countdown: combine the given numbers with + - * / into an expression equal to the target.

    ## Description
    One turn, one answer, as in the reference (``max_turn 1``, one action). The reference
    reads its instances from a downloaded dataset; here they are generated from the seed
    with the reference's guarantee (the target is reachable by adding and subtracting all
    the numbers): 3 or 4 numbers in 1..99, a target in 1..99
    (``ragen_envs.games.countdown.generate_instance``). Answers are evaluated exactly
    (fractions) by a bounded parser, never by ``eval``.

    ## Action Space
    Any string (`Text`). ``<think>...</think><answer>44 + 19 - 35</answer>``: the answer is
    the expression (no ``= target``: every number in the answer counts as a use, as in the
    reference). Allowed: integers, ``+ - * /``, unary minus, parentheses.

    ## Observation Space
    `Text`: the reference prompt; the state is ``Target: {target}, nums: [a, b, c]``, and
    after the answer ``Your answer get {reward} points.`` (the ``ansi`` render).

    ## Starting State
    The generated instance of ``reset(seed=...)``.

    ## Rewards
    The reference's levels: ``score`` (1) when the expression uses the numbers as required
    and equals the target; ``format_score`` (0.1) when it uses them but is wrong or does not
    evaluate; 0 when the numbers are not the given ones. ``use_all_numbers=True`` (the
    reference) requires each number exactly once; False allows each at most once. Plus the
    format penalty (-0.1) when the reply has no think/answer match or an empty answer.

    ## Episode End
    Terminated after the one turn (``turn_limit_terminates=True``). Success = the answer is
    correct.

    ## Information
    The protocol keys (``ragen_envs.protocol.INFO_KEYS``) plus ``target`` (int),
    ``numbers`` (list[int]), ``numbers_ok`` (bool: the answer used the numbers as required)
    and ``correct`` (bool: it equals the target).

    ## Arguments
    ``gym.make("ragen/Countdown-v0", score=1.0, format_score=0.1, use_all_numbers=True,
    max_turns=1, max_actions=1, max_actions_per_turn=1, think=True,
    prompt_style="reference", format_penalty=-0.1, max_tokens=100,
    turn_limit_terminates=True, render_mode=None)``

    ## Version History
    * v0: initial release (protocol 1.0).
    """

    instruction = INSTRUCTION

    def __init__(
        self,
        *,
        score: float = 1.0,
        format_score: float = 0.1,
        use_all_numbers: bool = True,
        max_turns: int = 1,
        max_actions: int = 1,
        max_actions_per_turn: int = 1,
        turn_limit_terminates: bool = True,
        **kwargs,
    ) -> None:
        score = check_number("score", score)
        format_score = check_number("format_score", format_score)
        use_all_numbers = check_bool("use_all_numbers", use_all_numbers)
        super().__init__(
            max_turns=max_turns,
            max_actions=max_actions,
            max_actions_per_turn=max_actions_per_turn,
            turn_limit_terminates=turn_limit_terminates,
            **kwargs,
        )
        self.score = float(score)
        self.format_score = float(format_score)
        self.use_all_numbers = use_all_numbers
        self.instance: cd.CountdownInstance | None = None
        self.answer: str | None = None
        self.answer_reward: float | None = None

    def _action_names(self) -> Sequence[str] | None:
        return None  # the answer is free text: an expression

    def _legend(self) -> Mapping[str, str] | None:
        return None

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        self.instance = cd.generate_instance(layout_seed)
        self.answer = self.answer_reward = None

    def _run_action(self, name: str) -> ActionOutcome:
        reward = cd.score_answer(name, self.instance, score=self.score, format_score=self.format_score,
                                 use_all=self.use_all_numbers)
        self.answer, self.answer_reward = name, reward
        correct = self._correct()
        return ActionOutcome(reward=reward, done=True, success=correct, effective=reward > 0)

    def _correct(self) -> bool:
        if self.answer is None or not cd.numbers_ok(self.answer, self.instance.numbers, self.use_all_numbers):
            return False
        try:
            return cd.evaluate(self.answer) == self.instance.target
        except cd.ExpressionError:
            return False

    def _state_text(self) -> str:
        if self.answer_reward is None:
            return f"Target: {self.instance.target}, nums: {list(self.instance.numbers)}"
        return f"Your answer get {_shown(self.answer_reward)} points."

    def _frame(self) -> np.ndarray:
        from renderers.countdown import draw

        return draw(self.instance.numbers, self.instance.target, self.answer, self._correct())

    def expert_actions(self) -> list[str]:
        return [cd.solve(self.instance.numbers, self.instance.target) or " + ".join(map(str, self.instance.numbers))]

    def random_answer(self, rng: np.random.Generator) -> str:
        """A random expression for the random agent: the numbers in a random order joined by
        random operators (each number once, no parentheses)."""
        order = rng.permutation(len(self.instance.numbers))
        ops = rng.choice(["+", "-", "*", "/"], size=len(order) - 1)
        parts = [str(self.instance.numbers[int(order[0])])]
        for op, k in zip(ops, order[1:]):
            parts += [str(op), str(self.instance.numbers[int(k)])]
        return " ".join(parts)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info["target"] = int(self.instance.target)
        info["numbers"] = [int(n) for n in self.instance.numbers]
        info["numbers_ok"] = self.answer is not None and cd.numbers_ok(self.answer, self.instance.numbers, self.use_all_numbers)
        info["correct"] = self._correct()
        return obs, reward, terminated, truncated, info
