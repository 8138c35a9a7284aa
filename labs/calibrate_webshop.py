"""Calibrate a WebShop catalog: the oracle, upstream's rule baseline and a random agent.

``python labs/calibrate_webshop.py [--split test] [--goals 500] [--catalog PATH]``
plays every goal of the split once (seed s -> goal ``start + s``) through ``ragen/WebShop-v0``
and the full text protocol, and prints a Markdown table: success rate (score exactly 1.0)
with its 95 % Wilson interval, mean score, purchase rate and mean actions. Upstream's rule
baseline ("search the instruction, click the first result, buy") reaches about 10 % success
on real WebShop; a usable catalog should put it in that band, and the oracle near 100 %.

It is a lab (it was ``ragen_envs/webshop/calibrate.py``, then ``labs/calibrate_webshop.py``):
it drives agents and the evaluator, which sit above the WebShop engine, so it cannot be part of
that package.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym

from ragen_envs.agents import make_agent
from ragen_envs.agents.webshop import HeuristicAgent
from ragen_envs.eval import run_episode
from ragen_envs.eval.metrics import wilson_interval

__all__ = ["calibrate", "main"]


def calibrate(split: str = "test", goals: int | None = None, catalog: str | None = None, agents=("oracle", "heuristic", "random")) -> list[dict[str, Any]]:
    """One row per agent: ``agent, episodes, success_rate, ci95, mean_score, purchase_rate, mean_actions, seconds``."""
    kwargs = {"split": split} if catalog is None else {"split": split, "catalog": catalog}
    rows = []
    for name in agents:
        env = gym.make("ragen/WebShop-v0", **kwargs)
        start, stop = env.unwrapped.describe()["splits"][split]
        n = stop - start if goals is None else min(goals, stop - start)
        agent = {
            "oracle": lambda: make_agent("expert", env=env),
            "heuristic": lambda: HeuristicAgent(think=env.unwrapped.think),
            "random": lambda: make_agent("random", env=env, seed=0),
        }[name]()
        t0 = time.monotonic()
        successes = purchases = 0
        score = actions = 0.0
        for seed in range(n):
            ep = run_episode(env, agent, seed, env_id="ragen/WebShop-v0")
            last = ep.turns[-1].info
            successes += ep.success
            purchases += last["purchased"]
            score += sum(t.info["game_reward"] for t in ep.turns)
            actions += ep.num_actions
        lo, hi = wilson_interval(successes, n)
        rows.append({
            "agent": name, "episodes": n, "success_rate": successes / n, "ci95": (lo, hi),
            "mean_score": score / n, "purchase_rate": purchases / n, "mean_actions": actions / n,
            "seconds": time.monotonic() - t0,
        })
        env.close()
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = ["| agent | episodes | success % | 95 % CI | mean score | purchase % | mean actions |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r["ci95"]
        lines.append(f"| {r['agent']} | {r['episodes']} | {100 * r['success_rate']:.1f} | {100 * lo:.1f}-{100 * hi:.1f} "
                     f"| {r['mean_score']:.3f} | {100 * r['purchase_rate']:.1f} | {r['mean_actions']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python labs/calibrate_webshop.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="test", help="test, val or train (default test)")
    parser.add_argument("--goals", type=int, help="play only the first N goals of the split")
    parser.add_argument("--catalog", help="a mini catalog file (default: the shipped one)")
    args = parser.parse_args(argv)
    if args.goals is not None and args.goals < 1:
        parser.error("--goals must be >= 1")
    rows = calibrate(args.split, args.goals, args.catalog)
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
