"""Supervised fine-tuning on expert trajectories (the paper's App. G baseline, and the demo's
warm start).

The expert agent (``ragen_envs.agents.make_agent("expert")``: Sokoban's BFS plan,
FrozenLake's optimal turn plan, the Bandit's better arm) plays episodes through the same
token-in/token-out rollout code as the policy (:func:`~.rollout.collect_rollouts` with a
scripted responder), so SFT sequences have exactly the layout the policy samples in. Each
reply is rendered in the protocol format with a short think text; the loss is the token
mean of -log π over reply tokens only (the loss mask).

Think styles: ``"grounded"`` states where the nearest box / target / goal / hole is
relative to the player and commits to the actions ("The box is below and left. The target
is left. I go Down, Left.") — true claims by construction, so the reasoning checks of
``info["reasoning"]`` score 1; ``"plan"`` is a fixed sentence; with ``think=False``
environments the reply is the answer only.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from . import distributed as D
from .expert import THINK_STYLES, expert_reply_fn, expert_trajectories, grounded_think, merge_expert_shards
from .policy import ChatFormat, pad_right, sequence_logprobs
from .rollout import Trajectory

__all__ = ["THINK_STYLES", "grounded_think", "expert_reply_fn", "expert_trajectories", "make_batches", "sft_loss", "train_sft",
           "message_trajectory", "dataset_trajectories", "first_turns", "lr_at", "check_schedule", "LR_SCHEDULES",
           "check_early_stop", "validation_blocks", "validation_success", "FORMATS", "model_context", "vocab_char_bounds",
           "min_tokens", "row_min_tokens", "fit_context", "heldout_start", "tool_trajectory", "tool_dataset_trajectories"]


def message_trajectory(messages: Sequence[dict], fmt: ChatFormat, index: int = 0) -> Trajectory:
    """A token trajectory of one conversation ``[system, user, assistant, user, ...]`` laid
    out exactly as a rollout samples it: ``fmt.first(system, obs_0)``, reply 1's tokens + the
    end-of-turn token, the template's increment for the next observation, ... The loss mask
    is 1 on the reply tokens after the forced prefix (the prefix is prompt, as in a rollout).
    Raises ValueError for a reply that does not start with ``fmt.prefix``."""
    system = messages[0]["content"]
    users = [m["content"] for m in messages[1::2]]
    replies = [m["content"] for m in messages[2::2]]
    t = Trajectory(group=index, member=0)
    t.token_ids = fmt.first(system, users[0])
    t.loss_mask = [0] * len(t.token_ids)
    history = [{"role": "system", "content": system}, {"role": "user", "content": users[0]}]
    for k, reply in enumerate(replies):
        if not reply.startswith(fmt.prefix):
            raise ValueError(f"reply {k} {reply[:40]!r} does not start with the forced prefix {fmt.prefix!r}")
        body = fmt.encode(reply[len(fmt.prefix):]) + [fmt.eot_id]
        t.token_ids += body
        t.loss_mask += [1] * len(body)
        t.turn_ends.append(len(t.token_ids) - 1)
        if k + 1 < len(replies):
            history.append({"role": "assistant", "content": reply})
            extra = fmt.append(history, users[k + 1])
            history.append({"role": "user", "content": users[k + 1]})
            t.token_ids += extra
            t.loss_mask += [0] * len(extra)
    return t


def dataset_trajectories(rows: Sequence[dict], fmt: ChatFormat, *, use_token_ids: bool = False,
                         vocab_size: int | None = None) -> tuple[list[Trajectory], int]:
    """Token trajectories of trajectory-dataset rows (:mod:`ragen_envs.trajectories`) and the
    number of rows skipped because a reply lacks the forced prefix. ``use_token_ids``: the
    rows' ``token_ids`` / ``loss_mask`` as they are (ValueError when a row has none or an id
    is outside ``vocab_size``); otherwise :func:`message_trajectory` of the ``messages``."""
    out, skipped = [], 0
    for i, row in enumerate(rows):
        rewards = [float(r) for r in (row.get("rewards") or [])]
        if use_token_ids:
            ids, mask = row.get("token_ids"), row.get("loss_mask")
            if ids is None or mask is None or len(ids) != len(mask) or not any(mask):
                raise ValueError(f"row {i} has no token_ids / loss_mask of equal length (only trainer rollouts do); "
                                 "drop --token-ids to tokenize the messages")
            if vocab_size is not None and max(ids) >= vocab_size:
                raise ValueError(f"row {i} holds token id {max(ids)} >= the model's vocabulary ({vocab_size}): "
                                 "the ids come from another tokenizer; drop --token-ids")
            t = Trajectory(group=i, member=0, token_ids=[int(x) for x in ids], loss_mask=[int(x) for x in mask])
            t.turn_ends = [b - 1 for _, b in t.reply_token_spans()]
            replies = [m["content"] for m in row["messages"][2::2]]
            for (a, b), reply in zip(t.reply_token_spans(), replies):
                body = t.token_ids[a:b]
                text = fmt.tok.decode(body[:-1] if body[-1] == fmt.eot_id else body, skip_special_tokens=False)
                if text not in reply:
                    raise ValueError(f"row {i}: its token ids decode to {text[:40]!r} with this model's tokenizer, "
                                     f"not to its reply {reply[:40]!r}: they come from another tokenizer; drop --token-ids")
        else:
            try:
                t = message_trajectory(row["messages"], fmt, i)
            except ValueError:
                skipped += 1
                continue
        t.turn_rewards = rewards
        out.append(t)
    return out, skipped

FORMATS = ("protocol", "tools")
"""What the model learns to write: ``protocol`` — each reply is an assistant message of the
protocol (the layout ``ragen train``, ``ragen eval hf:`` and TRL's ``rollout_func`` play);
``tools`` — each reply is the argument of an ``act`` tool call, laid out as TRL's
``GRPOTrainer(environment_factory=...)`` loop renders it (:mod:`ragen_envs.integrations.trl`)."""

# transformers fills an unset tokenizer.model_max_length with int(1e30): a limit that large is no limit
_NO_LIMIT = 10**9


def model_context(config, tokenizer) -> int | None:
    """The longest token sequence the model takes: its ``max_position_embeddings`` (GPT-2's
    ``n_positions`` answers to that name too) or the tokenizer's ``model_max_length``, the
    smaller of those that are set; None when neither is."""
    limits = [getattr(config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    real = [int(x) for x in limits if isinstance(x, int) and not isinstance(x, bool) and 0 < x < _NO_LIMIT]
    return min(real) if real else None


def vocab_char_bounds(tokenizer) -> tuple[int, list[str]]:
    """``(base_chars, added)``: the longest token string of the vocabulary without its added
    tokens (an upper bound on the characters one such token stands for: byte-level BPE writes
    one character per byte, SentencePiece one per character) and the added tokens' strings
    (special tokens, whole phrases), for :func:`min_tokens`."""
    added = [t for t in tokenizer.get_added_vocab() if t]
    skip = set(added)
    base = max((len(t) for t in tokenizer.get_vocab() if t not in skip), default=1)
    return max(base, 1), added


def min_tokens(text: str, base_chars: int, added: Sequence[str] = ()) -> int:
    """A lower bound on the number of tokens of ``text``, without tokenizing it (a 1 MB
    message is not worth tokenizing to learn it is too long). The added tokens are matched
    first, each on its own string, so together they cover at most sum_a count(a) x len(a)
    characters; every other token covers at most ``base_chars``; so the text has at least
    (len(text) - covered) / base_chars tokens (rounded up)."""
    covered = sum(text.count(a) * len(a) for a in added)
    return max(0, -(-(len(text) - covered) // base_chars))


def row_min_tokens(row: dict, base_chars: int, added: Sequence[str], final_observation: bool = False) -> int:
    """:func:`min_tokens` of a dataset row's message texts (and its final observation)."""
    texts = [str(m.get("content") or "") for m in row.get("messages") or []]
    if final_observation:
        texts.append(str(row.get("final_observation") or ""))
    return sum(min_tokens(t, base_chars, added) for t in texts)


def fit_context(trajs: Sequence[Trajectory], context: int | None) -> tuple[list[Trajectory], int]:
    """The trajectories of at most ``context`` tokens (all when None) and how many were longer."""
    if context is None:
        return list(trajs), 0
    kept = [t for t in trajs if len(t.token_ids) <= context]
    return kept, len(trajs) - len(kept)


def heldout_start(first: int, episodes: int, taken: set[int]) -> int:
    """The first seed s >= ``first`` such that the layouts s .. s + ``episodes`` - 1 miss
    ``taken`` (the training seeds and the EVAL_SEEDS)."""
    start = first
    while True:
        hit = [x for x in taken if start <= x < start + episodes]
        if not hit:
            return start
        start = max(hit) + 1


def tool_trajectory(fmt, system: str, observations: Sequence[str], replies: Sequence[str], index: int = 0,
                    rewards: Sequence[float] = ()) -> Trajectory:
    """One episode in the ``tools`` format (:func:`ragen_envs.integrations.trl.tool_transcript`
    with ``fmt``, a :class:`~ragen_envs.integrations.trl.ToolCallFormat`) as a Trajectory."""
    from ..integrations.trl import tool_transcript

    ids, mask = tool_transcript(fmt, system, observations, replies)
    t = Trajectory(group=index, member=0, token_ids=ids, loss_mask=mask, turn_rewards=[float(r) for r in rewards])
    t.turn_ends = [b - 1 for _, b in t.reply_token_spans()]
    return t


def tool_dataset_trajectories(rows: Sequence[dict], fmt) -> tuple[list[Trajectory], int]:
    """``tools``-format trajectories of dataset rows and the number skipped for want of the
    final observation (the last tool result)."""
    out, skipped = [], 0
    for i, row in enumerate(rows):
        messages = row["messages"]
        final = row.get("final_observation")
        if not isinstance(final, str) or not final:
            skipped += 1
            continue
        users = [m["content"] for m in messages[1::2]]
        out.append(tool_trajectory(fmt, messages[0]["content"], users + [final], [m["content"] for m in messages[2::2]],
                                   i, row.get("rewards") or ()))
    return out, skipped


def first_turns(traj: Trajectory, turns: int) -> Trajectory:
    """The start of ``traj`` up to and including its ``turns``-th reply (its end-of-turn
    token): ``token_ids`` / ``loss_mask`` cut at ``turn_ends[turns - 1] + 1``, ``turn_ends``
    and ``turn_rewards`` to their first ``turns``; the whole trajectory (a copy of its lists)
    when it has no more turns than that. The cut sequence is what the policy saw and wrote
    in those turns: the prompt, the observations and replies of turns 1..``turns``."""
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    end = traj.turn_ends[turns - 1] + 1 if len(traj.turn_ends) > turns else len(traj.token_ids)
    return Trajectory(group=traj.group, member=traj.member, token_ids=list(traj.token_ids[:end]),
                      loss_mask=list(traj.loss_mask[:end]), turn_ends=list(traj.turn_ends[:turns]),
                      turn_rewards=list(traj.turn_rewards[:turns]), episode=traj.episode)


def make_batches(lengths: Sequence[int], batch_size: int, generator: torch.Generator, bucket: int = 16) -> list[list[int]]:
    """One epoch of index batches: a seeded permutation, sorted by length inside windows of
    ``bucket`` batches (less padding), batches in seeded random order."""
    perm = torch.randperm(len(lengths), generator=generator).tolist()
    batches = []
    window = batch_size * bucket
    for i in range(0, len(perm), window):
        part = sorted(perm[i : i + window], key=lambda j: lengths[j])
        batches += [part[k : k + batch_size] for k in range(0, len(part), batch_size)]
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[k] for k in order]


