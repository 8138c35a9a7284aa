"""The README's main command (``make demo``): the expert and the random agent on the 256
fixed evaluation seeds of every environment, with a results table.

Run: ``python -m ragen_envs.demo [--seeds N] [--out DIR]``. Writes ``DIR/summary.json``
(default ``runs/demo``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import gymnasium as gym

from . import ENV_SPECS, EVAL_SEEDS
from ._progress import Progress
from .agents import make_agent
from .eval import run_episode, summarize

__all__ = ["main", "evaluate", "format_table"]


def evaluate(env_id: str, agent_spec: str, seeds, label: str = "") -> dict:
    """Play ``agent_spec`` on ``env_id`` for every seed; returns the summary dict."""
    env = gym.make(env_id)
    agent = make_agent(agent_spec, env=env, **({"seed": 0} if agent_spec == "random" else {}))
    episodes = []
    with Progress(len(seeds), label) as bar:
        for seed in seeds:
            episodes.append(run_episode(env, agent, seed, env_id=env_id))
            bar.update(1, note=f"success {sum(e.success for e in episodes) / len(episodes):.1%}")
    env.close()
    return summarize(episodes)


def format_table(rows: list[dict]) -> str:
    """A plain-text table: one row per (env, agent)."""
    header = ["env", "agent", "success %", "95% CI", "return", "turns", "actions", "effective %", "valid %", "format err %"]
    lines = []
    for r in rows:
        s = r["summary"]
        lo, hi = s["success_ci95"]
        lines.append([
            r["env"], r["agent"], f"{100 * s['success_rate']:.2f}", f"{100 * lo:.1f}-{100 * hi:.1f}",
            f"{s['mean_return']:.3f}", f"{s['mean_turns']:.2f}", f"{s['mean_actions']:.2f}",
            f"{100 * s['mean_action_is_effective']:.1f}", f"{100 * s['mean_action_is_valid']:.1f}",
            f"{100 * s['mean_format_error']:.1f}",
        ])
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(l) for l in lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragen_envs.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=len(EVAL_SEEDS), help="how many of the 256 EVAL_SEEDS (default all)")
    parser.add_argument("--out", default="runs/demo", help="output directory for summary.json")
    args = parser.parse_args(argv)
    if not 1 <= args.seeds <= len(EVAL_SEEDS):
        parser.error(f"--seeds must be between 1 and {len(EVAL_SEEDS)}")
    seeds = EVAL_SEEDS[: args.seeds]
    rows = []
    start = time.monotonic()
    for spec in ENV_SPECS:
        for agent in ("expert", "random"):
            summary = evaluate(spec.id, agent, seeds, label=f"{spec.id:26s} {agent:6s}")
            rows.append({"env": spec.id, "agent": agent, "summary": summary})
    print()
    print(f"{len(seeds)} fixed evaluation seeds ({seeds[0]}..{seeds[-1]}) per environment, "
          f"{time.monotonic() - start:.1f}s in all")
    print(format_table(rows))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"seeds": list(seeds), "results": rows}, indent=2))
    print(f"\nwrote {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
