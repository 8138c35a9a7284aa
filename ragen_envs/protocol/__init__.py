"""The text protocol: parsing, prompt text, budgets, format penalty, episode records.

Knows no game. Specified in ``docs/protocol.md`` (version :data:`PROTOCOL_VERSION`).
"""

from .episode import Episode, Turn, chat_messages
from .info import INFO_KEYS, RESET_INFO_KEYS
from .jsonsafe import json_safe, safe_text
from .parsing import ACTION_SEP, ParsedAnswer, format_answer, parse_answer
from .prompt import (
    PROMPT_STYLES,
    SYSTEM_PROMPT,
    format_prompt,
    instruction_prefix,
    reward_message,
    turn_block,
)
from .turn import FORMAT_PENALTY, ActionOutcome, EpisodeBudget, TurnResult, play_turn

PROTOCOL_VERSION = "1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "ACTION_SEP",
    "FORMAT_PENALTY",
    "INFO_KEYS",
    "RESET_INFO_KEYS",
    "PROMPT_STYLES",
    "SYSTEM_PROMPT",
    "ActionOutcome",
    "Episode",
    "EpisodeBudget",
    "ParsedAnswer",
    "Turn",
    "TurnResult",
    "chat_messages",
    "format_answer",
    "format_prompt",
    "instruction_prefix",
    "json_safe",
    "parse_answer",
    "play_turn",
    "reward_message",
    "safe_text",
    "turn_block",
]
