"""The env loop: one agent plays one episode and the result is an :class:`Episode` record."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from ..agents import Agent
from ..protocol import Episode, Turn

__all__ = ["run_episode"]


def run_episode(
    env: gym.Env,
    agent: Agent,
    seed: int,
    noise_seed: int | None = None,
    env_id: str | None = None,
) -> Episode:
    """Reset ``env`` with ``seed`` and let ``agent`` answer until the episode ends.

    The agent sees the chat history the way the reference builds it (system message, user
    observations, its earlier replies reformatted) with the latest observation last.
    """
    options: dict[str, Any] | None = None if noise_seed is None else {"noise_seed": noise_seed}
    obs, info = env.reset(seed=seed, options=options)
    base = env.unwrapped
    episode = Episode(
        env_id=env_id or (env.spec.id if env.spec else type(base).__name__),
        seed=seed,
        noise_seed=noise_seed,
        system_prompt=info.get("system_prompt", ""),
        think=bool(getattr(base, "think", True)),
    )
    while True:
        messages = episode.messages() + [{"role": "user", "content": obs}]
        reply = agent.act(messages)
        next_obs, reward, terminated, truncated, info = env.step(reply)
        episode.turns.append(Turn(observation=obs, response=reply, reward=float(reward), info=info))
        obs = next_obs
        if terminated or truncated:
            break
    episode.final_observation = obs
    episode.terminated, episode.truncated = bool(terminated), bool(truncated)
    return episode
