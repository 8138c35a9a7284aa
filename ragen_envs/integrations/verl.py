"""A verl agent loop that plays whole protocol episodes (verl 0.9.x; its own venv: ``make verl-venv``).

verl generates through ``self.server_manager.generate(request_id=..., prompt_ids=...,
sampling_params=...)`` (vLLM or SGLang servers, token ids in and out). :class:`RagenAgentLoop`
subclasses verl's ``AgentLoopBase`` and implements ``async run(sampling_params, **row)``:

1. the row names the initial state (``extra_info`` = ``{env_id, seed, noise_seed,
   env_kwargs}``, or an episode prompt; :func:`make_rows` writes both), so the ``rollout.n``
   copies of a row are one group with one initial state;
2. prompt ids = the tokenizer's chat template over ``[system, user(obs_1)]`` with the
   generation prompt and the forced ``<think>`` prefix
   (:class:`~ragen_envs.lm.chat.ChatFormat`, the project's own token-in/token-out rule);
3. each turn the whole sequence so far goes to the server; the returned ids are appended as
   they are (``response_mask`` 1, log-probs kept), the decoded reply goes to ``env.step``
   unchanged, and the template's increment for the next observation is appended with mask 0;
4. the episode return (the sum of the env's per-turn rewards, format penalties included) is
   ``reward_score``, so verl's reward manager is bypassed and the return lands on the last
   response token; per-turn rewards, success and turns go to ``extra_fields``.

An episode that would outgrow ``data.max_response_length`` stops there (its response is cut to
the limit, ``extra_fields["cut_at_response_length"]`` is True) and keeps the return so far.

Registration: :data:`AGENT_LOOP_YAML` (written by ``python -m ragen_envs.integrations.verl
--write-config DIR``) lists ``{name: ragen_agent, _target_: ragen_envs.integrations.verl.RagenAgentLoop}``
for ``actor_rollout_ref.rollout.agent.agent_loop_config_path``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any, Mapping, Sequence
from uuid import uuid4

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
except ImportError as exc:  # pragma: no cover - exercised only outside the verl venv
    raise ImportError(
        "the verl integration needs verl 0.9.x, which pins transformers < 5.11 and so lives in its own "
        "venv: `make verl-venv` builds .venv-verl (see docs/integrations.md)"
    ) from exc

from ..lm.chat import ChatFormat
from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted
from .episodes import ProtocolEpisode, episode_prompt, spec_from_row

__all__ = ["RagenAgentLoop", "AGENT_NAME", "AGENT_LOOP_YAML", "make_rows", "write_config"]

AGENT_NAME = "ragen_agent"
AGENT_LOOP_YAML = (
    f"- name: {AGENT_NAME}\n"
    "  _target_: ragen_envs.integrations.verl.RagenAgentLoop\n"
    "  prefix: <think>\n"
    "  max_new_tokens: 100\n"
)


@register(AGENT_NAME)
class RagenAgentLoop(AgentLoopBase):
    """Whole RAGEN episodes, one per ``run`` call. Keywords (set them in the agent-loop YAML
    entry, next to ``_target_``): ``prefix`` (default ``"<think>"``; ``""`` for ``think=False``
    envs), ``max_new_tokens`` per reply (default 100, the reference's), ``eot_token``
    (default the tokenizer's eos, ``<|im_end|>`` for Qwen2.5-Instruct)."""

    def __init__(self, *args, prefix: str = "<think>", max_new_tokens: int = 100, eot_token: str | None = None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        self.prefix = str(prefix)
        self.max_new_tokens = max_new_tokens
        self.eot_token = eot_token
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        spec = spec_from_row(kwargs)
        fmt = ChatFormat(self.tokenizer, self.prefix, self.eot_token)
        loop = asyncio.get_running_loop()  # env work runs off the event loop
        ep = await loop.run_in_executor(None, ProtocolEpisode, spec, fmt)
        request_id = uuid4().hex
        cut = False
        try:
            while not ep.done:
                room = self.response_length - len(ep.completion_ids)
                if room <= 0:
                    cut = True
                    break
                params = {**sampling_params, "max_tokens": min(self.max_new_tokens, room)}
                out = await self.server_manager.generate(request_id=request_id, prompt_ids=ep.token_ids,
                                                         sampling_params=params)
                ids = list(out.token_ids)
                stopped = bool(ids) and ids[-1] == fmt.eot_id
                lps = list(out.log_probs) if out.log_probs else None
                if not stopped and len(ids) < params["max_tokens"]:
                    # the server stopped on the end-of-turn token but left it out: it was sampled
                    ids, stopped = ids + [fmt.eot_id], True
                    lps = lps + [0.0] if lps is not None else None
                await loop.run_in_executor(None, ep.add_reply, ids, stopped, lps)
        finally:
            ep.close()
        n = min(len(ep.completion_ids), self.response_length)
        cut = cut or n < len(ep.completion_ids)
        return AgentLoopOutput(
            prompt_ids=ep.prompt_ids,
            response_ids=ep.completion_ids[:n],
            response_mask=ep.env_mask[:n],
            response_logprobs=ep.logprobs[:n] if ep.logprobs else None,
            reward_score=ep.episode_return,
            num_turns=1 + 2 * len(ep.rewards),
            metrics={},
            extra_fields={
                "turn_scores": list(ep.rewards),
                "success": bool(ep.success),
                "env_turns": len(ep.rewards),
                "terminated": ep.terminated,
                "truncated": ep.truncated,
                "cut_at_response_length": cut,
                "env_id": spec.env_id,
                "seed": spec.seed,
            },
        )


def make_rows(env_id: str, seeds: Sequence[int], noise_seeds: Sequence[int | None] | None = None,
              env_kwargs: Mapping[str, Any] | None = None, data_source: str = "ragen") -> list[dict]:
    """verl dataset rows (write them to parquet): one per initial state, with the episode
    prompt as a one-message conversation, ``agent_name`` and ``extra_info``."""
    noise = list(noise_seeds) if noise_seeds is not None else [None] * len(seeds)
    if len(noise) != len(seeds):
        raise ValueError(f"noise_seeds has {len(noise)} entries for {len(seeds)} seeds")
    rows = []
    for i, (seed, ns) in enumerate(zip(seeds, noise)):
        prompt = episode_prompt(env_id, int(seed), ns, env_kwargs)
        rows.append({
            "data_source": data_source,
            "prompt": [{"role": "user", "content": prompt}],
            "agent_name": AGENT_NAME,
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"index": i, "env_id": env_id, "seed": int(seed), "noise_seed": -1 if ns is None else int(ns),
                           "env_kwargs": json.dumps(dict(env_kwargs or {}), sort_keys=True)},
        })
    return rows


def write_config(out_dir: str | Path, env_id: str, train_seeds: Sequence[int], val_seeds: Sequence[int],
                 env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write ``agent_loop.yaml``, ``train.parquet`` and ``val.parquet`` into ``out_dir``."""
    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"agent_loop": out / "agent_loop.yaml", "train": out / "train.parquet", "val": out / "val.parquet"}
    paths["agent_loop"].write_text(AGENT_LOOP_YAML)
    pd.DataFrame(make_rows(env_id, train_seeds, env_kwargs=env_kwargs)).to_parquet(paths["train"])
    pd.DataFrame(make_rows(env_id, val_seeds, env_kwargs=env_kwargs)).to_parquet(paths["val"])
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ragen_envs.integrations.verl",
                                description="write the agent-loop YAML and train/val parquet files for verl")
    p.add_argument("--write-config", required=True, metavar="DIR")
    p.add_argument("--env", default="ragen/Sokoban-v0")
    p.add_argument("--train-seeds", type=int, default=10_000, help="number of training initial states (seeds 0..N-1)")
    p.add_argument("--val-seeds", type=int, default=256, help="number of validation states (seeds 10^6 ..)")
    p.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON")
    args = p.parse_args(argv)
    kwargs = {}
    for pair in args.env_kwarg:
        key, _, value = pair.partition("=")
        try:
            kwargs[key] = loads_untrusted(value, allow_nan=False)
        except UntrustedJSONError as exc:
            p.error(f"--env-kwarg {key}: {exc}")
    paths = write_config(args.write_config, args.env, range(args.train_seeds),
                         range(1_000_000, 1_000_000 + args.val_seeds), kwargs)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
