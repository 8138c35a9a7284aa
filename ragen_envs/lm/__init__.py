"""Causal-LM plumbing shared by the trainer (:mod:`ragen_envs.starpo`) and the ``hf:`` agent:

- :mod:`.chat` — the tokenizer as saved, and :class:`~.chat.ChatFormat` (token-in/token-out
  chat templating);
- :mod:`.sampling` — one-turn batched sampling with a KV cache, token drawing;
- :mod:`.sampler` — :class:`~.sampler.MultiTurnSampler`, the batched sampler that keeps each
  conversation's KV cache across turns;
- :mod:`.settings` — the protocol settings saved beside a trained model;
- :mod:`.masks` — loss-mask helpers.

Needs the ``train`` extra (torch, transformers), except :mod:`.settings` and :mod:`.masks`. Nothing here knows
an environment or the trainer.
"""
