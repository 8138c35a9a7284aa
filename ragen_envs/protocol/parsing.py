"""Answer parsing: turn a model's reply into actions.

The rules are the reference implementation's (``docs/protocol.md`` §3):

1. Find the *first* match of ``<think>(.*?)</think>\\s*<answer>(.*?)</answer>`` (dot matches
   newlines). With ``think=False`` the pattern is ``<answer>(.*?)</answer>``. The match is
   found by a linear scan with ``str.find`` that returns exactly what ``re.search`` with those
   patterns returns (the regex backtracks: cubic time on ``<think></think><answer>``
   repeated); see :func:`_match_think_answer`.
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

_THINK, _END_THINK, _ANSWER, _END_ANSWER = "<think>", "</think>", "<answer>", "</answer>"
_SPACES = re.compile(r"\s*")  # the pattern's \s* (Unicode whitespace), one C-speed run
# Tag strings the reference deletes from the captured parts (a nested or repeated tag must
# not leak into an action name).
_STRAY_TAGS = ("<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True, init=False)
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

    # frozen dataclass, own __init__: writing __dict__ directly costs half of the generated
    # per-field object.__setattr__, and this is built on every turn (the hot path).
    def __init__(self, matched: bool, think: str, answer: str, pieces: tuple[str, ...], actions: tuple[str, ...],
                 invalid: tuple[str, ...], format_ok: bool) -> None:
        d = self.__dict__
        d["matched"], d["think"], d["answer"], d["pieces"] = matched, think, answer, pieces
        d["actions"], d["invalid"], d["format_ok"] = actions, invalid, format_ok

    def reformatted(self, think: bool = True) -> str:
        """The reply as the reference writes it back into the history.

        ``<think>{think}</think><answer>{answer}</answer>`` (or only the answer part when
        ``think`` is False). Meaningful only when ``matched``.
        """
        answer = f"<answer>{self.answer}</answer>"
        return f"<think>{self.think}</think>{answer}" if think else answer


def _match_think_answer(text: str) -> tuple[str, str] | None:
    """``re.search(r"<think>(.*?)</think>\\s*<answer>(.*?)</answer>", text, re.DOTALL)``'s
    two groups, or None, in time linear in ``len(text)``.

    Why this equals the regex: the search tries start positions left to right, and a match
    from a later ``<think>`` implies one from the first (the later one's continuations are a
    subset), so the match starts at the first ``<think>``. The lazy first group ends at the
    first ``</think>`` after it whose whitespace run is followed by ``<answer>`` (a ``\\s*``
    shorter than the whole run cannot meet ``<``) and from which a ``</answer>`` follows;
    such ``</answer>`` exists iff the last ``</answer>`` lies at or after the answer's start,
    which only gets harder for later ``</think>``: so the first ``</think>`` + ``<answer>``
    decides. The lazy second group ends at the first ``</answer>`` after ``<answer>``.
    Every character is looked at O(1) times (whitespace runs after different ``</think>``
    are disjoint).
    """
    # The usual reply, in three partitions (METH_O calls: CPython 3.11's ``find`` and
    # ``startswith`` parse their arguments as a tuple, ~1.5k instructions a call): the first
    # ``<think>``, its first ``</think>``, ``<answer>`` right after it and a ``</answer>`` after
    # that is the match the loop below finds on its first round. Anything else (whitespace
    # between the tags, a ``</think>`` not followed by ``<answer>``, no tag) goes to the loop.
    _, sep, rest = text.partition(_THINK)
    if not sep:
        return None
    think_text, sep, rest = rest.partition(_END_THINK)
    if not sep:
        return None
    if rest[:8] == _ANSWER:  # len(_ANSWER) == 8
        answer_text, sep, _ = rest[8:].partition(_END_ANSWER)
        return (think_text, answer_text) if sep else None
    start = text.find(_THINK)
    last_end = text.rfind(_END_ANSWER)
    if last_end < 0:
        return None
    i = start + len(_THINK)
    while True:
        j = text.find(_END_THINK, i)
        if j < 0:
            return None
        k = j + len(_END_THINK)
        if not text.startswith(_ANSWER, k):  # most replies have no space between the tags
            k = _SPACES.match(text, k).end()
        if text.startswith(_ANSWER, k):
            a = k + len(_ANSWER)
            if a > last_end:
                return None
            return text[start + len(_THINK):j], text[a:text.find(_END_ANSWER, a)]
        i = j + 1


def _match_answer(text: str) -> str | None:
    """``re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)``'s group, or None, in linear
    time: the first ``<answer>`` and the first ``</answer>`` after it (a later ``<answer>``
    has no ``</answer>`` after it when the first has none)."""
    _, sep, rest = text.partition(_ANSWER)
    if not sep:
        return None
    answer_text, sep, _ = rest.partition(_END_ANSWER)
    return answer_text if sep else None


def _clean(part: str) -> str:
    if "<" in part:  # every stray tag starts with "<": most parts skip the six replaces
        for tag in _STRAY_TAGS:
            part = part.replace(tag, "")
    return part.strip()


# {lowercased name: name} per action-name tuple: built once, not on every reply.
_LOOKUPS: dict[tuple[str, ...], dict[str, str]] = {}
_MAX_LOOKUPS = 64


def _lookup(action_names: Sequence[str]) -> dict[str, str]:
    key = action_names if type(action_names) is tuple else tuple(action_names)
    lookup = _LOOKUPS.get(key)
    if lookup is None:
        lookup = {name.lower(): name for name in key}
        if len(_LOOKUPS) >= _MAX_LOOKUPS:
            _LOOKUPS.clear()
        _LOOKUPS[key] = lookup
    return lookup


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

    Never raises on any string input; runs in time linear in ``len(text)``. A ``text`` that
    is not a ``str`` raises :class:`TypeError` (a list holding a reply is not a reply).

    >>> parse_answer("<think>go</think><answer>up || Left || jump</answer>", ["Up", "Left"]).actions
    ('Up', 'Left')
    """
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    if not isinstance(text, str):
        raise TypeError(f"a reply must be a str, got {type(text).__name__}")
    if think:
        match = _match_think_answer(text)
        if match is None:
            return ParsedAnswer(False, "", "", (), (), (), False)
        think_text, answer_text = _clean(match[0]), match[1]
    else:
        answer_text = _match_answer(text)
        if answer_text is None:
            return ParsedAnswer(False, "", "", (), (), (), False)
        think_text = ""
    answer_text = _clean(answer_text)

    if ACTION_SEP in answer_text:
        all_pieces = [p for p in (piece.strip() for piece in answer_text.split(ACTION_SEP)) if p]
        pieces = tuple(all_pieces[:max_actions])
        if len(all_pieces) > max_actions:
            answer_text = f" {ACTION_SEP} ".join(pieces)
    else:  # the usual one-action answer: already stripped, and max_actions >= 1 keeps it
        pieces = (answer_text,) if answer_text else ()

    if action_names is None:
        return ParsedAnswer(True, think_text, answer_text, pieces, pieces, (), bool(pieces))
    lookup = _lookup(action_names)
    actions, invalid = [], []
    for piece in pieces:
        name = lookup.get(piece.lower())
        if name is None:
            invalid.append(piece)
        else:
            actions.append(name)
    format_ok = bool(pieces) and not invalid
    return ParsedAnswer(True, think_text, answer_text, pieces, tuple(actions), tuple(invalid), format_ok)


def format_answer(actions: Sequence[str], think_text: str = "", think: bool = True) -> str:
    """A well-formed reply: ``<think>{think_text}</think><answer>A || B</answer>``.

    ``parse_answer(format_answer(a), names)`` returns ``a`` for any action names ``a``.
    """
    answer = f"<answer>{f' {ACTION_SEP} '.join(actions)}</answer>"
    return f"<think>{think_text}</think>{answer}" if think else answer
