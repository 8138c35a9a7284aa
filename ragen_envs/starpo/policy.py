"""Model, tokenizer and value head: loading, sampling, log-probs, values.

Any Hugging Face causal LM with a chat template works through the same code: the tiny local
model of :mod:`ragen_envs.models` on a CPU, or e.g. Qwen2.5-0.5B-Instruct on a GPU. The
critic is a separate copy of the backbone with a one-output token-classification head (the
reference's ``AutoModelForTokenClassification(num_labels=1)``).

Token-in/token-out: :class:`ChatFormat` turns each new chat message into the token ids that
the chat template appends to the conversation so far — the history is never decoded and
tokenized again — and checks that the template really only appends.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Sequence

from ..models import require_train_extra

require_train_extra()

import torch  # noqa: E402

from .core import entropy_from_logits  # noqa: E402

__all__ = [
    "ChatFormat",
    "load_tokenizer",
    "load_policy",
    "load_critic",
    "pad_right",
    "sample_replies",
    "common_prefix_length",
    "sequence_logprobs",
    "sequence_values",
    "count_parameters",
    "tiny_corpus",
    "build_tiny_policy",
]


# ----------------------------------------------------------------------------- loading
def load_tokenizer(path: str | Path):
    """The tokenizer saved at ``path``, checked for a chat template and a pad token.

    A directory with a ``tokenizer.json`` is loaded exactly as saved
    (``PreTrainedTokenizerFast``): ``AutoTokenizer`` may rebuild the tokenizer class of the
    model type (e.g. Qwen2's) with that class's own pre-tokenizer, which would tokenize
    differently from what a custom tokenizer was trained and used with.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (Path(path) / "tokenizer.json").exists():
        tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    else:
        tok = AutoTokenizer.from_pretrained(str(path))
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"the tokenizer at {path} has no chat template; the trainer needs one")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """The actor: ``AutoModelForCausalLM.from_pretrained(path)`` in ``dtype`` on ``device``,
    in eval mode (no dropout: the log-probs of the update equal those of the rollout)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return model.to(device).eval()


def load_critic(path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0):
    """The critic: the checkpoint's backbone plus a fresh scalar head
    (``AutoModelForTokenClassification``, ``num_labels=1``). A checkpoint saved by the
    trainer already holds the head and loads it. The new head is drawn under a forked,
    seeded torch RNG, so the global RNG is untouched and runs repeat."""
    import logging

    from transformers import AutoModelForTokenClassification
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)  # "some weights were newly initialised" is expected
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            critic = AutoModelForTokenClassification.from_pretrained(str(path), num_labels=1, dtype=dtype)
    except ValueError as exc:
        raise ValueError(
            f"cannot build a value head on {path}: {exc}. The critic needs a model type with a "
            "token-classification head in transformers (Qwen2, Llama, Mistral, ... have one); "
            "use the 'grpo' preset for a critic-free run"
        ) from None
    finally:
        hf_logging.set_verbosity(level)
    # the head's dropout (classifier_dropout, 0.1 by default) is off as in eval mode, also
    # when gradient checkpointing needs train mode
    for module in critic.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    if hasattr(critic.config, "classifier_dropout"):
        critic.config.classifier_dropout = 0.0
    return critic.to(device).eval()


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
    from .sft import expert_trajectories

    probe_tok = build_tiny_tokenizer(corpus, vocab_size=300)
    for think in (True, False):
        fmt = ChatFormat(probe_tok, "<think>" if think else "<answer>")
        eps = expert_trajectories(env_id, fmt, range(900_000, 900_000 + 100), actions_per_turn=2,
                                  env_kwargs={**env_kwargs, "think": think})
        corpus += [turn.response for t in eps for turn in t.episode.turns]
    return corpus


def build_tiny_policy(path: str | Path, env_id: str, env_kwargs: dict | None = None, *, seed: int = 0,
                      vocab_size: int = 1024, **model_kwargs) -> Path:
    """A tiny causal LM + tokenizer for one environment, saved with ``save_pretrained``.

    The byte-level BPE is trained on that env's text only (:func:`tiny_corpus`); its grid
    cells (the legend's symbols) are one token each and no merge of them is learned, digits
    are single tokens, and the env's fixed sentences (instruction, turn reminder, headers)
    are single tokens (``ragen_envs.models.protocol_phrases``) — the prompt text is the
    env's, unchanged, but a tiny model's sequences are mostly state and reply. The result
    tokenizes identically whether loaded by :func:`load_tokenizer` or by ``AutoTokenizer``.
    ``model_kwargs`` go to ``ragen_envs.models.build_tiny_model``.
    """
    import gymnasium as gym

    from ..models import build_tiny_model, build_tiny_tokenizer, protocol_phrases

    env_kwargs = dict(env_kwargs or {})
    env = gym.make(env_id, **env_kwargs)
    legend = env.unwrapped.legend() or {}
    env.close()
    phrases = protocol_phrases(env_id, **env_kwargs) + ["system\n", "user\n", "assistant\n"]
    tok = build_tiny_tokenizer(tiny_corpus(env_id, env_kwargs), vocab_size=vocab_size, grid_symbols="".join(legend),
                               phrases=phrases, split_digits=True)
    model = build_tiny_model(tok, seed=seed, **model_kwargs)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(path)
    model.save_pretrained(path)
    return path


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- chat format
class ChatFormat:
    """Incremental chat-template tokenisation for token-in/token-out rollouts.

    The sequence of a trajectory is ``first(system, obs_1)`` + reply_1 + ``append(...)`` +
    reply_2 + ... where each reply is the *sampled ids* ending with the end-of-turn token.
    :meth:`append` returns the ids of the text the template adds after reply k:
    ``template(messages + [user obs], gen) - template(messages[:-1], gen) - content - eot``,
    after checking that the template renders an assistant message as generation prompt +
    content + end-of-turn token + tail, and that adding a message only appends text.

    ``prefix`` is the forced start of every reply (``"<think>"`` as the reference, or ""):
    it is part of the prompt (never trained on) and of the reply text the env receives.
    """

    def __init__(self, tokenizer, prefix: str = "", eot_token: str | None = None) -> None:
        self.tok = tokenizer
        self.prefix = prefix
        self.eot_token = eot_token or tokenizer.eos_token
        if self.eot_token is None:
            raise ValueError("the tokenizer has no eos token; pass eot_token= (e.g. '<|im_end|>')")
        self.eot_id = tokenizer.convert_tokens_to_ids(self.eot_token)
        if self.eot_id is None or self.eot_id == getattr(tokenizer, "unk_token_id", -1):
            raise ValueError(f"end-of-turn token {self.eot_token!r} is not in the vocabulary")
        self.prefix_ids = self.encode(prefix) if prefix else []

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def first(self, system: str, observation: str) -> list[int]:
        """Ids of ``[system, user(observation)]`` with the generation prompt and the prefix."""
        text = self.render(self._start(system, observation), True)
        return self.encode(text) + self.prefix_ids

    def append(self, messages: list[dict[str, str]], observation: str) -> list[int]:
        """Ids the template adds after the last assistant message of ``messages`` (whose
        content is prefix + decoded reply) for a new user ``observation``, generation prompt
        and prefix included. Raises ValueError when the template is not append-only."""
        if not messages or messages[-1]["role"] != "assistant":
            raise ValueError("append() expects the conversation to end with the assistant reply")
        before_reply = self.render(messages[:-1], True) + messages[-1]["content"] + self.eot_token
        with_reply = self.render(messages, False)
        after = self.render(messages + [{"role": "user", "content": observation}], True)
        if not with_reply.startswith(before_reply) or not after.startswith(with_reply):
            raise ValueError(
                "the chat template is not append-only (it rewrites earlier messages or does not end an "
                "assistant message with the end-of-turn token); token-in/token-out rollouts need one "
                "(ChatML / Qwen2.5 style templates are)"
            )
        return self.encode(after[len(before_reply):]) + self.prefix_ids

    @staticmethod
    def _start(system: str, observation: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": system}] if system else []
        return msgs + [{"role": "user", "content": observation}]


# ----------------------------------------------------------------------------- batching
def pad_right(seqs: Sequence[Sequence[float]], pad: float, dtype=torch.long) -> torch.Tensor:
    """(B, T_max) tensor of right-padded rows."""
    T = max((len(s) for s in seqs), default=0)
    out = torch.full((len(seqs), T), pad, dtype=dtype)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(list(s), dtype=dtype)
    return out


def _pad_left(seqs: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, T - len(s):] = torch.as_tensor(list(s), dtype=torch.long)
        att[i, T - len(s):] = 1
    return ids, att


_CACHE_ARG: dict[type, str] = {}


def _cache_kwarg(model) -> str:
    """The forward() keyword for the KV cache: ``cache`` (transformers >= 5.x) or
    ``past_key_values`` (older)."""
    cls = type(model)
    if cls not in _CACHE_ARG:
        params = inspect.signature(model.forward).parameters
        _CACHE_ARG[cls] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_ARG[cls]


def _out_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


# ----------------------------------------------------------------------------- sampling
MIN_SHARED_PREFIX = 16  # shorter common prefixes are not worth a separate forward pass


def common_prefix_length(seqs: Sequence[Sequence[int]], keep: int = 1) -> int:
    """Length of the token prefix shared by every sequence, leaving at least ``keep`` tokens
    of the shortest one after it. All trajectories of an env start with the same system
    message and instruction, so this is typically a few hundred tokens."""
    if not seqs:
        return 0
    first, limit = seqs[0], min(len(s) for s in seqs) - keep
    n = 0
    while n < limit and all(s[n] == first[n] for s in seqs):
        n += 1
    return max(n, 0)


def _expand_cache(cache, batch: int) -> None:
    if batch > 1:
        cache.batch_repeat_interleave(batch)


@torch.no_grad()
def sample_replies(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    eot_id: int,
    pad_id: int,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    top_p: float = 1.0,
) -> list[tuple[list[int], bool]]:
    """Sample one reply per prompt with a KV cache; returns ``[(ids, stopped), ...]``.

    ``ids`` are exactly the sampled token ids, ending with ``eot_id`` when the model stopped
    (``stopped`` True) or cut at ``max_new_tokens`` (``stopped`` False). Randomness comes
    only from ``generator`` (a private ``torch.Generator``): same generator state, same
    replies. ``temperature`` 0 means greedy.

    The prefix shared by all prompts is run once and its cache copied to every row; the
    rest of each prompt is left-padded after it (``[prefix][pad][rest]``, pads masked).
    Finished rows leave the batch.
    """
    if not prompts:
        return []
    device = next(model.parameters()).device
    key = _cache_kwarg(model)
    B = len(prompts)
    P = common_prefix_length(prompts)
    if P < MIN_SHARED_PREFIX or B == 1:
        P = 0
    rest_ids, rest_att = _pad_left([p[P:] for p in prompts], pad_id)
    att = torch.cat([torch.ones((B, P), dtype=torch.long), rest_att], dim=1).to(device)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    if P:
        head = torch.as_tensor(list(prompts[0][:P]), dtype=torch.long, device=device).unsqueeze(0)
        first = model(input_ids=head, position_ids=pos[:1, :P], use_cache=True, logits_to_keep=1)
        cache = _out_cache(first)
        _expand_cache(cache, B)
        out = model(input_ids=rest_ids.to(device), attention_mask=att, position_ids=pos[:, P:],
                    use_cache=True, logits_to_keep=1, **{key: cache})
    else:
        out = model(input_ids=rest_ids.to(device), attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache = _out_cache(out)
    replies: list[list[int]] = [[] for _ in range(B)]
    stopped = [False] * B
    rows = list(range(B))  # batch row -> prompt index
    next_pos = pos[:, -1:] + 1
    logits = out.logits[:, -1, :]
    for step in range(max_new_tokens):
        tok = _draw(logits.float().cpu(), temperature, top_p, generator)
        keep = []
        for r, i in enumerate(rows):
            t = int(tok[r])
            replies[i].append(t)
            if t == eot_id:
                stopped[i] = True
            else:
                keep.append(r)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(rows):
            sel = torch.as_tensor(keep, dtype=torch.long, device=device)
            cache.batch_select_indices(sel)
            att, next_pos, tok = att[sel], next_pos[sel], tok[sel.cpu()]
            rows = [rows[r] for r in keep]
        att = torch.cat([att, torch.ones((len(rows), 1), dtype=att.dtype, device=device)], dim=1)
        out = model(input_ids=tok.to(device).unsqueeze(1), attention_mask=att, position_ids=next_pos,
                    use_cache=True, **{key: cache})
        cache = _out_cache(out)
        logits = out.logits[:, -1, :]
        next_pos = next_pos + 1
    return [(r, s) for r, s in zip(replies, stopped)]


def _draw(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        cum = sorted_p.cumsum(dim=-1)
        sorted_p = torch.where(cum - sorted_p > top_p, torch.zeros_like(sorted_p), sorted_p)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


# ----------------------------------------------------------------------------- scoring
def backbone_of(model):
    """The decoder stack (``Qwen2Model`` ...) under a causal LM / token-classification head,
    also through a peft wrapper (LoRA layers are injected in place, so the adapters act)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.base_model


def _hidden_states(backbone, input_ids: torch.Tensor, attention_mask: torch.Tensor, share_prefix: bool = True) -> torch.Tensor:
    """Last hidden states (B, T, H) of right-padded rows; the prefix common to all rows is
    computed once (batch 1) and its KV cache repeated for the rest, gradients included."""
    pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    B = input_ids.shape[0]
    lengths = attention_mask.sum(-1).tolist()
    P = common_prefix_length([input_ids[b, : int(n)].tolist() for b, n in enumerate(lengths)]) if share_prefix else 0
    if B == 1 or P < MIN_SHARED_PREFIX:
        return backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos).last_hidden_state
    key = _cache_kwarg(backbone)
    first = backbone(input_ids=input_ids[:1, :P], position_ids=pos[:1, :P], use_cache=True)
    cache = _out_cache(first)
    _expand_cache(cache, B)
    rest = backbone(input_ids=input_ids[:, P:], attention_mask=attention_mask, position_ids=pos[:, P:],
                    use_cache=True, **{key: cache}).last_hidden_state
    return torch.cat([first.last_hidden_state.expand(B, -1, -1), rest], dim=1)


