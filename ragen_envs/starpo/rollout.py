"""Multi-turn rollouts, token-in/token-out.

A rollout batch is ``num_groups`` initial states x ``group_size`` rollouts, played through
``ragen_envs.make_vec`` (group g plays seed ``base_seed + g``; noise shared inside a group
or not). Every turn, each live trajectory's token ids go to a *responder* (the model's
sampler, or the expert for SFT data), the reply ids are appended exactly as produced, the
decoded reply text (with the forced prefix) goes to the environment, and the next
observation's ids — the chat template's increment, see :class:`~.policy.ChatFormat` — are
appended after it. Nothing is decoded and tokenized again.

A :class:`Trajectory` keeps the ids, the loss mask (1 exactly on the responder's tokens,
its end-of-turn token included; 0 on system, user, template, prefix and any end-of-turn
token added after a reply cut at the length limit), each turn's last reply token, the
per-turn rewards, and the text record as a protocol :class:`~ragen_envs.protocol.Episode`.

Context windows (``context_window_mode``, RAGEN-2's names; :mod:`ragen_envs.protocol.context`):
in ``full`` the prompt of each turn is the trajectory's sequence so far. In
``limited_multi_turn`` it is the last ``max_context_window`` turns: a fresh start
``template([system, user(instruction + state block of the window's first turn)])`` followed
by the trajectory's own ids from that turn's reply on (sampled ids and template increments,
not tokenized again). In ``single_turn`` it is ``template([system, user(instruction +
summary + current state)])``, encoded fresh each turn. Either way the trajectory still keeps
the whole episode as one sequence (``token_ids``), and ``turn_prompts[j]`` the ids the model
was given at turn j; :meth:`Trajectory.turn_samples` are the per-turn training samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..lm.masks import mask_spans
from ..protocol import Episode, Turn
from ..protocol.context import check_context_window, context_messages, split_observation, window_start
from ..protocol.episode import history_reply
from ..vector import make_vec
from .policy import ChatFormat, sample_replies

__all__ = ["Trajectory", "Responder", "ModelResponder", "ScriptedResponder", "collect_rollouts", "turn_rows",
           "unbatch_info"]

# A responder gets the live trajectories' token ids and their envs; it returns for each the
# reply ids and whether the reply ended with the end-of-turn token.
Responder = Callable[[Sequence[Sequence[int]], Sequence[Any]], list[tuple[list[int], bool]]]


@dataclass
class Trajectory:
    """One episode as the trainer sees it (token level) plus its text record."""

    group: int
    member: int
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)  # index of each turn's last reply token
    turn_rewards: list[float] = field(default_factory=list)  # env step rewards (game + penalty)
    reasoning_scores: list[float] = field(default_factory=list)
    truncated_replies: int = 0  # replies cut at max_new_tokens
    episode: Episode | None = None
    turn_prompts: list[list[int]] = field(default_factory=list)  # windowed modes: the prompt ids of each turn
    # windowed modes: (mode, k), and per turn [s, a, b, n] (see turn_window)
    context_window: tuple[str, int] | None = None
    turn_windows: list[list[int]] = field(default_factory=list)

    def turn_samples(self) -> list[tuple[list[int], list[int]]]:
        """``[(ids, loss_mask), ...]``, one per turn: the prompt the model was given at that
        turn followed by its sampled ids (mask 1 exactly on those) — the reference's
        per-turn samples of ``limited_multi_turn`` / ``single_turn`` (only the last reply
        trained). Needs :attr:`turn_prompts` (a windowed rollout)."""
        spans = self.reply_token_spans()
        if len(self.turn_prompts) != len(spans):
            raise ValueError(f"turn_samples needs one prompt per turn: {len(self.turn_prompts)} prompts, {len(spans)} replies")
        out = []
        for prompt, (a, b) in zip(self.turn_prompts, spans):
            out.append((list(prompt) + self.token_ids[a:b], [0] * len(prompt) + [1] * (b - a)))
        return out

    @property
    def episode_return(self) -> float:
        return float(sum(self.turn_rewards))

    @property
    def success(self) -> bool:
        return bool(self.episode is not None and self.episode.success)

    @property
    def num_reply_tokens(self) -> int:
        return int(sum(self.loss_mask))

    def reply_token_spans(self) -> list[tuple[int, int]]:
        """``[(start, end_exclusive), ...]`` of each turn's reply tokens (from the mask)."""
        return mask_spans(self.loss_mask)


