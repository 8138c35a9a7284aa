"""Large models on one device: gradient checkpointing, LoRA, bf16 autocast, memory figures.

See ``docs/scale.md``. The trainer already has micro-batches with gradient accumulation
(``micro_batch_size`` trajectories per forward / backward, token-mean over the whole
mini-batch) and pure-bf16 weights (``dtype="bfloat16"``); these helpers add the rest:

- :func:`enable_gradient_checkpointing`: recompute each decoder layer in the backward pass
  (activations O(layers) -> O(1) per layer boundary). Under checkpointing a layer drops its
  KV cache, so :func:`~.policy.sequence_logprobs` / ``sequence_values`` must be called with
  ``share_prefix=False`` (:func:`prefix_sharing_safe` says which); with transformers 5.x the
  prefix pass then returns no cache and the shared-prefix path fails.
- :func:`apply_lora`: peft LoRA adapters (lazy import; ``pip install peft``), only the
  adapters train; :func:`trainable_parameters` is what the optimiser should get.
- :func:`autocast`: fp32 master weights with bf16 matmuls (``torch.autocast``), the
  alternative to pure-bf16 weights when optimiser precision matters.
- :func:`memory_stats` / :func:`reset_peak_memory`: peak memory (CUDA allocator, or the
  process's max RSS on CPU).
"""

from __future__ import annotations

import contextlib
from typing import Iterable

import torch

__all__ = [
    "enable_gradient_checkpointing",
    "gradient_checkpointing_active",
    "prefix_sharing_safe",
    "apply_lora",
    "load_lora",
    "value_head_name",
    "trainable_parameters",
    "autocast",
    "memory_stats",
    "reset_peak_memory",
    "LORA_TARGETS",
]

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _dropouts(model) -> list[float]:
    probs = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    cfg = getattr(model, "config", None)
    for name in ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop"):
        v = getattr(cfg, name, None)
        if isinstance(v, (int, float)):
            probs.append(float(v))
    return probs


def enable_gradient_checkpointing(model) -> None:
    """Turn on HF gradient checkpointing (non-reentrant) and put ``model`` in train mode,
    which checkpointing needs. The trainer keeps models in eval mode so that update
    log-probs equal rollout log-probs: this refuses a model with dropout > 0, for which
    train mode would change them."""
    if any(p > 0 for p in _dropouts(model)):
        raise ValueError("the model has dropout > 0: train mode (needed by gradient checkpointing) would change its "
                         "log-probs; set the dropout probabilities to 0 first")
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False
    model.train()


def gradient_checkpointing_active(model) -> bool:
    """Whether a forward with grad enabled would checkpoint (and so drop KV caches)."""
    flag = getattr(type(model), "is_activation_checkpointing", None)
    active = model.is_activation_checkpointing if flag is not None else getattr(model, "is_gradient_checkpointing", False)
    return bool(active) and model.training


def prefix_sharing_safe(model) -> bool:
    """The ``share_prefix`` argument for :func:`~.policy.sequence_logprobs` /
    ``sequence_values`` with grad enabled: False under active gradient checkpointing (the
    layers drop the prefix's KV cache), True otherwise."""
    return not gradient_checkpointing_active(model)


def apply_lora(model, r: int = 16, alpha: float = 32, dropout: float = 0.0, target_modules: Iterable[str] = LORA_TARGETS,
               task_type: str = "CAUSAL_LM", modules_to_save: list[str] | None = None, seed: int = 0):
    """Wrap ``model`` with peft LoRA adapters on ``target_modules``; the base weights are
    frozen (``modules_to_save``, e.g. a critic's fresh value head, train fully). Returns the
    peft model (``save_pretrained`` writes the adapters only; ``merge_and_unload()`` gives a
    plain model back). ``dropout`` defaults to 0 so that train-mode log-probs equal the
    rollout's. ``task_type``: ``CAUSAL_LM`` (actor) or ``TOKEN_CLS`` (critic). The adapters'
    random init (LoRA A) is drawn under a forked RNG seeded with ``seed``: runs repeat, and
    the caller's global RNG is untouched."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ImportError("LoRA needs peft, which is not installed: pip install peft") from None
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(target_modules),
                        task_type=task_type, bias="none", modules_to_save=modules_to_save)
    devices = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def load_lora(model, path, trainable: bool = True):
    """``model`` with the LoRA adapters (and saved modules) that ``save_pretrained`` wrote
    to ``path``; trainable for resuming a run."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ImportError("LoRA needs peft, which is not installed: pip install peft") from None
    return PeftModel.from_pretrained(model, str(path), is_trainable=trainable)


def value_head_name(critic) -> str:
    """The attribute name of a token-classification model's head (``score`` or ``classifier``)."""
    for name in ("score", "classifier"):
        if isinstance(getattr(critic, name, None), torch.nn.Module):
            return name
    raise ValueError(f"{type(critic).__name__} has no 'score' / 'classifier' head")


def trainable_parameters(model) -> list[torch.nn.Parameter]:
    """The parameters that require grad (all of them, or LoRA's adapters only)."""
    return [p for p in model.parameters() if p.requires_grad]


def autocast(device: str | torch.device, dtype: str | torch.dtype = "bfloat16"):
    """``torch.autocast`` for ``device`` (cuda or cpu) in ``dtype``; a null context for
    float32. Weights stay float32 (the optimiser's master copy), matmuls run in ``dtype``."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def reset_peak_memory(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def memory_stats(device: str | torch.device) -> dict[str, float]:
    """Peak memory in GiB: ``peak_allocated`` / ``peak_reserved`` on CUDA (since the last
    :func:`reset_peak_memory`), ``max_rss`` (the process's high-water mark) on CPU."""
    dev = torch.device(device)
    gib = 1024 ** 3
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        return {"peak_allocated_gib": torch.cuda.max_memory_allocated(dev) / gib,
                "peak_reserved_gib": torch.cuda.max_memory_reserved(dev) / gib}
    import resource

    return {"max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / gib}
