# A frozen copy of ragen_envs/protocol/reasoning.py before issue 23 (the turn hot path): the
# reference the equivalence test compares the optimised module against. Do not edit.
"""Reasoning checks: does the think text agree with the answer and with the state?

Format penalties check tags, not reasoning (RAGEN App. L). These pure functions check two
simple things in a reply's think text, deterministically, with no game knowledge:

1. **Commitment** — the actions the think text commits to equal the answer's actions.
   The think is cut into clauses at ``. ; ! ?`` and newlines. Clauses with an action verb
   (go, move, push, choose, ...) commit to the action names they mention, in order; when no
   clause has a verb, clauses that mention an action name and no object noun commit.
   ``actions_agree``: the committed sequence equals the answer's actions (ignoring case).
2. **Grounded claims** — for grid states, a clause without an action verb that names an
   object (box, target, hole, goal, wall) and directions (left, right, above/up,
   below/down) claims where that object is relative to the player. The state is taken as
   text rows of legend symbols and the legend ``{symbol: meaning}``; an object kind is a
   noun appearing in a symbol's meaning ("box on target" is a box and a target). A claim
   holds when some cell of that kind lies in every stated direction (row above / below,
   column left / right of the player; an unstated axis is free).

``reasoning_report`` returns the ``info["reasoning"]`` dict of every environment step:
``stated_actions`` (list[str]), ``actions_agree`` (bool), ``claims`` (int),
``claims_true`` (int) and ``score`` = (actions_agree + claims_true) / (1 + claims) in [0, 1]
(0 for an empty think).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Mapping, Sequence

__all__ = [
    "OBJECT_NOUNS",
    "DIRECTION_WORDS",
    "ACTION_VERBS",
    "parse_grid",
    "relative_directions",
    "split_clauses",
    "stated_actions",
    "grounded_claims",
    "check_claim",
    "reasoning_report",
]

# Nouns a legend meaning may contain; plural forms map to the singular.
OBJECT_NOUNS = ("box", "target", "hole", "goal", "wall")
_NOUN_FORMS = {n: n for n in OBJECT_NOUNS} | {n + "s": n for n in OBJECT_NOUNS} | {"boxes": "box"}
PLAYER_NOUN = "player"
DIRECTION_WORDS = {"left": "left", "right": "right", "above": "up", "up": "up", "below": "down",
                   "down": "down", "under": "down", "beneath": "down"}
ACTION_VERBS = frozenset(
    "go goes going move moves moving push pushes pushing step steps walk walks head heads choose chooses "
    "chose pick picks pull pulls select selects take takes press presses play plays do".split()
)
_CLAUSE_SPLIT = re.compile(r"[.;!?\n]+")
_WORD = re.compile(r"[A-Za-z]+")


@lru_cache(maxsize=64)
def _kinds_of(legend_items: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    """``{symbol: [kind, ...]}`` from the legend's meanings (cached: fixed per env)."""
    kinds_of = {}
    for sym, meaning in legend_items:
        words = set(_WORD.findall(meaning.lower()))
        kinds_of[sym] = [k for k in (PLAYER_NOUN, *OBJECT_NOUNS) if k in words]
    return kinds_of


def parse_grid(state: str, legend: Mapping[str, str] | None) -> dict[str, list[tuple[int, int]]] | None:
    """``{kind: [(row, col), ...]}`` for a state drawn as rows of legend symbols.

    Kinds are ``player`` and :data:`OBJECT_NOUNS` found as words in the symbols' meanings.
    Returns None when there is no legend or some line holds a non-legend character (the state
    is not a grid, e.g. the Bandit's text).
    """
    if not legend or not state:
        return None
    kinds_of = _kinds_of(tuple(legend.items()))
    rows = state.split("\n")
    if any(not row or any(ch not in kinds_of for ch in row) for row in rows):
        return None
    cells: dict[str, list[tuple[int, int]]] = {}
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            for kind in kinds_of[ch]:
                cells.setdefault(kind, []).append((r, c))
    return cells


def relative_directions(cell: tuple[int, int], player: tuple[int, int]) -> tuple[str, ...]:
    """Where ``cell`` is from ``player``: ("up"|"down",)? + ("left"|"right",)?; () if equal."""
    out = []
    if cell[0] < player[0]:
        out.append("up")
    elif cell[0] > player[0]:
        out.append("down")
    if cell[1] < player[1]:
        out.append("left")
    elif cell[1] > player[1]:
        out.append("right")
    return tuple(out)


def split_clauses(think: str) -> list[str]:
    """The think text cut at ``. ; ! ?`` and newlines (empty clauses dropped)."""
    return [c.strip() for c in _CLAUSE_SPLIT.split(think or "") if c.strip()]


def _clause_words(clause: str) -> list[str]:
    return _WORD.findall(clause.lower())


@lru_cache(maxsize=64)
def _names_pattern(names: tuple[str, ...]) -> tuple[re.Pattern, dict[str, str]]:
    """One compiled pattern matching any action name as a whole word (lower-cased text),
    longest names first so a multi-word name wins over its prefix; cached per action list."""
    lookup = {n.lower(): n for n in names}
    alternatives = "|".join(re.escape(n) for n in sorted(lookup, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])"), lookup


