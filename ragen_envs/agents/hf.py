"""``hf:PATH``: a local transformers causal LM (a hub id or a ``save_pretrained`` folder).

Prompts are built with the tokenizer's chat template; generation is batched. Callers that
wait on replies concurrently (``ragen eval`` with ``--concurrency``, ``ragen serve`` with
several clients) go through :meth:`HFAgent.submit`: one background thread gathers the
requests that arrive together (up to ``batch_size``, waiting ``batch_wait_s`` for more) and
runs them as one left-padded ``generate`` call per group of equal sampling settings.

Sampling matches the reference's validation rollout: ``temperature`` (0.5), ``top_p`` 1,
no top-k, no repetition penalty — the checkpoint's own ``generation_config`` sampling
defaults (e.g. Qwen's top_k=20) are not used. Replies are decoded with
``skip_special_tokens=True``. With ``prefill=True`` the opening tag (``<think>``, or
``<answer>`` with think off) is forced into the prompt, as the reference's trainer does, and
put back in front of the decoded text; otherwise the reply is completed like an API reply
(``think_prefix``, see :func:`ragen_envs.agents.complete_reply`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import Reply, THINK_PREFIX_MODES, complete_reply
from .base import Agent, Messages

__all__ = ["HFAgent", "Generation", "SamplingParams", "load_tokenizer", "count_chat_tokens"]


def _require_torch():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            f"the hf: agent needs torch and transformers ({exc.name} is missing): pip install \"ragen-envs[train]\""
        ) from None


def load_tokenizer(spec: Any):
    """A tokenizer object, or the one saved at ``spec`` (``tokenizer.json`` as saved, else ``AutoTokenizer``)."""
    if not isinstance(spec, (str, Path)):
        return spec
    _require_torch()
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        # As the trainer loads it: AutoTokenizer may rebuild the model type's tokenizer class
        # with its own pre-tokenizer and give different ids than training used.
        if (Path(spec).expanduser() / "tokenizer.json").is_file():
            return PreTrainedTokenizerFast.from_pretrained(str(Path(spec).expanduser()))
        return AutoTokenizer.from_pretrained(str(spec))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot load a tokenizer from {str(spec)!r}: {_first_line(exc)}") from None


def count_chat_tokens(tokenizer, messages: Messages) -> int:
    """Tokens of ``messages`` laid out by the chat template with the generation prompt."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = "\n".join(m["content"] for m in messages)
    return len(tokenizer.encode(text, add_special_tokens=False))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@dataclass(frozen=True)
class SamplingParams:
    """The settings one batched ``generate`` call shares."""

    temperature: float = 0.5
    top_p: float = 1.0
    max_tokens: int = 400
    stop: tuple[str, ...] = ()


