"""Redaction of an API key *and its fragments* from text that is stored or printed.

Servers echo keys in part: OpenAI answers a bad key with ``Incorrect API key provided:
sk-SECRE*********6789``, others print ``sk-...6789``, ``sk-SECR…`` or the last four
characters. Replacing only the whole key left those fragments in errors.jsonl,
summary.json, report.html and on stderr. :class:`KeyRedactor` replaces, with ``***``:

1. every run of 8 or more consecutive characters of the key, wherever it stands (inside a
   word too); the whole key always, even when shorter than 8;
2. every *word* that is a rendering of the key: the word (a maximal run of characters that
   are not whitespace, quotes, brackets or ``,;:=``, or the word without its trailing ``.,;:!?``)
   cut at its *mask runs* (``*``, ``•``, ``●``, ``·``, ``…``, two or more ``.``,
   three or more ``x``/``X``) leaves pieces that are, in order, pieces of the key, and at
   least 4 key characters are shown in all. So ``sk-SECRE*********6789``, ``sk-...6789``,
   ``…6789``, ``sk-***89`` and a bare ``6789`` (when the key ends so) are redacted.

What is deliberately *not* redacted: a run of 4 to 7 key characters glued into a longer
word that is not itself a rendering of the key, and a bare word made only of the key's
public scheme prefix (:func:`public_prefix`: the leading letter groups that end in ``-`` or
``_``, such as ``sk-proj-``, ``sk-ant-api03-``, ``gsk_``; providers print it themselves). Keys open with well-known prefixes
(``sk-proj-``, ``sk-ant-``, ``sk-admin-``), so every text holding "project", "admin" or
"task-a" would otherwise lose words in stored episodes; such a run in an ordinary word is a
coincidence, not an echo (a server that echoes a key pads it with masks or nothing, not
with letters). Under this rule, no run of 4 or more key characters that is a word, or a
piece of a masked word, survives; tests/test_redaction.py checks it with hypothesis.

Cost: a substring scan per key 4-gram and one regex search for a mask run per string;
strings with neither are returned untouched (BENCHMARKS.md#key-redaction).
"""

from __future__ import annotations

import re

__all__ = ["KeyRedactor", "redact_key", "public_prefix", "REDACTED", "MIN_FRAGMENT", "ALWAYS_FRAGMENT"]

REDACTED = "***"
MIN_FRAGMENT = 4  # key characters a rendering must show to be redacted
ALWAYS_FRAGMENT = 8  # a run of this many key characters is redacted anywhere

_WORD_DELIMITERS = set(" \t\r\n\f\v\"'`()[]{}<>,;:=|")
_TRAILING = ".,;:!?"
_MASK_PARTS = ("*", "•", "●", "·", "…")
_PREFIX_GROUP = re.compile(r"[A-Za-z][A-Za-z0-9]{0,7}[-_]")
PREFIX_MAX = 16


def public_prefix(key: str) -> str:
    """The scheme prefix of ``key`` (``sk-proj-``, ``sk-ant-api03-``, ``gsk_``; ``""`` for
    none): letter-led groups of up to 8 characters, each ending in ``-`` or ``_``, at most
    16 characters in all, and never the whole key."""
    at = 0
    while True:
        m = _PREFIX_GROUP.match(key, at)
        if m is None or m.end() > PREFIX_MAX or m.end() >= len(key):
            return key[:at]
        at = m.end()


def _mask_pattern(key: str) -> re.Pattern:
    """Mask runs, leaving out any mask character (or run) the key itself holds."""
    alts = ["[" + re.escape("".join(c for c in _MASK_PARTS if c not in key)) + "]"]
    if ".." not in key:
        alts.append(r"\.{2,}")
    if "xxx" not in key.lower():
        alts.append("[xX]{3,}")
    alts = [a for a in alts if a != "[]"]
    return re.compile("(?:" + "|".join(alts) + ")+" if alts else "(?!)")  # (a key holding every mask: none)


