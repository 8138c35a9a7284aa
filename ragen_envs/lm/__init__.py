"""Causal-LM plumbing shared by the trainer (:mod:`ragen_envs.starpo`), the ``hf:`` agent and ``ragen serve``:

- :mod:`.chat` — the tokenizer as saved, and :class:`~.chat.ChatFormat` (token-in/token-out
  chat templating);
- :mod:`.engine` — the one token-sampling engine: the forward call with a KV cache, token
  drawing (temperature / top-p / greedy, per-row generators) and the continuous batch
  ``ragen serve`` decodes in;
- :mod:`.token_engine` — :class:`~.token_engine.TokenEngine`, ``ragen serve``'s generation
  thread: continuous batching of requests with fair places (``ragen_envs.serve`` is its HTTP);
- :mod:`.sampling` — one-turn batched sampling with a KV cache;
- :mod:`.sampler` — :class:`~.sampler.MultiTurnSampler`, the batched sampler that keeps each
  conversation's KV cache across turns;
- :mod:`.settings` — the protocol settings saved beside a trained model;
- :mod:`.masks` — loss-mask helpers.

Needs the ``train`` extra (torch, transformers), except :mod:`.settings` and :mod:`.masks`. Nothing here knows
an environment or the trainer.
"""