def turn_rows(trajs: Sequence[Trajectory], turn_rewards: Sequence[Sequence[float]],
              ) -> tuple[list[Trajectory], list[list[float]], list[int]]:
    """The per-turn training samples of windowed rollouts (the reference's ``limited_multi_turn``
    / ``single_turn`` updates): ``(rows, row_rewards, episodes)``, one row per turn in
    trajectory then turn order. Row j of trajectory e is :meth:`Trajectory.turn_samples`'s
    sample j, its one turn ending at its last token; its reward list is ``[R_e]``,
    R_e = Σ turn_rewards[e], so every turn of an episode carries the episode's return (on its
    last reply token); ``episodes[row] = e`` (GRPO counts each episode once per group)."""
    rows, rewards, episodes = [], [], []
    for e, (t, rs) in enumerate(zip(trajs, turn_rewards)):
        ret = float(sum(rs))
        for ids, mask in t.turn_samples():
            rows.append(Trajectory(group=t.group, member=t.member, token_ids=ids, loss_mask=mask,
                                   turn_ends=[len(ids) - 1], turn_rewards=[ret], episode=t.episode))
            rewards.append([ret])
            episodes.append(e)
    return rows, rewards, episodes


class ModelResponder:
    """Samples replies from a causal LM (see :func:`~.policy.sample_replies`)."""

    def __init__(self, model, fmt: ChatFormat, pad_id: int, max_new_tokens: int, temperature: float,
                 generator: torch.Generator, top_p: float = 1.0, batch_size: int | None = None) -> None:
        self.model, self.fmt, self.pad_id = model, fmt, pad_id
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.generator = generator
        self.batch_size = batch_size

    def __call__(self, prompts, envs):
        out = []
        step = self.batch_size or len(prompts) or 1
        for i in range(0, len(prompts), step):
            out += sample_replies(
                self.model, prompts[i : i + step], eot_id=self.fmt.eot_id, pad_id=self.pad_id,
                max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                generator=self.generator, top_p=self.top_p,
            )
        return out


class ScriptedResponder:
    """Replies from a text function of the env (e.g. the expert for SFT data, or fixed texts
    in tests): ``reply_fn(env, prompt_ids) -> text``; the text must start with the forced
    prefix; the ids are the tokenisation of the rest plus the end-of-turn token."""

    def __init__(self, fmt: ChatFormat, reply_fn: Callable[[Any, Sequence[int]], str]) -> None:
        self.fmt, self.reply_fn = fmt, reply_fn

    def __call__(self, prompts, envs):
        out = []
        for ids, env in zip(prompts, envs):
            text = self.reply_fn(env, ids)
            if not text.startswith(self.fmt.prefix):
                raise ValueError(f"scripted reply {text[:40]!r} does not start with the forced prefix {self.fmt.prefix!r}")
            out.append((self.fmt.encode(text[len(self.fmt.prefix):]) + [self.fmt.eot_id], True))
        return out


