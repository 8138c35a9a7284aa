"""Replay an Echo Trap warning on finished training runs and score it against the collapse label.

    python labs/monitor_replay.py runs/mt/n16_5seeds/runs runs/mt/n16_more/runs --rule multiturn \
        --since 5 --out runs/monitor_replay.json

Every directory under the given roots that holds a ``metrics.jsonl`` is one run (its path names
it; ``seedN`` in the path gives its seed). Each run is labelled from its evaluation curve by
the corpus's label (docs/monitor.md, ``collapse_label``), the rule is replayed on its metric
rows (``replay_monitor``, as the trainer feeds them), and the runs are scored as in
``labs/monitor_noise.py``: collapses warned before the label's step (Wilson 95 % CI),
late warnings, leads and their median (bootstrap CI), healthy runs alarmed (Wilson CI).
``--since N`` also scores the runs with seed >= N on their own (the seeds trained after a rule
was written down). Rules: ``default`` (the trainer's), ``multiturn``
(``monitor.MULTITURN_MONITOR``), or a JSON object of EchoTrapMonitor keywords.
(benchmarks/results/2026-12-03-monitor-multiturn-trap.md §13e: the N = 16 multi-turn runs.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):  # the checkout (ragen_envs) and this folder (_labs_common)
    if _p not in sys.path:
        sys.path.insert(0, _p)

import _labs_common as common  # noqa: E402


def rule_kwargs(rule: str) -> dict[str, Any]:
    """EchoTrapMonitor keywords of a named rule or a JSON object of keywords."""
    from ragen_envs.starpo.monitor import MULTITURN_MONITOR

    if rule == "default":
        return {}
    if rule == "multiturn":
        return dict(MULTITURN_MONITOR)
    try:
        kw = json.loads(rule)
    except json.JSONDecodeError:
        kw = None
    if not isinstance(kw, dict):
        raise ValueError(f"--rule must be default, multiturn or a JSON object of monitor keywords, got {rule!r}")
    return kw


def find_runs(roots: Sequence[Path]) -> list[Path]:
    """Run directories (those with a metrics.jsonl) under each root, sorted, each once."""
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            raise ValueError(f"{root} is not a directory")
        found += [p.parent for p in sorted(root.rglob("metrics.jsonl"))]
    out = list(dict.fromkeys(Path(os.path.relpath(p)) for p in found))
    if not out:
        raise ValueError(f"no metrics.jsonl under {', '.join(map(str, roots))}")
    return out


def seed_of(path: Path) -> int | None:
    """The N of the innermost ``seedN`` path component (the lab's ``VARIANT/seedN`` layout)."""
    for part in reversed(path.parts):
        m = re.fullmatch(r"seed(\d+)", part)
        if m:
            return int(m.group(1))
    return None


def replay(run_dirs: Sequence[Path], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """Per run: its name, seed, collapse step (the label) and the rule's first alarm."""
    from ragen_envs.starpo.diagnostics import EchoTrapMonitor, read_metrics, replay_monitor

    EchoTrapMonitor(**kwargs)  # a bad keyword fails here, before any run is read
    runs = []
    for d in run_dirs:
        rows = read_metrics(d / "metrics.jsonl")
        runs.append({"run": str(d), "seed": seed_of(d), "label": common.label_run(rows),
                     "alarm": replay_monitor(rows, **kwargs)["alarm"]})
    return runs


def score(runs: Sequence[dict]) -> dict[str, Any]:
    """monitor_noise's scoring of the runs' first alarms, with its CIs."""
    return common.report_entry(common.score_alarms(runs, [r["alarm"] for r in runs]))


def lines(report: dict) -> list[str]:
    out = [f"rule: {json.dumps(report['kwargs'])}"]
    for r in report["runs"]:
        out.append(f"  {r['run']}: collapse {r['label']['collapse_step']}, first alarm {r['alarm']}")
    for name, e in report["scores"].items():
        out.append(f"{name}: {e['warned']}/{e['collapsing']} collapses warned before the label "
                   f"(95 % CI {common.fmt_ci(e['warned_ci'])}), {e['late']} late, leads {e['leads']} "
                   f"(median {e['median_lead']}, CI {common.fmt_ci(e['median_lead_ci'], False)}); "
                   f"{e['false_alarms']}/{e['healthy']} healthy runs alarmed (95 % CI {common.fmt_ci(e['false_alarm_ci'])})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path, help="folders holding run directories")
    parser.add_argument("--rule", default="multiturn", help="default, multiturn or a JSON object of monitor keywords")
    parser.add_argument("--since", type=int, default=None, help="also score the runs with seed >= this on their own")
    parser.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    try:
        kwargs = rule_kwargs(args.rule)
        runs = replay(find_runs(args.roots), kwargs)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    scores = {"all runs": score(runs)}
    if args.since is not None:
        later = [r for r in runs if r["seed"] is not None and r["seed"] >= args.since]
        scores[f"seed >= {args.since}"] = score(later)
    report = {"kwargs": kwargs, "runs": runs, "scores": scores}
    for line in lines(report):
        print(line)
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2))
        except OSError as exc:
            print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
