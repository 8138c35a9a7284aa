"""Tiny local models for CPU tests and demos (no hub downloads).

``build_tiny_checkpoint(path)`` trains a byte-level BPE tokenizer on protocol text (the
environments' own prompts and well-formed answers), builds a small randomly initialised
Qwen2-architecture causal LM, and writes both with ``save_pretrained`` — so they load back
through exactly the code path a real checkpoint (e.g. Qwen2.5-0.5B-Instruct) uses:
``AutoTokenizer.from_pretrained(path)`` / ``AutoModelForCausalLM.from_pretrained(path)``.
Requires the ``train`` extra (torch, transformers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

__all__ = ["CHATML_TEMPLATE", "CHATML_RESPONSE_TEMPLATE", "SPECIAL_TOKENS", "require_train_extra", "protocol_corpus", "protocol_phrases",
           "build_tiny_tokenizer", "build_tiny_model", "build_tiny_checkpoint", "QWEN25_05B", "build_random_checkpoint"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen2.5's ChatML layout, without its default system prompt, with two additions:
#
# * tools and tool calls exactly as Qwen2.5's template renders them: with ``tools`` the
#   system message is followed by ``# Tools`` and the JSON schemas; an assistant message's
#   calls are ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`` blocks after
#   its content; a run of ``tool`` messages is one ``user`` message of ``<tool_response>``
#   blocks. This is the layout TRL's ``environment_factory`` loop renders for Qwen models,
#   so ``ragen sft --format tools`` teaches a local model the format a Qwen user trains in.
# * ``{% generation %}`` markers around each assistant reply and its end-of-turn token (the
#   tokens a model writes), so TRL's ``SFTTrainer(assistant_only_loss=True)`` masks exactly
#   those. The markers render as nothing.
#
# Without tools and tool messages the text is byte for byte the plain ChatML layout
# ``<|im_start|>{role}\n{content}<|im_end|>\n`` per message (+ ``<|im_start|>assistant\n``),
# which token-in/token-out rollouts, the protocol and saved runs rely on.
CHATML_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}"
    "{%- if message.get('tool_calls') %}"
    "{{- message['content'] + '\\n' if message['content'] else '' }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call.get('function') else call %}"
    "{%- if not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- else %}{{- message['content'] }}"
    "{%- endif %}"
    "{{- '<|im_end|>' }}"
    "{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# How ``tokenizer.parse_response`` (transformers >= 5.13; TRL calls it on every reply of its
# tool loop) reads a reply written in CHATML_TEMPLATE's layout: each ``<tool_call>`` block is
# one JSON call, the rest up to ``<|im_end|>`` is the message content. A block that is not
# valid JSON leaves the reply without calls.
CHATML_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def require_train_extra():
    """Import torch and transformers or raise a clear error naming the extra."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            f"this feature needs torch and transformers ({exc.name} is missing): "
            'pip install "ragen-envs[train]"'
        ) from None


def protocol_corpus(seeds: Iterable[int] = range(8)) -> list[str]:
    """Text the tiny tokenizer is trained on: every env's prompts and example answers."""
    import gymnasium as gym

    import ragen_envs
    from ragen_envs.agents import make_agent
    from ragen_envs.eval import run_episode

    texts = []
    for spec in ragen_envs.ENV_SPECS:
        env = gym.make(spec.id)
        for agent_spec in ("expert", "random"):
            agent = make_agent(agent_spec, env=env)
            for seed in seeds:
                ep = run_episode(env, agent, seed)
                texts.append(ep.system_prompt)
                for turn in ep.turns:
                    texts += [turn.observation, turn.response]
                texts.append(ep.final_observation)
        env.close()
    texts.append("<think>I should push the box down then left.</think><answer>Down || Left</answer>")
    return texts


def protocol_phrases(env_id: str, **env_kwargs) -> list[str]:
    """Fixed prompt strings of one environment (its instruction prefix, the turn-block
    reminder, ``Turn``/``State``/``Reward`` headers, the answer tags), for
    ``build_tiny_tokenizer(phrases=...)``: each becomes one token, so a tiny model's
    sequences are mostly state and reply tokens. Taken from the env's own text, so the
    prompt is unchanged."""
    import gymnasium as gym

    from ragen_envs.protocol.prompt import format_prompt, length_prompt

    env = gym.make(env_id, **env_kwargs)
    base = env.unwrapped
    env.close()
    reminder = f" Always output: {format_prompt(base.think)} with no extra text. Strictly follow this format. "
    return [
        base.instruction_text(),
        reminder + length_prompt(base.max_tokens) + "\n",
        "\nTurn ",
        ":\nState:\n",
        "\nYou have ",
        " actions left.",
        "Reward:\n",
        "</think><answer>",
        "</answer>",
    ]