@dataclass
class Generation:
    """One generated reply: decoded text (cut at the first stop string), token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (EOS or a stop string) or "length"


class HFAgent(Agent):
    """A local causal LM.

    Args:
        path: a model folder or hub id (``AutoModelForCausalLM.from_pretrained``).
        temperature, top_p, max_tokens, stop: sampling (temperature 0 = greedy). Default
            ``max_tokens`` 400 is the reference's per-turn response length.
        batch_size: the most prompts per ``generate`` call.
        batch_wait_s: how long the batching thread waits for more requests.
        device: ``"cuda"``, ``"cpu"``, ...; default cuda when available.
        dtype: ``"auto"`` (bfloat16 on a GPU that has it, else float32) or a torch dtype name.
        think, think_prefix, prefill: how the opening tag is handled (module docstring).
        seed: seeds the sampling of each call (under a forked RNG; the global torch RNG
            is left alone). Batches formed by concurrent callers depend on timing, so only
            sequential use reproduces exactly.
    """

    def __init__(
        self,
        path: str,
        *,
        temperature: float = 0.5,
        top_p: float = 1.0,
        max_tokens: int | None = 400,
        stop: Sequence[str] | str | None = None,
        batch_size: int = 16,
        batch_wait_s: float = 0.01,
        device: str | None = None,
        dtype: str = "auto",
        think: bool = True,
        think_prefix: str = "auto",
        prefill: bool = False,
        seed: int = 0,
        trust_remote_code: bool = False,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        _require_torch()
        import torch
        from transformers import AutoModelForCausalLM

        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if max_tokens is None:
            max_tokens = 400
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        if think_prefix not in THINK_PREFIX_MODES:
            raise ValueError(f"think_prefix must be one of {THINK_PREFIX_MODES}, got {think_prefix!r}")
        self.path = str(path)
        self.name = f"hf:{path}"
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if dtype == "auto":
            use_bf16 = self.device.type == "cuda" and torch.cuda.is_bf16_supported()
            torch_dtype = torch.bfloat16 if use_bf16 else torch.float32
        else:
            torch_dtype = getattr(torch, str(dtype), None)
            if not isinstance(torch_dtype, torch.dtype):
                raise ValueError(f"dtype must be 'auto' or a torch dtype name such as bfloat16, got {dtype!r}")
        if model is None:
            if isinstance(path, (str, Path)) and str(path).startswith((".", "/", "~")) and not Path(path).expanduser().exists():
                raise ValueError(f"hf: model folder {str(path)!r} does not exist")
            import transformers

            major_minor = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
            dtype_kw = "dtype" if major_minor >= (4, 56) else "torch_dtype"  # renamed in 4.56
            try:
                model = AutoModelForCausalLM.from_pretrained(
                    str(Path(path).expanduser()) if Path(path).expanduser().exists() else str(path),
                    trust_remote_code=trust_remote_code,
                    **{dtype_kw: torch_dtype},
                )
            except (OSError, ValueError) as exc:
                raise ValueError(f"cannot load a causal LM from {str(path)!r}: {_first_line(exc)}") from None
        self.model = model.to(self.device).eval()
        self.tokenizer = load_tokenizer(tokenizer if tokenizer is not None else str(Path(path).expanduser()))
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {str(path)!r} has no chat template; hf: agents need a chat model")
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else list(eos or []))
        self.pad_id = gen.pad_token_id if gen.pad_token_id is not None else self.tokenizer.pad_token_id
        self.params = SamplingParams(
            float(temperature), float(top_p), max_tokens,
            tuple([stop] if isinstance(stop, str) else (stop or ())),
        )
        self.batch_size = batch_size
        self.batch_wait_s = float(batch_wait_s)
        self.think = bool(think)
        self.think_prefix = think_prefix
        self.prefill = bool(prefill)
        self.seed = int(seed)
        self._calls = itertools.count()
        self._lock = threading.Lock()  # one generate at a time (GPU memory, RNG fork)
        self._start_lock = threading.Lock()
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None

    def config(self) -> dict[str, Any]:
        p = self.params
        return {
            "path": self.path, "temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens,
            "stop": list(p.stop) or None, "think_prefix": self.think_prefix, "prefill": self.prefill,
            "device": str(self.device), "dtype": str(self.model.dtype).replace("torch.", ""),
        }

    # ------------------------------------------------------------------ generation
    def prompt_text(self, messages: Messages, prefill: str = "") -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefill

    def generate(self, conversations: Sequence[Messages], params: SamplingParams | None = None,
                 prefill: str = "") -> list[Generation]:
        """Replies to ``conversations``, ``batch_size`` at a time (left padding)."""
        params = params or self.params
        out: list[Generation] = []
        texts = [self.prompt_text(m, prefill) for m in conversations]
        for i in range(0, len(texts), self.batch_size):
            out += self._generate_batch(texts[i : i + self.batch_size], params)
        return out

    def _generate_batch(self, texts: list[str], params: SamplingParams) -> list[Generation]:
        import torch
        from transformers import GenerationConfig

        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        sample = params.temperature > 0
        config = GenerationConfig(
            max_new_tokens=params.max_tokens,
            do_sample=sample,
            temperature=params.temperature if sample else None,
            top_p=params.top_p if sample else None,
            top_k=0 if sample else None,
            repetition_penalty=1.0,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids) or None,
            stop_strings=list(params.stop) or None,
        )
        extra = {"tokenizer": self.tokenizer} if params.stop else {}
        fork = {"devices": [self.device], "device_type": "cuda"} if self.device.type == "cuda" else {"devices": []}
        with self._lock, torch.no_grad(), torch.random.fork_rng(**fork):
            torch.manual_seed(hash((self.seed, next(self._calls))) & 0x7FFFFFFF)
            out = self.model.generate(**enc, generation_config=config, **extra)
        width = enc["input_ids"].shape[1]
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        results = []
        for row, prompt_len in zip(out[:, width:].tolist(), prompt_lens):
            count, finish = len(row), "length"
            for j, token in enumerate(row):
                if token in self.eos_ids:
                    count, finish = j + 1, "stop"
                    break
                if token == self.pad_id:
                    count, finish = j, "stop"
                    break
            text = self.tokenizer.decode(row[:count], skip_special_tokens=True)
            cut = min((text.find(s) for s in params.stop if s in text), default=-1)
            if cut >= 0:
                text, finish = text[:cut], "stop"
            results.append(Generation(text, int(prompt_len), count, finish))
        return results

    # ------------------------------------------------------------------ batching thread
    def submit(self, messages: Messages, params: SamplingParams | None = None,
               prefill: str = "") -> concurrent.futures.Future:
        """Queue one conversation for the batching thread; a future of its :class:`Generation`."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._queue = queue.Queue()
                self._thread = threading.Thread(target=self._batch_loop, args=(self._queue,),
                                                name="hf-batcher", daemon=True)
                self._thread.start()
            self._queue.put((messages, params or self.params, prefill, future))
        return future

    def _batch_loop(self, q: queue.Queue) -> None:
        while True:
            first = q.get()
            if first is None:
                return
            items = [first]
            deadline = time.monotonic() + self.batch_wait_s
            while len(items) < self.batch_size:
                try:
                    nxt = q.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    q.put(None)
                    break
                items.append(nxt)
            groups: dict[tuple, list] = {}
            for item in items:
                groups.setdefault((item[1], item[2]), []).append(item)
            for (params, prefill), group in groups.items():
                live = [g for g in group if g[3].set_running_or_notify_cancel()]
                if not live:
                    continue
                try:
                    gens = self._generate_batch([self.prompt_text(g[0], prefill) for g in live], params)
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting callers
                    for g in live:
                        g[3].set_exception(exc)
                    continue
                for g, gen in zip(live, gens):
                    g[3].set_result(gen)

    def close(self) -> None:
        """Stop the batching thread (pending requests still finish)."""
        with self._start_lock:
            if self._queue is not None and self._thread is not None and self._thread.is_alive():
                self._queue.put(None)
                self._thread.join(timeout=60)

    # ------------------------------------------------------------------ agent interface
    def _reply(self, gen: Generation, think: bool | None, started: float) -> Reply:
        think = self.think if think is None else think
        if self.prefill:
            text = ("<think>" if think else "<answer>") + gen.text
        else:
            text = complete_reply(gen.text, think, self.think_prefix)
        usage = {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                 "total_tokens": gen.prompt_tokens + gen.completion_tokens}
        return Reply(text=text, raw=gen.text, usage=usage, usage_source="tokenizer",
                     latency_s=time.monotonic() - started, finish_reason=gen.finish_reason)

    def _prefill(self, think: bool | None) -> str:
        if not self.prefill:
            return ""
        return "<think>" if (self.think if think is None else think) else "<answer>"

    async def areply(self, messages: Messages, think: bool | None = None) -> Reply:
        started = time.monotonic()
        gen = await asyncio.wrap_future(self.submit(messages, prefill=self._prefill(think)))
        return self._reply(gen, think, started)

    def reply(self, messages: Messages, think: bool | None = None) -> Reply:
        started = time.monotonic()
        (gen,) = self.generate([messages], prefill=self._prefill(think))
        return self._reply(gen, think, started)

    def act(self, messages: Messages) -> str:
        return self.reply(messages).text

    def act_batch(self, conversations: Sequence[Messages], think: bool | None = None) -> list[str]:
        """Replies to several conversations in batched ``generate`` calls."""
        started = time.monotonic()
        gens = self.generate(conversations, prefill=self._prefill(think))
        return [self._reply(g, think, started).text for g in gens]

    async def aact(self, messages: Messages) -> str:
        return (await self.areply(messages)).text