def sft_loss(model, trajs: Sequence[Trajectory], pad_id: int, num_tokens: int | None = None,
             context_coef: float = 0.0, num_context_tokens: int | None = None) -> tuple[torch.Tensor, int]:
    """Σ -log π over reply tokens / ``num_tokens`` (default: this batch's reply tokens), plus,
    when ``context_coef`` > 0, ``context_coef`` x Σ -log π over the other tokens (system
    prompt, observations: the env's side) / ``num_context_tokens`` (default: this batch's).
    The second term is an auxiliary language-model loss on the context: a model trained from
    scratch learns the grid's layout and how actions change it (the next observation) from
    it; the same forward pass scores both. Returns (loss, number of reply tokens in this batch)."""
    ids = pad_right([t.token_ids for t in trajs], pad_id)
    att = pad_right([[1] * len(t.token_ids) for t in trajs], 0)
    mask = pad_right([t.loss_mask for t in trajs], 0)
    n = int(mask.sum())
    denom = float(num_tokens if num_tokens is not None else max(n, 1))
    if context_coef <= 0:
        logp, _ = sequence_logprobs(model, ids, att, mask)
        return -(logp * mask.to(logp.device)).sum() / denom, n
    logp, _ = sequence_logprobs(model, ids, att, att)  # every real token (the first has no prediction)
    context = (att - mask).to(logp.device)
    context[:, 0] = 0
    n_ctx = float(num_context_tokens if num_context_tokens is not None else max(int(context.sum()), 1))
    reply_loss = -(logp * mask.to(logp.device)).sum() / denom
    return reply_loss + context_coef * (-(logp * context).sum() / n_ctx), n


