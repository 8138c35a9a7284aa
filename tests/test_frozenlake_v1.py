"""ragen/FrozenLake-v1: the newest reference's FrozenLake (p 0.9, success_rate 0.8), instance
for instance and step for step against recorded episodes of its env (fixtures/ragen2/
frozenlake.json.gz, made by fixtures/ragen2/record_frozenlake.py)."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.envs.frozenlake import ACTION_NAMES
from ragen_envs.games import frozenlake as fl
from ragen_envs.protocol import format_answer

FIXTURE = Path(__file__).parent / "fixtures" / "ragen2" / "frozenlake.json.gz"


@lru_cache(maxsize=1)
def reference() -> dict:
    """mll-lab-nu/RAGEN 20daedc's FrozenLakeEnv (envs.yaml's FrozenLake tag) on seeds 0..999:
    per seed the grid text at reset and after each of up to 10 scripted actions (theirs: 1 Left,
    2 Down, 3 Right, 4 Up), reward and done; grid_coord texts for seeds 0..99."""
    with gzip.open(FIXTURE, "rt") as f:
        return json.load(f)


def replay(rec: dict, env_id: str = "ragen/FrozenLake-v1", texts: str = "texts", **kwargs) -> None:
    """Send the reference's actions one per reply; the state text (``rec[texts]``), reward and
    end after each must be the reference's."""
    env = gym.make(env_id, max_turns=10, max_actions=10, **kwargs).unwrapped
    obs, _ = env.reset(seed=rec["seed"])
    assert rec[texts][0] in obs, rec["seed"]  # the prompt shows the state text
    assert env._state_text() == rec[texts][0], rec["seed"]
    for i, action in enumerate(rec["actions"]):
        _, reward, terminated, truncated, info = env.step(format_answer([ACTION_NAMES[action - 1]], "x"))
        where = (rec["seed"], i)
        assert env._state_text() == rec[texts][i + 1], where
        assert reward == rec["rewards"][i], where
        assert terminated == rec["done"][i], where
        assert info["success"] == (rec["rewards"][i] == 1.0), where
        assert truncated == (i == 9 and not terminated), where


def test_fixture_covers_slips_holes_and_goals():
    eps = reference()["episodes"]
    assert [rec["seed"] for rec in eps] == list(range(1000))
    outcomes = {rec["rewards"][-1] == 1.0 for rec in eps} | {rec["done"][-1] for rec in eps}
    assert outcomes == {True, False}


@pytest.mark.parametrize("chunk", range(0, 1000, 250))
def test_episodes_equal_the_references(chunk):
    # all 1,000 recorded episodes (about 1.5 s in all)
    for rec in reference()["episodes"][chunk:chunk + 250]:
        replay(rec)


def test_v0_differs_from_the_newest_reference():
    # the fixture really tells the two apart: v0 (p 0.8, 1/3 slips) gives other maps or steps
    v0 = gym.make("ragen/FrozenLake-v0").unwrapped
    differ = sum(v0.reset(seed=rec["seed"]) and v0._state_text() != rec["texts"][0]
                 for rec in reference()["episodes"][:200])
    assert differ > 100


@pytest.mark.parametrize("env_id,tag", [("ragen/FrozenLake-v1", "FrozenLake"),
                                        ("ragen/CoordFrozenLake-v0", "CoordFrozenLake")])
def test_defaults_instruction_and_budgets_are_the_tags(env_id, tag):
    want = reference()["tags"][tag]
    env = gym.make(env_id).unwrapped
    assert (env.p, env.success_rate, env.size, env.slippery) == (0.9, want["env_config"]["success_rate"], 4, True)
    assert env.observation_format == want["env_config"].get("observation_format", "grid")
    assert env.instruction == want["env_instruction"]
    assert (env.budget.max_actions, env.max_tokens) == (want["max_actions_per_traj"], want["max_tokens"])
    assert env.instruction_text().startswith(want["env_instruction"])


def test_slip_thresholds_are_gymnasiums():
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
    import numpy as np

    for rate in (0.8, 1.0 / 3.0, 0.0, 1.0, 0.55):
        gym_env = FrozenLakeEnv(desc=["SF", "FG"], is_slippery=True, success_rate=rate)
        probs = [t[0] for t in gym_env.P[0][1]]
        assert fl.slip_thresholds(rate) == tuple(float(x) for x in np.cumsum(probs))
    with pytest.raises(ValueError, match="success_rate"):
        fl.slip_thresholds(1.5)


@pytest.mark.parametrize("kwargs,match", [({"success_rate": 1.5}, "success_rate"),
                                          ({"success_rate": "0.8"}, "success_rate")])
def test_bad_success_rate(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("ragen/FrozenLake-v1", **kwargs)


def test_expert_plans_with_the_envs_slip_model():
    # the planner's value is the exact success chance under 0.8 / 0.1 / 0.1, not under 1/3 each
    from ragen_envs.games.frozenlake_planner import TurnPlanner

    env = gym.make("ragen/FrozenLake-v1").unwrapped
    differ = 0
    for seed in range(40):
        env.reset(seed=seed)
        start = env.game.position[0] * env.size + env.game.position[1]
        right = TurnPlanner(env.game.desc, 5, True, 0.8).value(5, 10)[start]
        wrong = TurnPlanner(env.game.desc, 5, True).value(5, 10)[start]
        assert env.success_probability() == pytest.approx(right)
        differ += abs(right - wrong) > 1e-6
    assert differ > 20


# --------------------------------------------------------------------------- CoordFrozenLake
def test_coord_episodes_equal_the_references():
    coord = [rec for rec in reference()["episodes"] if "coord" in rec]
    assert len(coord) == 100
    for rec in coord:
        replay(rec, "ragen/CoordFrozenLake-v0", texts="coord")


def test_coord_only_format_is_the_references_coordinate_lines():
    # observation_format "coord": the reference's lines without the grid (its grid_coord minus the grid)
    for rec in reference()["episodes"][:100]:
        env = gym.make("ragen/FrozenLake-v1", observation_format="coord", max_turns=10).unwrapped
        env.reset(seed=rec["seed"])
        head, _, grid = rec["coord"][0].partition("\nGrid Map: \n")
        assert env._state_text() == head.removeprefix("Coordinates: \n") and grid == rec["texts"][0]


def test_coordinate_lines_for_a_player_in_a_hole_and_on_the_goal():
    seen = {"Player in hole": 0, "Player on goal": 0}
    for rec in reference()["episodes"][:100]:
        for label in seen:
            seen[label] += f"\n{label}: " in rec["coord"][-1]
    assert min(seen.values()) > 0  # the fixture covers both labels (checked above, text for text)


def test_bad_observation_format():
    with pytest.raises(ValueError, match="observation_format must be one of"):
        gym.make("ragen/FrozenLake-v1", observation_format="coords")


def test_v0_stays_current_beside_v1():
    """-v0 (the paper's) and -v1 (the newest reference's) are both kept: no Gymnasium "out of
    date, consider upgrading" notice, not even under -W error, nor from `ragen list` (in fresh
    processes: the test run's own warning filters would hide it)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    make = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c",
                           "import gymnasium as gym, ragen_envs; gym.make('ragen/FrozenLake-v0').close(); "
                           "gym.make('ragen/LargeSokoban-v0').close()"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert make.returncode == 0, make.stderr
    listing = subprocess.run([sys.executable, "-m", "ragen_envs.cli", "list"], env=env, capture_output=True, text=True,
                             timeout=120)
    assert listing.returncode == 0 and "out of date" not in listing.stderr, listing.stderr
