"""Reasoning checks (ragen_envs/protocol/reasoning.py) and their ``info["reasoning"]`` key."""

from __future__ import annotations

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.protocol import INFO_KEYS
from ragen_envs.protocol.reasoning import (
    check_claim,
    grounded_claims,
    parse_grid,
    reasoning_report,
    relative_directions,
    stated_actions,
)

SOKO_LEGEND = {"#": "wall", "_": "empty", "O": "target", "√": "box on target", "X": "box", "P": "player", "S": "player on target"}
GRID = "\n".join(["######", "#_O__#", "#_P__#", "#_X__#", "######"])
NAMES = ("Up", "Down", "Left", "Right")


def test_parse_grid_kinds_from_the_legend_words():
    cells = parse_grid(GRID, SOKO_LEGEND)
    assert cells["player"] == [(2, 2)] and cells["box"] == [(3, 2)] and cells["target"] == [(1, 2)]
    assert len(cells["wall"]) == 18
    both = parse_grid("#√P#", SOKO_LEGEND)
    assert both["box"] == both["target"] == [(0, 1)]
    assert parse_grid("not a grid", SOKO_LEGEND) is None
    assert parse_grid(GRID, None) is None
    assert relative_directions((0, 0), (1, 1)) == ("up", "left") and relative_directions((1, 1), (1, 1)) == ()


@pytest.mark.parametrize(
    "think,claims,true",
    [
        ("The box is below.", 1, 1),
        ("The box is above.", 1, 0),
        ("The target is up. The box is under me", 2, 2),
        ("The boxes are left", 1, 0),
        ("The target is above and right", 1, 0),
        ("The wall is left", 1, 1),
        ("The hole is left", 1, 0),  # no hole on this grid: false
        ("I push the box down.", 0, 0),  # an action clause, not a claim
        ("box on target soon", 0, 0),  # no direction
    ],
)
def test_grounded_claims(think, claims, true):
    r = reasoning_report(think, [], NAMES, GRID, SOKO_LEGEND)
    assert (r["claims"], r["claims_true"]) == (claims, true)


def test_stated_actions_and_agreement():
    assert stated_actions("The box is left. I go Down then Left.", NAMES) == ["Down", "Left"]
    assert stated_actions("Down, Left", NAMES) == ["Down", "Left"]  # no verb: bare action names commit
    assert stated_actions("The box is left", NAMES) == []  # a claim, not a commitment
    assert stated_actions("Dragon is risky. I choose Dragon.", ("Phoenix", "Dragon")) == ["Dragon"]
    assert stated_actions("I go Leftwards", NAMES) == []  # whole words only
    assert stated_actions("x", None) == []
    good = reasoning_report("The box is below. I go Down.", ["Down"], NAMES, GRID, SOKO_LEGEND)
    assert good == {"stated_actions": ["Down"], "actions_agree": True, "claims": 1, "claims_true": 1, "score": 1.0}
    bad = reasoning_report("The box is above. I go Up.", ["Down"], NAMES, GRID, SOKO_LEGEND)
    assert (bad["actions_agree"], bad["claims_true"], bad["score"]) == (False, 0, 0.0)
    half = reasoning_report("I go Down.", ["Down", "Left"], NAMES, GRID, SOKO_LEGEND)
    assert not half["actions_agree"]
    assert reasoning_report("", ["Down"], NAMES, GRID, SOKO_LEGEND)["score"] == 0.0
    assert check_claim("box", ("down",), {"box": [(3, 2)]}) is None  # no player on the grid


def test_env_info_carries_the_reasoning_dict_for_every_env():
    assert INFO_KEYS["reasoning"][0] is dict
    env = gym.make("ragen/Sokoban-v0")
    env.reset(seed=123)  # the player stands right of the box, the target is above the box
    _, _, _, _, info = env.step("<think>The box is left. The target is above and left. I go Down, Left.</think>"
                                "<answer>Down || Left</answer>")
    assert info["reasoning"] == {"stated_actions": ["Down", "Left"], "actions_agree": True, "claims": 2,
                                 "claims_true": 2, "score": 1.0}
    fl = gym.make("ragen/FrozenLake-v0")
    fl.reset(seed=3)
    _, _, _, _, info = fl.step("<think>The goal is above</think><answer>Up</answer>")
    assert info["reasoning"]["claims"] == 1
    nv = gym.make("ragen/SokobanNewVocab-v0")  # other symbols: the legend tells the kinds
    nv.reset(seed=5)
    _, _, _, _, info = nv.step("<think>The box is left</think><answer>Left</answer>")
    assert info["reasoning"]["claims"] == 1
    b = gym.make("ragen/Bandit-v0")
    b.reset(seed=0)
    _, _, _, _, info = b.step("<think>I choose Dragon</think><answer>Dragon</answer>")
    assert info["reasoning"]["actions_agree"] and info["reasoning"]["claims"] == 0
    off = gym.make("ragen/Sokoban-v0", think=False)
    off.reset(seed=1)
    assert off.step("<answer>Up</answer>")[4]["reasoning"]["score"] == 0.0


def test_grounded_claims_parse():
    assert grounded_claims("The box is below and left. I go Down.") == [("box", ("down", "left"))]