LR_SCHEDULES = ("cosine", "wsd")


def lr_at(step: int, total: int, warmup: int, min_ratio: float = 0.1, schedule: str = "cosine",
          decay_frac: float = 0.2) -> float:
    """The learning-rate factor of ``step`` (0-based) of ``total``: linear warm-up
    (step + 1) / warmup over the first ``warmup`` steps, then

    * ``cosine``: m + (1 - m) (1 + cos(pi f)) / 2 with f = (step - warmup) / (total - warmup),
      m = ``min_ratio``;
    * ``wsd`` (warm-up, stable, decay): 1 until the last D = round(``decay_frac`` x total)
      steps, then a linear decay 1 - (1 - m) (step - (total - D) + 1) / D, which reaches m at
      the last step."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"unknown lr schedule {schedule!r}: expected one of {', '.join(LR_SCHEDULES)}")
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "wsd":
        decay = max(1, round(decay_frac * total))
        into = step - (total - decay) + 1
        return 1.0 if into <= 0 else 1.0 - (1.0 - min_ratio) * min(1.0, into / decay)
    frac = (step - warmup) / max(1, total - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def check_schedule(steps: int, warmup: int, min_lr_ratio: float, lr_schedule: str, decay_frac: float,
                   ema_decay: float, ema_from: int) -> None:
    """Raise ValueError on a schedule or weight-average setting :func:`train_sft` cannot run."""
    lr_at(warmup, steps, warmup, min_lr_ratio, lr_schedule, decay_frac)  # an unknown schedule
    if not 0.0 <= min_lr_ratio <= 1.0 or not 0.0 < decay_frac <= 1.0:
        raise ValueError(f"min_lr_ratio must lie in [0, 1] and decay_frac in (0, 1], got {min_lr_ratio} and {decay_frac}")
    if not 0.0 <= ema_decay < 1.0 or ema_from < 0:
        raise ValueError(f"ema_decay must lie in [0, 1) and ema_from be >= 0, got {ema_decay} and {ema_from}")


def _check_curriculum(turns: int, steps: int) -> None:
    if turns < 0 or steps < 0 or (steps > 0) != (turns > 0):
        raise ValueError(f"curriculum_turns ({turns}) and curriculum_steps ({steps}) must both be > 0 (a curriculum) "
                         "or both 0 (none)")


def check_early_stop(stop_at_success: float | None, validate_every: int, validate_from: int,
                     validation_seed_start: int, validation_episodes: int) -> None:
    """ValueError unless the early-stopping settings of :func:`run_sft` make sense (the
    target a success rate in (0, 1], the counts positive, the seeds non-negative)."""
    if stop_at_success is not None and (isinstance(stop_at_success, bool) or not isinstance(stop_at_success, (int, float))
                                        or not 0.0 < stop_at_success <= 1.0):
        raise ValueError(f"stop_at_success must be a success rate in (0, 1] or null, got {stop_at_success!r}")
    for name, value, low in (("validate_every", validate_every, 1), ("validate_from", validate_from, 1),
                             ("validation_episodes", validation_episodes, 1),
                             ("validation_seed_start", validation_seed_start, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def check_validation_seeds(start: int, episodes: int, expert: tuple[int, int] | None) -> None:
    """ValueError when the held-out layouts ``start .. start + episodes - 1`` overlap the expert
    data's seeds (``expert`` = (first seed, count); None: no expert data) or ``EVAL_SEEDS``."""
    import ragen_envs

    held = set(range(start, start + episodes))
    for name, taken in (("the expert data's seeds", range(expert[0], expert[0] + expert[1]) if expert else ()),
                        ("EVAL_SEEDS", ragen_envs.EVAL_SEEDS)):
        if held.intersection(taken):
            raise ValueError(f"the validation layouts {start}..{start + episodes - 1} overlap {name} "
                             f"({min(taken)}..{max(taken)}): pick another validation_seed_start")