def unbatch_info(infos: dict, i: int) -> dict:
    """Env ``i``'s info dict out of a Gymnasium vector info (``key`` arrays + ``_key`` masks),
    numpy scalars turned back into Python values."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict):
            out[key] = unbatch_info(value, i)
            continue
        present = infos.get("_" + key)
        if present is not None and not bool(present[i]):
            continue
        out[key] = _py(value[i])
    return out


def _py(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


def collect_rollouts(
    env_id: str,
    base_seed: int,
    num_groups: int,
    group_size: int,
    responder: Responder,
    fmt: ChatFormat,
    *,
    shared_noise: bool = True,
    env_kwargs: dict[str, Any] | None = None,
    context_window_mode: str = "full",
    max_context_window: int = -1,
) -> list[Trajectory]:
    """Play ``num_groups x group_size`` episodes; group g plays layout seed ``base_seed + g``.

    Returns the trajectories in (group, member) order. Per turn, all live trajectories go to
    ``responder`` in one call (one batched generation). ``context_window_mode`` /
    ``max_context_window``: what each turn's prompt holds (module docstring).
    """
    check_context_window(context_window_mode, max_context_window)
    windowed = context_window_mode != "full"
    n = num_groups * group_size
    vec = make_vec(env_id, n, group_size=group_size, shared_noise=shared_noise, **(env_kwargs or {}))
    try:
        envs = vec.unwrapped.envs
        think = bool(getattr(envs[0].unwrapped, "think", True))
        obs, infos = vec.reset(seed=int(base_seed))
        trajs = [Trajectory(group=i // group_size, member=i % group_size) for i in range(n)]
        messages: list[list[dict[str, str]]] = []
        for i, t in enumerate(trajs):
            info = unbatch_info(infos, i)
            system = info["system_prompt"]
            noise = info["noise_seed"]
            t.episode = Episode(env_id=env_id, seed=int(info["seed"]), noise_seed=None if noise < 0 else int(noise),
                                system_prompt=system, think=think, meta={"group": t.group, "member": t.member})
            t.token_ids = fmt.first(system, obs[i])
            t.loss_mask = [0] * len(t.token_ids)
            messages.append([{"role": "system", "content": system}, {"role": "user", "content": obs[i]}])
            if windowed:
                try:
                    split_observation(obs[i], 1)
                except ValueError as exc:
                    raise ValueError(f"context_window_mode={context_window_mode} needs observations in the protocol's "
                                     f"turn layout; {env_id}'s are not ({exc})") from None
        current_obs = list(obs)
        live = list(range(n))
        reply_starts: list[list[int]] = [[] for _ in range(n)]
        while live:
            if windowed:
                prompts = []
                for i in live:
                    t = trajs[i]
                    prompt, tail = _window_prompt(t, current_obs[i], reply_starts[i], fmt, context_window_mode,
                                                  max_context_window)
                    t.turn_prompts.append(prompt)
                    t.context_window = (context_window_mode, max_context_window)
                    turn = len(t.turn_ends)
                    t.turn_windows.append([window_start(turn, max_context_window), tail, len(t.token_ids), len(prompt)])
                    prompts.append(prompt)
            else:
                prompts = [trajs[i].token_ids for i in live]
            replies = responder(prompts, [envs[i] for i in live])
            actions = [""] * n
            texts = {}
            for i, (ids, stopped) in zip(live, replies):
                t = trajs[i]
                if not ids:
                    raise ValueError("a responder returned an empty reply (at least one token expected)")
                reply_starts[i].append(len(t.token_ids))
                t.token_ids += list(ids)
                t.loss_mask += [1] * len(ids)
                t.turn_ends.append(len(t.token_ids) - 1)
                body = ids[:-1] if stopped and ids[-1] == fmt.eot_id else ids
                if not stopped:
                    t.token_ids.append(fmt.eot_id)  # close the turn; not sampled, not trained
                    t.loss_mask.append(0)
                    t.truncated_replies += 1
                texts[i] = fmt.prefix + fmt.tok.decode(list(body), skip_special_tokens=False)
                actions[i] = texts[i]
            obs, rewards, terminated, truncated, infos = vec.step(actions)
            still = []
            for i in live:
                t = trajs[i]
                info = unbatch_info(infos, i)
                reward = float(rewards[i])
                t.turn_rewards.append(reward)
                t.reasoning_scores.append(float(info.get("reasoning", {}).get("score", 0.0)))
                t.episode.turns.append(Turn(observation=current_obs[i], response=texts[i], reward=reward, info=info))
                if terminated[i] or truncated[i]:
                    t.episode.final_observation = obs[i]
                    t.episode.terminated, t.episode.truncated = bool(terminated[i]), bool(truncated[i])
                    continue
                messages[i].append({"role": "assistant", "content": texts[i]})
                extra = fmt.append(messages[i], obs[i])
                messages[i].append({"role": "user", "content": obs[i]})
                t.token_ids += extra
                t.loss_mask += [0] * len(extra)
                current_obs[i] = obs[i]
                still.append(i)
            live = still
        return trajs
    finally:
        vec.close()


def _window_prompt(t: Trajectory, observation: str, reply_starts: list[int], fmt: ChatFormat, mode: str,
                   k: int) -> tuple[list[int], int]:
    """The prompt ids of trajectory ``t``'s next turn under a windowed context mode, and where
    the part of them taken from ``t.token_ids`` starts there (a): the prompt is
    ``t.token_ids[:b]`` when a = 0, else a fresh ``fmt.first(system, window's first user
    message)`` + ``t.token_ids[a:b]`` (b = ``len(t.token_ids)``; a = b: nothing taken)."""
    turn = len(t.turn_ends)
    start = window_start(turn, k)
    end = len(t.token_ids)
    if mode == "limited_multi_turn" and start == 0:
        return list(t.token_ids), 0  # the whole history fits: the full sequence, as sampled
    ep = t.episode
    observations = [x.observation for x in ep.turns] + [observation]
    if mode == "limited_multi_turn":
        responses = [x.response for x in ep.turns]  # (only the first user message is read: the rest are ids)
        first = context_messages(observations, responses, turn, mode, k, ep.system_prompt)[1]["content"]
        # turns start..turn-1 as played: their sampled ids and the template's increments
        tail = reply_starts[start] if start < turn else end
        return fmt.first(ep.system_prompt, first) + t.token_ids[tail:], tail
    actions = [history_reply(x.response, x.info, ep.think) for x in ep.turns]
    content = context_messages(observations, actions, turn, mode, k, ep.system_prompt)[1]["content"]
    return fmt.first(ep.system_prompt, content), end
