"""The parsers as they were before the linear-time rewrite (commit 7918232), kept as oracles:
``tests/test_hostile.py`` checks the new scanners equal them, and
``benchmarks/bench_hostile_parse.py`` times them side by side."""

from __future__ import annotations

import re
from typing import Sequence

from ragen_envs.protocol import ParsedAnswer
from ragen_envs.protocol import reasoning as R
from ragen_envs.protocol.parsing import ACTION_SEP, _STRAY_TAGS

__all__ = ["old_parse_answer", "old_parse_action", "old_reasoning_report"]

_OLD_THINK_ANSWER = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_OLD_ANSWER_ONLY = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OLD_ACTION = re.compile(r"(.+)\[(.+)\]")


def _old_clean(part: str) -> str:
    for tag in _STRAY_TAGS:
        part = part.replace(tag, "")
    return part.strip()


def old_parse_answer(text: str, action_names: Sequence[str] | None, think: bool = True,
                     max_actions: int = 5) -> ParsedAnswer:
    """The regex parser before the linear rewrite (commit 7918232), verbatim in behaviour."""
    match = (_OLD_THINK_ANSWER if think else _OLD_ANSWER_ONLY).search(text)
    if match is None:
        return ParsedAnswer(False, "", "", (), (), (), False)
    if think:
        think_text, answer_text = match.groups()
        think_text = _old_clean(think_text)
    else:
        think_text, answer_text = "", match.group(1)
    answer_text = _old_clean(answer_text)
    all_pieces = [p for p in (piece.strip() for piece in answer_text.split(ACTION_SEP)) if p]
    pieces = tuple(all_pieces[:max_actions])
    if len(all_pieces) > max_actions:
        answer_text = f" {ACTION_SEP} ".join(pieces)
    if action_names is None:
        return ParsedAnswer(True, think_text, answer_text, pieces, pieces, (), bool(pieces))
    lookup = {name.lower(): name for name in action_names}
    actions, invalid = [], []
    for piece in pieces:
        name = lookup.get(piece.lower())
        if name is None:
            invalid.append(piece)
        else:
            actions.append(name)
    return ParsedAnswer(True, think_text, answer_text, pieces, tuple(actions), tuple(invalid),
                        bool(pieces) and not invalid)


def old_parse_action(action: str) -> tuple[str, str | None]:
    m = _OLD_ACTION.match(action)
    return (action, None) if m is None else (m.group(1), m.group(2))


def old_reasoning_report(think, answer_actions, action_names, state, legend) -> dict:
    """``protocol.reasoning.reasoning_report`` before clauses were memoised (commit 7918232)."""
    clauses = [(c, R._clause_words(c)) for c in R.split_clauses(think)]
    stated = []
    if action_names:
        pattern = R._names_pattern(tuple(action_names))
        with_verb = [c for c, words in clauses if R.ACTION_VERBS.intersection(words)]
        chosen = with_verb or [c for c, words in clauses if not any(w in R._NOUN_FORMS for w in words)]
        for clause in chosen:
            stated += R._mentions(clause, pattern)
    agree = bool(stated) and [a.lower() for a in stated] == [a.lower() for a in answer_actions]
    found = []
    for _, words in clauses:
        if R.ACTION_VERBS.intersection(words):
            continue
        kind = next((R._NOUN_FORMS[w] for w in words if w in R._NOUN_FORMS), None)
        dirs = tuple(sorted({R.DIRECTION_WORDS[w] for w in words if w in R.DIRECTION_WORDS}))
        if kind is not None and dirs:
            found.append((kind, dirs))
    claims = true = 0
    if found:
        cells = R.parse_grid(state() if callable(state) else state, legend() if callable(legend) else legend)
        for kind, dirs in found if cells is not None else ():
            ok = R.check_claim(kind, dirs, cells)
            if ok is None:
                continue
            claims += 1
            true += int(ok)
    score = (int(agree) + true) / (1 + claims) if think.strip() else 0.0
    return {"stated_actions": stated, "actions_agree": agree, "claims": claims, "claims_true": true,
            "score": float(score)}