def validation_blocks(seed_start: int, episodes: int, parts: int) -> list[tuple[int, int]]:
    """The ``parts`` consecutive blocks (first seed, count) of the layouts ``seed_start ..
    seed_start + episodes - 1``; the first ``episodes % parts`` blocks hold one layout more."""
    if not isinstance(parts, int) or isinstance(parts, bool) or not 1 <= parts <= episodes:
        raise ValueError(f"validation_parts must be an integer in 1..{episodes} (the layouts), got {parts!r}")
    base, extra = divmod(episodes, parts)
    out, start = [], seed_start
    for j in range(parts):
        n = base + (1 if j < extra else 0)
        out.append((start, n))
        start += n
    return out


def validation_success(model, fmt: ChatFormat, pad_id: int, env_id: str, *, seed_start: int, episodes: int,
                       max_new_tokens: int, env_kwargs: dict | None = None, temperature: float = 0.5,
                       stream: int = 1, parts: int = 1) -> float:
    """Success rate of ``model`` on the layouts ``seed_start .. seed_start + episodes - 1``,
    one episode each, sampled at ``temperature`` from a generator seeded ``stream`` (its
    own: torch's global RNGs are not drawn from), as the demo's evaluation samples.

    ``parts`` > 1: the layouts in that many consecutive blocks (:func:`validation_blocks`),
    block j sampled from its own generator seeded ``stream + j``. Under torch.distributed
    (every rank calls this) block j is played by rank j mod world size and the successes are
    summed over ranks, so one process and several give the same rate."""
    from .rollout import collect_rollouts
    from .sampler import CachedResponder

    ctx = D.context()
    solved = 0
    with torch.no_grad():
        for j, (start, n) in enumerate(validation_blocks(seed_start, episodes, parts)):
            if j % ctx.world_size != ctx.rank:
                continue
            responder = CachedResponder(model, fmt, pad_id, max_new_tokens, temperature,
                                        torch.Generator().manual_seed(stream + j))
            trajs = collect_rollouts(env_id, start, n, 1, responder, fmt, env_kwargs=env_kwargs)
            solved += sum(bool(t.success) for t in trajs)
    return round(D.global_sum(solved)) / episodes


