"""The optimised turn path equals the implementation it replaced (issue 23 goal 4).

``tests/old_reasoning.py`` is the reasoning module as it was before; hypothesis draws think
texts from the words the checks look for (verbs, nouns, directions, action names, separators,
case and Unicode tricks) and compares every report.
"""

from __future__ import annotations

import old_reasoning
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_envs.protocol import reasoning

WORDS = sorted(
    set(reasoning.ACTION_VERBS) | set(reasoning.DIRECTION_WORDS) | set(reasoning._NOUN_FORMS)
    | {"Up", "DOWN", "left", "Right", "Phoenix", "dragon", "the", "player", "I", "then", "İ", "\u212a", "go2",
       "search[red]", "a b", "Push", "Down-", "_up", "up2", "3left", "dragon9", "٣up", "\u00e9down"}
)
SEPARATORS = [" ", ". ", "; ", "!", "?", "\n", ", ", " .. ", "\t", "  "]
NAMES = [("Up", "Down", "Left", "Right"), ("Left", "Down", "Right", "Up"), ("Phoenix", "Dragon"),
         ("North", "Down", "West", "Right"), ("a b", "b"), ("Up", "Upper", "up2"), ("Pick1", "Drop"), None, ()]
LEGEND = {"#": "wall", "_": "empty", "O": "target", "√": "box on target", "X": "box", "P": "player",
          "S": "player on target"}
STATES = ["#####\n#P_O#\n#_X_#\n#####", "#####\n#_SX#\n#___#\n#####", "####\n#X_#\n#__#\n####", "not a grid"]

thinks = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=24).map(
    lambda parts: "".join(w + s for w, s in parts)
) | st.text(max_size=80) | st.text(alphabet=st.characters(max_codepoint=127), max_size=80)


@settings(max_examples=600, deadline=None)
@given(think=thinks, names=st.sampled_from(NAMES), answer=st.lists(st.sampled_from(["Up", "down", "Left", "Dragon"]), max_size=3),
       state=st.sampled_from(STATES), legend=st.sampled_from([LEGEND, None]))
def test_reasoning_report_equals_the_old_one(think, names, answer, state, legend):
    new = reasoning.reasoning_report(think, answer, names, state, legend)
    old = old_reasoning.reasoning_report(think, answer, names, state, legend)
    assert new == old
    assert [type(v) for v in new.values()] == [type(v) for v in old.values()]
    assert reasoning.stated_actions(think, names) == old_reasoning.stated_actions(think, names)
    assert reasoning.grounded_claims(think) == old_reasoning.grounded_claims(think)


def test_repeated_clauses_equal_the_old_report():
    think = "The box is left. I go Up. " * 50 + "the wall is below; push Down"
    names = ("Up", "Down", "Left", "Right")
    assert (reasoning.reasoning_report(think, ["Up"] * 50 + ["Down"], names, STATES[0], LEGEND)
            == old_reasoning.reasoning_report(think, ["Up"] * 50 + ["Down"], names, STATES[0], LEGEND))


# ---------------------------------------------------------------------------- json_part
import enum  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402
import old_json_part  # noqa: E402

from ragen_envs.integrations import json_part  # noqa: E402


class _Arm(enum.IntEnum):
    LOW = 0
    HIGH = 1


class _Text(str):
    pass


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6), st.sampled_from(["\ud800x", "é", _Text("sub"), _Text("\udfff"), _Arm.HIGH, b"raw", {1, 2},
                                          np.float32(1.5), np.int64(7), np.bool_(True), np.float64("nan"),
                                          np.array(3.0), np.array([1, 2]), object()]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.one_of(st.text(max_size=4), st.sampled_from(["\ud801k", 3, _Text("t"), None])), inner,
                      max_size=4),
    max_leaves=12,
)


def _same(a, b):
    """Equal, with the same types all the way down (a NaN never survives json_part)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@settings(max_examples=500, deadline=None)
@given(value=values)
def test_json_part_equals_the_old_one(value):
    new = json_part(value)
    try:
        old = old_json_part.json_part(value)
    except RecursionError:  # the old one recursed forever on any tuple: compare with lists
        old = old_json_part.json_part(_lists(value))
    assert _same(new, old), (new, old)


def _lists(value):
    if isinstance(value, tuple):
        return [_lists(v) for v in value]
    if isinstance(value, list):
        return [_lists(v) for v in value]
    if type(value) is dict:
        return {k: _lists(v) for k, v in value.items()}
    return value


def test_json_part_takes_tuples_as_lists():
    import collections

    point = collections.namedtuple("point", "x y")
    assert json_part({"a": (1, "b", (2.0, float("nan"))), "p": point(1, 2)}) == {"a": [1, "b", [2.0]], "p": [1, 2]}
