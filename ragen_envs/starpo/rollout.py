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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..lm.masks import mask_spans
from ..protocol import Episode, Turn
from ..vector import make_vec
from .policy import ChatFormat, sample_replies

__all__ = ["Trajectory", "Responder", "ModelResponder", "ScriptedResponder", "collect_rollouts", "unbatch_info"]

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
) -> list[Trajectory]:
    """Play ``num_groups x group_size`` episodes; group g plays layout seed ``base_seed + g``.

    Returns the trajectories in (group, member) order. Per turn, all live trajectories go to
    ``responder`` in one call (one batched generation).
    """
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
        current_obs = list(obs)
        live = list(range(n))
        while live:
            replies = responder([trajs[i].token_ids for i in live], [envs[i] for i in live])
            actions = [""] * n
            texts = {}
            for i, (ids, stopped) in zip(live, replies):
                t = trajs[i]
                if not ids:
                    raise ValueError("a responder returned an empty reply (at least one token expected)")
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
