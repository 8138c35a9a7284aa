"""The analysis half of ``benchmarks/monitor_corpus.py``: labels, the corpus file, the monitor's
thresholds chosen on the development runs, its report on the held-out runs, the figure.

Pure functions (:func:`score_runs`, :func:`choose_threshold`, :func:`probe_cost`) are tested
in tests/test_monitor.py on recorded traces.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

from ragen_envs.starpo.diagnostics import MONITOR_SIGNALS, collapse_label, read_metrics, replay_monitor

# each signal's threshold keyword and the grid tried on the development runs
GRIDS: dict[str, tuple[str, tuple[float, ...]]] = {
    "success_drop": ("success_ratio", (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)),
    "valid_success_drop": ("valid_success_ratio", (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)),
    "reward_std_collapse": ("std_ratio", (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)),
    "grad_norm_spike": ("spike_factor", (1.25, 1.5, 2.0, 3.0, 5.0)),
    "echo_trap": ("diversity_ratio", (0.5, 0.7, 0.8, 0.9, 0.95)),
    "mi_drop": ("mi_ratio", (0.1, 0.25, 0.5, 0.75)),
    "entropy_drop": ("entropy_ratio", (0.5, 0.7, 0.8, 0.9, 0.95)),
}
# the metric each signal reads (a signal is only chosen on runs where it can be seen)
SIGNAL_INPUT = {"success_drop": "rollout/success", "valid_success_drop": "rollout/format_error", "reward_std_collapse": "rollout/in_group_std",
                "grad_norm_spike": "actor/grad_norm", "echo_trap": "probe/distinct_ngrams", "mi_drop": "probe/mi",
                "entropy_drop": "probe/entropy"}
ALL_OFF = {"std_ratio": None, "spike_factor": None, "diversity_ratio": None, "success_ratio": None, "valid_success_ratio": None,
           "mi_ratio": None, "entropy_ratio": None, "well_formed_ratio": None}
# the paper's signatures at the trainer's thresholds before the redesign (the baseline)
PAPER_SIGNALS = {**ALL_OFF, "std_ratio": 0.1, "spike_factor": 5.0, "diversity_ratio": 0.5,
                 "alarm": ("reward_std_collapse", "grad_norm_spike", "echo_trap")}
KEEP_KEYS = ("step", "final", "rollout/", "eval/", "probe/", "actor/grad_norm", "actor/entropy", "time/")


def signal_kwargs(signal: str, value: float) -> dict[str, Any]:
    """EchoTrapMonitor keywords with only ``signal`` on, at threshold ``value``."""
    key, _ = GRIDS[signal]
    return {**ALL_OFF, key: value, "alarm": (signal,)}


def label_run(rows: Sequence[dict]) -> dict[str, Any]:
    """The run's evaluation curve and its collapse label (:func:`collapse_label`)."""
    ev = [(r["step"], r["eval/success"]) for r in rows if isinstance(r.get("eval/success"), (int, float))]
    steps = [s for s, _ in ev]
    succ = [v for _, v in ev]
    col = collapse_label(steps, succ)
    return {"collapse_step": col, "collapsed": col is not None, "eval_steps": steps, "eval_success": succ,
            "eval_grid": (steps[1] - steps[0]) if len(steps) > 1 else None}


