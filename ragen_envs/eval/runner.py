"""The env loop: one agent plays one episode and the result is an :class:`Episode` record.

Model agents (those with ``reply`` / ``areply``, returning a :class:`~ragen_envs.agents.Reply`)
also leave, per turn, the raw reply, token usage, latency and attempts in
``episode.meta["turns"]`` (one dict per turn, aligned with ``episode.turns``).

An env wrapped in :class:`~ragen_envs.vision.ImageObservation` gives dict observations: the
agent gets them as OpenAI-style content parts (text + PNG image), the record keeps their text
(the state shown as the marker ``<image>``); earlier turns go back into the history as that
text, so only the latest state is sent as a picture.

An agent with ``supports_sessions = True`` (the ``hf:`` agent) gets a ``session`` key per
episode with every request, and ``end_session(session)`` when the episode is over, so it can
keep the episode's token history and KV cache between turns. The key is an
:class:`EpisodeSession`: one per episode (compared by identity), carrying the episode's
``stream`` (env id, seed, noise seed), from which the ``hf:`` agent seeds the episode's own
sampling generator.

Context windows (``context_window_mode``, the trainer's RAGEN-2 modes): with ``full`` (the
default) the agent gets the whole conversation, as above. With ``limited_multi_turn`` or
``single_turn`` it gets, each turn, exactly the window the trainer builds for that turn:
:func:`ragen_envs.protocol.context.context_messages` over the episode's observations and its
earlier replies written back as in ``full`` (:func:`~ragen_envs.protocol.episode.history_reply`).
The episode record is the same either way (every turn's observation and raw reply). An
``hf:`` agent with token history is sent the same messages; from the session's ``window`` it
builds the trainer's token prompts (``limited_multi_turn``: a fresh start + the episode's own
sampled ids; ``single_turn``: the messages encoded fresh, as the trainer does too).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from ..agents import Agent
from ..protocol import Episode, Turn
from ..protocol.context import check_context_window, context_messages
from ..protocol.episode import history_reply
from ..vision import content_parts, text_record

__all__ = ["EpisodeSession", "run_episode", "arun_episode", "turn_messages"]


def _start(env: gym.Env, seed: int, noise_seed: int | None, env_id: str | None) -> tuple[Any, Episode]:
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
    return obs, episode


def _user_content(obs: Any) -> Any:
    """What the agent is sent for an observation: the text, or content parts for an image one."""
    return obs if isinstance(obs, str) else content_parts(obs)


def turn_messages(episode: Episode, obs: Any, context_window_mode: str = "full",
                  max_context_window: int = -1) -> list[dict[str, Any]]:
    """The messages the agent answers next: the episode so far (``episode.turns``) and the
    current observation ``obs``. ``full``: the whole conversation (replies written back as the
    reference does); a windowed mode: :func:`~ragen_envs.protocol.context.context_messages`
    for this turn, over the same replies (its observations must be text)."""
    if context_window_mode == "full":
        return episode.messages() + [{"role": "user", "content": _user_content(obs)}]
    if not isinstance(obs, str):
        raise ValueError(f"context_window_mode={context_window_mode} needs text observations, not pictures")
    observations = [t.observation for t in episode.turns] + [obs]
    replies = [history_reply(t.response, t.info, episode.think) for t in episode.turns]
    return context_messages(observations, replies, len(episode.turns), context_window_mode, max_context_window,
                            episode.system_prompt)


def _step(env: gym.Env, episode: Episode, obs: Any, reply: Any) -> tuple[Any, bool]:
    """Send one reply (a str or a Reply) to the env and record the turn."""
    text = reply if isinstance(reply, str) else reply.text
    next_obs, reward, terminated, truncated, info = env.step(text)
    episode.turns.append(Turn(observation=text_record(obs), response=text, reward=float(reward), info=info))
    if not isinstance(reply, str):
        episode.meta.setdefault("turns", []).append(reply.record())
    done = bool(terminated or truncated)
    if done:
        episode.final_observation = text_record(next_obs)
        episode.terminated, episode.truncated = bool(terminated), bool(truncated)
    return next_obs, done


class EpisodeSession:
    """The ``session`` key of one episode. Equal only to itself (two episodes of one seed are
    two sessions); ``stream`` = ``(env id, seed, noise seed or -1)`` names the episode for
    agents that draw its tokens from a generator of its own, so the episode's replies do not
    depend on which other episodes shared a batch with it. ``window``: the episode's context
    mode (``full``, ``limited_multi_turn``, ``single_turn``), from which an ``hf:`` agent with
    token history builds the trainer's ``limited_multi_turn`` prompts token for token."""

    __slots__ = ("stream", "window")

    def __init__(self, env_id: str | None, seed: int, noise_seed: int | None = None, window: str = "full") -> None:
        self.stream = (str(env_id), int(seed), -1 if noise_seed is None else int(noise_seed))
        self.window = window

    def __repr__(self) -> str:
        return f"EpisodeSession{self.stream!r}"