def sequence_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prefix: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(x_t | x_<t) (and the entropy of π(· | x_<t)) at every masked token t.

    Right-padded (B, T) inputs; returns (B, T) tensors aligned on the scored token (0 off
    the mask). Only the hidden states of masked positions go through the LM head, so a
    150k-token vocabulary costs memory for the trained tokens only. Gradients flow when
    called with grad enabled.
    """
    device = next(model.parameters()).device
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    mask = mask.to(device)
    hidden = _hidden_states(backbone_of(model), input_ids, attention_mask, share_prefix)
    target = mask[:, 1:] > 0
    rows, cols = torch.nonzero(target, as_tuple=True)
    h = hidden[:, :-1][rows, cols]
    logits = model.get_output_embeddings()(h).float() / temperature
    tokens = input_ids[:, 1:][rows, cols]
    logp = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    B, T = input_ids.shape
    out = torch.zeros((B, T), dtype=logp.dtype, device=device).index_put((rows, cols + 1), logp)
    ent = None
    if with_entropy:
        ent = torch.zeros((B, T), dtype=logp.dtype, device=device).index_put((rows, cols + 1), entropy_from_logits(logits))
    return out, ent


def _value_head(critic):
    head = getattr(critic, "score", None) or getattr(critic, "classifier", None)
    if head is None:
        raise ValueError(f"{type(critic).__name__} has no 'score' / 'classifier' head to read values from")
    return head


def sequence_values(critic, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor,
                    share_prefix: bool = True) -> torch.Tensor:
    """V(state before x_t) at every masked token t: the head's output at position t-1
    (the same positions as :func:`sequence_logprobs`). (B, T), 0 off the mask."""
    device = next(critic.parameters()).device
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    hidden = _hidden_states(backbone_of(critic), input_ids, attention_mask, share_prefix)
    v = _value_head(critic)(hidden)[..., 0].float()
    values = torch.zeros_like(v)
    values[:, 1:] = v[:, :-1]
    return values * mask.to(device).to(values.dtype)
