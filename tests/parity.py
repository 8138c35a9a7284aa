"""One parity suite across every path a user reaches our envs through (issue 19 item 5).

The same scripted replies (the expert's, random well-formed ones, malformed ones) on the same
seeds go through each path; every path must give the local env's episode: the system prompt,
the first observation, and per turn the observation text, the reward, terminated / truncated
and success. A path that cannot show something (one reward per episode, no text) is compared
on what it keeps; docs/integrations.md has the table.

This module holds the scripts and the local reference; tests/test_parity_paths.py drives the
paths of the main venv, tests/verl and tests/verifiers (own venvs) import it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.agents import make_agent

# (env id, env kwargs, noise seed of seed s or None): FrozenLake slips, so its noise seed matters
CASES: list[tuple[str, dict[str, Any], Callable[[int], int] | None]] = [
    ("ragen/Sokoban-v0", {}, None),
    ("ragen/FrozenLake-v0", {}, lambda s: 1000 + 7 * s),
    ("ragen/WebShop-v0", {}, None),
    # free-text placements; budgets raised so the expert solves (the reference's cannot: 10 of 32 cells)
    ("ragen/Sudoku-v0", {"max_turns": 20, "max_actions": 40}, None),
    # the newer ids' other texts: the coordinate lines above the grid, RAGEN-2's instruction on 8x8 / 2 boxes
    ("ragen/CoordSokoban-v0", {}, None),
    ("ragen/LargeSokoban-v1", {}, None),
]
SEEDS = range(20)
POLICIES = ("expert", "random", "malformed")

MALFORMED = (
    "I will push the box.",  # no tags at all
    "<think>hmm</think>",  # no answer
    "<answer></answer>",  # an empty answer
    "<think>x</think><answer>Jump || Fly</answer>",  # unknown actions
    "<answer>Up || Up || Up || Up || Up || Up || Up || Up || Up || Up || Up || Up</answer>",  # over budget
    "\x00<answer>\ud800</answer>",  # NUL and a lone surrogate
)


@dataclass
class Turn:
    reply: str
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    success: bool


@dataclass
class Episode:
    env_id: str
    env_kwargs: dict[str, Any]
    seed: int
    noise_seed: int | None
    system_prompt: str
    first_observation: str
    turns: list[Turn] = field(default_factory=list)

    @property
    def replies(self) -> list[str]:
        return [t.reply for t in self.turns]

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def success(self) -> bool:
        return bool(self.turns and self.turns[-1].success)

    @property
    def options(self) -> dict[str, Any] | None:
        return None if self.noise_seed is None else {"noise_seed": self.noise_seed}


def _reply(policy: str, agent, obs: str, turn: int, rng: np.random.Generator) -> str:
    if policy == "malformed":
        # a malformed reply most turns, a well-formed random one now and then (so episodes
        # also move and end by the game, not only by the turn budget)
        if rng.random() < 0.7:
            return MALFORMED[int(rng.integers(0, len(MALFORMED)))]
    return agent.act([{"role": "user", "content": obs}])


def local_episode(env_id: str, env_kwargs: dict[str, Any], seed: int, noise_seed: int | None, policy: str) -> Episode:
    """Play ``policy`` on a local ``gym.make`` env: the reference every path is compared with."""
    env = gym.make(env_id, **env_kwargs)
    agent = make_agent("expert", env=env) if policy == "expert" else make_agent("random", env=env, seed=seed)
    rng = np.random.default_rng([seed, 7])
    obs, info = env.reset(seed=seed, options=None if noise_seed is None else {"noise_seed": noise_seed})
    ep = Episode(env_id, dict(env_kwargs), seed, noise_seed, info["system_prompt"], obs)
    done = False
    while not done:
        reply = _reply(policy, agent, obs, len(ep.turns), rng)
        obs, reward, terminated, truncated, info = env.step(reply)
        ep.turns.append(Turn(reply, obs, float(reward), bool(terminated), bool(truncated), bool(info["success"])))
        done = terminated or truncated
    env.close()
    return ep


def reference_episodes(env_id: str, env_kwargs: dict[str, Any], noise: Callable[[int], int] | None,
                       policies: Sequence[str] = POLICIES, seeds: Sequence[int] = SEEDS) -> list[Episode]:
    return [local_episode(env_id, env_kwargs, s, None if noise is None else noise(s), p) for p in policies for s in seeds]


def assert_same_episode(got: Episode, want: Episode, path: str, *, text: bool = True, per_turn_rewards: bool = True,
                        end_kind: bool = True) -> None:
    """``got`` (from ``path``) equals ``want`` (local): texts (when the path shows text),
    per-turn rewards (when it has them), the return, episode ends (terminated vs truncated
    when the path tells them apart, else only where the episode ends: ``end_kind=False``,
    with ``got.turns[k].terminated`` holding "done") and success."""
    where = f"{path}: {want.env_id} seed {want.seed}"
    if text:
        assert got.system_prompt == want.system_prompt, f"{where}: system prompt"
        assert got.first_observation == want.first_observation, f"{where}: first observation"
    assert len(got.turns) == len(want.turns), f"{where}: {len(got.turns)} turns, want {len(want.turns)}"
    for k, (g, w) in enumerate(zip(got.turns, want.turns)):
        if text:
            assert g.observation == w.observation, f"{where} turn {k}: observation"
        if per_turn_rewards:
            assert g.reward == w.reward, f"{where} turn {k}: reward {g.reward} != {w.reward}"
        if end_kind:
            assert (g.terminated, g.truncated) == (w.terminated, w.truncated), f"{where} turn {k}: episode end"
        else:
            assert g.terminated == (w.terminated or w.truncated), f"{where} turn {k}: episode end"
        assert g.success == w.success, f"{where} turn {k}: success"
    assert abs(got.episode_return - want.episode_return) < 1e-9, f"{where}: return"
