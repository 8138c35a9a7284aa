"""Expert trajectories for SFT and for the tiny tokenizer's corpus: the expert agent
(``ragen_envs.agents.make_agent("expert")``) plays through the same token-in/token-out
rollout code as the policy, each reply written in the protocol format with a short think
text (``"grounded"``: true claims about the grid, or ``"plan"``: a fixed sentence)."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any, Callable, Sequence

from ..agents import make_agent
from ..protocol import format_answer, parse_answer
from ..protocol.reasoning import parse_grid, relative_directions
from .policy import ChatFormat
from .rollout import ScriptedResponder, Trajectory, collect_rollouts

__all__ = ["THINK_STYLES", "grounded_think", "expert_reply_fn", "expert_trajectories", "merge_expert_shards"]

THINK_STYLES = ("grounded", "plan")
_DIR_WORD = {"up": "above", "down": "below", "left": "left", "right": "right"}
_CLAIM_KINDS = ("box", "target", "goal", "hole")


def grounded_think(state: str, legend: dict[str, str] | None, actions: Sequence[str]) -> str:
    """A short think text with true claims about ``state`` and the committed ``actions``.

    For each of box, target, goal, hole present on the grid: the nearest such cell
    (Manhattan distance from the player; ties by row, then column) that is not under the
    player, as "The {kind} is {directions}." Then "I go {actions}.".
    """
    parts = []
    cells = parse_grid(state, legend)
    players = (cells or {}).get("player", [])
    if players:
        p = players[0]
        for kind in _CLAIM_KINDS:
            candidates = [c for c in cells.get(kind, []) if c != p]
            other = {"box": "target", "target": "box"}.get(kind)
            if other:  # boxes still to place, targets still free, when there are any
                unmatched = [c for c in candidates if c not in set(cells.get(other, []))]
                candidates = unmatched or candidates
            if not candidates:
                continue
            c = min(candidates, key=lambda c: (abs(c[0] - p[0]) + abs(c[1] - p[1]), c))
            dirs = relative_directions(c, p)
            parts.append(f"The {kind} is {' and '.join(_DIR_WORD[d] for d in dirs)}.")
    parts.append(f"I go {', '.join(actions)}.")
    return " ".join(parts)


def expert_reply_fn(think_style: str = "grounded", actions_per_turn: int | None = None) -> Callable[[Any, Any], str]:
    """``reply(env, prompt_ids) -> text``: the expert's actions for the env's current state
    (at most ``actions_per_turn``), formatted with a think text of ``think_style``."""
    if think_style not in THINK_STYLES:
        raise ValueError(f"unknown think style {think_style!r}; choose one of {THINK_STYLES}")
    if actions_per_turn is not None and actions_per_turn < 1:
        raise ValueError(f"actions_per_turn must be >= 1, got {actions_per_turn}")
    agents: dict[int, tuple[Any, Any]] = {}  # id(env) -> (env, agent); the env is kept so ids are never reused

    def reply(env, _ids) -> str:
        held = agents.get(id(env))
        if held is None or held[0] is not env:
            held = agents[id(env)] = (env, make_agent("expert", env=env))
        agent = held[1]
        base = env.unwrapped
        names = base.action_names()
        parsed = parse_answer(agent.act([]), names, base.think, base.budget.max_actions_per_turn)
        actions = list(parsed.actions[: actions_per_turn or len(parsed.actions)])
        if not base.think:
            return format_answer(actions, think=False)
        if think_style == "plan":
            text = f"I go {', '.join(actions)}."
        else:
            text = grounded_think(base.state_text(), base.legend(), actions)
        return format_answer(actions, text, think=True)

    return reply


def expert_trajectories(
    env_id: str,
    fmt: ChatFormat,
    seeds: range,
    *,
    think_style: str = "grounded",
    actions_per_turn: int | None = None,
    env_kwargs: dict | None = None,
    chunk: int = 256,
    workers: int = 1,
    shard: tuple[int, int] | None = None,
) -> list[Trajectory]:
    """Expert episodes on the consecutive layout seeds ``seeds`` as token trajectories.

    The seeds are played in chunks of ``chunk`` (fresh envs and expert per chunk), so the
    result does not depend on ``workers``: with ``workers`` > 1 the chunks are shared out to
    that many forked processes (where ``fork`` exists; the BFS expert is pure Python, one core
    a process) and joined in seed order. ``shard`` = (k, n): only chunks k, k + n, k + 2n, ...
    (one of n processes' share; :func:`merge_expert_shards` joins the n shares into the
    whole list)."""
    if not isinstance(seeds, range) or seeds.step != 1 or len(seeds) == 0:
        raise ValueError(f"seeds must be a non-empty range of consecutive seeds, got {seeds!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    jobs = _chunks(seeds, chunk)
    if shard is not None:
        k, n = shard
        if not 0 <= k < n:
            raise ValueError(f"shard must be (k, n) with 0 <= k < n, got {shard!r}")
        jobs = jobs[k::n]
        if not jobs:
            return []
    job = (env_id, fmt, think_style, actions_per_turn, env_kwargs)
    if workers == 1 or len(jobs) == 1 or "fork" not in mp.get_all_start_methods():
        return [t for start, n in jobs for t in _expert_chunk(job, start, n)]
    global _FORKED_JOB
    _FORKED_JOB = job  # inherited by the forked workers: only the seeds travel
    try:
        with mp.get_context("fork").Pool(min(workers, len(jobs))) as pool:
            parts = pool.starmap(_forked_chunk, jobs, chunksize=1)
    finally:
        _FORKED_JOB = None
    return [t for part in parts for t in part]


def _chunks(seeds: range, chunk: int) -> list[tuple[int, int]]:
    return [(start, min(chunk, seeds.stop - start)) for start in range(seeds.start, seeds.stop, chunk)]


def merge_expert_shards(shares: Sequence[Sequence[Trajectory]], seeds: range, chunk: int = 256) -> list[Trajectory]:
    """The trajectories of ``expert_trajectories(seeds)`` from the n shares
    ``expert_trajectories(seeds, shard=(k, n))``, k = 0 .. n - 1 (in that order): chunk i
    comes from share i mod n."""
    n = len(shares)
    taken = [0] * n
    out: list[Trajectory] = []
    for i, (_, size) in enumerate(_chunks(seeds, chunk)):
        k = i % n
        part = shares[k][taken[k] : taken[k] + size]
        if len(part) != size:
            raise ValueError(f"share {k} of {n} holds {len(shares[k])} trajectories: too few for the chunks of {seeds!r}")
        out += part
        taken[k] += size
    if taken != [len(s) for s in shares]:
        raise ValueError(f"the shares hold {[len(s) for s in shares]} trajectories, the chunks of {seeds!r} take {taken}")
    return out


_FORKED_JOB: tuple | None = None


def _forked_chunk(start: int, n: int) -> list[Trajectory]:
    return _expert_chunk(_FORKED_JOB, start, n)


def _expert_chunk(job: tuple, start: int, n: int) -> list[Trajectory]:
    env_id, fmt, think_style, actions_per_turn, env_kwargs = job
    responder = ScriptedResponder(fmt, expert_reply_fn(think_style, actions_per_turn))  # per chunk: fresh envs
    return collect_rollouts(env_id, start, n, 1, responder, fmt, env_kwargs=env_kwargs)