def build_tiny_tokenizer(corpus: Iterable[str] | None = None, vocab_size: int = 400, grid_symbols: str = "",
                         phrases: Iterable[str] = (), split_digits: bool = False):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ChatML special tokens.

    Byte-level, so any text (``√`` included) encodes; BPE merges make it a realistic test of
    re-tokenisation bugs (a character tokenizer would hide them). ``grid_symbols`` (e.g.
    ``"#_OX√PS"``): in lines made only of these characters (grid rows) every character is
    its own token, so a grid row of width w is always w tokens. ``phrases``: whole strings
    added as single (non-special) tokens, matched before the BPE, e.g.
    :func:`protocol_phrases`; decoding still gives the exact text back. ``split_digits``:
    every digit is its own token (as Qwen2's pre-tokenizer does).
    """
    require_train_extra()
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if grid_symbols:
        cls = "[" + "".join("\\" + c if c in "\\^]-[" else c for c in grid_symbols) + "]"
        grid_cell = pre_tokenizers.Split(Regex(f"{cls}(?={cls}*(?:\\n|$))"), behavior="isolated")
        tok.pre_tokenizer = pre_tokenizers.Sequence([grid_cell, tok.pre_tokenizer])
    if split_digits:
        digit = pre_tokenizers.Split(Regex("[0-9]"), behavior="isolated")
        tok.pre_tokenizer = pre_tokenizers.Sequence([digit, tok.pre_tokenizer])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus) if corpus is not None else protocol_corpus(), trainer=trainer)
    phrases = [p for p in dict.fromkeys(phrases) if p]
    if phrases:
        from tokenizers import AddedToken

        tok.add_tokens([AddedToken(p, normalized=False, special=False) for p in phrases])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.response_template = CHATML_RESPONSE_TEMPLATE
    return fast


def build_tiny_model(tokenizer, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
                     intermediate_size: int = 128, seed: int = 0, max_position_embeddings: int = 4096,
                     architecture: str = "qwen2"):
    """A randomly initialised Qwen2ForCausalLM sized for a CPU (about 0.1 M parameters by
    default; e.g. ``hidden_size=192, num_layers=4, intermediate_size=512`` is about 2 M).

    ``architecture="gpt2"`` builds a GPT2LMHeadModel of the same size instead: learned
    absolute position embeddings (no dropout), which let a tiny model read grid
    coordinates much sooner than rotary embeddings do. Initialised under a forked torch
    RNG, so the global RNG is left untouched.
    """
    require_train_extra()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if architecture == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=num_heads,
            n_inner=intermediate_size,
            n_positions=max_position_embeddings,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            tie_word_embeddings=True,
            bos_token_id=None,
            eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
            pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        )
        return _init_model(GPT2LMHeadModel, config, seed)
    if architecture != "qwen2":
        raise ValueError(f"architecture must be 'qwen2' or 'gpt2', got {architecture!r}")

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    return _init_model(Qwen2ForCausalLM, config, seed)


def _init_model(model_class, config, seed: int):
    """Instantiate under a forked torch RNG seeded with ``seed`` (the global RNG is left
    untouched) and point generation at the config's end-of-turn and padding ids."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


def build_tiny_checkpoint(path: str | Path, seed: int = 0, tokenizer_kwargs: dict | None = None, **model_kwargs) -> Path:
    """Write a tiny tokenizer + model to ``path`` with ``save_pretrained``; returns the path.
    ``tokenizer_kwargs`` go to :func:`build_tiny_tokenizer`, the rest to :func:`build_tiny_model`."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(**(tokenizer_kwargs or {}))
    model = build_tiny_model(tokenizer, seed=seed, **model_kwargs)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return path


# Qwen2.5-0.5B's shape (Qwen2Config keywords): a model of the real size with random weights, for
# the memory and speed checks of scripts/device_check.py and benchmarks/bench_memory.py / bench_sharding.py
QWEN25_05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768, rope_theta=1_000_000.0)


def build_random_checkpoint(path: str | Path, shape: dict | None = None, dtype=None) -> tuple[Path, int]:
    """A randomly initialised Qwen2 of ``shape`` (Qwen2Config keywords; default
    :data:`QWEN25_05B`; ``vocab_size`` defaults to the tokenizer's) with the tiny protocol
    tokenizer (Sokoban's phrases), weights seeded with 0, saved to ``path`` in ``dtype`` (a
    torch dtype; None keeps float32). Returns the path and the number of parameters."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tiny_tokenizer(phrases=protocol_phrases("ragen/Sokoban-v0"))
    shape = dict(QWEN25_05B if shape is None else shape)
    shape.setdefault("vocab_size", len(tok))
    if shape["vocab_size"] < len(tok):
        raise ValueError("the tokenizer has more ids than the model's vocabulary")
    config = Qwen2Config(**shape, tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    model = _init_model(Qwen2ForCausalLM, config, seed=0)
    n = sum(p.numel() for p in model.parameters())
    (model if dtype is None else model.to(dtype)).save_pretrained(path)
    tok.save_pretrained(path)
    return Path(path), n