class KeyRedactor:
    """``redactor(text)``: ``text`` with the key and its fragments replaced (module docstring)."""

    def __init__(self, key: str | None) -> None:
        self.key = key or ""
        k = self.key
        self._active = len(k) >= MIN_FRAGMENT
        if not self._active:
            return
        self._always = min(ALWAYS_FRAGMENT, len(k))
        self._prefix = public_prefix(k)
        self._mask = _mask_pattern(k)
        self._mask_split = re.compile("(" + self._mask.pattern + ")")
        self._mask_literals = [m for m in (*_MASK_PARTS, "..", "xxx", "XXX") if self._mask.fullmatch(m)]
        grams = sorted({k[i:i + MIN_FRAGMENT] for i in range(len(k) - MIN_FRAGMENT + 1)})
        self._gram_list = grams
        # overlapping hits: a lookahead finds every start position of a key 4-gram
        self._grams = re.compile("(?=(" + "|".join(map(re.escape, grams)) + "))")
        # characters of the key are word characters even when they would delimit a word
        self._delims = frozenset(_WORD_DELIMITERS - set(k))
        self._word = re.compile("[^" + re.escape("".join(sorted(self._delims))) + "]+") if self._delims else \
            re.compile(r".+", re.S)

    def __call__(self, text: str) -> str:
        if not self._active or not isinstance(text, str) or not text:
            return text
        for _ in range(8):  # a replacement can make a new rendering out of its neighbours
            new = self._once(text)
            if new == text:
                return new
            text = new
        return text

    # ------------------------------------------------------------------ the two rules
    def _once(self, text: str) -> str:
        # fast path: one C substring scan per key 4-gram (a regex alternation is ~10x slower)
        hit = any(g in text for g in self._gram_list)
        if not hit and not any(m in text for m in self._mask_literals):
            return text
        hits = [m.start() for m in self._grams.finditer(text)] if hit else []
        spans = self._long_runs(text, hits)
        out, pos = [], 0
        for m in self._word.finditer(text):
            start, end = m.span()
            word = m.group()
            if self._is_rendering(word):
                spans.append((start, end))
                continue
            core = word.rstrip(_TRAILING)  # "6789." at the end of a sentence
            if core and core != word and self._is_rendering(core):
                spans.append((start, start + len(core)))
        if not spans:
            return text
        spans.sort()
        merged: list[list[int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        for a, b in merged:
            out.append(text[pos:a])
            out.append(REDACTED)
            pos = b
        out.append(text[pos:])
        return "".join(out)

    def _long_runs(self, text: str, hits: list[int]) -> list[tuple[int, int]]:
        """Maximal runs of key characters (substrings of the key) of ``_always`` or more."""
        key, spans, reach = self.key, [], -1
        for i in hits:
            if i < reach:
                continue
            j = i + MIN_FRAGMENT
            while j < len(text) and text[i:j + 1] in key:
                j += 1
            if j - i >= self._always:
                spans.append((i, j))
                reach = j
        return spans

    def _is_rendering(self, word: str) -> bool:
        """Whether ``word`` cut at its mask runs is, in order, pieces of the key that show
        at least :data:`MIN_FRAGMENT` key characters."""
        if len(word) < MIN_FRAGMENT:
            return False
        key = self.key
        if word in key:
            return word not in self._prefix  # a bare "admin" of sk-admin-...: public, and a common word
        parts = self._mask_split.split(word)  # piece, mask, piece, mask, ..., piece
        if len(parts) == 1:
            return False
        pieces, masks = parts[0::2], parts[1::2]
        if self._in_order(pieces):
            return True
        # an x-run mask may have eaten key characters that are x/X themselves ("000" "xxxxxx" "X"
        # of the key 000X): let the pieces next to each x-run take back up to 3 of its characters
        runs = [i for i, m in enumerate(masks) if m[0] in "xX" and set(m) <= set("xX")]
        if not runs or len(runs) > 3:
            return False
        import itertools

        options = [[(a, b) for a in range(4) for b in range(4) if a + b < len(masks[i])] for i in runs]
        for choice in itertools.product(*options):
            trial = list(pieces)
            for i, (a, b) in zip(runs, choice):
                m = masks[i]
                trial[i] = trial[i] + m[:a]
                trial[i + 1] = m[len(m) - b:] + trial[i + 1]
            if self._in_order(trial):
                return True
        return False

    def _in_order(self, pieces: list[str]) -> bool:
        """Whether ``pieces`` occur in the key in this order, not overlapping, and show at
        least :data:`MIN_FRAGMENT` key characters in all."""
        if sum(map(len, pieces)) < MIN_FRAGMENT:
            return False
        key, at = self.key, 0
        for piece in pieces:
            if not piece:
                continue
            found = key.find(piece, at)
            if found < 0:
                return False
            at = found + len(piece)
        return True


def redact_key(text: str, key: str | None) -> str:
    """:class:`KeyRedactor` for one call."""
    return KeyRedactor(key)(text)
