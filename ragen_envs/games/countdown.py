"""Countdown: reach a target number with arithmetic on given numbers. Pure mechanics, no text
protocol: instance generation, a safe exact evaluator, the reference's scoring and a solver.

**Instances from a seed.** The reference reads its instances from a downloaded dataset
(``Jiayi-Pan/Countdown-Tasks-3to4``: 3 or 4 numbers, kept only when the target is reachable
by adding and subtracting all of them); that cannot be reproduced from a seed, so
:func:`generate_instance` draws instances with the same guarantee. With ``G =
numpy.random.default_rng(seed)`` (Gymnasium's ``seeding.np_random(seed)`` stream):
``count = G.integers(3, 5)`` (3 or 4 numbers); then repeat: ``numbers = G.integers(1, 100,
size=count)`` (each 1..99), ``signs = G.integers(0, 2, size=count)`` (0 is +, 1 is -),
``target = sum(+/- numbers)``; accept the first draw whose target lies in 1..99. Every
instance is therefore solvable with ``+`` and ``-`` using each number exactly once.

**Answers** are arithmetic expressions over integer literals with ``+ - * /``, unary
``+``/``-`` and parentheses, evaluated exactly with :class:`fractions.Fraction` by a small
recursive-descent parser (never Python's ``eval``). Size is bounded: at most
``MAX_EXPRESSION_CHARS`` characters, ``MAX_LITERAL_DIGITS`` digits per literal and
``MAX_DEPTH`` nested parentheses; anything else (``**``, ``//``, ``=``, a name, division by
zero) does not evaluate, nor (as for the reference's ``eval``) a literal with leading zeros
(``054``; ``00`` is zero) or a line break outside parentheses (``1 +\n2``; before the first
and after the last token it is fine).

**Scoring** (the reference's ``compute_reward``): the integer literals of the answer (every
run of digits, as the reference's ``re.findall(r"\\d+")`` sees them) must be the given
numbers, each used exactly once (``use_all=False``: at most once); otherwise 0. When they
are, ``score`` (1) if the expression evaluates to the target, else ``format_score`` (0.1).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

__all__ = [
    "CountdownInstance",
    "ExpressionError",
    "MAX_EXPRESSION_CHARS",
    "evaluate",
    "generate_instance",
    "literals",
    "numbers_ok",
    "score_answer",
    "solve",
]

MAX_EXPRESSION_CHARS = 256
MAX_LITERAL_DIGITS = 6
MAX_DEPTH = 32
MIN_NUMBER, MAX_NUMBER = 1, 99
MIN_TARGET, MAX_TARGET = 1, 99


class ExpressionError(ValueError):
    """The answer is not an expression this evaluator accepts (or divides by zero)."""


@dataclass(frozen=True)
class CountdownInstance:
    """The numbers to use and the target to reach."""

    numbers: tuple[int, ...]
    target: int


def generate_instance(seed: int) -> CountdownInstance:
    """The instance of ``seed`` (rule in the module docstring)."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(3, 5))
    while True:
        numbers = [int(v) for v in rng.integers(MIN_NUMBER, MAX_NUMBER + 1, size=count)]
        signs = [int(v) for v in rng.integers(0, 2, size=count)]
        target = sum(-n if s else n for n, s in zip(numbers, signs))
        if MIN_TARGET <= target <= MAX_TARGET:
            return CountdownInstance(tuple(numbers), target)


# --------------------------------------------------------------------------- parsing
def _tokens(text: str) -> list[str]:
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"longer than {MAX_EXPRESSION_CHARS} characters")
    out: list[str] = []
    i, n = 0, len(text)
    depth, line_break = 0, False  # a line break outside parentheses ends the expression (as in eval)
    while i < n:
        ch = text[i]
        if ch in " \t\n\r":
            line_break = line_break or (ch in "\n\r" and depth == 0 and bool(out))
            i += 1
            continue
        if line_break:
            raise ExpressionError("a line break outside parentheses")
        if "0" <= ch <= "9":
            j = i
            while j < n and "0" <= text[j] <= "9":
                j += 1
            if j - i > MAX_LITERAL_DIGITS:
                raise ExpressionError(f"a number longer than {MAX_LITERAL_DIGITS} digits")
            if ch == "0" and text[i:j].strip("0"):
                raise ExpressionError(f"leading zeros in {text[i:j]!r}")
            out.append(text[i:j])
            i = j
        elif ch in "+-*/()":
            if ch in "*/" and i + 1 < n and text[i + 1] == ch:
                raise ExpressionError(f"{ch * 2!r} is not allowed (only + - * / and parentheses)")
            depth += {"(": 1, ")": -1}.get(ch, 0)
            out.append(ch)
            i += 1
        else:
            raise ExpressionError(f"unexpected character {ch!r}")
    return out


