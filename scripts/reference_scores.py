"""Regenerate (or check) the expert / random rows of the bundled reference scores.

    python scripts/reference_scores.py                       # every registered id, both agents
    python scripts/reference_scores.py --ids ragen/Sudoku-v0 # only these ids (others kept)
    python scripts/reference_scores.py --check               # replay a quick subset, compare
    python scripts/reference_scores.py --check --ids all     # replay everything, compare
    python scripts/reference_scores.py --doc-only            # re-render the doc from the JSON

Each (agent, id) is played by ``ragen eval ID --agent AGENT`` on the 256 ``EVAL_SEEDS`` with the
id's default settings into ``RUNS/AGENT/ragen_ID`` (a finished run is resumed, not replayed),
and its summary goes into ``ragen_envs/eval/reference_scores.json``; then the generated tables
of ``docs/reference-scores.md`` are re-rendered from the JSON. The expert and random agents are
deterministic (random is seeded with the episode seed), so ``--check`` replays into a fresh
temporary folder and exits 1 when any success count or mean return differs from the stored one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JSON_PATH = ROOT / "ragen_envs" / "eval" / "reference_scores.json"
DOC_PATH = ROOT / "docs" / "reference-scores.md"
# --check without --ids: ids that replay in seconds on one core (2048's expert takes minutes)
QUICK_IDS = ("ragen/Bandit-v0", "ragen/Sokoban-v0", "ragen/FrozenLake-v0", "ragen/LightsOut-v0", "ragen/Countdown-v0")


def registered_ids() -> list[str]:
    import ragen_envs

    return [s.id for s in ragen_envs.ENV_SPECS]


def play(env_id: str, agent: str, seeds: list[int], out: Path, concurrency: int) -> dict:
    """The env's entry of the run's summary (episodes played now or resumed from ``out``)."""
    from ragen_envs.eval import evaluate

    result = evaluate(agent, [env_id], seeds, out, concurrency=concurrency, progress=False, frame_episodes=0)
    entry = result.summary["envs"][env_id]
    if entry.get("errors") or entry.get("episodes") != len(seeds):
        raise SystemExit(f"{agent} on {env_id}: {entry.get('episodes')} of {len(seeds)} episodes finished, "
                         f"{entry.get('errors')} errors; see {out}")
    return entry


def expert_missing(env_id: str) -> str | None:
    """Why ``env_id`` has no expert (its env raises NotImplementedError for the expert's
    actions at the first seed), or None when it has one."""
    import gymnasium as gym

    from ragen_envs import EVAL_SEEDS

    env = gym.make(env_id)
    try:
        env.reset(seed=EVAL_SEEDS[0])
        env.unwrapped.expert_actions()
    except NotImplementedError as exc:
        return str(exc) or f"{type(env.unwrapped).__name__} implements no expert_actions()"
    finally:
        env.close()
    return None


def write_doc(data: dict) -> None:
    from ragen_envs.eval.reference import markdown_blocks, replace_blocks

    DOC_PATH.write_text(replace_blocks(DOC_PATH.read_text(encoding="utf-8"), markdown_blocks(data)), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ids", nargs="+", metavar="ID", help="gym ids, or `all` (default: every registered id; "
                                                          "--check: a quick subset)")
    p.add_argument("--agents", nargs="+", choices=("expert", "random"), default=["expert", "random"])
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "reference", metavar="DIR",
                   help="run directories, DIR/AGENT/ragen_ID (default runs/reference)")
    p.add_argument("--concurrency", type=int, default=2, help="episodes in flight (default 2)")
    p.add_argument("--check", action="store_true", help="replay into a temporary folder and compare; write nothing")
    p.add_argument("--doc-only", action="store_true", help="only re-render docs/reference-scores.md from the JSON")
    args = p.parse_args(argv)

    from ragen_envs import EVAL_SEEDS
    from ragen_envs.eval.reference import baseline_entry, load_reference, validate_reference

    data = json.loads(JSON_PATH.read_text(encoding="utf-8"))
    validate_reference(data)
    if args.doc_only:
        write_doc(data)
        print(f"wrote {DOC_PATH}")
        return 0
    known = registered_ids()
    if not args.ids or args.ids == ["all"]:
        ids = list(QUICK_IDS) if args.check and not args.ids else known
    else:
        ids = args.ids
    unknown = [i for i in ids if i not in known]
    if unknown:
        print(f"not registered: {', '.join(unknown)} (registered: {', '.join(known)})", file=sys.stderr)
        return 2
    seeds = list(EVAL_SEEDS)
    agents = data["baselines"]["agents"]

    if args.check:
        bad = 0
        with tempfile.TemporaryDirectory(prefix="reference-check-") as tmp:
            for agent in args.agents:
                for env_id in ids:
                    stored = agents.get(agent, {}).get(env_id)
                    if stored is None and agent == "expert" and env_id in data["baselines"].get("no_expert", {}):
                        print(f"{agent:6s} {env_id}: no expert (stored so)")
                        continue
                    if stored is None:
                        print(f"{agent:6s} {env_id}: no stored numbers", file=sys.stderr)
                        bad += 1
                        continue
                    now = baseline_entry(play(env_id, agent, seeds, Path(tmp) / agent / env_id.replace("/", "_"),
                                              args.concurrency))
                    same = (now["successes"], now["episodes"]) == (stored["successes"], stored["episodes"]) \
                        and math.isclose(now["mean_return"], stored["mean_return"], rel_tol=1e-9, abs_tol=1e-12)
                    bad += not same
                    print(f"{agent:6s} {env_id}: {now['successes']}/{now['episodes']} now, "
                          f"{stored['successes']}/{stored['episodes']} stored{'' if same else '  <-- DIFFERS'}")
        return 1 if bad else 0

    no_expert = data["baselines"].setdefault("no_expert", {})
    for agent in args.agents:
        for env_id in ids:
            if agent == "expert":
                why = expert_missing(env_id)
                if why:
                    no_expert[env_id] = why
                    agents.get("expert", {}).pop(env_id, None)
                    print(f"expert {env_id}: no expert ({why})")
                    continue
                no_expert.pop(env_id, None)
            start = time.monotonic()
            entry = play(env_id, agent, seeds, args.runs / agent / env_id.replace("/", "_"), args.concurrency)
            agents.setdefault(agent, {})[env_id] = baseline_entry(entry)
            print(f"{agent:6s} {env_id}: {entry['successes']}/{entry['episodes']} ({time.monotonic() - start:.1f}s)")
    order = {env_id: i for i, env_id in enumerate(known)}  # registration order; unregistered ids last
    for agent in list(agents):
        agents[agent] = dict(sorted(agents[agent].items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    data["baselines"]["agents"] = {a: agents[a] for a in ("expert", "random") if a in agents}
    if not no_expert:
        del data["baselines"]["no_expert"]
    text = json.dumps(validate_reference(data), indent=1, ensure_ascii=False) + "\n"
    load_reference(text)
    JSON_PATH.write_text(text, encoding="utf-8")
    write_doc(data)
    print(f"wrote {JSON_PATH} and {DOC_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
