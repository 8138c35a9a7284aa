"""Hostile replies: the old backtracking regexes vs the linear scanners, in parse and in env.step.

Each hostile unit (``<think></think><answer>``, ``<think>``, ``<think>a</think>``, ``[``, ...)
is repeated to a size. Two tables:

1. **parse** — ``parse_answer`` (think on) and WebShop's ``parse_action``: the new code at
   ``--size`` (1 MiB by default, median of ``--repeat`` runs) beside the old regexes (kept in
   this file, as in ``tests/test_hostile.py``) on a size ladder 1 KiB, 2 KiB, 4 KiB, ...: the
   ladder stops at the first size where the old code took more than ``--old-budget`` seconds
   (so a cubic case stops before a run of minutes), and the table gives the largest size the
   old code was timed at with its time and the new code's time at that same size.
2. **env.step** — for every registered id: the slowest of 36 hostile replies (each unit raw,
   inside both the think and the answer part, after ``search`` in the answer, and as a
   ``search[...]`` query) at ``--size``, new code; and the old code (parse, WebShop's
   ``parse_action`` and the unmemoised reasoning checks patched back in) at the largest
   ladder size it finished in the budget. A normal one-action reply is timed too (median
   microseconds), old and new, to show the common case
   did not get slower.

Run: ``python benchmarks/bench_hostile_parse.py [--size BYTES] [--repeat N] [--old-budget S]``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import gymnasium as gym

import ragen_envs
from ragen_envs.envs import base as env_base
from ragen_envs.envs import webshop as env_webshop
from ragen_envs.protocol import parse_answer
from ragen_envs.webshop.engine import parse_action

UNITS = ["<think></think><answer>", "<think>", "<think>a</think>", "</think>", "<answer>", "[", "||",
         "<think></think> ", "go up. box left.\n"]

# ------------------------------------------------------------------ the old code (before the rewrite)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from old_parsers import old_parse_action, old_parse_answer, old_reasoning_report  # noqa: E402


@contextmanager
def old_code():
    """Patch the old parsing and reasoning back into the env modules."""
    saved = env_base.parse_answer, env_base.reasoning_report, env_webshop.parse_action
    env_base.parse_answer, env_base.reasoning_report, env_webshop.parse_action = (
        old_parse_answer, old_reasoning_report, old_parse_action)
    try:
        yield
    finally:
        env_base.parse_answer, env_base.reasoning_report, env_webshop.parse_action = saved


# ------------------------------------------------------------------ timing
def repeated(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


def step_replies(unit: str, size: int) -> list[str]:
    body = repeated(unit, size)
    return [body, f"<think>{body}</think><answer>{body}</answer>", f"<think>x</think><answer>search{body}</answer>",
            f"<think>x</think><answer>search[{body}]</answer>"]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_time(fn: Callable[[], object], repeat: int) -> float:
    return statistics.median(timed(fn) for _ in range(repeat))


def ladder(seconds_at: Callable[[int], float], budget: float, limit: int) -> tuple[int, float, bool]:
    """``seconds_at(size)`` at 1 KiB, 2 KiB, ... up to ``limit``; stop after the first size
    over ``budget`` seconds. Returns (largest size timed, its seconds, reached ``limit``)."""
    size, last = 1024, (0, 0.0)
    while size <= limit:
        seconds = seconds_at(size)
        last = (size, seconds)
        if seconds > budget:
            return size, seconds, False
        size *= 2
    return last[0], last[1], last[0] >= limit


def fmt_size(n: int) -> str:
    return f"{n // (1 << 20)} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n // 1024} KiB"


def fmt_s(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def parse_table(size: int, repeat: int, budget: float) -> list[str]:
    names = ("Up", "Down", "Left", "Right")
    rows = ["| unit | new parse at " + fmt_size(size) + " | old: largest size timed | old time there | new time there "
            "| old/new there |", "|---|---:|---:|---:|---:|---:|"]
    cases = [(f"`{u!r}` parse_answer", lambda s, u=u: (lambda: parse_answer(repeated(u, s), names)),
              lambda s, u=u: (lambda: old_parse_answer(repeated(u, s), names))) for u in UNITS]
    cases += [(f"`{u!r}` parse_action", lambda s, u=u: (lambda: parse_action("click" + repeated(u, s))),
               lambda s, u=u: (lambda: old_parse_action("click" + repeated(u, s)))) for u in ("[", "[a", "a]")]
    for label, new_at, old_at in cases:
        new_full = median_time(new_at(size), repeat)
        old_size, old_s, finished = ladder(lambda n: timed(old_at(n)), budget, size)
        new_there = median_time(new_at(old_size), repeat)
        ratio = old_s / new_there if new_there > 0 else float("inf")
        mark = "" if finished else " (stopped)"
        shown = f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2f}x"
        rows.append(f"| {label} | {fmt_s(new_full)} | {fmt_size(old_size)}{mark} | {fmt_s(old_s)} | "
                    f"{fmt_s(new_there)} | {shown} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def slowest_step(env: gym.Env, size: int) -> tuple[float, str]:
    worst, which = 0.0, ""
    for unit in UNITS:
        for k, reply in enumerate(step_replies(unit, size)):
            env.reset(seed=k)
            seconds = timed(lambda r=reply: env.step(r))
            if seconds > worst:
                worst, which = seconds, f"{unit!r} ({('raw', 'in think+answer', 'in search', 'as query')[k]})"
    return worst, which


def normal_step_us(env: gym.Env, reply: str, n: int) -> float:
    times = []
    for i in range(n):
        env.reset(seed=i % 50)  # one turn per episode: Bandit's episodes are one turn long
        start = time.perf_counter_ns()
        env.step(reply)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def step_table(size: int, budget: float, normal_steps: int) -> list[str]:
    rows = [f"| id | new: slowest hostile step at {fmt_size(size)} | which | old: largest size in budget | "
            "old slowest there | new slowest there | normal reply, old µs | normal reply, new µs |",
            "|---|---:|---|---:|---:|---:|---:|---:|"]
    good = {"ragen/Bandit-v0": "Dragon", "ragen/BanditRev-v0": "Dragon", "ragen/FrozenLake-v0": "Left",
            "ragen/WebShop-v0": "search[red shoes]"}
    for spec in ragen_envs.ENV_SPECS:
        env = gym.make(spec.id)
        new_full, which = slowest_step(env, size)
        with old_code():
            old_size, old_s, finished = ladder(lambda n: slowest_step(env, n)[0], budget, size)
        new_there, _ = slowest_step(env, old_size)
        reply = f"<think>The goal is below me, so I go {good.get(spec.id, 'Up')}.</think>" \
                f"<answer>{good.get(spec.id, 'Up')}</answer>"
        with old_code():
            old_us = normal_step_us(env, reply, normal_steps)
        new_us = normal_step_us(env, reply, normal_steps)
        mark = "" if finished else " (stopped)"
        rows.append(f"| {spec.id} | {fmt_s(new_full)} | {which} | {fmt_size(old_size)}{mark} | {fmt_s(old_s)} | "
                    f"{fmt_s(new_there)} | {old_us:.1f} | {new_us:.1f} |")
        print(rows[-1], file=sys.stderr, flush=True)
        env.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=1 << 20, help="hostile reply size for the new code (default 1 MiB)")
    p.add_argument("--repeat", type=int, default=5, help="runs per parse timing (median; default 5)")
    p.add_argument("--old-budget", type=float, default=1.0,
                   help="the old code's ladder stops after the first size over this many seconds (default 1)")
    p.add_argument("--normal-steps", type=int, default=300, help="normal-reply steps per side and id (default 300)")
    args = p.parse_args(argv)
    print(f"python {platform.python_version()} on {platform.machine()}, size {args.size} bytes, "
          f"old budget {args.old_budget} s\n")
    print("\n".join(parse_table(args.size, args.repeat, args.old_budget)))
    print()
    print("\n".join(step_table(args.size, args.old_budget, args.normal_steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
