"""Two-armed bandit as a one-turn text environment."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from gymnasium.utils import seeding

from ..games.bandit import TwoArmedBandit
from ..protocol import ActionOutcome
from .base import MAX_NAME_LENGTH, TextGameEnv
from .checks import check_number
from .space import UnicodeText

__all__ = ["BanditEnv", "BANDIT_PROMPT"]

# The reference's game description, shown as the state (three lines end with a space).
BANDIT_PROMPT = (
    "You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull. \n"
    "Game Rules: \n"
    "1. There are 2 arms, named {a} and {b}\n"
    "2. Each arm has its own reward distribution, related to their names. \n"
    "3. Analyze the symbolic meaning of each arm's name to guess how their reward distribution might behave.\n"
    "4. Based on the symbolic meaning of their names, which arm do you think is more likely to give higher "
    "rewards on average? Choose between {a} and {b}, and output like <answer> {a} </answer> or <answer> {b} </answer>.\n"
)


class BanditEnv(TextGameEnv):
    """Two-armed bandit: link the arms' names to their reward distributions.

    ## Description
    One turn, one pull. The low-risk arm always pays ``low_payout`` (0.15, the paper's value;
    the reference code used 0.1); the high-risk arm pays ``high_payout`` with probability
    ``high_prob`` (Bernoulli(0.25) by default, expected 0.25). Which arm is action 1 is drawn
    per episode. The names are the only clue: "Dragon" (high) vs "Phoenix" (low) for
    ``ragen/Bandit-v0``, "Librarian" (high) vs "Trader" (low) for ``ragen/BanditRev-v0``.

    ## Action Space
    Any string (`Text`). The reply ``<think>...</think><answer>Dragon</answer>`` names one arm
    (case-insensitive); with ``think=False`` only ``<answer>Dragon</answer>``.

    ## Observation Space
    `UnicodeText(65536)`: the reference prompt (``Turn 1:`` + state block holding the game description),
    then ``"Reward:\\n{r}\\n"``.

    ## Starting State
    The arm order is the first ``random()`` draw of ``reset(seed=...)``'s generator.

    ## Rewards
    The arm's payout, plus the format penalty (-0.1) for a malformed reply or unknown arm.

    ## Episode End
    Terminated after the one turn (``turn_limit_terminates=True``: the single answer is the
    decision; a malformed answer forfeits the pull). Success = the pulled arm has the higher
    expected payout, whatever the draw paid.

    ## Information
    The protocol keys (``ragen_envs.protocol.INFO_KEYS``) plus ``arm`` (str, the pulled arm
    or "") and ``high_risk`` (bool, the pulled arm is the high-risk arm).

    ## Arguments
    ``gym.make("ragen/Bandit-v0", low_name="Phoenix", high_name="Dragon", low_payout=0.15,
    high_payout=1.0, high_prob=0.25, max_turns=1, max_actions=1, max_actions_per_turn=1,
    think=True, prompt_style="reference", format_penalty=-0.1, max_tokens=100,
    turn_limit_terminates=True, render_mode=None)``

    ## Version History
    * v0: initial release (protocol 1.0).
    """

    def __init__(
        self,
        *,
        low_name: str = "Phoenix",
        high_name: str = "Dragon",
        low_payout: float = 0.15,
        high_payout: float = 1.0,
        high_prob: float = 0.25,
        max_turns: int = 1,
        max_actions: int = 1,
        max_actions_per_turn: int = 1,
        turn_limit_terminates: bool = True,
        **kwargs,
    ) -> None:
        for label, name in (("low_name", low_name), ("high_name", high_name)):
            if (not isinstance(name, str) or not name.strip() or "||" in name or len(name.strip()) > MAX_NAME_LENGTH
                    or not UnicodeText(MAX_NAME_LENGTH).contains(name.strip())):
                raise ValueError(f"{label} must be a non-empty arm name without '||', at most {MAX_NAME_LENGTH} "
                                 f"characters, no lone surrogates, got {name!r}")
        if low_name.strip().lower() == high_name.strip().lower():
            raise ValueError(f"the two arm names must differ (ignoring case), got {low_name!r} twice")
        super().__init__(
            max_turns=max_turns,
            max_actions=max_actions,
            max_actions_per_turn=max_actions_per_turn,
            turn_limit_terminates=turn_limit_terminates,
            **kwargs,
        )
        self.low_name, self.high_name = low_name.strip(), high_name.strip()
        self.game = TwoArmedBandit(check_number("low_payout", low_payout), check_number("high_payout", high_payout),
                                   check_number("high_prob", high_prob, 0.0, 1.0))
        self._names: tuple[str, str] = (self.low_name, self.high_name)

    def _action_names(self) -> Sequence[str]:
        return self._names

    def prompt_action_names(self) -> Sequence[str]:
        return ()  # the reference lists no actions: the state describes the arms

    def _legend(self) -> Mapping[str, str] | None:
        return None

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        # The reference draws the order and then the payouts from one generator seeded with
        # the seed. A fresh generator for the order plus one skipped draw on the noise stream
        # gives exactly that when the noise stream is the seed's own, and keeps the layout
        # fixed when a separate noise_seed is given.
        self.game.reset(seeding.np_random(layout_seed)[0])
        noise_rng.random()
        high = self.game.high_arm
        self._names = (self.high_name, self.low_name) if high == 0 else (self.low_name, self.high_name)

    def _best_arm(self) -> int:
        expected = self.game.expected_payouts()
        if expected[0] == expected[1]:
            return self.game.high_arm
        return int(np.argmax(expected))

    def _run_action(self, name: str) -> ActionOutcome:
        arm = self._names.index(name)
        pull = self.game.pull(arm, self._noise_rng)
        return ActionOutcome(reward=pull.reward, done=True, success=arm == self._best_arm(), effective=True)

    def _frame(self) -> np.ndarray:
        from renderers.bandit import draw

        pull = self.game.last_pull
        return draw(tuple(self.action_names()), None if pull is None else (pull.arm, pull.reward))

    def _state_text(self) -> str:
        pull = self.game.last_pull
        if pull is None:
            return BANDIT_PROMPT.format(a=self._names[0], b=self._names[1])
        return f"{self._names[pull.arm]}: {pull.reward} points"

    def expert_actions(self) -> list[str]:
        return [self._names[self._best_arm()]]

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        pull = self.game.last_pull
        info["arm"] = self._names[pull.arm] if pull else ""
        info["high_risk"] = bool(pull and pull.high_risk)
        return obs, reward, terminated, truncated, info
