"""Whole multi-turn episodes inside TRL's ``GRPOTrainer`` (the ``trl`` extra, trl 1.16).

TRL hands a ``rollout_func`` nothing but the prompt list (each prompt already repeated
``num_generations`` times, consecutively). So each prompt *is* the episode's identity:
:func:`episode_prompt` writes ``ragen-episode:{"env_id": ..., "seed": ..., "noise_seed": ...,
"env_kwargs": ...}`` and :func:`make_dataset` builds a dataset of such prompts, one row per
initial state. The ``num_generations`` copies of a row are one group: same layout seed, same
noise seed, so the same initial state and, with a noise seed, the same slips.

:func:`make_rollout_func` returns ``rollout_func(prompts, trainer)`` that plays every episode
through the exact protocol, token-in/token-out (as :func:`ragen_envs.starpo.rollout.collect_rollouts`):

* ``prompt_ids`` = the trainer's chat template over ``[system, user(first observation)]``
  with the generation prompt and the forced reply prefix (``"<think>"`` by default);
* ``completion_ids`` = reply_1 + template increment + reply_2 + ...: each reply is exactly the
  sampled ids (ending with the end-of-turn token), each increment is what the chat template
  appends for the next observation (:class:`~ragen_envs.lm.chat.ChatFormat`);
* ``env_mask`` = 1 exactly on the sampled ids, 0 on every template / observation / prefix
  token and on an end-of-turn token closing a reply cut at ``max_new_tokens``;
* ``logprobs`` = the sampling log-probs from vLLM (0.0 on env tokens, which the mask drops)
  or None with the CPU sampler (TRL then skips the importance-sampling correction: the
  sampler runs the trainer's own weights);
* ``env_return`` (the episode's summed rewards: game rewards + format penalties),
  ``env_success`` and ``env_turns``: TRL forwards them to the reward functions;
  :func:`env_return_reward` is the reward function that returns ``env_return``.

The env receives the decoded reply (prefix + text) unchanged, so parsing, the format penalty
and budgets are the env's. Generation: the project's :class:`~ragen_envs.lm.sampler.MultiTurnSampler`
(KV cache kept across turns) on the trainer's model; with ``use_vllm=True`` and
``vllm_mode="server"``, TRL's vLLM client (token ids in, token ids + log-probs out).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..lm.chat import ChatFormat
from .episodes import PROMPT_TAG, EpisodeSpec, ProtocolEpisode, episode_prompt, parse_episode_prompt

__all__ = [
    "PROMPT_TAG",
    "EpisodeSpec",
    "episode_prompt",
    "parse_episode_prompt",
    "make_dataset",
    "make_rollout_func",
    "env_return_reward",
    "play_episodes",
    "ProtocolEpisode",
]

def make_dataset(env_id: str, seeds: Sequence[int], noise_seeds: Sequence[int | None] | None = None,
                 env_kwargs: Mapping[str, Any] | None = None):
    """A ``datasets.Dataset`` with one ``prompt`` per initial state (plus ``seed`` /
    ``noise_seed`` columns for reading; only ``prompt`` reaches the rollout function)."""
    from datasets import Dataset

    seeds = [int(s) for s in seeds]
    noise = list(noise_seeds) if noise_seeds is not None else [None] * len(seeds)
    if len(noise) != len(seeds):
        raise ValueError(f"noise_seeds has {len(noise)} entries for {len(seeds)} seeds")
    prompts = [episode_prompt(env_id, s, n, env_kwargs) for s, n in zip(seeds, noise)]
    return Dataset.from_dict({"prompt": prompts, "seed": seeds, "noise_seed": [-1 if n is None else n for n in noise]})


# ---------------------------------------------------------------------------------- playing
# A generator gets the live episodes' token ids and returns, for each, the reply ids, whether
# the reply ended with the end-of-turn token, and the sampling log-prob of each id (or None).
Generator = Callable[[Sequence[Sequence[int]]], list[tuple[list[int], bool, list[float] | None]]]


def play_episodes(specs: Sequence[EpisodeSpec], generate: Generator, fmt: ChatFormat) -> list[ProtocolEpisode]:
    """Play one episode per spec, all live episodes batched into one ``generate`` call per turn."""
    eps: list[ProtocolEpisode] = []
    try:
        for spec in specs:
            eps.append(ProtocolEpisode(spec, fmt))
        live = list(eps)
        while live:
            outs = generate([e.token_ids for e in live])
            live = [e for e, (ids, stopped, lps) in zip(live, outs) if not e.add_reply(ids, stopped, lps)]
        return eps
    finally:
        for e in eps:
            e.close()


def _sampler_generator(model, fmt: ChatFormat, pad_id: int, max_new_tokens: int, temperature: float, top_p: float,
                       generator) -> Generator:
    from ..lm.sampler import MultiTurnSampler

    sampler = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=pad_id, max_new_tokens=max_new_tokens,
                               temperature=temperature, generator=generator, top_p=top_p)

    def generate(prompts):
        return [(ids, stopped, None) for ids, stopped in sampler.generate(prompts)]

    return generate


def _vllm_generator(client, fmt: ChatFormat, max_new_tokens: int, temperature: float, top_p: float) -> Generator:
    """TRL's ``VLLMClient.generate`` on token ids; stops at the end-of-turn token."""

    def generate(prompts):
        out = client.generate(prompts=[list(p) for p in prompts], n=1, temperature=temperature, top_p=top_p,
                              max_tokens=max_new_tokens, logprobs=0,
                              generation_kwargs={"stop_token_ids": [fmt.eot_id], "skip_special_tokens": False})
        res = []
        for ids, lps in zip(out["completion_ids"], out["logprobs"]):
            ids = list(ids)
            lp = [float("nan") if x is None or x[0] is None else float(x[0]) for x in lps]
            stopped = bool(ids) and ids[-1] == fmt.eot_id
            if not stopped and len(ids) < max_new_tokens:  # vLLM dropped the stop token: put it back
                ids, lp, stopped = ids + [fmt.eot_id], lp + [float("nan")], True
            res.append((ids, stopped, lp))
        return res

    return generate


