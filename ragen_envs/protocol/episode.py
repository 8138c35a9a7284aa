"""The one episode record: produced by the env loop, read by eval, trainer, reports, viewer.

An :class:`Episode` holds what the model saw and said each turn, and what the environment
answered. :func:`chat_messages` turns observations and replies into chat messages for any
chat template (``docs/protocol.md`` §7).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from .prompt import SYSTEM_PROMPT

__all__ = ["Turn", "Episode", "chat_messages", "history_reply"]


def history_reply(response: str, info: dict[str, Any], think: bool = True) -> str:
    """The reply as the reference writes it back into the history.

    A reply that matched the pattern is rewritten as ``<think>{think}</think><answer>{answer}
    </answer>`` (text outside the first pair dropped); an unmatched reply stays raw.
    """
    if not info.get("matched"):
        return response
    answer = f"<answer>{info['answer']}</answer>"
    return f"<think>{info['think']}</think>{answer}" if think else answer


def chat_messages(
    observations: Sequence[str],
    responses: Sequence[str],
    system_prompt: str = SYSTEM_PROMPT,
) -> list[dict[str, str]]:
    """Chat messages ``[system, user(obs_0), assistant(resp_0), user(obs_1), ...]``.

    ``observations`` has as many entries as ``responses`` (the prompt for the next reply) or
    one more (the final observation is appended as a last user message).
    """
    if not len(responses) <= len(observations) <= len(responses) + 1:
        raise ValueError(
            f"need len(responses) <= len(observations) <= len(responses) + 1, "
            f"got {len(observations)} observations and {len(responses)} responses"
        )
    messages = [{"role": "system", "content": system_prompt}]
    for i, obs in enumerate(observations):
        messages.append({"role": "user", "content": obs})
        if i < len(responses):
            messages.append({"role": "assistant", "content": responses[i]})
    return messages


@dataclass
class Turn:
    """One model reply and the environment's answer to it."""

    observation: str  # the user message the model answered
    response: str  # the raw reply
    reward: float  # game reward + format penalty (the env's step reward)
    info: dict[str, Any]  # the env's step info

    @property
    def game_reward(self) -> float:
        return float(self.info.get("game_reward", self.reward))

    @property
    def format_penalty(self) -> float:
        return float(self.info.get("format_penalty", 0.0))


@dataclass
class Episode:
    """A whole episode, JSON-serialisable with :meth:`to_dict` / :meth:`from_dict`."""

    env_id: str
    seed: int
    noise_seed: int | None = None
    system_prompt: str = SYSTEM_PROMPT
    think: bool = True
    turns: list[Turn] = field(default_factory=list)
    final_observation: str = ""
    terminated: bool = False
    truncated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        """The game ended in its success state within the budgets."""
        return bool(self.terminated and self.turns and self.turns[-1].info.get("success"))

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def num_actions(self) -> int:
        return sum(int(t.info.get("n_executed", 0)) for t in self.turns)

    def messages(self, reformat: bool = True, include_final: bool = False) -> list[dict[str, str]]:
        """The chat history; ``reformat`` rewrites replies as the reference does."""
        replies = [history_reply(t.response, t.info, self.think) if reformat else t.response for t in self.turns]
        observations = [t.observation for t in self.turns]
        if include_final and self.final_observation:
            observations.append(self.final_observation)
        return chat_messages(observations, replies, self.system_prompt)

    @property
    def actions(self) -> list[str]:
        """The names of the executed actions of every turn, in order."""
        return [a for t in self.turns for a in t.info.get("actions", [])]

    def outcome(self) -> dict[str, Any]:
        """The episode's outcome: ``success``, ``return`` (Σ turn rewards), ``num_turns`` and
        ``actions`` (the executed action names, in order)."""
        return {"success": self.success, "return": self.total_reward, "num_turns": len(self.turns),
                "actions": self.actions}

    def to_dict(self) -> dict[str, Any]:
        """The record of one ``episodes.jsonl`` line: the :meth:`outcome` keys first (so
        ``jq 'select(.success)'`` works on the file), then the fields."""
        return {**self.outcome(), **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Episode":
        """The inverse of :meth:`to_dict`; the outcome keys are derived, so they are dropped
        (records written before they existed load the same)."""
        data = {k: v for k, v in data.items() if k not in OUTCOME_KEYS}
        data["turns"] = [Turn(**t) for t in data.get("turns", [])]
        return cls(**data)


OUTCOME_KEYS = ("success", "return", "num_turns", "actions")
