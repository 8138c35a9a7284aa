"""``hf:PATH``: a local transformers causal LM (a hub id or a ``save_pretrained`` folder).

Generation goes through the project's multi-turn KV-cache sampler
(:class:`~ragen_envs.lm.sampler.MultiTurnSampler`), the one the trainer plays with: callers
that wait on replies concurrently (``ragen eval`` with ``--concurrency``, ``ragen serve`` with
several clients) go through :meth:`HFAgent.submit`, where one background thread gathers the
requests that arrive together (up to ``batch_size``, waiting ``batch_wait_s`` for more) and
samples them as one batch per group of equal sampling settings; each conversation's keys and
values stay cached between its turns, so a turn only prefills what the environment added.

**A model trained here is evaluated as it was trained.** A folder written by ``ragen sft``,
``ragen train`` or the demo holds ``ragen_protocol.json`` (:mod:`ragen_envs.lm.settings`):
its think mode, forced reply prefix, reply cap, sampling temperature and history mode are the
defaults here (constructor arguments still override; :attr:`HFAgent.settings_used` says where
each value came from). With ``history="tokens"`` (the trainer's way) a conversation's earlier
turns are fed back as the exact tokens sampled — token-in/token-out, the ids of each new
observation appended by the chat template's increment — keyed by the ``session`` the
evaluator passes per episode; with ``"messages"`` (any other chat model) the prompt is the
chat template over the messages as given.

Sampling: ``temperature`` (0.5 unless the settings say otherwise), ``top_p`` 1, no top-k, no
repetition penalty — the checkpoint's own ``generation_config`` sampling defaults (e.g.
Qwen's top_k=20) are not used; temperature 0 is greedy. Randomness: an episode of the
evaluator (a ``session`` with a ``stream``, :class:`ragen_envs.eval.runner.EpisodeSession`)
draws from a ``torch.Generator`` of its own, seeded from ``seed`` and the episode's env id,
seed and noise seed, so its replies do not depend on which episodes' requests were batched
with it (concurrency, batch size, timing; up to float rounding of the batched forward) and
``ragen eval`` reruns give the same episodes; other requests draw from one private generator
seeded with ``seed`` (sequential use reproduces exactly; batches formed by concurrent callers
depend on timing). Replies end at the chat format's end-of-turn token
(or any eos token of the model's generation config). With ``prefill`` the opening tag
(``<think>``, or ``<answer>`` with think off) ends the prompt, as the reference's trainer
does, and is put back in front of the decoded text; otherwise the reply is completed like an
API reply (``think_prefix``, see :func:`ragen_envs.agents.complete_reply`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import queue
import re
import socket
import threading
import time
import urllib.parse
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Sequence

from . import Reply, THINK_PREFIX_MODES, complete_reply
from .base import Agent, Messages

__all__ = ["HFAgent", "Generation", "SamplingParams", "GenerationCancelled", "load_tokenizer", "count_chat_tokens",
           "resolve_model_path"]

DEFAULT_TEMPERATURE = 0.5
DEFAULT_MAX_TOKENS = 400  # the reference's per-turn response length


def _require_torch():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            f"the hf: agent needs torch and transformers ({exc.name} is missing): pip install \"ragen-envs[train]\""
        ) from None


# a hub repo id: "name" or "org/name", letters, digits, "-", "_", "." (no "--" or ".." runs)
_HUB_ID = re.compile(r"^(?!.*(--|\.\.))[\w.\-]{1,96}(/[\w.\-]{1,96})?$")


def _looks_local(path: str) -> bool:
    """Whether ``path`` can only mean a folder on this machine: it starts with ``.``, ``/`` or
    ``~``, has a backslash, is no hub id (``org/name``), or its first part is a folder here
    (``runs/nope`` beside ``runs/``)."""
    if path.startswith((".", "/", "~")) or "\\" in path or not _HUB_ID.match(path):
        return True
    head, sep, _ = path.partition("/")
    return bool(sep) and os.path.isdir(head)


def _hub_offline() -> bool:
    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return flag in ("1", "ON", "YES", "TRUE")


def resolve_model_path(path: str) -> str:
    """Where ``hf:PATH`` loads from, decided without waiting for the network: the folder when it
    exists (``~`` expanded); for a hub id cached by Hugging Face, its cached snapshot folder; for
    another hub id, the id itself (transformers downloads it). Raises ValueError with one line,
    at once, when PATH looks local (:func:`_looks_local`) and does not exist, and when a hub id is
    not cached and the hub cannot be reached (``HF_HUB_OFFLINE`` set, or its host has no address):
    transformers would retry for ~50 s before failing with the same news."""
    local = Path(path).expanduser()
    if local.exists():
        return str(local)
    if _looks_local(path):
        parent = next((p for p in local.parents if str(p) not in ("", ".") and p.is_dir()), None)
        where = (f" ({str(parent).rstrip('/')}/ has no {local.relative_to(parent).parts[0]!r})"
                 if parent is not None else "")
        raise ValueError(f"hf: model folder {path!r} does not exist{where}")
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(path, "config.json", cache_dir=constants.HF_HUB_CACHE)
    if isinstance(cached, str):
        return str(Path(cached).parent)
    if _hub_offline() or constants.HF_HUB_OFFLINE:
        raise ValueError(f"hf:{path}: no such folder, and no such model in the Hugging Face cache "
                         f"({constants.HF_HUB_CACHE}; HF_HUB_OFFLINE is set)")
    host = urllib.parse.urlparse(constants.ENDPOINT).hostname or constants.ENDPOINT
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        raise ValueError(f"hf:{path}: no such folder, not in the Hugging Face cache, and the hub ({host}) cannot "
                         f"be reached: {exc.strerror or exc}") from None
    return path


def load_tokenizer(spec: Any):
    """A tokenizer object, or the one saved at ``spec`` (:func:`ragen_envs.lm.chat.load_tokenizer`)."""
    if not isinstance(spec, (str, Path)):
        return spec
    _require_torch()
    from ..lm.chat import load_tokenizer as _load

    return _load(spec)


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


class GenerationCancelled(RuntimeError):
    """The agent was closed while a request waited or generated."""


@dataclass(frozen=True)
class SamplingParams:
    """The settings one batched sampling call shares."""

    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = 1.0
    max_tokens: int = DEFAULT_MAX_TOKENS
    stop: tuple[str, ...] = ()


@dataclass
class Generation:
    """One generated reply: decoded text (cut at the first stop string), token counts.

    ``prefix`` is the forced opening the prompt ended with (not part of ``text``)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (end of turn, eos or a stop string) or "length"
    prefix: str = ""
    tokens: dict[str, Any] | None = None  # a session turn's ids (token history): see HFAgent._sample


