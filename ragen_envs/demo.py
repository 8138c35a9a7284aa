"""The expert and the random agent on the 256 fixed evaluation seeds of every environment.

Run: ``python -m ragen_envs.demo [--seeds N] [--out DIR]``. Prints the tables and writes a
``ragen eval`` run directory per agent (``DIR/expert``, ``DIR/random``: summary.json,
episodes.jsonl, report.html; default ``runs/agents``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gymnasium as gym

from . import ENV_SPECS, EVAL_SEEDS
from ._progress import Progress
from .agents import make_agent
from .eval import format_compare_table, format_summary_table, run_episode, write_results

__all__ = ["main", "play"]


def play(env_id: str, agent_spec: str, seeds, label: str = "") -> list:
    """Play ``agent_spec`` on ``env_id`` for every seed; returns the episodes."""
    env = gym.make(env_id)
    agent = make_agent(agent_spec, env=env, **({"seed": 0} if agent_spec == "random" else {}))
    episodes = []
    with Progress(len(seeds), label) as bar:
        for seed in seeds:
            episodes.append(run_episode(env, agent, seed, env_id=env_id))
            bar.update(1, note=f"success {sum(e.success for e in episodes) / len(episodes):.1%}")
    env.close()
    return episodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragen_envs.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=len(EVAL_SEEDS), help="how many of the 256 EVAL_SEEDS (default all)")
    parser.add_argument("--out", default="runs/agents", help="output directory (one run directory per agent)")
    args = parser.parse_args(argv)
    if not 1 <= args.seeds <= len(EVAL_SEEDS):
        parser.error(f"--seeds must be between 1 and {len(EVAL_SEEDS)}")
    seeds = EVAL_SEEDS[: args.seeds]
    from .cli import CLIError
    from ._rundir import claim_run_dir

    try:  # DIR/expert and DIR/random are eval runs: rewritten, never anything else
        for agent in ("expert", "random"):
            claim_run_dir(Path(args.out) / agent, kind="eval", resume=True)
    except CLIError as exc:
        parser.error(str(exc))
    start = time.monotonic()
    summaries = []
    for agent in ("expert", "random"):
        episodes = []
        for spec in ENV_SPECS:
            episodes += play(spec.id, agent, seeds, label=f"{spec.id:26s} {agent:6s}")
        summaries.append(write_results(Path(args.out) / agent, episodes, agent))
    print(f"\n{len(seeds)} fixed evaluation seeds ({seeds[0]}..{seeds[-1]}) per environment, "
          f"{time.monotonic() - start:.1f}s in all")
    for agent, summary in zip(("expert", "random"), summaries):
        print(f"\n{agent}:\n{format_summary_table(summary)}")
    print(f"\nsuccess %, expert vs random:\n{format_compare_table(summaries, ['expert', 'random'])}")
    print(f"\nwrote {args.out}/expert and {args.out}/random (summary.json, episodes.jsonl, report.html)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