def make_rollout_func(*, prefix: str = "<think>", max_new_tokens: int = 100, temperature: float = 1.0,
                      top_p: float = 1.0, seed: int = 0, eot_token: str | None = None,
                      on_episodes: Callable[[list[ProtocolEpisode]], None] | None = None):
    """``rollout_func(prompts, trainer) -> dict`` for ``GRPOTrainer(rollout_func=...)``.

    ``prefix``: the forced start of every reply (part of the prompt ids, never trained;
    ``"<think>"`` as the reference, ``""`` for ``think=False`` envs). ``max_new_tokens``: the
    cap of one reply (the whole episode is as long as the env's turn budget makes it).
    ``seed``: the CPU sampler's ``torch.Generator`` seed (one stream per process, from
    ``SeedSequence([seed, process_index])``; advanced by each call).
    ``eot_token``: the end-of-turn token (default the tokenizer's eos, e.g. ``<|im_end|>``).
    ``on_episodes`` is called with the played episodes (logging, tests).
    """
    import torch

    gens: dict[int, torch.Generator] = {}

    def rollout_func(prompts: list, trainer) -> dict[str, list]:
        rank = int(getattr(getattr(trainer, "accelerator", None), "process_index", 0))
        if rank not in gens:  # one stream per process: ranks sample their prompts independently
            gens[rank] = torch.Generator().manual_seed(int(np.random.SeedSequence([int(seed), rank]).generate_state(1)[0]))
        gen = gens[rank]
        specs = [parse_episode_prompt(p) for p in prompts]
        tok = trainer.processing_class
        tok = getattr(tok, "tokenizer", tok)  # a processor wraps its tokenizer
        fmt = ChatFormat(tok, prefix, eot_token)
        if getattr(trainer, "use_vllm", False):
            vgen = getattr(trainer, "vllm_generation", None)
            if getattr(vgen, "mode", None) != "server" or getattr(vgen, "vllm_client", None) is None:
                raise ValueError("ragen rollouts support use_vllm=True only with vllm_mode='server' (TRL's vLLM client)")
            generate = _vllm_generator(vgen.vllm_client, fmt, max_new_tokens, temperature, top_p)
            eps = play_episodes(specs, generate, fmt)
        else:
            model = trainer.accelerator.unwrap_model(trainer.model)
            pad = tok.pad_token_id if tok.pad_token_id is not None else fmt.eot_id
            was_training = model.training
            model.eval()  # no dropout while sampling: the replies come from the weights TRL scores
            try:
                generate = _sampler_generator(model, fmt, pad, max_new_tokens, temperature, top_p, gen)
                eps = play_episodes(specs, generate, fmt)
            finally:
                model.train(was_training)
        if on_episodes is not None:
            on_episodes(eps)
        logprobs = [e.logprobs for e in eps]
        return {
            "prompt_ids": [e.prompt_ids for e in eps],
            "completion_ids": [e.completion_ids for e in eps],
            "logprobs": None if any(lp is None for lp in logprobs) else logprobs,
            "env_mask": [e.env_mask for e in eps],
            "env_return": [e.episode_return for e in eps],
            "env_success": [float(e.success) for e in eps],
            "env_turns": [len(e.rewards) for e in eps],
        }

    return rollout_func


def env_return_reward(completions: list, env_return: list[float] | None = None, **kwargs) -> list[float]:
    """A TRL reward function: the episode return the rollout function computed (the sum of
    the env's per-turn rewards, format penalties included)."""
    if env_return is None:
        raise ValueError("env_return_reward needs the 'env_return' field: use it with make_rollout_func's rollout_func")
    if len(env_return) != len(completions):
        raise ValueError(f"{len(env_return)} returns for {len(completions)} completions")
    return [float(r) for r in env_return]
