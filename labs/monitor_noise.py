"""The noise-aware success warning chosen on the development runs of BOTH corpora (Bandit and
multi-turn Sokoban) and reported on each task's held-out runs (issue 21;
benchmarks/results/2026-12-03-monitor-multiturn-trap.md §13c/§13d).

    python labs/monitor_noise.py --bandit runs/monitor_corpus --sokoban runs/mt_corpus --out runs/monitor_noise

Reads the finished runs of ``labs/monitor_corpus.py`` (``--task bandit`` and ``--task
sokoban``; their specs fix the dev / held-out split), labels each with the unchanged
``collapse_label`` (monitor_analysis.label_run), then for the two success signals replays
every (window, ratio, k) of :data:`GRID` — k = 0 is the ratio-only rule of §13c — and

1. chooses on the union of the development runs by §13c's rule: no development false alarm,
   then the most development collapses warned, then the largest median lead, then the
   first in :func:`grid` order (the least sensitive: largest k, smallest ratio first);
2. reports the chosen rule, the old default (``valid_success_drop`` 0.8, k = 0, 5 steps) and
   the best ratio-only rule on each task's held-out runs: warned before the collapse, late,
   median lead (bootstrap CI), false alarms, Wilson 95 % CIs for the counts;
3. writes ``OUT/monitor_noise.json``, ``OUT/monitor_noise_tables.md`` (the ROC-style rows of
   every grid value, dev and held-out per task), ``OUT/monitor_noise_{bandit,sokoban}.png``
   (held-out curves with each run's collapse and first warning of the chosen rule) and, with
   ``--fixture PATH``, a few trimmed multi-turn traces for the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):  # the checkout (ragen_envs) and this folder (_labs_common)
    if _p not in sys.path:
        sys.path.insert(0, _p)

import _labs_common as common  # noqa: E402
# the rule grid and its replay, shared with template_collapse.py
from _labs_common import (FORMED, GRID, SIGNALS, SUCCESS_SIGNALS, choose_rule, first_fires, grid,  # noqa: E402,F401
                          kwargs_for, rule_alarms, rule_kwargs, rule_name, union_alarms, union_candidates)

OLD_DEFAULT = ("valid_success_drop", 5, 0.8, 0.0)
FIXTURE_KEYS = ("step", "rollout/success", "rollout/format_error", "rollout/in_group_std", "rollout/return_mean",
                "actor/grad_norm", "rollout/episodes", "eval/success", "rollout/well_formed_episodes",
                "rollout/well_formed_success")


def load_runs(out: Path, specs: Sequence[dict], task: str) -> list[dict]:
    """The finished runs of ``specs`` under OUT/runs, labelled (monitor_analysis.label_run)."""
    from ragen_envs.starpo.diagnostics import read_metrics

    runs = []
    for spec in specs:
        d = out / "runs" / spec["variant"] / f"seed{spec['seed']}"
        if not (d / "result.json").exists():
            continue
        rows = read_metrics(d / "metrics.jsonl")
        runs.append({"task": task, "config": spec["variant"], "seed": spec["seed"], "split": spec["split"],
                     "reused": None, "label": common.label_run(rows),
                     "rows": [{k: v for k, v in r.items() if any(k == p or k.startswith(p) for p in common.KEEP_KEYS)}
                              for r in rows]})
    return runs


MULTITURN_2026_12_02 = {"signal": "success_drop", "window": 5, "ratio": 0.25, "k": 5.0}  # monitor.MULTITURN_MONITOR before


def analyze(bandit: Sequence[dict], sokoban: Sequence[dict], out: Path, log=print) -> dict[str, Any]:
    tasks = {"bandit": list(bandit), "sokoban": list(sokoban)}
    runs = tasks["bandit"] + tasks["sokoban"]
    where = {(t, split): [i for i, r in enumerate(runs) if r["task"] == t and r["split"] == split]
             for t in tasks for split in ("dev", "heldout")}
    dev = [i for i, r in enumerate(runs) if r["split"] == "dev"]
    report: dict[str, Any] = {"grid": GRID, "runs": {t: [{k: r[k] for k in ("config", "seed", "split", "label")} for r in rs]
                                                     for t, rs in tasks.items()}}
    for t, rs in tasks.items():
        for r in rs:
            log(f"  {t:<7} {r['split']:<7} {r['config']:<22} seed {r['seed']:<3} collapse {r['label']['collapse_step']}"
                f"  eval {' '.join(f'{x:.2f}' for x in r['label']['eval_success'])}")
    table = first_fires(runs)
    cands = union_candidates()
    singles = [c for c in cands if "parts" not in c]
    success_only = [c for c in singles if c["signal"] in SUCCESS_SIGNALS]
    chosen = choose_rule(runs, dev, table, cands)
    report["chosen"] = chosen
    report["chosen_success_only"] = choose_rule(runs, dev, table, success_only)
    report["chosen_ratio_only"] = choose_rule(runs, dev, table, [c for c in cands if all(
        p["k"] == 0 for p in c.get("parts", [c]))])
    report["chosen_per_task"] = {t: choose_rule(runs, where[(t, "dev")], table, cands) for t in tasks}
    rules = {}
    if chosen:
        rules["chosen on both tasks' dev: " + rule_name(chosen["rule"])] = chosen["rule"]
    named = [("success signals only, chosen on both: ", report["chosen_success_only"]),
             ("ratio only, chosen on both: ", report["chosen_ratio_only"])]
    named += [(f"chosen on {t} dev alone: ", c) for t, c in report["chosen_per_task"].items()]
    for prefix, c in named:
        if c and c["rule"] not in rules.values():
            rules[prefix + rule_name(c["rule"])] = c["rule"]
    for prefix, rule in (("MULTITURN_MONITOR of 2026-12-02: ", MULTITURN_2026_12_02),
                         ("old default (§13c): ", dict(zip(("signal", "window", "ratio", "k"), OLD_DEFAULT)))):
        if rule not in rules.values():
            rules[prefix + rule_name(rule)] = rule
    report["sets"] = {}
    for (t, split), index in where.items():
        sub = [runs[i] for i in index]
        entries = {}
        for name, rule in rules.items():
            sc = common.score_alarms(sub, rule_alarms(rule, table, index))
            e = common.report_entry(sc)
            e["per_run"] = [{"config": r["config"], "seed": r["seed"], "collapse": r["label"]["collapse_step"],
                             "alarm": w} for r, w in zip(sub, sc["first_alarm"])]
            e["rule"] = rule
            entries[name] = e
        report["sets"][f"{t}_{split}"] = entries
    report["roc"] = [{"rule": rule, **{f"{t}_{split}": common.public_fields(common.score_alarms([runs[i] for i in index],
                                                                                          rule_alarms(rule, table, index)))
                                       for (t, split), index in where.items()}} for rule in singles]
    report["probes"] = {t: common.probe_summary(rs) for t, rs in tasks.items()}
    report["probe_signals"] = probe_signal_rows(tasks)
    out.mkdir(parents=True, exist_ok=True)
    (out / "monitor_noise.json").write_text(json.dumps(report, indent=2))
    (out / "monitor_noise_tables.md").write_text("\n".join(markdown(report)) + "\n")
    for line in markdown(report, roc=False):
        log(line)
    if chosen:
        kw = rule_kwargs(chosen["rule"])
        for t, rs in tasks.items():
            held = [r for r in rs if r["split"] == "heldout"] or rs
            if held:
                common.plot_corpus(held, kw, out / f"monitor_noise_{t}.png", f"{t}: held-out runs, rule {rule_name(chosen['rule'])}")
    return report


OTHER_SIGNALS = ("reward_std_collapse", "grad_norm_spike", "echo_trap", "mi_drop", "entropy_drop")


def probe_signal_rows(tasks: dict[str, Sequence[dict]]) -> list[dict]:
    """The signals other than the drop tests (the paper's std collapse, grad spikes and think
    diversity; the probe's MI proxy and H(Z|X)) over monitor_analysis.GRIDS, each alone,
    scored on each task's dev and held-out runs that recorded its input."""
    rows = []
    for sig in OTHER_SIGNALS:
        key, values = common.GRIDS[sig]
        for v in values:
            row = {"signal": sig, "key": key, "value": v}
            for t, rs in tasks.items():
                for split in ("dev", "heldout"):
                    sub = [r for r in rs if r["split"] == split and any(common.SIGNAL_INPUT[sig] in x for x in r["rows"])]
                    row[f"{t}_{split}"] = common.public_fields(common.score_runs(sub, common.signal_kwargs(sig, v))) if sub else None
            rows.append(row)
    return rows


def _n(e: dict, key: str) -> str:
    return f"{e[key]}/{e['collapsing' if key in ('warned', 'late') else 'healthy']}"


def markdown(report: dict, roc: bool = True) -> list[str]:
    lines = [f"chosen on the union of both tasks' dev runs: {report['chosen']}",
             f"success signals only, chosen the same way: {report.get('chosen_success_only')}",
             f"ratio-only (k = 0) chosen the same way: {report['chosen_ratio_only']}",
             f"chosen per task's dev runs alone: {report['chosen_per_task']}", ""]
    lines += ["| runs | rule | warned before collapse | 95 % CI | late | median lead | 95 % CI | leads | false alarms | 95 % CI |",
              "|---|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for set_name, entries in report["sets"].items():
        for name, e in entries.items():
            lines.append(f"| {set_name} | {name} | {_n(e, 'warned')} | {common.fmt_ci(e['warned_ci'])} | {e['late']} | "
                         f"{e['median_lead'] if e['median_lead'] is not None else '-'} | {common.fmt_ci(e['median_lead_ci'], False)} | "
                         f"{', '.join(map(str, e['leads'])) or '-'} | {_n(e, 'false_alarms')} | {common.fmt_ci(e['false_alarm_ci'])} |")
    if not roc:
        return lines
    lines += ["", "ROC-style: every grid value (warned/collapsing, median lead, false alarms/healthy):", "",
              "| signal | window | ratio | k | dev bandit | dev sokoban | held-out bandit | held-out sokoban |",
              "|---|---:|---:|---:|---|---|---|---|"]

    def cell(s):
        lead = s["median_lead"] if s["median_lead"] is not None else "-"
        return f"{s['warned']}/{s['collapsing']}, {lead}, FA {s['false_alarms']}/{s['healthy']}"

    for row in report["roc"]:
        r = row["rule"]
        lines.append(f"| {r['signal']} | {r['window']} | {r['ratio']} | {r['k']:g} | {cell(row['bandit_dev'])} | "
                     f"{cell(row['sokoban_dev'])} | {cell(row['bandit_heldout'])} | {cell(row['sokoban_heldout'])} |")
    lines += ["", "The other signals, each alone (runs that record its input only):", "",
              "| signal | threshold | dev bandit | dev sokoban | held-out bandit | held-out sokoban |", "|---|---:|---|---|---|---|"]
    for row in report.get("probe_signals", []):
        cells = [cell(row[k]) if row[k] else "-" for k in ("bandit_dev", "sokoban_dev", "bandit_heldout", "sokoban_heldout")]
        lines.append(f"| {row['signal']} | {row['value']} | " + " | ".join(cells) + " |")
    return lines


def write_fixture(runs: Sequence[dict], picks: dict[str, tuple[str, int]], path: Path, after: int = 12) -> Path:
    """A few recorded multi-turn runs as trimmed metric traces for the tests: ``picks`` maps a
    name to (config, seed); a collapsing run's rows end ``after`` steps past its collapse step,
    a healthy run's are all kept; only the monitor's inputs and the evaluation."""
    by_key = {(r["config"], r["seed"]): r for r in runs}
    out = {}
    for name, key in picks.items():
        if key not in by_key:
            raise ValueError(f"no finished run {key}")
        r = by_key[key]
        c = r["label"]["collapse_step"]
        rows = [{k: round(v, 6) if isinstance(v, float) else v for k, v in row.items() if k in FIXTURE_KEYS}
                for row in r["rows"] if "rollout/success" in row and (c is None or row["step"] <= c + after)]
        out[name] = {"config": r["config"], "seed": r["seed"], "split": r["split"],
                     "collapse_step": r["label"]["collapse_step"], "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bandit", default="runs/monitor_corpus", help="OUT of monitor_corpus.py --task bandit")
    parser.add_argument("--sokoban", default="runs/mt_corpus", help="OUT of monitor_corpus.py --task sokoban")
    parser.add_argument("--out", default="runs/monitor_noise")
    parser.add_argument("--fixture", default=None, help="write trimmed multi-turn traces here (the tests' fixture)")
    parser.add_argument("--fixture-runs", nargs="+", default=[], metavar="NAME=CONFIG:SEED")
    args = parser.parse_args(argv)
    try:
        bandit = load_runs(Path(args.bandit), common.corpus_specs(), "bandit")
        sokoban = load_runs(Path(args.sokoban), common.mt_specs(), "sokoban")
        if not bandit and not sokoban:
            raise ValueError("no finished runs under --bandit or --sokoban")
        analyze(bandit, sokoban, Path(args.out))
        if args.fixture:
            picks = {}
            for item in args.fixture_runs:
                name, _, rest = item.partition("=")
                cfg, _, seed = rest.partition(":")
                if not (name and cfg and seed.isdigit()):
                    raise ValueError(f"--fixture-runs needs NAME=CONFIG:SEED, got {item!r}")
                picks[name] = (cfg, int(seed))
            write_fixture(sokoban, picks, Path(args.fixture))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
