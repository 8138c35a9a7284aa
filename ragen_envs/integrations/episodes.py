"""Episode identities that travel inside a trainer's prompt column.

Trainers pass rollout code the prompt only (TRL) or the dataset row (verl). A prompt written
by :func:`episode_prompt` names the initial state exactly: ``ragen-episode:`` followed by JSON
``{"env_id", "seed", "noise_seed", "env_kwargs"}``. Every copy of a prompt in a group is the
same initial state (same layout seed and noise seed).

:class:`ProtocolEpisode` plays one such episode token-in/token-out for any trainer: the prompt
ids are the chat template's ``[system, user(obs_1)]`` with the generation prompt and forced
prefix; each reply is appended exactly as sampled (mask 1), the decoded text (prefix + reply)
goes to ``env.step`` unchanged, and the template's increment for the next observation is
appended with mask 0 (:class:`~ragen_envs.lm.chat.ChatFormat`), exactly as
:func:`ragen_envs.starpo.rollout.collect_rollouts` does. No trainer is imported here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import gymnasium as gym

from ..protocol.jsonsafe import loads_untrusted

__all__ = ["PROMPT_TAG", "EpisodeSpec", "ProtocolEpisode", "episode_prompt", "parse_episode_prompt", "spec_from_row"]

PROMPT_TAG = "ragen-episode:"


@dataclass(frozen=True)
class EpisodeSpec:
    """Which initial state an episode starts from."""

    env_id: str
    seed: int
    noise_seed: int | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)


def _checked_spec(env_id: Any, seed: Any, noise_seed: Any, env_kwargs: Any, source: str) -> EpisodeSpec:
    """An :class:`EpisodeSpec` whose parts pass the env gate (``ragen_envs.envs.limits``): a
    registered id, seeds that are integers in ``[0, 2**32)``, env kwargs fit for a file's (a
    prompt travels in a dataset: never an operator-only keyword, e.g. a remote backend's host)."""
    from ..envs.base import check_seed
    from ..envs.limits import validate_env_kwargs

    kwargs = validate_env_kwargs(env_id, env_kwargs, source=source)
    return EpisodeSpec(env_id=env_id, seed=check_seed("seed", seed),
                       noise_seed=None if noise_seed is None else check_seed("noise_seed", noise_seed), env_kwargs=kwargs)


def episode_prompt(env_id: str, seed: int, noise_seed: int | None = None, env_kwargs: Mapping[str, Any] | None = None) -> str:
    """The dataset prompt that names one initial state (JSON after :data:`PROMPT_TAG`)."""
    spec = _checked_spec(env_id, seed, noise_seed, env_kwargs, "env_kwargs")
    return PROMPT_TAG + json.dumps({"env_id": spec.env_id, "seed": spec.seed, "noise_seed": spec.noise_seed,
                                    "env_kwargs": dict(spec.env_kwargs)}, sort_keys=True)


