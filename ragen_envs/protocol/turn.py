"""One turn: run the parsed actions against a game under the episode budgets.

The protocol never sees a game. An environment hands :func:`play_turn` a callback that runs
one named action and reports a :class:`ActionOutcome`; this module owns the order of
execution, the budgets, the format penalty and the per-turn counters
(``docs/protocol.md`` §4–§6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .parsing import ParsedAnswer

__all__ = ["FORMAT_PENALTY", "ActionOutcome", "TurnResult", "EpisodeBudget", "play_turn"]

FORMAT_PENALTY = -0.1


@dataclass(frozen=True, init=False)
class ActionOutcome:
    """What one executed action did in the game."""

    reward: float
    done: bool  # the game ended (solved, fell in a hole, arm pulled, ...)
    success: bool  # the game is in its success state
    effective: bool  # the action changed the game state

    # frozen dataclass, own __init__: writing __dict__ directly costs half of the generated
    # per-field object.__setattr__, and this is built on every turn (the hot path).
    def __init__(self, reward: float, done: bool, success: bool, effective: bool) -> None:
        d = self.__dict__
        d["reward"], d["done"], d["success"], d["effective"] = reward, done, success, effective


@dataclass
class EpisodeBudget:
    """Turn and action budgets of one episode.

    Attributes:
        max_turns: the most turns (model replies) per episode.
        max_actions: the most executed actions per episode.
        max_actions_per_turn: the most actions kept from one reply.
    """

    max_turns: int = 5
    max_actions: int = 10
    max_actions_per_turn: int = 5
    turns_used: int = 0
    actions_used: int = 0

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_actions", "max_actions_per_turn"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    @property
    def actions_left(self) -> int:
        return self.max_actions - self.actions_used

    @property
    def turns_left(self) -> int:
        return self.max_turns - self.turns_used

    @property
    def exhausted(self) -> bool:
        """No turn or no action left."""
        return self.turns_left <= 0 or self.actions_left <= 0

    def reset(self) -> None:
        self.turns_used = 0
        self.actions_used = 0


@dataclass(frozen=True, init=False)
class TurnResult:
    """The outcome of one turn.

    ``game_reward`` is the Python sum of the executed actions' rewards starting from the
    integer 0 (so it is ``0`` when nothing ran, as the reference shows it).
    """

    parsed: ParsedAnswer
    executed: tuple[str, ...]
    game_reward: float | int
    format_penalty: float
    n_effective: int
    last_effective: bool
    game_over: bool
    success: bool
    outcomes: tuple[ActionOutcome, ...] = field(default=())

    # frozen dataclass, own __init__: writing __dict__ directly costs half of the generated
    # per-field object.__setattr__, and this is built on every turn (the hot path).
    def __init__(self, parsed: ParsedAnswer, executed: tuple[str, ...], game_reward: float | int,
                 format_penalty: float, n_effective: int, last_effective: bool, game_over: bool, success: bool,
                 outcomes: tuple[ActionOutcome, ...] = ()) -> None:
        d = self.__dict__
        d["parsed"], d["executed"], d["game_reward"], d["format_penalty"] = parsed, executed, game_reward, format_penalty
        d["n_effective"], d["last_effective"], d["game_over"] = n_effective, last_effective, game_over
        d["success"], d["outcomes"] = success, outcomes

    @property
    def reward(self) -> float:
        """Game reward plus format penalty: the step reward the environment returns."""
        return float(self.game_reward) + self.format_penalty


def play_turn(
    parsed: ParsedAnswer,
    budget: EpisodeBudget,
    run_action: Callable[[str], ActionOutcome],
    success_before: bool = False,
    format_penalty: float = FORMAT_PENALTY,
) -> TurnResult:
    """Run the valid actions of ``parsed`` in order and charge the budgets.

    Actions run until the game ends or the episode's action budget is spent; the rest are
    dropped (no penalty). The format penalty (``format_penalty``, default -0.1) is charged once when
    ``parsed.format_ok`` is False, whether or not valid actions ran beside the bad ones.
    The turn counts against ``budget.max_turns`` in every case.
    """
    executed: list[str] = []
    outcomes: list[ActionOutcome] = []
    game_reward: float | int = 0
    game_over, success = False, success_before
    n_effective, last_effective = 0, False
    for name in parsed.actions:
        if budget.max_actions - budget.actions_used <= 0:  # budget.actions_left, inlined (hot path)
            break
        outcome = run_action(name)
        budget.actions_used += 1
        executed.append(name)
        outcomes.append(outcome)
        game_reward += outcome.reward
        n_effective += outcome.effective
        last_effective = outcome.effective
        success = outcome.success
        if outcome.done:
            game_over = True
            break
    budget.turns_used += 1
    # positional (keywords cost more on this call, made on every turn): parsed, executed,
    # game_reward, format_penalty, n_effective, last_effective, game_over, success, outcomes
    return TurnResult(parsed, tuple(executed), game_reward, 0.0 if parsed.format_ok else float(format_penalty),
                      n_effective, last_effective, game_over, success, tuple(outcomes))
