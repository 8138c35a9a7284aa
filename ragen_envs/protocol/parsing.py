"""Answer parsing: turn a model's reply into actions.

The rules are the reference implementation's (``docs/protocol.md`` §3):

1. Find the *first* match of ``<think>(.*?)</think>\\s*<answer>(.*?)</answer>`` (dot matches
   newlines). With ``think=False`` the pattern is ``<answer>(.*?)</answer>``.
2. Remove stray tag strings from both parts and strip them.
3. Split the answer on ``||``, strip every piece, drop empty pieces, keep at most
   ``max_actions`` pieces (extra pieces are dropped silently: no penalty).
4. A piece is a valid action when it equals an action name ignoring case. With
   ``action_names=None`` (free-text envs such as WebShop) every piece is valid.
5. ``format_ok`` is False when there was no match, no piece, or any kept piece is invalid;
   the environment charges the format penalty exactly when ``format_ok`` is False.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

__all__ = ["ParsedAnswer", "parse_answer", "format_answer", "ACTION_SEP"]

ACTION_SEP = "||"

_THINK_ANSWER = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_ANSWER_ONLY = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# Tag strings the reference deletes from the captured parts (a nested or repeated tag must
# not leak into an action name).
_STRAY_TAGS = ("<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class ParsedAnswer:
    """What :func:`parse_answer` found in one reply.

    Attributes:
        matched: the think/answer pattern was found.
        think: the reasoning text ("" when think is off or nothing matched).
        answer: the answer text as the reference stores it (kept pieces joined by " || "
            when pieces were dropped by ``max_actions``).
        pieces: the kept answer pieces, in order (valid and invalid).
        actions: the valid pieces, as the canonical action names, in order.
        invalid: the kept pieces that are not action names.
        format_ok: matched, at least one piece, and no invalid piece.
    """

    matched: bool
    think: str
    answer: str
    pieces: tuple[str, ...]
    actions: tuple[str, ...]
    invalid: tuple[str, ...]
    format_ok: bool

    def reformatted(self, think: bool = True) -> str:
        """The reply as the reference writes it back into the history.

        ``<think>{think}</think><answer>{answer}</answer>`` (or only the answer part when
        ``think`` is False). Meaningful only when ``matched``.
        """
        answer = f"<answer>{self.answer}</answer>"
        return f"<think>{self.think}</think>{answer}" if think else answer


def _clean(part: str) -> str:
    for tag in _STRAY_TAGS:
        part = part.replace(tag, "")
    return part.strip()


def parse_answer(
    text: str,
    action_names: Sequence[str] | None,
    think: bool = True,
    max_actions: int = 5,
) -> ParsedAnswer:
    """Parse one reply into actions with the reference rules (see module docstring).

    Args:
        text: the model's reply, including any forced prefix such as ``<think>``.
        action_names: the env's action names (matched case-insensitively), or None to accept
            every non-empty piece as an action.
        think: whether a ``<think>`` block is required before ``<answer>``.
        max_actions: the most pieces kept per reply (``>= 1``).

    Never raises on any string input.

    >>> parse_answer("<think>go</think><answer>up || Left || jump</answer>", ["Up", "Left"]).actions
    ('Up', 'Left')
    """
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    match = (_THINK_ANSWER if think else _ANSWER_ONLY).search(text)
    if match is None:
        return ParsedAnswer(False, "", "", (), (), (), False)
    if think:
        think_text, answer_text = _clean(match.group(1)), _clean(match.group(2))
    else:
        think_text, answer_text = "", _clean(match.group(1))

    all_pieces = [p.strip() for p in answer_text.split(ACTION_SEP)]
    all_pieces = [p for p in all_pieces if p]
    pieces = all_pieces[:max_actions]
    if len(all_pieces) > max_actions:
        answer_text = f" {ACTION_SEP} ".join(pieces)

    if action_names is None:
        actions, invalid = tuple(pieces), ()
    else:
        lookup = {name.lower(): name for name in action_names}
        actions = tuple(lookup[p.lower()] for p in pieces if p.lower() in lookup)
        invalid = tuple(p for p in pieces if p.lower() not in lookup)
    format_ok = bool(pieces) and not invalid
    return ParsedAnswer(True, think_text, answer_text, tuple(pieces), actions, invalid, format_ok)


def format_answer(actions: Sequence[str], think_text: str = "", think: bool = True) -> str:
    """A well-formed reply: ``<think>{think_text}</think><answer>A || B</answer>``.

    ``parse_answer(format_answer(a), names)`` returns ``a`` for any action names ``a``.
    """
    answer = f"<answer>{f' {ACTION_SEP} '.join(actions)}</answer>"
    return f"<think>{think_text}</think>{answer}" if think else answer