def train_sft(
    model,
    trajectories: Sequence[Trajectory],
    *,
    pad_id: int,
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-3,
    warmup: int = 50,
    weight_decay: float = 0.0,
    max_grad_norm: float = 1.0,
    seed: int = 0,
    micro_batch_size: int | None = None,
    time_budget_s: float | None = None,
    log: Callable[[dict], None] | None = None,
    log_every: int = 25,
    context_coef: float = 0.0,
    curriculum_turns: int = 0,
    curriculum_steps: int = 0,
    on_step: Callable[[int, Any], None] | None = None,
    lr_schedule: str = "cosine",
    min_lr_ratio: float = 0.1,
    decay_frac: float = 0.2,
    ema_decay: float = 0.0,
    ema_from: int = 0,
    stop: Callable[[int, Any], bool] | None = None,
) -> list[dict]:
    """AdamW on the reply tokens of ``trajectories`` for ``steps`` updates (or until
    ``time_budget_s`` runs out), plus ``context_coef`` x the context tokens' LM loss
    (:func:`sft_loss`). Deterministic for a given ``seed``. Returns the log rows.

    Curriculum: with ``curriculum_turns`` = k > 0, the first ``curriculum_steps`` steps train
    on every episode's first k turns only (:func:`first_turns`: shorter sequences, so cheaper
    steps), the rest on whole episodes (a fresh epoch of batches from the same generator).
    With ``curriculum_steps`` = 0 (the default) nothing changes, draw for draw.

    ``on_step(step, model)`` is called after each optimiser step (e.g. to keep a weight
    average or save snapshots); it must not change the model or draw from torch's RNGs.
    ``stop(step, model)`` is called after it; when it returns True the run ends after this
    step (logged, and with the weights as they are: early stopping, :func:`run_sft`). It
    must not change the model or draw from torch's global RNGs either, so the steps before
    the stop are those of a run without it, draw for draw.

    Weight average: with ``ema_decay`` = d > 0 the run keeps an exponential moving average of
    the parameters, A = theta after optimiser step max(``ema_from``, 1) (1-based), then
    A <- d A + (1 - d) theta after every later step, and the model ends with A's values
    (the training itself, step for step, is unchanged).

    Data parallel: under torch.distributed (every rank calls this with the same arguments and
    trajectories) each step's micro-batches are shared out, micro-batch k to rank k mod world
    size, and the gradients summed over ranks before clipping; every rank then takes the same
    optimiser step. Each micro-batch's loss is already divided by the whole batch's token
    counts, so the sum is the one-process gradient. With one micro-batch per rank on two ranks
    (``micro_batch_size`` = ``batch_size`` / 2) it is that gradient bit for bit: one process
    accumulates g_0 + g_1, the all-reduce adds the same two tensors (float addition commutes)."""
    if not trajectories:
        raise ValueError("no SFT trajectories")
    _check_curriculum(curriculum_turns, curriculum_steps)
    check_schedule(steps, warmup, min_lr_ratio, lr_schedule, decay_frac, ema_decay, ema_from)
    average: list[torch.Tensor] | None = None
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    full = trajectories
    if curriculum_steps > 0:
        trajectories = [first_turns(t, curriculum_turns) for t in full]
    lengths = [len(t.token_ids) for t in trajectories]
    batches: list[list[int]] = []
    rows = []
    start = time.monotonic()
    tokens_seen = 0
    micro = micro_batch_size or batch_size
    ctx = D.context()
    for step in range(steps):
        if curriculum_steps > 0 and step == curriculum_steps:
            trajectories, batches = full, []
            lengths = [len(t.token_ids) for t in trajectories]
        if not batches:
            batches = make_batches(lengths, batch_size, gen)
        idx = batches.pop()
        group = [trajectories[i] for i in idx]
        scale = lr_at(step, steps, warmup, min_lr_ratio, lr_schedule, decay_frac)
        for g in opt.param_groups:
            g["lr"] = lr * scale
        n_total = sum(t.num_reply_tokens for t in group)
        n_context = sum(len(t.token_ids) - 1 - t.num_reply_tokens for t in group)
        loss_sum = 0.0
        for k in range(0, len(group), micro)[ctx.rank :: ctx.world_size]:
            loss, _ = sft_loss(model, group[k : k + micro], pad_id, n_total, context_coef, n_context)
            loss.backward()
            loss_sum += float(loss.detach())
        if ctx.enabled:  # a rank without a micro-batch adds zeros
            D.all_reduce_gradients(model)
            loss_sum = D.global_sum(loss_sum)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ema_decay > 0 and step + 1 >= max(ema_from, 1):
            with torch.no_grad():
                if average is None:
                    average = [p.detach().clone() for p in model.parameters()]
                else:
                    for a, p in zip(average, model.parameters()):
                        a.lerp_(p.detach(), 1.0 - ema_decay)
        if on_step is not None:
            on_step(step, model)
        stopping = stop is not None and bool(stop(step, model))
        tokens_seen += sum(lengths[i] for i in idx)
        elapsed = time.monotonic() - start
        if log is not None and (step % log_every == 0 or step == steps - 1 or stopping):
            row = {"step": step, "loss": loss_sum, "grad_norm": grad_norm, "lr": lr * scale,
                   "tokens_per_s": tokens_seen / max(elapsed, 1e-9), "elapsed_s": elapsed}
            rows.append(row)
            log(row)
        over = time_budget_s is not None and elapsed > time_budget_s
        if time_budget_s is not None and ctx.enabled:  # rank 0's clock decides for all: no rank left in a collective
            over = bool(D.broadcast_object(over))
        if stopping or over:
            break
    if average is not None:
        with torch.no_grad():
            for a, p in zip(average, model.parameters()):
                p.copy_(a)
    return rows