def _session_kwargs(agent: Agent, episode: Episode, noise_seed: int | None, window: str = "full") -> dict[str, Any]:
    if not getattr(agent, "supports_sessions", False):
        return {}
    return {"session": EpisodeSession(episode.env_id, episode.seed, noise_seed, window)}


def _end_session(agent: Agent, kwargs: dict[str, Any]) -> None:
    if kwargs:
        agent.end_session(kwargs["session"])


def run_episode(
    env: gym.Env,
    agent: Agent,
    seed: int,
    noise_seed: int | None = None,
    env_id: str | None = None,
    context_window_mode: str = "full",
    max_context_window: int = -1,
) -> Episode:
    """Reset ``env`` with ``seed`` and let ``agent`` answer until the episode ends.

    The agent sees the chat history the way the reference builds it (system message, user
    observations, its earlier replies reformatted) with the latest observation last; with a
    windowed ``context_window_mode`` the trainer's window of it (:func:`turn_messages`).
    """
    check_context_window(context_window_mode, max_context_window)
    obs, episode = _start(env, seed, noise_seed, env_id)
    reply_fn = getattr(agent, "reply", None)
    think = episode.think
    session = _session_kwargs(agent, episode, noise_seed, context_window_mode) if reply_fn is not None else {}
    start = time.monotonic()
    try:
        while True:
            messages = turn_messages(episode, obs, context_window_mode, max_context_window)
            reply = reply_fn(messages, think=think, **session) if reply_fn is not None else agent.act(messages)
            obs, done = _step(env, episode, obs, reply)
            if done:
                break
    finally:
        _end_session(agent, session)
    if reply_fn is not None:
        episode.meta["elapsed_s"] = round(time.monotonic() - start, 6)
    return episode


async def arun_episode(
    env: gym.Env,
    agent: Agent,
    seed: int,
    noise_seed: int | None = None,
    env_id: str | None = None,
    context_window_mode: str = "full",
    max_context_window: int = -1,
) -> Episode:
    """:func:`run_episode` for an event loop: awaits ``agent.areply`` (or ``aact``) each turn.

    Errors of the agent (:class:`~ragen_envs.agents.AgentRequestError`, ...) propagate; the
    caller decides what an unfinished episode means.
    """
    check_context_window(context_window_mode, max_context_window)
    obs, episode = _start(env, seed, noise_seed, env_id)
    areply = getattr(agent, "areply", None)
    think = episode.think
    session = _session_kwargs(agent, episode, noise_seed, context_window_mode) if areply is not None else {}
    start = time.monotonic()
    try:
        while True:
            messages = turn_messages(episode, obs, context_window_mode, max_context_window)
            reply = await areply(messages, think=think, **session) if areply is not None else await agent.aact(messages)
            obs, done = _step(env, episode, obs, reply)
            if done:
                break
    finally:
        _end_session(agent, session)
    episode.meta["elapsed_s"] = round(time.monotonic() - start, 6)
    return episode
