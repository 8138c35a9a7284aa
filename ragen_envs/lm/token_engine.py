"""``ragen serve``'s generation engine: :class:`TokenEngine`, one thread that generates for
every request with continuous batching and fair places between requests. It knows no HTTP:
a request is a prompt's tokens and its sampling settings, its answer a :class:`Job`'s events
(``("delta", index, text)``, ``("done", index, Completion)``, ``("error", None, message)``).
:mod:`ragen_envs.serve` puts the OpenAI-compatible HTTP API in front of it.

The policy is small pure functions with worked examples (:func:`join_now`, :func:`fair_share`,
:func:`fair_evictions`, :func:`fair_pick`); the tensors are :mod:`.engine`'s
(:class:`~.engine.RunningBatch`, :func:`~.engine.draw_rows`, the trainer's sampling code).
Needs the ``train`` extra (torch, transformers) to run, not to import.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Hashable

__all__ = ["Completion", "Job", "TokenEngine", "fair_evictions", "fair_pick", "fair_share", "join_now"]


@dataclass
class Completion:
    """One finished reply: its text, why it ended (``stop``, ``length``, ``cancelled``, ...) and
    the tokens it drew."""

    text: str
    finish_reason: str
    completion_tokens: int


class _Row:
    """One reply being generated: its settings, tokens, text so far, and where events go."""

    def __init__(self, index: int, prompt_ids: list[int], job: "Job", temperature: float, top_p: float,
                 max_new: int, stop: tuple[str, ...], generator: Any, prefix: str) -> None:
        self.index, self.prompt_ids, self.job = index, prompt_ids, job
        self.temperature, self.top_p, self.max_new, self.stop = temperature, top_p, max_new, stop
        self.generator = generator
        self.prefix = prefix
        self.ids: list[int] = []
        self.count = 0  # completion tokens (EOS counts, as in HFAgent)
        self.text = ""  # incrementally decoded text
        self._prefix_off = self._read_off = 0
        self.sent = 0  # characters of ``text`` already emitted
        self.hold = max((len(s) for s in stop), default=1) - 1  # a stop string may be forming
        self.finish: str | None = None
        self.queued_at = 0  # the engine's step count when it started waiting for a place
        self.admitted_at = 0  # the engine's step count when it last joined the batch
        self.preempted = 0  # times it left the batch for a fairer share (it rejoins with its tokens)


class Job:
    """The handle of one request inside :class:`TokenEngine`: ``events`` receives
    ``("delta", index, text)``, ``("done", index, Completion)`` and ``("error", None, message)``;
    :meth:`cancel` makes its rows leave the batch at the next step."""

    def __init__(self, prompt_tokens: int, stream: bool = True) -> None:
        self.prompt_tokens = prompt_tokens
        self.stream = stream  # False: no delta events before each choice's last one
        self.events: queue.Queue = queue.Queue()
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()


def join_now(running: int, room: int, waiting: int, waited: int, next_cap: int, join_batch: int,
             join_wait_steps: int) -> bool:
    """Whether the engine admits its waiting rows at this step (one prefill pass for
    ``min(room, waiting)`` of them). ``running`` rows decode with ``room`` places free,
    ``waiting`` rows wait, the first for ``waited`` steps since a place was free for it (steps
    in a full batch do not count: no gathering delayed it then); ``next_cap`` is the fewest
    tokens any running row may still draw before its reply cap (it leaves then at the latest).

    Admit when the batch is empty; or the first waiter has waited ``join_wait_steps`` (the
    latency bound); or all waiters fit; or at least ``join_batch`` fit and no running row hits
    its cap before the first waiter's bound (``next_cap > join_wait_steps - waited``). Else
    wait: the places that open then take more of the waiters in the same prefill.
    E.g. 12 of 16 rows at token 10 of 16, 4 places free, 48 waiting, waited 0: wait (6 <= 8);
    at 16 places free the 16 are admitted in one prefill instead of 4 + 12 in two."""
    if running == 0:
        return True
    if room <= 0:
        return False
    if waited >= join_wait_steps or room >= waiting:
        return True
    return room >= join_batch and next_cap > join_wait_steps - waited


def fair_share(batch_size: int, requests: int) -> int:
    """The places one request may hold while others want some: an equal split of the batch
    among the requests present (running or waiting), at least one."""
    return max(1, batch_size // max(1, requests))


def fair_evictions(running: list[Hashable], progress: list[int], ran: list[int], waiting: list[Hashable],
                   batch_size: int, slice_steps: int) -> list[int]:
    """Which running rows leave the batch (to rejoin later, their tokens kept) so that waiting
    requests get their fair places now. ``running[i]`` is the request of batch row ``i``,
    ``progress[i]`` its tokens so far (the cost of bringing it back), ``ran[i]`` the steps since it
    last joined; ``waiting`` the request of each waiting row. Returns batch indices.

    Each request present is owed up to :func:`fair_share` places. When the places free do not
    cover what waiting requests are owed, rows of requests above their share leave: from the
    request holding the most (on ties the one listed last in ``running``, then ``waiting``), its
    rows with the fewest tokens first. With more requests than places (a share of 1), a request
    with no place still gets one within ``slice_steps`` steps: rows that have run that long leave,
    longest first (0: never). E.g. batch 16, one request holding all 16, a request of n=1
    arrives: share 8, one row leaves."""
    order = list(dict.fromkeys([*running, *waiting]))  # requests in order of arrival
    share = fair_share(batch_size, len(order))
    held = {q: 0 for q in order}
    for q in running:
        held[q] += 1
    wants = {q: 0 for q in order}
    for q in waiting:
        wants[q] += 1
    need = sum(min(wants[q], max(0, share - held[q])) for q in order) - (batch_size - len(running))
    out: list[int] = []
    while need > 0:
        donors = [q for q in order if held[q] > share]
        if not donors:
            break
        rank = {q: i for i, q in enumerate(order)}
        q = max(donors, key=lambda d: (held[d], rank[d]))
        i = min((i for i, r in enumerate(running) if r == q and i not in out), key=lambda i: (progress[i], -i))
        out.append(i)
        held[q] -= 1
        need -= 1
    starved = sum(1 for q in order if wants[q] and held[q] == 0)
    if need > 0 and starved and slice_steps > 0:
        long_run = sorted((i for i in range(len(running)) if i not in out and ran[i] >= slice_steps),
                          key=lambda i: (-ran[i], i))
        out += long_run[:min(need, starved)]
    return out


def fair_pick(waiting: list[Hashable], held: dict[Hashable, int], k: int) -> list[int]:
    """Indices of the ``k`` waiting rows to admit (of ``waiting``'s requests, in arrival order):
    round robin between requests, the request holding the fewest places first, a request's own
    rows first come first served. ``held``: places each request holds now.
    E.g. waiting [A, A, A, B], held {A: 4}, k 2 -> [3, 0] (B holds none)."""
    held = dict(held)
    queues: dict[Hashable, list[int]] = {}
    for i, q in enumerate(waiting):
        queues.setdefault(q, []).append(i)
    rank = {q: n for n, q in enumerate(queues)}
    picked: list[int] = []
    while len(picked) < k and queues:
        q = min(queues, key=lambda q: (held.get(q, 0), rank[q]))
        picked.append(queues[q].pop(0))
        held[q] = held.get(q, 0) + 1
        if not queues[q]:
            del queues[q]
    return picked


class TokenEngine:
    """One thread that generates for every request, with continuous batching: rows decode
    together in a :class:`ragen_envs.lm.engine.RunningBatch` (one KV cache), and a request that
    arrives while others decode is prefilled and joins them at the next step, up to
    ``batch_size`` rows. When the batch is empty the first arrival waits ``batch_wait_s`` for
    company. Each step draws one token per row with :func:`ragen_envs.lm.engine.draw_rows`, the
    trainer's sampling code: each row with its own temperature / top-p (below
    :data:`~ragen_envs.lm.engine.MIN_TEMPERATURE`: greedy), from the engine's generator (seeded
    with ``seed``) or, for a request with a ``seed``, from its own, so a seeded request gets the
    same tokens alone or in a busy batch. A row leaves at once on EOS, a stop string, its reply
    cap or cancellation (its cache rows are dropped). A row whose logits come out NaN or +inf
    fails its own request (an error event), while the other rows draw as if it were not there.

    Places are shared fairly between requests, so one request (``n=16, max_tokens=4000``) cannot
    hold the batch while another waits: waiting rows are admitted round robin between requests,
    the one holding the fewest places first (:func:`fair_pick`), and when a request that holds
    less than its share (:func:`fair_share`) waits while the batch is full, rows of requests above
    their share leave at once to make room, or, with more requests than places, rows that ran
    ``slice_steps`` steps (:func:`fair_evictions`). A row that leaves keeps its tokens and its
    generator and rejoins later by prefilling its prompt and those tokens: its reply is the one it
    would have got uninterrupted (up to float rounding, as for any batch composition).

    Joining costs a prefill forward pass, as much as a decoding step for a small model, so
    joiners are gathered (:func:`join_now`): waiting rows are admitted when they all fit, or
    when at least ``join_batch`` of them fit (default a quarter of ``batch_size``) and no row
    reaches its reply cap within the steps the first of them may still wait, or once it has
    waited ``join_wait_steps`` steps (default 8). A lone request beside a few long ones joins at
    the next step; under a full load a prefill serves several rows, and rows that started
    together are refilled together."""

    def __init__(self, model, tokenizer, device, *, batch_size: int = 16, batch_wait_s: float = 0.01,
                 seed: int = 0, stop_ids: tuple[int, ...] = (), join_batch: int | None = None,
                 join_wait_steps: int = 8, slice_steps: int = 256) -> None:
        import torch

        self.model, self.tokenizer, self.device = model, tokenizer, torch.device(device)
        self.batch_size, self.batch_wait_s = batch_size, batch_wait_s
        self.join_batch = max(1, batch_size // 4) if join_batch is None else max(1, int(join_batch))
        self.join_wait_steps = int(join_wait_steps)
        self.slice_steps = int(slice_steps)
        gen = model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else list(eos or [])) | frozenset(stop_ids)
        pad = gen.pad_token_id if gen.pad_token_id is not None else tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else next(iter(self.eos_ids), 0))
        self._seed = int(seed)
        self._generator = torch.Generator()  # tokens are drawn on the CPU, as in the trainer's sampler
        self._generator.manual_seed(self._seed)
        # forwards: every forward pass; prefills: those over new rows; joined_rows: rows that joined
        # a decoding batch; preempted_rows: rows that left for a fairer share (and rejoined later);
        # failed_rows: rows whose logits were not usable
        self.stats = {"forwards": 0, "prefills": 0, "rows": 0, "joined_rows": 0, "cancelled_rows": 0, "steps": 0,
                      "max_rows": 0, "preempted_rows": 0, "failed_rows": 0}
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="ragen-serve-engine", daemon=True)
        self._thread.start()

    def context_length(self) -> int | None:
        config = getattr(self.model, "config", None)
        value = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        return int(value) if isinstance(value, int) and value > 0 else None

    def submit(self, job: Job, prompt_ids: list[int], n: int, temperature: float, top_p: float, max_new: int,
               stop: tuple[str, ...], seed: int | None, prefix: str = "") -> None:
        import torch

        for i in range(n):
            gen = self._generator
            if seed is not None:
                gen = torch.Generator()
                gen.manual_seed((seed + i) % 2**64)
            self._queue.put(_Row(i, list(prompt_ids), job, temperature, top_p, max_new, stop, gen, prefix))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    # ------------------------------------------------------------------ the loop
    def _gather(self, waiting: collections.deque, deadline: float | None, limit: int | None) -> bool:
        """Move queued rows to ``waiting`` (stamped with the step they arrived at): until
        ``deadline`` or ``limit`` rows are waiting, or (``deadline`` None) only those already
        queued. False when the shutdown sentinel came."""
        while limit is None or len(waiting) < limit:
            try:
                row = (self._queue.get_nowait() if deadline is None
                       else self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                return True
            if row is None:
                return False
            row.queued_at = self.stats["steps"]
            waiting.append(row)
        return True

    def _loop(self) -> None:
        from .engine import RunningBatch

        batch = RunningBatch(self.model, self.pad_id, self.device)
        waiting: collections.deque[_Row] = collections.deque()
        room_since: int | None = None  # the step since which places are free while rows wait
        while True:
            if not batch.rows and not waiting:  # idle: block, then gather who arrives together
                row = self._queue.get()
                if row is None:
                    return
                row.queued_at = self.stats["steps"]
                waiting.append(row)
                if not self._gather(waiting, time.monotonic() + self.batch_wait_s, self.batch_size):
                    return self._shut(batch, waiting)
            elif not self._gather(waiting, None, None):  # decoding: whoever arrived joins at this step
                return self._shut(batch, waiting)
            for _ in range(len(waiting)):  # a request whose client left before it started
                row = waiting.popleft()
                if row.job.cancelled.is_set():
                    self.stats["cancelled_rows"] += 1
                else:
                    waiting.append(row)
            forced = bool(waiting) and bool(batch.rows) and batch.can_join and self._preempt(batch, waiting)
            room = self.batch_size - len(batch.rows)
            if not waiting or room <= 0:
                room_since = None
            elif room_since is None:
                room_since = self.stats["steps"]  # a place opened while rows wait: the bound starts
            if waiting and room > 0 and (batch.can_join or not batch.rows) and (forced or join_now(
                    len(batch.rows), room, len(waiting), self.stats["steps"] - max(waiting[0].queued_at, room_since),
                    min((r.max_new - r.count for r in batch.rows), default=0), self.join_batch,
                    self.join_wait_steps)):
                room_since = None
                new = self._take(batch, waiting, room)
                joined = bool(batch.rows)
                try:
                    batch.admit([r.prompt_ids + r.ids for r in new], new)
                except Exception as exc:  # noqa: BLE001 - reported to these requests, the batch goes on
                    self._fail(new, exc)
                    continue
                for r in new:
                    r.admitted_at = self.stats["steps"]
                self.stats["prefills"] += 1
                self.stats["forwards"] += 1
                self.stats["rows"] += sum(1 for r in new if not r.preempted)
                self.stats["joined_rows"] += len(new) if joined else 0
                self.stats["max_rows"] = max(self.stats["max_rows"], len(batch.rows))
            if not batch.rows:
                continue
            try:
                self._step(batch)
            except Exception as exc:  # noqa: BLE001 - reported to the waiting requests, the engine goes on
                self._fail(batch.rows, exc)
                batch.keep([])

    def _preempt(self, batch, waiting: collections.deque) -> bool:
        """Let the rows :func:`fair_evictions` names leave the batch for the back of ``waiting``
        (their tokens, text and generator kept: they rejoin by prefilling prompt + tokens).
        True when some left, so the places go to the waiting requests at this step."""
        steps = self.stats["steps"]
        rows = batch.rows
        out = fair_evictions([id(r.job) for r in rows], [len(r.ids) for r in rows],
                             [steps - r.admitted_at for r in rows], [id(r.job) for r in waiting],
                             self.batch_size, self.slice_steps)
        if not out:
            return False
        leaving = set(out)
        batch.keep([j for j in range(len(rows)) if j not in leaving])
        for j in sorted(leaving):
            rows[j].queued_at = steps
            rows[j].preempted += 1
            waiting.append(rows[j])
        self.stats["preempted_rows"] += len(out)
        return True

    def _take(self, batch, waiting: collections.deque, room: int) -> list[_Row]:
        """Remove and return the waiting rows to admit into ``room`` places (:func:`fair_pick`)."""
        held: dict[int, int] = {}
        for r in batch.rows:
            held[id(r.job)] = held.get(id(r.job), 0) + 1
        queued = list(waiting)
        picked = fair_pick([id(r.job) for r in queued], held, min(room, len(queued)))
        chosen = set(picked)
        waiting.clear()
        waiting.extend(r for i, r in enumerate(queued) if i not in chosen)
        return [queued[i] for i in picked]

    def _fail(self, rows: list[_Row], exc: Exception) -> None:
        for r in rows:
            if r.finish is None:
                r.finish = "error"
                r.job.events.put(("error", None, f"generation failed: {type(exc).__name__}: {exc}"))

    def _fail_request(self, row: _Row, message: str) -> None:
        """End ``row``'s request with an error (its other rows leave at the next step as if
        cancelled); the other requests in the batch go on."""
        self.stats["failed_rows"] += 1
        row.finish = "error"
        if not row.job.cancelled.is_set():
            row.job.events.put(("error", None, message))
        row.job.cancel()

    def _shut(self, batch, waiting) -> None:
        for r in [*batch.rows, *waiting]:
            if r.finish is None:
                r.finish = "error"
                r.job.events.put(("error", None, "the server is shutting down"))
        batch.keep([])

    def _step(self, batch) -> None:
        """Draw one token for every row, let finished and cancelled rows leave, feed the rest."""
        from .engine import BAD_ROW, draw_rows

        gone = [j for j, r in enumerate(batch.rows) if r.job.cancelled.is_set()]
        if gone:
            for j in gone:
                batch.rows[j].finish = "cancelled"
            self.stats["cancelled_rows"] += len(gone)
            batch.keep([j for j, r in enumerate(batch.rows) if r.finish is None])
            if not batch.rows:
                return
        self.stats["steps"] += 1
        rows = batch.rows
        tokens = draw_rows(batch.logits, [r.temperature for r in rows], [r.top_p for r in rows],
                           [r.generator for r in rows])
        for r, tok in zip(rows, tokens):
            if tok == BAD_ROW:
                self._fail_request(r, "generation failed: the model's logits were not finite (NaN or +inf)")
            elif not r.job.cancelled.is_set():  # (a sibling of a row that failed leaves at the next step)
                self._accept(r, tok)
        keep = [j for j, r in enumerate(rows) if r.finish is None]
        batch.keep(keep)
        if keep:
            batch.step([tokens[j] for j in keep])
            self.stats["forwards"] += 1

    def _accept(self, row: _Row, tok: int) -> None:
        """Add one drawn token to ``row``: extend its text, emit what is safe to show, and
        decide whether it is finished."""
        row.count += 1
        if tok in self.eos_ids:
            return self._finish(row, "stop")
        if tok == self.pad_id:
            row.count -= 1  # as HFAgent: a pad (not EOS) ends the reply uncounted
            return self._finish(row, "stop")
        row.ids.append(tok)
        if not row.job.stream and not row.stop:  # nobody reads the text before the end: decode once then
            if row.count >= row.max_new:
                self._finish(row, "length")
            return None
        # incremental detokenisation: decode a short window, keep incomplete UTF-8 for the next step
        prefix_text = self.tokenizer.decode(row.ids[row._prefix_off:row._read_off], skip_special_tokens=True)
        new_text = self.tokenizer.decode(row.ids[row._prefix_off:], skip_special_tokens=True)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            start = len(row.text)
            row.text += new_text[len(prefix_text):]
            row._prefix_off, row._read_off = row._read_off, len(row.ids)
            if row.stop:
                window = row.text[max(0, start - row.hold):]
                if any(s in window for s in row.stop):
                    return self._finish(row, "stop")
        if row.count >= row.max_new:
            return self._finish(row, "length")
        safe = len(row.text) - row.hold
        if safe > row.sent and row.job.stream:
            row.job.events.put(("delta", row.index, (row.prefix if row.sent == 0 else "") + row.text[row.sent:safe]))
            row.sent = safe
        return None

    def _finish(self, row: _Row, reason: str) -> None:
        text = self.tokenizer.decode(row.ids, skip_special_tokens=True)
        cut = min((text.find(s) for s in row.stop if s in text), default=-1)
        if cut >= 0:
            text, reason = text[:cut], "stop"
        row.finish = reason
        shown = row.text[:row.sent]
        rest = text[len(shown):] if text.startswith(shown) else ""
        if row.job.stream and (rest or row.sent == 0):
            row.job.events.put(("delta", row.index, (row.prefix if row.sent == 0 else "") + rest))
        row.job.events.put(("done", row.index, Completion(row.prefix + text, reason, row.count)))
