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


_LETTERS = re.compile(r"[a-z]+")
_DIGIT = re.compile(r"[0-9]")


@lru_cache(maxsize=64)
def _names_pattern(names: tuple[str, ...]) -> tuple[re.Pattern, dict[str, str], bool]:
    """One compiled pattern matching any action name as a whole word (lower-cased text),
    longest names first so a multi-word name wins over its prefix; the lookup
    ``{lowered: name}``; and whether every name is one word of ASCII letters. Cached per
    action list."""
    lookup = {n.lower(): n for n in names}
    alternatives = "|".join(re.escape(n) for n in sorted(lookup, key=len, reverse=True))
    simple = all(_LETTERS.fullmatch(n) for n in lookup)
    return re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])"), lookup, simple


def _mentions(clause: str, pattern: tuple) -> list[str]:
    """Action names (canonical spelling) mentioned in ``clause``, in order, whole words,
    case-insensitive: the plain regex scan (the rule :func:`_mentions_lowered` speeds up)."""
    regex, lookup = pattern[0], pattern[1]
    return [lookup[m] for m in regex.findall(clause.lower())]


def _mentions_lowered(lowered: str, words: list[str], pattern: tuple[re.Pattern, dict[str, str], bool],
                      digits: bool = True) -> list[str]:
    """Action names (canonical spelling) mentioned in the lower-cased clause ``lowered``, in
    order, whole words (multi-word names allowed).

    When every name is one word of ASCII letters and the clause has no ASCII digit, the
    pattern's matches are exactly the clause's letter runs (``words``) that are names: a match
    must start and end where a run does (no letter or digit beside it), and a run equal to a
    name is that name's match. That list lookup is 3x cheaper than the regex scan.
    ``digits=False`` says the whole think has no ASCII digit (checked once per think), so no
    clause of it needs its own check."""
    regex, lookup, simple = pattern
    if simple and (not digits or _DIGIT.search(lowered) is None):
        return [lookup[w] for w in words if w in lookup]
    return [lookup[m] for m in regex.findall(lowered)]  # no groups: findall gives the names


# One clause as the checks read it: (lower-cased clause, its words, it has an action verb).
_Clause = tuple[str, list[str], bool]
_NOUNS = _NOUN_FORMS.keys()


def _stated(clauses: Sequence[_Clause], action_names: Sequence[str] | None, digits: bool = True) -> list[str]:
    if not action_names:
        return []
    pattern = _names_pattern(action_names if type(action_names) is tuple else tuple(action_names))
    if len(clauses) == 1:  # the usual think: it commits when it has a verb or names no object
        clause = clauses[0]
        if clause[2] or _NOUNS.isdisjoint(clause[1]):
            return _mentions_lowered(clause[0], clause[1], pattern, digits)
        return []
    chosen = [c for c in clauses if c[2]] or [c for c in clauses if _NOUNS.isdisjoint(c[1])]
    if len(chosen) == 1:  # the usual think: one committing clause
        return _mentions_lowered(chosen[0][0], chosen[0][1], pattern, digits)
    out: list[str] = []
    seen: dict[int, list[str]] = {}  # a repeated clause (one shared tuple) is matched once
    for clause in chosen:
        found = seen.get(id(clause))
        if found is None:
            found = seen[id(clause)] = _mentions_lowered(clause[0], clause[1], pattern, digits)
        out += found
    return out


def _claim_of(words: list[str], has_verb: bool) -> tuple[str, tuple[str, ...]] | None:
    if has_verb or _NOUNS.isdisjoint(words):
        return None
    kind = next(_NOUN_FORMS[w] for w in words if w in _NOUN_FORMS)
    dirs = tuple(sorted({DIRECTION_WORDS[w] for w in words if w in DIRECTION_WORDS}))
    return (kind, dirs) if dirs else None


def _claims(clauses: Sequence[_Clause]) -> list[tuple[str, tuple[str, ...]]]:
    if len(clauses) == 1:  # the usual think: one clause
        claim = _claim_of(clauses[0][1], clauses[0][2])
        return [] if claim is None else [claim]
    claims = []
    seen: dict[int, tuple[str, tuple[str, ...]] | None] = {}  # by clause tuple: shared per distinct clause
    for clause in clauses:
        key = id(clause)
        if key not in seen:
            seen[key] = _claim_of(clause[1], clause[2])
        claim = seen[key]
        if claim is not None:
            claims.append(claim)
    return claims


