"""Prompt text: the exact strings the model reads (``docs/protocol.md`` §2).

The default style ``"reference"`` reproduces the reference implementation's layout byte for
byte (system message, instruction prefix, ``Turn k:`` / ``State:`` blocks and ``Reward:``
messages). ``"minimal"`` drops the per-turn format and length reminder to save context.
"""

from __future__ import annotations

from typing import Mapping, Sequence

__all__ = [
    "SYSTEM_PROMPT",
    "PROMPT_STYLES",
    "format_prompt",
    "length_prompt",
    "instruction_prefix",
    "turn_block",
    "reward_message",
    "format_turn_reward",
]

SYSTEM_PROMPT = "You're a helpful assistant. "
PROMPT_STYLES = ("reference", "minimal")


def format_prompt(think: bool = True) -> str:
    """The output-format reminder repeated in every state block."""
    if think:
        return "<think> [Your thoughts] </think> <answer> [your answer] </answer>"
    return "<answer> [your answer] </answer>"


def length_prompt(max_tokens: int) -> str:
    """The length hint (only a hint: the real cap is the generator's)."""
    return f"Max response length: {max_tokens} words (tokens)."


def instruction_prefix(
    instruction: str,
    legend: Mapping[str, str] | None,
    action_names: Sequence[str] | None,
    max_actions: int,
) -> str:
    """The start of the first user message: instruction, symbol legend, action list.

    ``instruction`` + ``"\\nThe meaning of each symbol in the state is:\\n"`` + ``"sym: meaning"``
    joined by ``", "`` (when a legend is given) + ``"\\nYour available actions are:\\n"`` + the
    names joined by ``", "`` + ``"\\nYou can make up to N actions, separated by the action
    separator \\" || \\"\\n"`` (when action names are given).
    """
    text = instruction
    if legend:
        text += "\nThe meaning of each symbol in the state is:\n"
        text += ", ".join(f"{sym}: {meaning}" for sym, meaning in legend.items())
    if action_names:
        text += "\nYour available actions are:\n" + ", ".join(action_names)
        text += f'\nYou can make up to {max_actions} actions, separated by the action separator " || "\n'
    return text


def turn_block(
    turn: int,
    state: str,
    actions_left: int,
    think: bool = True,
    max_tokens: int = 100,
    style: str = "reference",
) -> str:
    """``"\\nTurn {k}:\\n"`` followed by the state block of that turn."""
    end = _block_end(think, max_tokens, style)
    return f"\nTurn {turn}:\nState:\n{state}\nYou have {actions_left} actions left.{end}"


# The constant end of a state block per (think, max_tokens, style): built once, not per turn.
_BLOCK_ENDS: dict[tuple[bool, int, str], str] = {}


def _block_end(think: bool, max_tokens: int, style: str) -> str:
    key = (think, max_tokens, style)
    cacheable = type(think) is bool and type(max_tokens) is int and type(style) is str
    end = _BLOCK_ENDS.get(key) if cacheable else None
    if end is None:
        if style == "reference":
            end = (
                f" Always output: {format_prompt(think)} with no extra text. "
                f"Strictly follow this format. {length_prompt(max_tokens)}\n"
            )
        elif style == "minimal":
            end = "\n"
        else:
            raise ValueError(f"unknown prompt style {style!r}; choose one of {PROMPT_STYLES}")
        if cacheable and len(_BLOCK_ENDS) < 256:
            _BLOCK_ENDS[key] = end
    return end


def format_turn_reward(reward: float | int) -> str:
    """The reward as the model sees it: Python's ``str`` of the summed game rewards.

    The sum starts from the integer 0, so a turn where no action ran shows ``0`` and a
    FrozenLake step shows ``0.0``; float sums keep their binary noise
    (``-0.30000000000000004``), as in the reference.
    """
    return str(reward)


def reward_message(reward: float | int) -> str:
    """The user message that reports a turn's game reward: ``"Reward:\\n{r}\\n"``."""
    return f"Reward:\n{reward!s}\n"  # !s is format_turn_reward's str(), without its call