class _Parser:
    """expr := term (('+' | '-') term)* ; term := unary (('*' | '/') unary)* ;
    unary := ('+' | '-') unary | atom ; atom := INT | '(' expr ')'."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ExpressionError("the expression ends too early")
        self.pos += 1
        return tok

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.unary()
            if op == "*":
                value *= rhs
            elif rhs == 0:
                raise ExpressionError("division by zero")
            else:
                value /= rhs
        return value

    def unary(self) -> Fraction:
        signs = 1
        while self.peek() in ("+", "-"):  # a loop, not recursion: "- - - 3" is bounded by length
            if self.take() == "-":
                signs = -signs
        return signs * self.atom()

    def atom(self) -> Fraction:
        tok = self.take()
        if tok == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ExpressionError(f"more than {MAX_DEPTH} nested parentheses")
            value = self.expr()
            if self.take() != ")":
                raise ExpressionError("a '(' is not closed")
            self.depth -= 1
            return value
        if tok.isdigit():
            return Fraction(int(tok))
        raise ExpressionError(f"expected a number or '(', got {tok!r}")


def evaluate(text: str) -> Fraction:
    """The exact value of an arithmetic expression; :class:`ExpressionError` if it is not one."""
    parser = _Parser(_tokens(text))
    value = parser.expr()
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected {parser.peek()!r} after the expression")
    return value


def literals(text: str) -> list[int]:
    """Every run of ASCII digits in ``text`` as an int (the reference's ``\\d+`` scan, ASCII)."""
    out, run = [], []
    for ch in text:
        if "0" <= ch <= "9":
            run.append(ch)
        elif run:
            out.append(int("".join(run)))
            run = []
    if run:
        out.append(int("".join(run)))
    return out


def numbers_ok(text: str, numbers: Sequence[int], use_all: bool = True) -> bool:
    """The answer's literals are ``numbers``, each once (``use_all``) or at most once."""
    if len(text) > MAX_EXPRESSION_CHARS:
        return False
    used, given = Counter(literals(text)), Counter(numbers)
    return used == given if use_all else not (used - given)


def score_answer(text: str, instance: CountdownInstance, *, score: float = 1.0, format_score: float = 0.1,
                 use_all: bool = True) -> float:
    """The reference's reward: 0 (wrong numbers), ``format_score`` (right numbers, wrong or
    no value), ``score`` (the expression equals the target)."""
    if not numbers_ok(text, instance.numbers, use_all):
        return 0.0
    try:
        value = evaluate(text)
    except ExpressionError:
        return float(format_score)
    return float(score) if value == instance.target else float(format_score)


# --------------------------------------------------------------------------- solver
def solve(numbers: Sequence[int], target: int) -> str | None:
    """An expression that uses every number once and equals ``target``, or None.

    Exhaustive: repeatedly combine two of the remaining values with ``+ - * /`` (both
    orders for ``-`` and ``/``) until one is left, exactly, depth first in a fixed order.
    """
    target_f = Fraction(target)

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if items[0][0] == target_f else None
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                (a, ea), (b, eb) = items[i], items[j]
                rest = [items[k] for k in range(len(items)) if k not in (i, j)]
                # every operand text is a literal or wrapped in parentheses
                candidates = [(a + b, f"{ea} + {eb}"), (a - b, f"{ea} - {eb}"), (b - a, f"{eb} - {ea}"),
                              (a * b, f"{ea} * {eb}")]
                if b != 0:
                    candidates.append((a / b, f"{ea} / {eb}"))
                if a != 0:
                    candidates.append((b / a, f"{eb} / {ea}"))
                for value, text in candidates:
                    found = search(rest + [(value, f"({text})" if rest else text)])
                    if found is not None:
                        return found
        return None

    return search([(Fraction(n), str(n)) for n in numbers])