def score_runs(runs: Sequence[dict], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Replay a monitor on labelled runs (each ``{"rows", "label"}``).

    A collapsing run is *warned* when the first alarm step W comes before its collapse
    step C (W < C; lead = C - W); an alarm at or after C is late. A healthy run has a
    *false alarm* when any alarm fires. Returns the counts, the leads and per-run W.
    """
    return score_alarms(runs, [replay_monitor(run["rows"], **kwargs)["alarm"] for run in runs])


def score_alarms(runs: Sequence[dict], alarms: Sequence[int | None]) -> dict[str, Any]:
    """:func:`score_runs` from each run's first alarm step (None: no alarm), already known."""
    if len(alarms) != len(runs):
        raise ValueError(f"{len(runs)} runs but {len(alarms)} alarm steps")
    warned, leads, late, false_alarms, n_col, n_ok, per_run = 0, [], 0, 0, 0, 0, []
    for run, w in zip(runs, alarms):
        c = run["label"]["collapse_step"]
        per_run.append(w)
        if c is not None:
            n_col += 1
            if w is not None and w < c:
                warned += 1
                leads.append(c - w)
            elif w is not None:
                late += 1
        else:
            n_ok += 1
            false_alarms += w is not None
    return {"collapsing": n_col, "warned": warned, "late": late, "leads": leads,
            "median_lead": statistics.median(leads) if leads else None,
            "healthy": n_ok, "false_alarms": false_alarms, "first_alarm": per_run}


def choose_threshold(signal: str, runs: Sequence[dict], grid: Sequence[float] | None = None) -> dict[str, Any]:
    """The threshold of ``signal`` chosen on ``runs`` (the development set): among the grid
    values with no false alarm, the one that warns the most collapses, then with the
    largest median lead, then the least sensitive (first in grid order). None when every
    value false-alarms or none warns, or when no healthy run in ``runs`` records the
    signal's input (its false alarms could not be judged)."""
    key, default_grid = GRIDS[signal]
    healthy_seen = [r for r in runs if r["label"]["collapse_step"] is None
                    and any(SIGNAL_INPUT[signal] in row for row in r["rows"])]
    if not healthy_seen:  # no healthy run shows this signal: its false alarms cannot be judged
        return {"signal": signal, "key": key, "value": None, "why": "no healthy run with this signal"}
    best = best_by_rule(runs, grid if grid is not None else default_grid, lambda v: signal_kwargs(signal, v))
    if best is None:
        return {"signal": signal, "key": key, "value": None}
    return {"signal": signal, "key": key, "value": best[0], "dev": _public(best[1])}


def best_by_rule(runs: Sequence[dict], candidates: Sequence[Any], kwargs_of) -> tuple[Any, dict] | None:
    """§13c's choice rule: score each candidate's monitor (``kwargs_of(candidate)``) on ``runs``;
    among those with no false alarm that warn at least one collapse, the one that warns the
    most, then with the largest median lead, then the first in order. (candidate, score) or
    None."""
    best = None
    for cand in candidates:
        s = score_runs(runs, kwargs_of(cand))
        if s["false_alarms"] or not s["warned"]:
            continue
        rank = (s["warned"], s["median_lead"] or 0)
        if best is None or rank > best[0]:
            best = (rank, cand, s)
    return None if best is None else (best[1], best[2])


def _public(s: dict) -> dict:
    return {k: v for k, v in s.items() if k != "first_alarm"}


def probe_cost(rows: Sequence[dict]) -> dict[str, float] | None:
    """Median over a run's probe steps of time/probe / (time/rollout + time/update) (the
    probe against the training step it came with, the same run and load), and of the
    cross-scoring part alone (time/probe_score)."""
    ratios, score = [], []
    for r in rows:
        if "time/probe" in r and "time/rollout" in r and "time/update" in r:
            train = r["time/rollout"] + r["time/update"]
            if train > 0:
                ratios.append(r["time/probe"] / train)
                if "time/probe_score" in r:
                    score.append(r["time/probe_score"] / train)
    if not ratios:
        return None
    return {"probe_over_step": statistics.median(ratios), "score_over_step": statistics.median(score) if score else None,
            "n": len(ratios)}


def _bootstrap_median_ci(xs: Sequence[float], seed: int = 0, reps: int = 2000) -> tuple[float, float] | None:
    import numpy as np

    if not xs:
        return None
    rng = np.random.default_rng(seed)
    arr = np.asarray(xs, dtype=float)
    meds = np.median(rng.choice(arr, size=(reps, len(arr)), replace=True), axis=1)
    return float(np.quantile(meds, 0.025)), float(np.quantile(meds, 0.975))


def _report_entry(s: dict) -> dict:
    from ragen_envs.eval.metrics import wilson_interval

    return {**_public(s), "warned_ci": wilson_interval(s["warned"], s["collapsing"]) if s["collapsing"] else None,
            "false_alarm_ci": wilson_interval(s["false_alarms"], s["healthy"]) if s["healthy"] else None,
            "median_lead_ci": _bootstrap_median_ci(s["leads"])}


def _paired(a: dict, b: dict, runs: Sequence[dict]) -> dict:
    """Exact McNemar on the per-run outcome (warned-before-collapse / no false alarm) of two
    monitors on the same runs."""
    from ragen_envs.starpo.stats import mcnemar_exact

    def ok(w, run):
        c = run["label"]["collapse_step"]
        return (w is not None and w < c) if c is not None else w is None

    only_a = sum(ok(x, r) and not ok(y, r) for x, y, r in zip(a["first_alarm"], b["first_alarm"], runs))
    only_b = sum(ok(y, r) and not ok(x, r) for x, y, r in zip(a["first_alarm"], b["first_alarm"], runs))
    return {"only_a": only_a, "only_b": only_b, "mcnemar_p": mcnemar_exact(only_a, only_b)}


def analyze(out: Path, specs: Sequence[dict], dirs: Sequence[Path], log=print) -> dict[str, Any]:
    """Label every finished run, write OUT/corpus.jsonl, choose thresholds on dev, report on
    held-out (OUT/monitor.json, OUT/monitor.png); returns the report."""
    runs = []
    for spec, d in zip(specs, dirs):
        d = Path(d)
        if not (d / "result.json").exists():
            continue
        rows = read_metrics(d / "metrics.jsonl")
        runs.append({"config": spec["variant"], "seed": spec["seed"], "split": spec["split"],
                     "reused": spec.get("reused"), "label": label_run(rows),
                     "rows": [{k: v for k, v in r.items() if any(k == p or k.startswith(p) for p in KEEP_KEYS)}
                              for r in rows]})
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for run in runs:
            f.write(json.dumps(run) + "\n")
    dev = [r for r in runs if r["split"] == "dev"]
    held = [r for r in runs if r["split"] == "heldout"]
    fine = [r for r in held if r["label"]["eval_grid"] == 2]
    log(f"corpus: {len(runs)} runs ({len(dev)} dev, {len(held)} held-out, {len(fine)} of them on the 2-step grid)")
    for r in runs:
        log(f"  {r['split']:<8} {r['config']:<14} seed {r['seed']:<3} collapse {r['label']['collapse_step']}"
            f"  eval {' '.join(f'{x:.2f}' for x in r['label']['eval_success'])}")

    chosen = {sig: choose_threshold(sig, dev) for sig in MONITOR_SIGNALS}
    combined_alarm = tuple(sig for sig, c in chosen.items() if c["value"] is not None)
    combined = {**ALL_OFF, **{c["key"]: c["value"] for c in chosen.values() if c["value"] is not None},
                "alarm": combined_alarm}
    report: dict[str, Any] = {"chosen": chosen, "combined_kwargs": combined, "sets": {}}
    monitors = {f"{sig} {c['key']}={c['value']}": {**ALL_OFF, c["key"]: c["value"], "alarm": (sig,)}
                for sig, c in chosen.items() if c["value"] is not None}
    monitors["combined (" + " + ".join(combined_alarm) + ")"] = combined
    monitors["paper signals at the old defaults"] = PAPER_SIGNALS
    for set_name, subset in (("dev", dev), ("heldout", held), ("heldout_fine", fine)):
        scores = {name: score_runs(subset, kw) for name, kw in monitors.items()} if subset else {}
        report["sets"][set_name] = {name: _report_entry(s) for name, s in scores.items()}
        if scores and combined_alarm:
            comb = scores["combined (" + " + ".join(combined_alarm) + ")"]
            report["sets"][set_name]["paired_combined_vs_paper"] = _paired(comb, scores["paper signals at the old defaults"], subset)
            report["sets"][set_name]["first_alarm_combined"] = [
                {"config": r["config"], "seed": r["seed"], "collapse": r["label"]["collapse_step"], "alarm": w}
                for r, w in zip(subset, comb["first_alarm"])]
    # ROC-style: each signal over its grid, dev and held-out
    roc = []
    for sig, (key, grid) in GRIDS.items():
        for value in grid:
            kw = signal_kwargs(sig, value)
            d, h = score_runs(dev, kw), score_runs(held, kw)
            roc.append({"signal": sig, "key": key, "value": value,
                        "dev": _public(d), "heldout": _public(h)})
    report["roc"] = roc
    costs = [c for c in (probe_cost(r["rows"]) for r in runs if not r["reused"]) if c]
    if costs:
        report["probe_cost"] = {"runs": len(costs),
                                "probe_over_step_median": statistics.median(c["probe_over_step"] for c in costs),
                                "probe_over_step_range": [min(c["probe_over_step"] for c in costs),
                                                          max(c["probe_over_step"] for c in costs)],
                                "score_over_step_median": statistics.median(c["score_over_step"] for c in costs
                                                                            if c["score_over_step"] is not None)}
    report["probe_summary"] = probe_summary(runs)
    report["runs"] = [{k: r[k] for k in ("config", "seed", "split", "reused", "label")} for r in runs]
    (out / "monitor.json").write_text(json.dumps(report, indent=2))
    for line in report_lines(report):
        log(line)
    (out / "monitor_tables.md").write_text("\n".join(markdown_tables(report)) + "\n")
    if runs:
        plot_corpus(held or runs, combined, out / "monitor.png", "held-out runs" if held else "development runs")
        if held and dev:
            plot_corpus(dev, combined, out / "monitor_dev.png", "development runs")
    return report


def probe_summary(runs: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """Per configuration, over all its probe rows: mean and sd of the MI proxy, the retrieval
    accuracy and H(Z|X) per token, and the mean first / last probe entropy."""
    out: dict[str, dict[str, Any]] = {}
    for cfg in dict.fromkeys(r["config"] for r in runs):
        rows = [row for r in runs if r["config"] == cfg for row in r["rows"] if "probe/mi" in row]
        if not rows:
            continue
        entry: dict[str, Any] = {"probes": len(rows)}
        for key in ("probe/mi", "probe/retrieval", "probe/h_z_given_x_token", "probe/entropy"):
            xs = [row[key] for row in rows if isinstance(row.get(key), (int, float))]
            if xs:
                entry[key] = {"mean": statistics.fmean(xs), "sd": statistics.pstdev(xs), "min": min(xs), "max": max(xs)}
        out[cfg] = entry
    return out


def report_lines(report: dict) -> list[str]:
    lines = ["chosen on dev: " + ", ".join(f"{s} {c['key']}={c['value']}" for s, c in report["chosen"].items())]
    for set_name, entries in report["sets"].items():
        lines.append(f"[{set_name}]")
        for name, e in entries.items():
            if not isinstance(e, dict) or "warned" not in e:
                if isinstance(e, dict) and "mcnemar_p" in e:
                    lines.append(f"  combined vs paper signals: only combined right {e['only_a']}, only paper {e['only_b']}, "
                                 f"McNemar p = {e['mcnemar_p']:.3g}")
                continue
            lines.append(f"  {name:<58} warned {e['warned']}/{e['collapsing']} (late {e['late']}), "
                         f"median lead {e['median_lead']}, leads {e['leads']}, false alarms {e['false_alarms']}/{e['healthy']}")
    if "probe_cost" in report:
        p = report["probe_cost"]
        lines.append(f"probe / training step (median over {p['runs']} runs): {p['probe_over_step_median']:.3f} "
                     f"(range {p['probe_over_step_range'][0]:.3f}-{p['probe_over_step_range'][1]:.3f}); "
                     f"cross-scoring alone {p['score_over_step_median']:.3f}")
    return lines


def _with_valid(row: dict) -> dict:
    """``row`` with ``rollout/valid_success`` (the success of the episodes whose every reply was
    well formed, as the monitor reads it) and ``rollout/formed`` (their share): the trainer's
    per-episode metrics where the row has them, else the rows' older stand-in (the share of
    well-formed turns; exact for one-turn replies)."""
    share, valid = row.get("rollout/well_formed_episodes"), row.get("rollout/well_formed_success")
    if isinstance(share, (int, float)) and isinstance(valid, (int, float)):
        return {**row, "rollout/valid_success": valid, "rollout/formed": share}
    s, f = row.get("rollout/success"), row.get("rollout/format_error")
    if isinstance(s, (int, float)) and isinstance(f, (int, float)) and f < 1:
        return {**row, "rollout/valid_success": min(1.0, s / (1 - f)), "rollout/formed": 1 - f}
    return row


def plot_corpus(runs: Sequence[dict], kwargs: dict, out_png: Path, title: str = "held-out runs") -> Path:
    """Curves per configuration (mean over seeds, band = min-max over seeds); on every panel
    each run's collapse step (x, its colour) and first warning of the monitor ``kwargs``
    (triangle)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("eval success (the label's curve)", "eval/success"),
              ("rollout success among well-formed episodes", "rollout/valid_success"),
              ("well-formed episodes (share)", "rollout/formed"),
              ("rollout success", "rollout/success"), ("in-group return std", "rollout/in_group_std"),
              ("probe I(X;Z) proxy (nats)", "probe/mi"), ("probe H(Z|X) (nats / token)", "probe/entropy"),
              ("probe think diversity (distinct bigrams)", "probe/distinct_ngrams"),
              ("probe retrieval: own state scores its reply best (chance 1 / states)", "probe/retrieval"),
              ("actor grad norm", "actor/grad_norm"))
    runs = [{**r, "rows": [_with_valid(row) for row in r["rows"]]} for r in runs]
    fig, axes = plt.subplots(2, 5, figsize=(23, 8))
    configs = list(dict.fromkeys(r["config"] for r in runs))
    colors = {c: f"C{i}" for i, c in enumerate(configs)}
    for ax, (name, key) in zip(axes.flat, panels):
        for cfg in configs:
            series = [{r2["step"]: r2[key] for r2 in r["rows"] if isinstance(r2.get(key), (int, float))}
                      for r in runs if r["config"] == cfg]
            series = [s for s in series if s]
            if not series:
                continue
            steps = sorted(set().union(*series))
            mean, lo, hi, xs = [], [], [], []
            for st in steps:
                vals = [s[st] for s in series if st in s]
                if vals:
                    xs.append(st)
                    mean.append(sum(vals) / len(vals))
                    lo.append(min(vals))
                    hi.append(max(vals))
            ax.plot(xs, mean, color=colors[cfg], label=f"{cfg} ({len(series)})", linewidth=1.2)
            ax.fill_between(xs, lo, hi, color=colors[cfg], alpha=0.15)
        ymin, ymax = ax.get_ylim()
        for r in runs:
            c = r["label"]["collapse_step"]
            w = replay_monitor(r["rows"], **kwargs)["alarm"]
            if c is not None:
                ax.axvline(c, color=colors[r["config"]], linestyle=":", linewidth=0.8)
                ax.plot([c], [ymin], marker="x", color=colors[r["config"]], clip_on=False)
            if w is not None:
                ax.plot([w], [ymax], marker="v", color=colors[r["config"]], clip_on=False)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{title}: mean over seeds (n per config in the legend), band = min-max over seeds; "
                 "x (and dotted line) collapse step, v first warning of the monitor chosen on dev", fontsize=10)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=72)
    plt.close(fig)
    return out_png


FIXTURE_KEYS = ("step", "final", "rollout/success", "rollout/format_error", "rollout/in_group_std", "rollout/return_mean", "actor/grad_norm", "probe/entropy",
                "probe/distinct_ngrams", "probe/mi", "probe/h_z_given_x_token", "eval/success")


def write_fixture(corpus: Path, picks: dict[str, tuple[str, int]], path: Path) -> Path:
    """Save a few recorded runs of OUT/corpus.jsonl as a small JSON of metric traces for the
    tests: ``picks`` maps a trace name to (config, seed); only the monitor's inputs and the
    evaluation curve are kept."""
    runs = {(r["config"], r["seed"]): r for r in map(json.loads, Path(corpus).read_text().splitlines())}
    out = {}
    for name, key in picks.items():
        if key not in runs:
            raise ValueError(f"no run {key} in {corpus}")
        r = runs[key]
        out[name] = {"config": r["config"], "seed": r["seed"], "split": r["split"],
                     "collapse_step": r["label"]["collapse_step"],
                     "rows": [{k: v for k, v in row.items() if k in FIXTURE_KEYS} for row in r["rows"]]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    return path


def _fmt_ci(ci, pct=True):
    if not ci:
        return "-"
    return f"{100 * ci[0]:.0f}-{100 * ci[1]:.0f} %" if pct else f"{ci[0]:g}-{ci[1]:g}"


def markdown_tables(report: dict) -> list[str]:
    """The tables of BENCHMARKS §13c from OUT/monitor.json."""
    lines = []
    for set_name in ("dev", "heldout", "heldout_fine"):
        entries = report["sets"].get(set_name) or {}
        if not entries:
            continue
        lines += ["", f"{set_name}:", "",
                  "| monitor | warned before collapse | 95 % CI | late | median lead (steps) | 95 % CI | leads | false alarms | 95 % CI |",
                  "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
        for name, e in entries.items():
            if not isinstance(e, dict) or "warned" not in e:
                continue
            lines.append(f"| {name} | {e['warned']}/{e['collapsing']} | {_fmt_ci(e['warned_ci'])} | {e['late']} | "
                         f"{e['median_lead'] if e['median_lead'] is not None else '-'} | {_fmt_ci(e['median_lead_ci'], False)} | "
                         f"{', '.join(map(str, e['leads'])) or '-'} | {e['false_alarms']}/{e['healthy']} | {_fmt_ci(e['false_alarm_ci'])} |")
        p = entries.get("paired_combined_vs_paper")
        if p:
            lines.append(f"\ncombined vs the paper's signals on the same runs (a run is right when warned before its "
                         f"collapse / quiet when healthy): only combined right {p['only_a']}, only paper signals right "
                         f"{p['only_b']}, exact McNemar p = {p['mcnemar_p']:.3g}")
    lines += ["", "ROC-style (each signal alone over its threshold grid; warned / collapsing, false alarms / healthy, median lead):", "",
              "| signal | threshold | dev warned | dev false alarms | held-out warned | held-out median lead | held-out false alarms |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["roc"]:
        d, h = r["dev"], r["heldout"]
        lines.append(f"| {r['signal']} | {r['key']} = {r['value']} | {d['warned']}/{d['collapsing']} | {d['false_alarms']}/{d['healthy']} | "
                     f"{h['warned']}/{h['collapsing']} | {h['median_lead'] if h['median_lead'] is not None else '-'} | "
                     f"{h['false_alarms']}/{h['healthy']} |")
    return lines
