"""The tiny local model of the demo and the tests: a byte-level BPE trained on one env's text
and a small Qwen2-architecture causal LM, saved with ``save_pretrained`` (no downloads)."""

from __future__ import annotations

from pathlib import Path

from ..lm.chat import ChatFormat

__all__ = ["TINY_MODEL", "tiny_corpus", "build_tiny_policy"]

TINY_MODEL = {"hidden_size": 128, "num_layers": 4, "num_heads": 8, "intermediate_size": 384}
"""The tiny model's shape for ``ragen train`` / ``ragen sft`` without ``--model`` and ``make demo-think``
(0.93 M parameters with a 1,024-token vocabulary; keyword arguments of
:func:`ragen_envs.models.build_tiny_model`). ``make demo`` uses a smaller one, measured on its answer-only
task (``starpo.demo.DEMO``)."""


def tiny_corpus(env_id: str, env_kwargs: dict | None = None, episodes: int = 16) -> list[str]:
    """Text of one environment for a tiny tokenizer: expert and random episodes and expert
    replies with grounded think texts, with think on and off (prompts, replies, rewards)."""
    import gymnasium as gym

    from ..agents import make_agent
    from ..eval import run_episode
    from ..models import build_tiny_tokenizer

    env_kwargs = dict(env_kwargs or {})
    corpus: list[str] = []
    for think in (True, False):
        env = gym.make(env_id, **{**env_kwargs, "think": think})
        for spec in ("expert", "random"):
            agent = make_agent(spec, env=env)
            for seed in range(episodes):
                ep = run_episode(env, agent, 900_000 + seed)
                corpus += [ep.system_prompt, ep.final_observation] + [x for t in ep.turns for x in (t.observation, t.response)]
        env.close()
    from .expert import expert_trajectories

    probe_tok = build_tiny_tokenizer(corpus, vocab_size=300)
    for think in (True, False):
        fmt = ChatFormat(probe_tok, "<think>" if think else "<answer>")
        eps = expert_trajectories(env_id, fmt, range(900_000, 900_000 + 100), actions_per_turn=2,
                                  env_kwargs={**env_kwargs, "think": think})
        corpus += [turn.response for t in eps for turn in t.episode.turns]
    return corpus


def build_tiny_policy(path: str | Path, env_id: str, env_kwargs: dict | None = None, *, seed: int = 0,
                      vocab_size: int = 1024, tools: bool = False, **model_kwargs) -> Path:
    """A tiny causal LM + tokenizer for one environment, saved with ``save_pretrained``.

    The byte-level BPE is trained on that env's text only (:func:`tiny_corpus`); its grid
    cells (the legend's symbols) are one token each and no merge of them is learned, digits
    are single tokens, and the env's fixed sentences (instruction, turn reminder, headers)
    are single tokens (``ragen_envs.models.protocol_phrases``) — the prompt text is the
    env's, unchanged, but a tiny model's sequences are mostly state and reply. The result
    tokenizes identically whether loaded by :func:`load_tokenizer` or by ``AutoTokenizer``.
    ``tools``: the fixed strings of the tool-call layout TRL's ``environment_factory`` loop
    renders for this env are single tokens too (``ragen_envs.integrations.trl.tool_phrases``:
    the tools block with ``act``'s schema, the text around a call and a tool result), for
    ``ragen sft --format tools``; off, the tokenizer is the protocol one, token for token.
    ``model_kwargs`` go to ``ragen_envs.models.build_tiny_model``.
    """
    import gymnasium as gym

    from ..models import build_tiny_model, build_tiny_tokenizer, protocol_phrases

    env_kwargs = dict(env_kwargs or {})
    env = gym.make(env_id, **env_kwargs)
    legend = env.unwrapped.legend() or {}
    env.close()
    phrases = protocol_phrases(env_id, **env_kwargs) + ["system\n", "user\n", "assistant\n"]
    if tools:
        from ..integrations.trl import tool_phrases

        phrases += tool_phrases(env_id, **env_kwargs)
    tok = build_tiny_tokenizer(tiny_corpus(env_id, env_kwargs), vocab_size=vocab_size, grid_symbols="".join(legend),
                               phrases=phrases, split_digits=True)
    model = build_tiny_model(tok, seed=seed, **model_kwargs)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(path)
    model.save_pretrained(path)
    return path
