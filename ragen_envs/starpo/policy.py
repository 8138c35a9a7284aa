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

from pathlib import Path
from typing import Sequence

from ..models import require_train_extra

require_train_extra()

import torch  # noqa: E402

from ..lm.chat import ChatFormat, load_tokenizer  # noqa: E402
from ..lm.sampling import (  # noqa: E402
    MIN_SHARED_PREFIX,
    _cache_kwarg,
    _expand_cache,
    _out_cache,
    common_prefix_length,
    draw_tokens,
    sample_replies,
)
from .core import entropy_from_logits, score_dtype  # noqa: E402

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
    "MIN_SHARED_PREFIX",
    "draw_tokens",
]



# ----------------------------------------------------------------------------- loading
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


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- batching
def pad_right(seqs: Sequence[Sequence[float]], pad: float, dtype=torch.long) -> torch.Tensor:
    """(B, T_max) tensor of right-padded rows."""
    T = max((len(s) for s in seqs), default=0)
    out = torch.full((len(seqs), T), pad, dtype=dtype)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(list(s), dtype=dtype)
    return out


# ----------------------------------------------------------------------------- scoring
def backbone_of(model):
    """The decoder stack (``Qwen2Model`` ...) under a causal LM / token-classification head,
    also through a peft wrapper (LoRA layers are injected in place, so the adapters act)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.base_model


def right_padded(attention_mask: torch.Tensor) -> bool:
    """Whether every row of a (B, T) 0/1 mask is ones then zeros (real tokens, then padding):
    a_t <= a_{t-1} for every t >= 1.

    >>> right_padded(torch.tensor([[1, 1, 0], [1, 1, 1]])), right_padded(torch.tensor([[0, 1, 1]]))
    (True, False)
    """
    return bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())


def _hidden_states(backbone, input_ids: torch.Tensor, attention_mask: torch.Tensor, share_prefix: bool = True) -> torch.Tensor:
    """Last hidden states (B, T, H) of right-padded rows.

    A prefix common to all rows that is at least half the longest row is computed once
    (batch 1) and its KV cache repeated for the rest, gradients included. Otherwise the rows
    run with causal attention alone (no padding mask): a right-padded row's real tokens only
    see earlier positions, which are all real, so their states are the masked forward's
    (within float rounding: SDPA's fused causal kernel instead of a materialised (B, heads,
    T, T) mask); pad positions get states nobody reads (every caller masks them).
    """
    B, T = input_ids.shape
    lengths = attention_mask.sum(-1).tolist()
    P = common_prefix_length([input_ids[b, : int(n)].tolist() for b, n in enumerate(lengths)]) if share_prefix else 0
    shared = B > 1 and P >= MIN_SHARED_PREFIX and 2 * P >= T
    if not shared and right_padded(attention_mask):
        pos = torch.arange(T, device=input_ids.device).unsqueeze(0).expand(B, T)
        return backbone(input_ids=input_ids, position_ids=pos).last_hidden_state
    pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    if not shared:
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
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(x_t | x_<t) (and the entropy of π(· | x_<t)) at every masked token t.

    Right-padded (B, T) inputs; returns (B, T) tensors aligned on the scored token (0 off
    the mask). Only the hidden states of masked positions go through the LM head, so a
    150k-token vocabulary costs memory for the trained tokens only. Gradients flow when
    called with grad enabled; ``entropy_grad=False`` computes the entropy off the graph (a
    metric only: no backward through the vocabulary softmax).
    """
    device = next(model.parameters()).device
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    mask = mask.to(device)
    hidden = _hidden_states(backbone_of(model), input_ids, attention_mask, share_prefix)
    target = mask[:, 1:] > 0
    rows, cols = torch.nonzero(target, as_tuple=True)
    h = hidden[:, :-1][rows, cols]
    logits = model.get_output_embeddings()(h)
    logits = logits.to(score_dtype(logits.dtype)) / temperature
    tokens = input_ids[:, 1:][rows, cols]
    logp = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    B, T = input_ids.shape
    out = torch.zeros((B, T), dtype=logp.dtype, device=device).index_put((rows, cols + 1), logp)
    ent = None
    if with_entropy:
        h_t = entropy_from_logits(logits if entropy_grad else logits.detach())
        ent = torch.zeros((B, T), dtype=logp.dtype, device=device).index_put((rows, cols + 1), h_t)
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
    v = _value_head(critic)(hidden)[..., 0]
    v = v.to(score_dtype(v.dtype))
    values = torch.zeros_like(v)
    values[:, 1:] = v[:, :-1]
    return values * mask.to(device).to(values.dtype)