def parse_episode_prompt(prompt: Any) -> EpisodeSpec:
    """The :class:`EpisodeSpec` inside a prompt written by :func:`episode_prompt` (also as the
    content of a one-message conversational prompt)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], dict):
        prompt = prompt[0].get("content")
    if not isinstance(prompt, str) or not prompt.startswith(PROMPT_TAG):
        raise ValueError(
            f"rollout prompts must come from ragen_envs.integrations.trl.make_dataset / episode_prompt "
            f"(a string starting with {PROMPT_TAG!r}), got {str(prompt)[:60]!r}"
        )
    try:
        spec = loads_untrusted(prompt[len(PROMPT_TAG):], allow_nan=False)  # UntrustedJSONError is a ValueError
        if not isinstance(spec, dict):
            raise ValueError("not a JSON object")
        return _checked_spec(spec["env_id"], spec["seed"], spec.get("noise_seed"), spec.get("env_kwargs"),
                             "episode prompt")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ValueError(f"malformed episode prompt {prompt[:80]!r}: {str(exc) or type(exc).__name__}") from None


def spec_from_row(row: Mapping[str, Any]) -> EpisodeSpec:
    """The spec of a dataset row: ``extra_info`` with ``env_id`` / ``seed`` (/ ``noise_seed`` /
    ``env_kwargs`` as a dict or JSON string) when present, else the episode prompt in
    ``raw_prompt`` or ``prompt`` (a string or a one-message conversation)."""
    extra = row.get("extra_info")
    if isinstance(extra, Mapping) and "env_id" in extra and "seed" in extra:
        try:
            kwargs = extra.get("env_kwargs") or {}
            if isinstance(kwargs, str):
                kwargs = loads_untrusted(kwargs, allow_nan=False) if kwargs else {}
            if not isinstance(kwargs, Mapping):
                raise ValueError("env_kwargs must be an object")
            noise = extra.get("noise_seed")
            noise = None if noise is None or int(noise) < 0 else int(noise)
            prompt = episode_prompt(str(extra["env_id"]), int(extra["seed"]), noise, dict(kwargs))
        except (ValueError, TypeError, OverflowError) as exc:
            raise ValueError(f"malformed extra_info {str(dict(extra))[:80]!r}: {exc}") from None
        return parse_episode_prompt(prompt)
    for key in ("raw_prompt", "prompt"):
        if key in row:
            prompt = row[key]
            if hasattr(prompt, "tolist"):
                prompt = prompt.tolist()
            return parse_episode_prompt(list(prompt) if isinstance(prompt, tuple) else prompt)
    raise ValueError("the row names no episode: give extra_info {env_id, seed, ...} or an episode prompt")


class ProtocolEpisode:
    """One episode at token level: ``prompt_ids`` + ``completion_ids`` is the sequence,
    ``env_mask`` marks the sampled ids (1) among the completion, ``logprobs`` their sampling
    log-probs (0.0 on env tokens; None once any reply came without them)."""

    def __init__(self, spec: EpisodeSpec, fmt) -> None:
        self.spec, self.fmt = spec, fmt
        self.env = gym.make(spec.env_id, **dict(spec.env_kwargs))
        options = None if spec.noise_seed is None else {"noise_seed": spec.noise_seed}
        obs, info = self.env.reset(seed=spec.seed, options=options)
        self.system_prompt = info["system_prompt"]
        self.observations: list[str] = [obs]
        self.messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": obs}]
        self.prompt_ids: list[int] = fmt.first(self.system_prompt, obs)
        self.completion_ids: list[int] = []
        self.env_mask: list[int] = []
        self.logprobs: list[float] | None = []
        self.replies: list[str] = []  # the text each turn sent to env.step
        self.rewards: list[float] = []
        self.infos: list[dict] = []
        self.success = self.terminated = self.truncated = self.done = False

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def episode_return(self) -> float:
        return float(sum(self.rewards))

    def add_reply(self, ids, stopped: bool, logprobs=None) -> bool:
        """Append one reply (its sampled ids; ``stopped``: it ended with the end-of-turn
        token), play it, append the next observation's template tokens. Returns done."""
        fmt = self.fmt
        if self.done:
            raise RuntimeError("the episode has ended")
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("an empty reply (at least one token expected)")
        self.completion_ids += ids
        self.env_mask += [1] * len(ids)
        self._logprobs(logprobs, len(ids))
        body = ids[:-1] if stopped and ids[-1] == fmt.eot_id else ids
        if not stopped:  # close the cut reply: not sampled, not trained
            self.completion_ids.append(fmt.eot_id)
            self.env_mask.append(0)
            self._logprobs([0.0], 1)
        text = fmt.prefix + fmt.tok.decode(body, skip_special_tokens=False)
        self.replies.append(text)
        obs, reward, terminated, truncated, info = self.env.step(text)
        self.rewards.append(float(reward))
        self.infos.append(info)
        self.success = bool(info.get("success", False))
        self.observations.append(obs)
        if terminated or truncated:
            self.terminated, self.truncated, self.done = bool(terminated), bool(truncated), True
            return True
        self.messages.append({"role": "assistant", "content": text})
        extra = fmt.append(self.messages, obs)
        self.messages.append({"role": "user", "content": obs})
        self.completion_ids += extra
        self.env_mask += [0] * len(extra)
        self._logprobs([0.0] * len(extra), len(extra))
        return False

    def _logprobs(self, values, n: int) -> None:
        if values is None or self.logprobs is None:
            self.logprobs = None
        else:
            if len(values) != n:
                raise ValueError(f"{len(values)} log-probs for {n} tokens")
            self.logprobs += [float(v) for v in values]

    def close(self) -> None:
        self.env.close()