def run_sft(
    env_id: str,
    out_dir: str,
    *,
    model: str | None = None,
    tiny_model: dict | None = None,
    tokenizer_kwargs: dict | None = None,
    episodes: int = 2000,
    seed_start: int = 10_000,
    steps: int = 1000,
    batch_size: int = 16,
    lr: float = 1e-3,
    warmup: int = 50,
    weight_decay: float = 0.0,
    think_style: str = "grounded",
    actions_per_turn: int | None = 2,
    env_kwargs: dict | None = None,
    seed: int = 0,
    force_prefix: bool = True,
    max_new_tokens: int | None = None,
    device: str = "cpu",
    log: Callable[[str], None] = print,
    context_coef: float = 0.0,
    data: str | None = None,
    successful_only: bool = False,
    min_return: float | None = None,
    use_token_ids: bool = False,
    data_workers: int = 1,
    curriculum_turns: int = 0,
    curriculum_steps: int = 0,
    on_step: Callable[[int, Any], None] | None = None,
    lr_schedule: str = "cosine",
    min_lr_ratio: float = 0.1,
    decay_frac: float = 0.2,
    ema_decay: float = 0.0,
    ema_from: int = 0,
    stop_at_success: float | None = None,
    validate_every: int = 100,
    validate_from: int = 1000,
    validation_seed_start: int = 30_000,
    validation_episodes: int = 512,
    validation_parts: int = 1,
    micro_batch_size: int | None = None,
    format: str = "protocol",
    heldout_episodes: int = 0,
) -> Path:
    """Expert SFT end to end: build (or load) the model, collect ``episodes`` expert episodes
    on layout seeds ``seed_start..`` (disjoint from ``EVAL_SEEDS`` by default), train, and
    save the model + tokenizer to ``out_dir/model`` (``save_pretrained``) with its protocol
    settings (``ragen_protocol.json``: think mode, forced prefix, reply cap ``max_new_tokens``
    — by default twice the longest expert reply — so ``hf:`` evaluates it as trained).
    Per-step rows go to ``out_dir/sft_metrics.jsonl``. Returns the model directory.

    ``data``: train on the episodes of ``env_id`` in a trajectory dataset file
    (:mod:`ragen_envs.trajectories`; ``successful_only`` / ``min_return`` filter them) instead
    of expert episodes; their messages are tokenized with the model's chat format (or, with
    ``use_token_ids``, their token ids and loss masks are used as they are). The env kwargs
    are the file's (one setting for all selected episodes). ``data_workers``: processes that
    play the expert episodes (the same episodes for any number). ``curriculum_turns`` /
    ``curriculum_steps``: the first steps on the episodes' first turns only (:func:`train_sft`);
    ``on_step``: :func:`train_sft`'s per-step hook; ``lr_schedule`` / ``min_lr_ratio`` /
    ``decay_frac``: the learning-rate schedule (:func:`lr_at`); ``ema_decay`` / ``ema_from``: save
    the weights' moving average instead of the last step's (:func:`train_sft`); ``validation_parts``: the
    early stop's held-out layouts in that many blocks, each with its own sampling stream
    (:func:`validation_success`); ``micro_batch_size``: episodes per forward / backward (:func:`train_sft`).

    ``format`` (:data:`FORMATS`): ``"tools"`` trains on the transcript TRL's
    ``environment_factory`` loop renders (each reply an ``act`` tool call, each observation
    its result, then a message without a call; :func:`tool_trajectory`), so an untrained
    model learns to call the tool; the tiny model is built with the tool layout's phrases,
    the early stop and the held-out line play through TRL's loop
    (:func:`ragen_envs.integrations.trl.play_tool_episodes`), and no protocol settings are
    saved (the model is for ``GRPOTrainer(environment_factory=...)``, not ``hf:``).

    Episodes longer than the model's context (:func:`model_context`) are skipped and counted
    (dataset rows first by :func:`row_min_tokens`, without tokenizing them); ValueError when
    none remains. ``heldout_episodes`` > 0: after saving, the success on that many held-out
    layouts (from ``validation_seed_start``, moved past the training seeds and EVAL_SEEDS),
    one episode each at the saved temperature (0.5), is logged.

    Under torch.distributed (every rank calls this with the same arguments) the ranks play
    their shares of the expert episodes and exchange them, train data-parallel
    (:func:`train_sft`), share out the validation blocks; rank 0 alone builds the model when
    ``model`` is None, logs, and writes the files."""
    import json

    from .diagnostics import strict_json_row
    from .policy import count_parameters, load_policy, load_tokenizer

    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if format == "tools" and use_token_ids:
        raise ValueError("token_ids are the protocol format's ids: drop --token-ids to train the tools format")
    if isinstance(heldout_episodes, bool) or not isinstance(heldout_episodes, int) or heldout_episodes < 0:
        raise ValueError(f"heldout_episodes must be an integer >= 0, got {heldout_episodes!r}")
    _check_curriculum(curriculum_turns, curriculum_steps)
    check_schedule(steps, warmup, min_lr_ratio, lr_schedule, decay_frac, ema_decay, ema_from)  # before the expert data
    check_early_stop(stop_at_success, validate_every, validate_from, validation_seed_start, validation_episodes)
    validation_blocks(validation_seed_start, validation_episodes, validation_parts)
    if micro_batch_size is not None and (not isinstance(micro_batch_size, int) or micro_batch_size < 1):
        raise ValueError(f"micro_batch_size must be an integer >= 1, got {micro_batch_size!r}")
    ctx = D.context()
    log = D.RankZeroLog(log)  # the other ranks are silent
    if stop_at_success is not None:
        check_validation_seeds(validation_seed_start, validation_episodes, None if data else (seed_start, episodes))
    rows = None
    train_seeds = set(range(seed_start, seed_start + episodes))
    if data is not None:
        rows, env_kwargs = _dataset_rows(data, env_id, env_kwargs, successful_only, min_return, use_token_ids)
        train_seeds = {int(r["seed"]) for r in rows if r.get("seed") is not None}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if model is None:
        from .tiny import TINY_MODEL, build_tiny_policy

        model = str(out / "model_init")
        if ctx.is_main:
            build_tiny_policy(out / "model_init", env_id, env_kwargs, seed=seed, **(tokenizer_kwargs or {}),
                              **({"tools": True} if format == "tools" else {}), **(tiny_model or TINY_MODEL))
        D.barrier()  # the other ranks load what rank 0 built
    tok = load_tokenizer(model)
    policy = load_policy(model, device)
    think = bool((env_kwargs or {}).get("think", True))
    prefix = ("<think>" if think else "<answer>") if force_prefix else ""
    fmt = ChatFormat(tok, prefix)
    tools = None
    if format == "tools":
        from ..integrations.trl import ToolCallFormat

        tools = ToolCallFormat(tok, env_id, **(env_kwargs or {}))
    context = model_context(policy.config, tok)
    too_long = 0
    t0 = time.monotonic()
    if rows is not None:
        source, selected = data, len(rows)
        if context is not None and not use_token_ids:  # a 1 MB message is refused before it is tokenized
            base_chars, added = vocab_char_bounds(tok)
            fits = [row_min_tokens(r, base_chars, added, tools is not None) <= context for r in rows]
            too_long = fits.count(False)
            rows = [r for r, ok in zip(rows, fits) if ok]
        if tools is not None:
            data, skipped = tool_dataset_trajectories(rows, tools)
            why = "no final observation (the last tool result)"
        else:
            data, skipped = dataset_trajectories(rows, fmt, use_token_ids=use_token_ids, vocab_size=len(tok))
            why = f"a reply without the prefix {prefix!r}"
        data, more = fit_context(data, context)
        too_long += more
        _log_too_long(log, too_long, selected, context)
        if not data:
            raise ValueError(f"no episode of {source} can be trained on: "
                             + (f"all {selected} are longer than the model's context ({context} tokens)"
                                if too_long == selected else
                                f"{too_long} are longer than the model's context ({context} tokens), "
                                f"{skipped} have {why}"))
        n_tok = sum(len(t.token_ids) for t in data)
        success = sum(bool(rows[t.group]["success"]) for t in data) / len(data)  # group = the row's index
        log(f"SFT data: {len(data)} episodes on {env_id} from {source}"
            + (f" ({skipped} skipped: {why})" if skipped else "")
            + (" in the tools format" if tools is not None else "")
            + f", {n_tok / len(data):.0f} tokens each, success {success:.3f}, {time.monotonic() - t0:.1f}s")
    else:
        seeds = range(seed_start, seed_start + episodes)
        kwargs = dict(think_style=think_style, actions_per_turn=actions_per_turn, env_kwargs=env_kwargs)
        if ctx.enabled:  # each rank plays its share of the chunks (its data_workers / world of the workers)
            mine = expert_trajectories(env_id, fmt, seeds, workers=max(1, data_workers // ctx.world_size),
                                       shard=(ctx.rank, ctx.world_size), **kwargs)
            data = merge_expert_shards(D.all_gather_objects(mine), seeds)
        else:
            data = expert_trajectories(env_id, fmt, seeds, workers=data_workers, **kwargs)
        if tools is not None:
            data = [_as_tool_trajectory(t, tools) for t in data]
        played = len(data)
        data, too_long = fit_context(data, context)
        _log_too_long(log, too_long, played, context)
        if not data:
            raise ValueError(f"every expert episode is longer than the model's context ({context} tokens)")
        n_tok = sum(len(t.token_ids) for t in data)
        log(f"SFT data: {len(data)} expert episodes on {env_id} (seeds {seed_start}..{seed_start + episodes - 1})"
            + (" in the tools format" if tools is not None else "") + ", "
            f"{n_tok / len(data):.0f} tokens each, expert success {sum(t.success for t in data) / len(data):.3f}, "
            f"{time.monotonic() - t0:.1f}s")
    log(f"SFT: {count_parameters(policy) / 1e6:.2f} M parameters, {steps} steps of {batch_size} episodes, lr {lr}"
        + (f", context loss x {context_coef}" if context_coef > 0 else "")
        + (f", the first {curriculum_steps} steps on the first {curriculum_turns} turn(s)" if curriculum_steps else ""))
    metrics = out / "sft_metrics.jsonl"
    if ctx.is_main:
        metrics.unlink(missing_ok=True)
    if max_new_tokens is None:
        longest = max((e - s for t in data for s, e in t.reply_token_spans()), default=8)
        max_new_tokens = max(8, 2 * longest)
    validation = out / "sft_validation.jsonl"
    if ctx.is_main:
        validation.unlink(missing_ok=True)

    def held_out(model, start: int, n: int, parts: int = 1) -> tuple[float, str]:
        """Success on layouts start .. start + n - 1 at temperature 0.5, in the trained format,
        and (tools) how many episodes called ``act`` at all."""
        if tools is None:
            return validation_success(model, fmt, tok.pad_token_id, env_id, seed_start=start, episodes=n,
                                      max_new_tokens=int(max_new_tokens), env_kwargs=env_kwargs, parts=parts), ""
        from ..integrations.trl import play_tool_episodes

        played = play_tool_episodes(model, tools, env_id, range(start, start + n), env_kwargs=env_kwargs,
                                    max_new_tokens=int(max_new_tokens), temperature=0.5,
                                    generator=torch.Generator().manual_seed(1))
        called = sum(len(e.replies) > e.unplayed_turns for e in played)
        return sum(e.success for e in played) / n, f"; {called} of {n} called act"

    stop = None
    if stop_at_success is not None:
        log(f"SFT: early stopping at validation success >= {stop_at_success} (checked after step {validate_from} and "
            f"every {validate_every} after it, on {validation_episodes} layouts from seed {validation_seed_start})")

        def stop(step: int, model) -> bool:
            done = step + 1  # optimiser steps taken
            if done < validate_from or (done - validate_from) % validate_every or done == steps:
                return False
            t = time.monotonic()
            success, _ = held_out(model, validation_seed_start, validation_episodes, validation_parts)
            row = {"step": done, "success": success, "episodes": validation_episodes, "target": stop_at_success,
                   "stop": success >= stop_at_success, "seconds": time.monotonic() - t}
            if not ctx.is_main:
                return row["stop"]
            from .._fs import open_nofollow

            with os.fdopen(open_nofollow(validation, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as f:
                f.write(json.dumps(row) + "\n")
            log(f"  sft validation after step {done}: success {success:.3f} on {validation_episodes} held-out layouts"
                + (f" >= {stop_at_success}: stopping here" if row["stop"] else f" < {stop_at_success}")
                + f" ({row['seconds']:.0f}s)")
            return row["stop"]

    def log_row(row: dict) -> None:
        if not ctx.is_main:
            return
        from .._fs import open_nofollow

        with os.fdopen(open_nofollow(metrics, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as f:
            f.write(json.dumps(strict_json_row(row), allow_nan=False) + "\n")  # NaN -> null
        log(f"  sft step {row['step']:5d} | loss {row['loss']:.4f} | grad {row['grad_norm']:.2f} | "
            f"{row['tokens_per_s']:.0f} tok/s | {row['elapsed_s']:.0f}s")

    train_sft(policy, data, pad_id=tok.pad_token_id, steps=steps, batch_size=batch_size, lr=lr, warmup=warmup,
              weight_decay=weight_decay, seed=seed, log=log_row, log_every=max(1, steps // 20), context_coef=context_coef,
              curriculum_turns=curriculum_turns, curriculum_steps=curriculum_steps, on_step=on_step,
              lr_schedule=lr_schedule, min_lr_ratio=min_lr_ratio, decay_frac=decay_frac, ema_decay=ema_decay,
              ema_from=ema_from, stop=stop, micro_batch_size=micro_batch_size)
    from ..lm.settings import ProtocolSettings, save_settings

    model_dir = out / "model"
    if ctx.is_main:  # rank 0 saves the model (every rank holds the same weights)
        policy.save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
        if tools is None:
            save_settings(model_dir, ProtocolSettings(
                env_id=env_id, env_kwargs={**(env_kwargs or {}), "think": think}, reply_prefix=prefix,
                max_new_tokens=int(max_new_tokens), eot_token=fmt.eot_token, temperature=0.5, history="tokens",
                written_by="ragen sft"))
            log(f"SFT model saved to {model_dir}")
        else:
            log(f"SFT model saved to {model_dir}: it calls act in TRL's tool loop, for GRPOTrainer(model=..., "
                f"environment_factory=make_environment_factory({env_id!r}, ...)) (no ragen_protocol.json: it does not "
                "play the protocol's chat format)")
    D.barrier()
    if heldout_episodes:
        import ragen_envs

        start = heldout_start(validation_seed_start, heldout_episodes, set(ragen_envs.EVAL_SEEDS) | train_seeds)
        t = time.monotonic()
        success, note = held_out(policy, start, heldout_episodes)
        log(f"SFT held-out success: {success:.3f} ({round(success * heldout_episodes)} of {heldout_episodes} layouts, "
            f"seeds {start}..{start + heldout_episodes - 1}: no training seed, none of the 256 EVAL_SEEDS 123..378; "
            "one episode each at temperature 0.5"
            + (", as ragen eval hf:DIR/model samples" if tools is None else ", through TRL's tool loop" + note)
            + f"; {time.monotonic() - t:.0f}s)")
    return model_dir


def _as_tool_trajectory(t: Trajectory, fmt) -> Trajectory:
    """An expert episode played in the protocol format, laid out in the tools format: its
    replies as the env received them, its observations as ``act`` returns them."""
    ep = t.episode
    tool = tool_trajectory(fmt, ep.system_prompt, [turn.observation for turn in ep.turns] + [ep.final_observation],
                           [turn.response for turn in ep.turns], t.group, t.turn_rewards)
    tool.episode = ep
    return tool


def _log_too_long(log, too_long: int, total: int, context: int | None) -> None:
    if too_long:
        log(f"SFT data: skipped {too_long} of {total} episodes longer than the model's context ({context} tokens)")


def _dataset_rows(path: str, env_id: str, env_kwargs: dict | None, successful_only: bool,
                  min_return: float | None, use_token_ids: bool = False) -> tuple[list[dict], dict]:
    """The selected rows of a dataset file and their (single) env kwargs, checked before any
    model is loaded."""
    import json

    from ..trajectories import read_dataset, select_rows

    every = read_dataset(path)
    rows = select_rows(every, env_id=env_id, successful_only=successful_only, min_return=min_return)
    if not rows:
        envs = sorted({r["env_id"] for r in every})
        raise ValueError(f"{path}: none of its {len(every)} episodes is of {env_id} and passes the filters "
                         f"(it holds {', '.join(envs)})")
    if use_token_ids:
        lacking = sum(r.get("token_ids") is None or r.get("loss_mask") is None for r in rows)
        if lacking:
            raise ValueError(f"{path}: {lacking} of the {len(rows)} selected episodes have no token_ids / loss_mask "
                             "(only trainer rollouts do); drop --token-ids to tokenize the messages")
    settings = sorted({r["env_kwargs"] if isinstance(r["env_kwargs"], str) else json.dumps(r["env_kwargs"], sort_keys=True)
                       for r in rows})
    if len(settings) > 1:
        raise ValueError(f"{path}: the selected episodes of {env_id} were played with different env kwargs "
                         f"({'; '.join(settings)}); export them to separate files")
    try:
        file_kwargs = json.loads(settings[0])
    except json.JSONDecodeError:
        raise ValueError(f"{path}: env_kwargs {settings[0]!r} is not a JSON object") from None
    if not isinstance(file_kwargs, dict):
        raise ValueError(f"{path}: env_kwargs {settings[0]!r} is not a JSON object")
    if env_kwargs and {**file_kwargs, **env_kwargs} != file_kwargs:
        raise ValueError(f"{path}: its episodes were played with env kwargs {settings[0]}, not {json.dumps(env_kwargs)}")
    return rows, file_kwargs
