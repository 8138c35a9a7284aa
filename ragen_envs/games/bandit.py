"""Two-armed bandit: a low-risk arm with a fixed payout and a high-risk Bernoulli arm.

Pure mechanics (no text). The arm order is drawn once per episode from the layout generator;
the high arm's payout is drawn from the noise generator at each pull, in the reference's
order: one ``random()`` draw for the order, then one per pull of the high arm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BanditPull", "TwoArmedBandit"]


@dataclass(frozen=True)
class BanditPull:
    """The result of one pull."""

    arm: int  # 0-based action index that was pulled
    high_risk: bool  # the pulled arm is the high-risk arm
    reward: float


class TwoArmedBandit:
    """Two arms, one low-risk (always ``low_payout``), one high-risk.

    The high-risk arm pays ``high_payout`` with probability ``high_prob`` and ``high_fail``
    otherwise. Expected values: low = ``low_payout``, high = ``high_prob * high_payout +
    (1 - high_prob) * high_fail``.
    """

    def __init__(
        self,
        low_payout: float = 0.15,
        high_payout: float = 1.0,
        high_prob: float = 0.25,
        high_fail: float = 0.0,
    ) -> None:
        if not 0.0 <= high_prob <= 1.0:
            raise ValueError(f"high_prob must be in [0, 1], got {high_prob}")
        self.low_payout = low_payout
        self.high_payout = high_payout
        self.high_prob = high_prob
        self.high_fail = high_fail
        self.high_arm = 1
        self.last_pull: BanditPull | None = None

    @property
    def low_arm(self) -> int:
        return 1 - self.high_arm

    def reset(self, layout_rng: np.random.Generator) -> None:
        """Draw the arm order: with probability 1/2 the low arm is action 0."""
        self.high_arm = 1 if layout_rng.random() < 0.5 else 0
        self.last_pull = None

    def pull(self, arm: int, noise_rng: np.random.Generator) -> BanditPull:
        """Pull ``arm`` (0 or 1); the high arm draws one ``random()`` from ``noise_rng``."""
        if arm not in (0, 1):
            raise ValueError(f"arm must be 0 or 1, got {arm!r}")
        if arm == self.high_arm:
            reward = self.high_payout if noise_rng.random() < self.high_prob else self.high_fail
        else:
            reward = self.low_payout
        self.last_pull = BanditPull(arm, arm == self.high_arm, reward)
        return self.last_pull

    def expected_payouts(self) -> tuple[float, float]:
        """Expected reward of action 0 and action 1."""
        high = self.high_prob * self.high_payout + (1.0 - self.high_prob) * self.high_fail
        return (high, self.low_payout) if self.high_arm == 0 else (self.low_payout, high)
