"""The trainer's responders over :class:`~ragen_envs.lm.sampler.MultiTurnSampler` (the batched
multi-turn KV-cache sampler, shared with the ``hf:`` agent)."""

from __future__ import annotations

import torch

from ..lm.sampler import MultiTurnSampler

__all__ = ["MultiTurnSampler", "CachedResponder", "vllm_available"]


class CachedResponder:
    """A :data:`~.rollout.Responder` backed by :class:`MultiTurnSampler` (same arguments as
    :class:`~.rollout.ModelResponder`). One instance per :func:`~.rollout.collect_rollouts`
    call: its cache belongs to the current weights."""

    def __init__(self, model, fmt, pad_id: int, max_new_tokens: int, temperature: float, generator: torch.Generator,
                 top_p: float = 1.0, batch_size: int | None = None) -> None:
        self.fmt = fmt
        self.sampler = MultiTurnSampler(model, eot_id=fmt.eot_id, pad_id=pad_id, max_new_tokens=max_new_tokens,
                                        temperature=temperature, generator=generator, top_p=top_p, batch_size=batch_size)

    def __call__(self, prompts, envs):
        return self.sampler.generate(prompts)


def vllm_available() -> bool:
    """Whether the optional vLLM backend could be used (vLLM installed and a CUDA device).
    No vLLM backend ships yet: this only reports why it would be skipped."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()