def _mentions(clause: str, pattern: tuple[re.Pattern, dict[str, str]]) -> list[str]:
    """Action names (canonical spelling) mentioned in ``clause``, in order, whole words,
    case-insensitive (multi-word names allowed)."""
    regex, lookup = pattern
    return [lookup[m.group(0)] for m in regex.finditer(clause.lower())]


def _stated(clauses: Sequence[tuple[str, list[str]]], action_names: Sequence[str] | None) -> list[str]:
    if not action_names:
        return []
    pattern = _names_pattern(tuple(action_names))
    with_verb = [c for c, words in clauses if ACTION_VERBS.intersection(words)]
    chosen = with_verb or [c for c, words in clauses if not any(w in _NOUN_FORMS for w in words)]
    out: list[str] = []
    seen: dict[str, list[str]] = {}  # a repeated clause is matched once
    for clause in chosen:
        found = seen.get(clause)
        if found is None:
            found = seen[clause] = _mentions(clause, pattern)
        out += found
    return out


def _claim_of(words: list[str]) -> tuple[str, tuple[str, ...]] | None:
    if ACTION_VERBS.intersection(words):
        return None
    kind = next((_NOUN_FORMS[w] for w in words if w in _NOUN_FORMS), None)
    if kind is None:
        return None
    dirs = tuple(sorted({DIRECTION_WORDS[w] for w in words if w in DIRECTION_WORDS}))
    return (kind, dirs) if dirs else None


def _claims(clauses: Sequence[tuple[str, list[str]]]) -> list[tuple[str, tuple[str, ...]]]:
    claims = []
    seen: dict[int, tuple[str, tuple[str, ...]] | None] = {}  # by words list: shared per distinct clause
    for _, words in clauses:
        key = id(words)
        if key not in seen:
            seen[key] = _claim_of(words)
        claim = seen[key]
        if claim is not None:
            claims.append(claim)
    return claims


def _split(think: str) -> list[tuple[str, list[str]]]:
    """``[(clause, words), ...]``; a repeated clause shares one words list (computed once), so
    a reply of one clause repeated costs little more than its splitting."""
    out = []
    seen: dict[str, tuple[str, list[str]] | None] = {}
    for raw in _CLAUSE_SPLIT.split(think or ""):
        item = seen.get(raw, False)
        if item is False:
            clause = raw.strip()
            item = seen[raw] = (clause, _clause_words(clause)) if clause else None
        if item is not None:
            out.append(item)
    return out


def stated_actions(think: str, action_names: Sequence[str] | None) -> list[str]:
    """The actions the think text commits to (see the module docstring), in order."""
    return _stated(_split(think), action_names)


def grounded_claims(think: str) -> list[tuple[str, tuple[str, ...]]]:
    """``[(kind, directions), ...]``: clauses without an action verb that name an object and
    at least one direction. The first object noun of the clause is the subject."""
    return _claims(_split(think))


def check_claim(kind: str, directions: Sequence[str], cells: Mapping[str, list[tuple[int, int]]]) -> bool | None:
    """Whether some cell of ``kind`` lies in every one of ``directions`` from the player.
    None when the grid shows no player (nothing to check against)."""
    players = cells.get(PLAYER_NOUN, [])
    if not players:
        return None
    player = players[0]
    want = set(directions)
    return any(want.issubset(relative_directions(c, player)) for c in cells.get(kind, []))


def reasoning_report(
    think: str,
    answer_actions: Sequence[str],
    action_names: Sequence[str] | None,
    state: str | Callable[[], str],
    legend: Mapping[str, str] | None | Callable[[], Mapping[str, str] | None],
) -> dict:
    """The ``info["reasoning"]`` dict for one reply (see the module docstring).

    ``state`` is the state the reply answered (before its actions ran). ``state`` and
    ``legend`` may be given as zero-argument callables: they are then only called when the
    think text makes a grounded claim.

    >>> legend = {"#": "wall", "_": "empty", "O": "target", "X": "box", "P": "player"}
    >>> r = reasoning_report("The box is below. I go Down.", ["Down"], ["Up", "Down"], "#P#\\n#X#\\n#O#", legend)
    >>> (r["actions_agree"], r["claims"], r["claims_true"], r["score"])
    (True, 1, 1, 1.0)
    """
    think = think or ""
    clauses = _split(think)
    stated = _stated(clauses, action_names)
    agree = bool(stated) and [a.lower() for a in stated] == [a.lower() for a in answer_actions]
    claims, true = 0, 0
    found = _claims(clauses)
    # The grid is parsed only when the think makes a claim: most replies make none.
    if found:
        cells = parse_grid(state() if callable(state) else state, legend() if callable(legend) else legend)
        checked: dict[tuple[str, tuple[str, ...]], bool | None] = {}  # the same claim, the same answer
        for claim in found if cells is not None else ():
            if claim not in checked:
                checked[claim] = check_claim(claim[0], claim[1], cells)
            ok = checked[claim]
            if ok is None:
                continue
            claims += 1
            true += int(ok)
    score = (int(agree) + true) / (1 + claims) if think.strip() else 0.0
    return {
        "stated_actions": stated,
        "actions_agree": agree,
        "claims": claims,
        "claims_true": true,
        "score": float(score),
    }