# ASCII think texts: one bytes.translate keeps the letters, turns each clause separator into
# "\n" and everything else into " " (same length), so splitting that on "\n" and each piece
# on whitespace gives every clause's letter runs (what _WORD finds) ~4x cheaper than the regexes.
# ASCII digits become "\x1f" instead of " ": str.split() splits on it too (it is whitespace to
# str.isspace), so the words are the same, and ``"\x1f" in tokens`` says whether the think has a
# digit with one C-speed scan (the ``[0-9]`` regex search cost ~3x more).
_DIGIT_TOKEN = "\x1f"
_ASCII_TOKENS = bytes(
    c if chr(c).isascii() and chr(c).isalpha() else 10 if chr(c) in ".;!?\n" else 0x1F if chr(c) in "0123456789"
    else 32 for c in range(256)
)


def _split(think: str) -> list[_Clause]:
    """``[(lowered clause, words, has_verb), ...]``; a repeated clause shares one tuple
    (computed once), so a reply of one clause repeated costs little more than its splitting."""
    return _clauses(think)[0]


def _clauses(think: str) -> tuple[list[_Clause], bool]:
    """:func:`_split` and whether ``think`` holds an ASCII digit (one scan for both when the
    think is ASCII)."""
    if not think:
        return [], False
    if think.isascii():
        return _split_ascii(think)
    return _split_unicode(think), _DIGIT.search(think) is not None


def _split_unicode(think: str) -> list[_Clause]:
    out = []
    seen: dict[str, _Clause | None] = {}
    for raw in _CLAUSE_SPLIT.split(think):
        item = seen.get(raw, False)
        if item is False:
            clause = raw.strip()
            if clause:
                lowered = clause.lower()
                words = _WORD.findall(lowered)
                item = (lowered, words, not ACTION_VERBS.isdisjoint(words))
            else:
                item = None
            seen[raw] = item
        if item is not None:
            out.append(item)
    return out


# Up to this many pieces an ASCII think is split without the repeat-sharing dict (equal
# clauses then get equal, not shared, tuples: the checks read them the same).
_FEW_PIECES = 4


def _split_ascii(think: str) -> tuple[list[_Clause], bool]:
    """:func:`_split` of an ASCII text, and whether it holds a digit. Lower-casing commutes
    with the split (it maps letters to letters, keeps the length of ASCII text and never makes
    or removes a separator or a space), so the clauses are cut from the lowered text at the
    translated text's offsets; runs of separators leave empty pieces, dropped like the regex
    split's empty clauses."""
    lowered = think.lower()
    tokens = lowered.encode("ascii").translate(_ASCII_TOKENS).decode("ascii")
    digits = _DIGIT_TOKEN in tokens
    if "\n" not in tokens:  # the usual think: one clause
        clause = lowered.strip()
        if not clause:
            return [], digits
        words = tokens.split()
        return [(clause, words, not ACTION_VERBS.isdisjoint(words))], digits
    pieces = tokens.split("\n")
    out = []
    pos = 0
    if len(pieces) <= _FEW_PIECES:  # the usual think: a few clauses, no repeats worth sharing
        for piece in pieces:
            end = pos + len(piece)
            clause = lowered[pos:end].strip()
            pos = end + 1
            if clause:
                words = piece.split()
                out.append((clause, words, not ACTION_VERBS.isdisjoint(words)))
        return out, digits
    seen: dict[str, _Clause | None] = {}
    for piece in pieces:
        end = pos + len(piece)
        raw = lowered[pos:end]
        pos = end + 1
        item = seen.get(raw, False)
        if item is False:
            clause = raw.strip()
            if clause:
                words = piece.split()
                item = (clause, words, not ACTION_VERBS.isdisjoint(words))
            else:
                item = None
            seen[raw] = item
        if item is not None:
            out.append(item)
    return out, digits


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
    # One digit scan of the whole think instead of one per committing clause.
    clauses, digits = _clauses(think or "")
    stated = _stated(clauses, action_names, digits)
    if len(stated) == 1:  # the usual think commits to one action
        agree = len(answer_actions) == 1 and stated[0].lower() == answer_actions[0].lower()
    else:
        agree = (bool(stated) and len(stated) == len(answer_actions)
                 and list(map(str.lower, stated)) == list(map(str.lower, answer_actions)))
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
    # A blank think has no clause, so agree is False and no claim is checked: the score is
    # then 0 / 1 = 0.0 without a test of its own.
    return {
        "stated_actions": stated,
        "actions_agree": agree,
        "claims": claims,
        "claims_true": true,
        "score": (int(agree) + true) / (1 + claims),
    }