@dataclass
class _Conversation:
    """A session's token history (``history="tokens"``): the ids fed so far, the messages
    they stand for (replies as sampled), the sampler slot key of its last reply, and where
    each reply starts in ``ids`` when ``ids`` is the whole episode from its first turn on
    (``reply_starts`` None otherwise)."""

    ids: list[int]
    messages: list[dict[str, str]]
    slot_key: list[int]
    reply_starts: list[int] | None = None


class HFAgent(Agent):
    """A local causal LM behind the multi-turn KV-cache sampler.

    Args:
        path: a model folder or hub id (``AutoModelForCausalLM.from_pretrained``).
        temperature, top_p, max_tokens, stop: sampling (temperature 0 = greedy); ``None`` =
            the saved protocol settings' value, else 0.5 / 400 tokens.
        batch_size: the most conversations per batch.
        batch_wait_s: how long the batching thread waits for more requests.
        device: ``"cuda"``, ``"cpu"``, ...; default cuda when available.
        dtype: ``"auto"`` (bfloat16 on a GPU that has it, else float32) or a torch dtype name.
        think, prefill, history: protocol handling (module docstring); ``None`` = the saved
            settings' value, else think on, no prefill, ``"messages"``.
        think_prefix: how a reply without prefill is completed (:func:`complete_reply`).
        settings: ``"auto"`` reads ``PATH/ragen_protocol.json``; a
            :class:`~ragen_envs.lm.settings.ProtocolSettings`, or None to ignore it.
        max_sessions: conversations kept in the cache at most (oldest dropped first).
        seed: seeds the private sampling generator.
    """

    supports_sessions = True

    def __init__(
        self,
        path: str,
        *,
        temperature: float | None = None,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        stop: Sequence[str] | str | None = None,
        batch_size: int = 16,
        batch_wait_s: float = 0.01,
        device: str | None = None,
        dtype: str = "auto",
        think: bool | None = None,
        think_prefix: str = "auto",
        prefill: bool | None = None,
        history: str | None = None,
        settings: Any = "auto",
        max_sessions: int | None = None,
        seed: int = 0,
        trust_remote_code: bool = False,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        source = path
        if isinstance(path, (str, Path)) and (model is None or tokenizer is None):
            source = resolve_model_path(str(path))  # a missing folder fails here, before torch loads
        _require_torch()
        import torch
        from transformers import AutoModelForCausalLM

        from ..lm.settings import HISTORY_MODES, ProtocolSettings, load_settings

        if settings == "auto":
            settings = load_settings(source) if isinstance(source, (str, Path)) else None
        if settings is not None and not isinstance(settings, ProtocolSettings):
            raise ValueError(f"settings must be 'auto', None or a ProtocolSettings, got {settings!r}")
        self.settings = settings
        used: dict[str, str] = {}

        def pick(name: str, given: Any, saved: Any, default: Any) -> Any:
            if given is not None:
                used[name] = "argument"
                return given
            if settings is not None:
                used[name] = "checkpoint"
                return saved
            used[name] = "default"
            return default

        s = settings
        temperature = pick("temperature", temperature, s and s.temperature, DEFAULT_TEMPERATURE)
        max_tokens = pick("max_tokens", max_tokens, s and s.max_new_tokens, DEFAULT_MAX_TOKENS)
        think = pick("think", think, s and s.think, True)
        prefill = pick("prefill", prefill, s and bool(s.reply_prefix), False)
        history = pick("history", history, s and s.history, "messages")
        self.settings_used = used

        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        if think_prefix not in THINK_PREFIX_MODES:
            raise ValueError(f"think_prefix must be one of {THINK_PREFIX_MODES}, got {think_prefix!r}")
        if history not in HISTORY_MODES:
            raise ValueError(f"history must be one of {HISTORY_MODES}, got {history!r}")
        self.path = str(path)
        self.name = f"hf:{path}"
        from ..devices import default_device

        self.device = torch.device(default_device(device))
        if dtype == "auto":
            use_bf16 = self.device.type == "cuda" and torch.cuda.is_bf16_supported()
            torch_dtype = torch.bfloat16 if use_bf16 else torch.float32
        else:
            torch_dtype = getattr(torch, str(dtype), None)
            if not isinstance(torch_dtype, torch.dtype):
                raise ValueError(f"dtype must be 'auto' or a torch dtype name such as bfloat16, got {dtype!r}")
        if model is None:
            try:
                model = AutoModelForCausalLM.from_pretrained(str(source), trust_remote_code=trust_remote_code,
                                                             dtype=torch_dtype)
            except (OSError, ValueError) as exc:
                raise ValueError(f"cannot load a causal LM from {str(path)!r}: {_first_line(exc)}") from None
        self.model = model.to(self.device).eval()
        self.tokenizer = load_tokenizer(tokenizer if tokenizer is not None else str(source))
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {str(path)!r} has no chat template; hf: agents need a chat model")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

        from ..lm.chat import ChatFormat
        from ..lm.sampler import MultiTurnSampler, SamplingCancelled

        self._eot_token = (settings.eot_token if settings is not None and settings.eot_token else None) or self.tokenizer.eos_token
        self._formats: dict[str, ChatFormat] = {"": ChatFormat(self.tokenizer, "", self._eot_token)}
        self._chat_format = ChatFormat
        self._cancelled = SamplingCancelled
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.tokenizer.eos_token_id
        eot_id = self._formats[""].eot_id
        stop_ids = {int(t) for t in ([eos] if isinstance(eos, int) else list(eos or []))} - {eot_id}
        self.pad_id = int(gen.pad_token_id if gen.pad_token_id is not None else self.tokenizer.pad_token_id)
        self.params = SamplingParams(
            float(temperature), float(top_p), int(max_tokens),
            tuple([stop] if isinstance(stop, str) else (stop or ())),
        )
        self.batch_size = batch_size
        self.batch_wait_s = float(batch_wait_s)
        self.think = bool(think)
        self.think_prefix = think_prefix
        self.prefill = bool(prefill)
        self.history = history
        self.seed = int(seed)
        self.max_sessions = int(max_sessions) if max_sessions is not None else max(4 * batch_size, 64)
        self._generator = torch.Generator().manual_seed(self.seed)
        self._stream_generators: dict[Hashable, Any] = {}  # session -> its episode's generator
        self.sampler = MultiTurnSampler(self.model, eot_id=eot_id, pad_id=self.pad_id, max_new_tokens=self.params.max_tokens,
                                        temperature=self.params.temperature, generator=self._generator,
                                        top_p=self.params.top_p, batch_size=batch_size, stop_ids=sorted(stop_ids),
                                        max_slots=self.max_sessions)
        self._sessions: OrderedDict[Hashable, _Conversation] = OrderedDict()
        self._windows: dict[Hashable, tuple[list[int], _Conversation]] = {}  # a windowed prompt's whole episode
        self._ended: deque = deque()  # sessions over, freed at the next batch
        self._lock = threading.Lock()  # one sampling call at a time (cache, generator)
        self._start_lock = threading.Lock()
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def config(self) -> dict[str, Any]:
        p = self.params
        return {
            "path": self.path, "temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens,
            "stop": list(p.stop) or None, "think_prefix": self.think_prefix, "prefill": self.prefill,
            "history": self.history, "device": str(self.device),
            "dtype": str(self.model.dtype).replace("torch.", ""),
        }

    def describe(self) -> str:
        """One line for the console: the protocol handling in use, each value's source
        (``checkpoint``, ``argument`` or ``default``)."""
        src = self.settings_used
        parts = [f"think {'on' if self.think else 'off'} ({src['think']})",
                 f"reply prefix {self._prefix(None)!r} ({src['prefill']})",
                 f"reply cap {self.params.max_tokens} tokens ({src['max_tokens']})",
                 f"temperature {self.params.temperature:g} ({src['temperature']})",
                 f"history {self.history} ({src['history']})"]
        line = f"{self.name}: " + "; ".join(parts)
        if self.settings is not None:
            line += f" — from the checkpoint's ragen_protocol.json; trained on {self.settings.env_id}"
        return line

    # ------------------------------------------------------------------ prompts
    def _format(self, prefix: str):
        fmt = self._formats.get(prefix)
        if fmt is None:
            fmt = self._formats[prefix] = self._chat_format(self.tokenizer, prefix, self._eot_token)
        return fmt

    def _prefix(self, think: bool | None) -> str:
        if not self.prefill:
            return ""
        return "<think>" if (self.think if think is None else think) else "<answer>"

    def prompt_text(self, messages: Messages, prefill: str = "") -> str:
        return self._format("").render(messages, True) + prefill

    def _prompt_ids(self, messages: Messages, prefix: str, session: Hashable | None) -> tuple[list[int], list[int], bool]:
        """The token ids to sample a reply to ``messages`` from (see the module docstring), the
        ids this turn adds to them (the template's increment after the session's history, or
        all of them) and whether they continue the session's history."""
        fmt = self._format(prefix)
        conv = self._sessions.pop(session, None) if session is not None else None
        window = self._window_prompt(fmt, conv, messages, session)
        if window is not None:
            return window
        if (conv is not None and len(messages) == len(conv.messages) + 1
                and messages[-1].get("role") == "user" and messages[0] == conv.messages[0]):
            try:
                added = fmt.append(conv.messages, messages[-1]["content"])
                return conv.ids + added, added, True
            except ValueError:  # a template that is not append-only: render the text instead
                pass
        if conv is not None:
            self.sampler.discard(conv.slot_key)
        ids = fmt.encode(fmt.render(messages, True)) + fmt.prefix_ids
        return ids, ids, False

    def _window_prompt(self, fmt, conv: _Conversation | None, messages: Messages,
                       session: Hashable | None) -> tuple[list[int], list[int], bool] | None:
        """The trainer's ``limited_multi_turn`` prompt for a session whose episode is played
        with that context window (the session's ``window``, :class:`ragen_envs.eval.runner.EpisodeSession`)
        once the window no longer starts at the first turn: ``messages`` is ``[system,
        user(instruction + state block of turn s), assistant(reply s), user(obs s+1), ...,
        user(obs t)]`` and the prompt is ``fmt.first(system, that first user message)`` followed
        by the episode's own ids from reply s on (sampled ids, template increments), as
        ``ragen_envs.starpo.rollout`` builds it. ``(prompt, increment, True)``; the increment
        continues the whole episode's sequence kept in ``conv``. None (the other paths) when
        this is not such a turn or the history is not whole."""
        if (conv is None or conv.reply_starts is None or getattr(session, "window", "full") != "limited_multi_turn"
                or len(messages) < 4 or len(messages) % 2 or messages[-1].get("role") != "user"
                or messages[0] != conv.messages[0]):
            return None
        turn = len(conv.reply_starts)
        start = turn - (len(messages) - 2) // 2
        if start <= 0 or messages[3::2][:-1] != conv.messages[1 + 2 * (start + 1)::2]:
            return None  # the window holds the whole history (the plain path), or another conversation
        try:
            added = fmt.append(conv.messages, messages[-1]["content"])
        except ValueError:
            return None
        full = conv.ids + added
        prompt = fmt.first(messages[0]["content"], messages[1]["content"]) + full[conv.reply_starts[start]:]
        if prompt[:len(conv.slot_key)] != conv.slot_key:
            self.sampler.discard(conv.slot_key)  # this prompt does not extend the cached one
        self._windows[session] = (full, conv)
        return prompt, added, True

    # ------------------------------------------------------------------ generation
    def _generator_for(self, session: Hashable | None):
        """The generator a request draws from: its episode's own when the session names a
        ``stream`` (seeded from sha256 of ``(seed, stream)``: the same on every machine and
        process), else the agent's shared one."""
        stream = getattr(session, "stream", None)
        if stream is None:
            return self._generator
        gen = self._stream_generators.get(session)
        if gen is None:
            digest = hashlib.sha256(repr((self.seed, tuple(stream))).encode()).digest()
            gen = self._stream_generators[session] = type(self._generator)().manual_seed(
                int.from_bytes(digest[:8], "little") >> 1)
        return gen

    def _sample(self, items: list[tuple[Messages, SamplingParams, str, Hashable | None]]) -> list[Generation]:
        """One batch: prompts built, sampled with the cache, decoded, sessions updated."""
        params = items[0][1]
        with self._lock:
            if self._closed.is_set():
                raise GenerationCancelled("the hf: agent was closed")
            self._forget_ended()
            self._windows.clear()  # (left by a batch that failed)
            prev_starts = {session: conv.reply_starts for _, _, _, session in items
                           if session is not None and (conv := self._sessions.get(session)) is not None}
            built = [self._prompt_ids(m, prefix, session) for m, _, prefix, session in items]
            prompts = [b[0] for b in built]
            gens = [self._generator_for(session) for *_, session in items]
            try:
                out = self.sampler.generate(prompts, keep_unclaimed=True, max_new_tokens=params.max_tokens,
                                            temperature=params.temperature, top_p=params.top_p,
                                            should_stop=self._closed.is_set,
                                            generators=None if all(g is self._generator for g in gens) else gens)
            except self._cancelled as exc:
                raise GenerationCancelled("the hf: agent was closed") from exc
            results = []
            for (messages, _, prefix, session), (prompt, added, continued), (ids, stopped) in zip(items, built, out):
                body = ids[:-1] if stopped else ids
                text = self.tokenizer.decode(body, skip_special_tokens=False)
                finish = "stop" if stopped else "length"
                cut = min((text.find(s) for s in params.stop if s in text), default=-1)
                if cut >= 0:
                    text, finish = text[:cut], "stop"
                slot_key = list(prompt) + list(ids[:-1])
                if session is not None and self.history == "tokens" and cut < 0:
                    eot = self._format(prefix).eot_id
                    reply = {"role": "assistant", "content": prefix + text}
                    windowed = self._windows.pop(session, None)
                    if windowed is not None:  # the whole episode goes on behind the window
                        full, old = windowed
                        conv = _Conversation(ids=full + list(body) + [eot],
                                             messages=old.messages + [messages[-1], reply], slot_key=slot_key,
                                             reply_starts=old.reply_starts + [len(full)])
                    else:
                        starts = None  # whole from the first turn: a first prompt, or one continuing a whole one
                        if len(messages) == 2 and not continued and session not in prev_starts:
                            starts = [len(prompt)]
                        elif continued and prev_starts.get(session) is not None:
                            starts = prev_starts[session] + [len(prompt)]
                        conv = _Conversation(ids=list(prompt) + list(body) + [eot], messages=list(messages) + [reply],
                                             slot_key=slot_key, reply_starts=starts)
                    self._sessions[session] = conv
                    while len(self._sessions) > self.max_sessions:
                        _, old = self._sessions.popitem(last=False)
                        self.sampler.discard(old.slot_key)
                elif self.history == "tokens" or session is None:
                    self.sampler.discard(slot_key)  # nothing will continue this cache
                # token history: the ids this turn fed and sampled, so the episode's sequence and
                # loss mask can be rebuilt without tokenizing text again (ragen export)
                tokens = None
                if session is not None and self.history == "tokens" and cut < 0:
                    tokens = {"added": list(added), "sampled": list(ids), "continued": continued,
                              "eot_id": self._format(prefix).eot_id}
                results.append(Generation(text, len(prompt), len(ids), finish, prefix, tokens))
            return results

    def generate(self, conversations: Sequence[Messages], params: SamplingParams | None = None,
                 prefill: str | None = None) -> list[Generation]:
        """Replies to ``conversations`` (no sessions), ``batch_size`` at a time."""
        params = params or self.params
        prefix = self._prefix(None) if prefill is None else prefill
        out: list[Generation] = []
        for i in range(0, len(conversations), self.batch_size):
            out += self._sample([(m, params, prefix, None) for m in conversations[i : i + self.batch_size]])
        return out

    def end_session(self, session: Hashable) -> None:
        """Forget a finished conversation; its cache is freed before the next batch (this
        never waits for a batch being sampled)."""
        self._ended.append(session)

    def _forget_ended(self) -> None:
        while self._ended:
            session = self._ended.popleft()
            self._stream_generators.pop(session, None)
            conv = self._sessions.pop(session, None)
            if conv is not None:
                self.sampler.discard(conv.slot_key)

    # ------------------------------------------------------------------ batching thread
    def submit(self, messages: Messages, params: SamplingParams | None = None, prefill: str | None = None,
               session: Hashable | None = None) -> concurrent.futures.Future:
        """Queue one conversation for the batching thread; a future of its :class:`Generation`.
        ``prefill`` None = the agent's forced prefix; ``session`` keys a token history."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        prefix = self._prefix(None) if prefill is None else prefill
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._queue = queue.Queue()
                self._thread = threading.Thread(target=self._batch_loop, args=(self._queue,),
                                                name="hf-batcher", daemon=True)
                self._thread.start()
            self._queue.put((messages, params or self.params, prefix, session, future))
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
            groups: dict[SamplingParams, list] = {}
            for item in items:
                groups.setdefault(item[1], []).append(item)
            for group in groups.values():
                live = [g for g in group if g[4].set_running_or_notify_cancel()]
                if not live:
                    continue
                try:
                    gens = self._sample([g[:4] for g in live])
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting callers
                    for g in live:
                        g[4].set_exception(exc)
                    continue
                for g, gen in zip(live, gens):
                    g[4].set_result(gen)

    def close(self, timeout: float = 60.0) -> None:
        """Stop the batching thread: a batch being sampled stops at its next token, waiting
        requests fail with :class:`GenerationCancelled`, every cache is dropped. Safe to call
        twice; the agent stays usable (a later request starts a new thread)."""
        self._closed.set()
        with self._start_lock:
            thread, q = self._thread, self._queue
        if thread is not None and q is not None and thread.is_alive():
            q.put(None)
            thread.join(timeout=timeout)
        if self._lock.acquire(timeout=timeout):  # the thread is gone: drop every cache
            try:
                self._sessions.clear()
                self._ended.clear()
                self._stream_generators.clear()
                self.sampler.reset()
            finally:
                self._lock.release()
        if q is not None:
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if item is not None and item[4].set_running_or_notify_cancel():
                    item[4].set_exception(GenerationCancelled("the hf: agent was closed"))
        self._closed.clear()  # usable again: the next submit starts a new thread

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------------ agent interface
    def _reply(self, gen: Generation, think: bool | None, started: float) -> Reply:
        think = self.think if think is None else think
        text = gen.prefix + gen.text if gen.prefix else complete_reply(gen.text, think, self.think_prefix)
        usage = {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                 "total_tokens": gen.prompt_tokens + gen.completion_tokens}
        return Reply(text=text, raw=gen.text, usage=usage, usage_source="tokenizer",
                     latency_s=time.monotonic() - started, finish_reason=gen.finish_reason,
                     extra={"tokens": gen.tokens} if gen.tokens is not None else {})

    async def areply(self, messages: Messages, think: bool | None = None, session: Hashable | None = None) -> Reply:
        started = time.monotonic()
        gen = await asyncio.wrap_future(self.submit(messages, prefill=self._prefix(think), session=session))
        return self._reply(gen, think, started)

    def reply(self, messages: Messages, think: bool | None = None, session: Hashable | None = None) -> Reply:
        started = time.monotonic()
        (gen,) = self._sample([(messages, self.params, self._prefix(think), session)])
        return self._reply(gen, think, started)

    def act(self, messages: Messages) -> str:
        return self.reply(messages).text

    def act_batch(self, conversations: Sequence[Messages], think: bool | None = None) -> list[str]:
        """Replies to several conversations in batched sampling calls."""
        started = time.monotonic()
        gens = self.generate(conversations, prefill=self._prefix(think))
        return [self._reply(g, think, started).text for g in gens]

    async def aact(self, messages: Messages) -> str:
        return (await self.areply(messages)).text
