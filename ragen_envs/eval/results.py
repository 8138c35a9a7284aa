"""From episodes on disk to ``summary.json``, the printed tables and ``report.html``.

The summary is always rebuilt from the files (``episodes.jsonl``, ``errors.jsonl``), never
from memory, so a resumed run and a fresh one give the same numbers. Its schema is in
``docs/eval.md`` (``SUMMARY_SCHEMA_VERSION``).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..protocol import PROTOCOL_VERSION, Episode
from .metrics import cost_usd, summarize
from .store import (
    EPISODES_FILE, REPORT_FILE, SUMMARY_FILE, read_episodes, read_errors, to_json, write_atomic, write_episodes,
)

__all__ = [
    "SUMMARY_SCHEMA_VERSION", "build_summary", "format_summary_table", "format_compare_table",
    "load_summary", "write_results", "write_summary_and_report",
]

SUMMARY_SCHEMA_VERSION = 1


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def build_summary(
    episodes: Iterable[Episode],
    agent: str,
    errors: Iterable[dict] = (),
    requested: dict[str, Sequence[int]] | None = None,
    prices: Sequence[float] | None = None,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``summary.json`` dict: per env the metrics of :func:`summarize` plus errors.

    ``requested`` (env id -> seeds) restricts the summary to those episodes and counts the
    ``missing`` ones; without it every episode counts. An error counts only for a seed that
    has no finished episode (a later retry that finished wins); errors are never part of
    the success rate.
    """
    from .. import __version__

    wanted = {env_id: set(int(s) for s in seeds) for env_id, seeds in requested.items()} if requested is not None else None
    by_env: dict[str, list[Episode]] = {}
    for ep in episodes:
        if wanted is not None and (ep.env_id not in wanted or ep.seed not in wanted[ep.env_id]):
            continue
        by_env.setdefault(ep.env_id, []).append(ep)
    env_ids = list(requested) if requested is not None else list(by_env)
    finished = {(e.env_id, e.seed) for eps in by_env.values() for e in eps}
    error_by_key: dict[tuple[str, int], str] = {}
    for err in errors:
        key = (err.get("env_id"), err.get("seed"))
        if key in finished or key[0] not in env_ids:
            continue
        if wanted is not None and key[1] not in wanted[key[0]]:
            continue
        error_by_key[key] = str(err.get("error", "unknown error"))  # the latest reason wins
    envs: dict[str, Any] = {}
    totals = {"episodes": 0, "successes": 0, "errors": 0, "missing": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for env_id in env_ids:
        eps = sorted(by_env.get(env_id, []), key=lambda e: (e.seed, e.noise_seed or 0))
        s = summarize(eps, prices) if eps else {"episodes": 0}
        err_seeds = sorted(seed for (eid, seed) in error_by_key if eid == env_id)
        s["errors"] = len(err_seeds)
        s["error_seeds"] = err_seeds
        s["error_reasons"] = {str(seed): error_by_key[(env_id, seed)] for seed in err_seeds}
        if requested is not None:
            s["seeds_requested"] = len(requested[env_id])
            s["missing"] = len(requested[env_id]) - s["episodes"] - len(err_seeds)
        else:
            s["seeds_requested"] = s["episodes"] + len(err_seeds)
            s["missing"] = 0
        envs[env_id] = s
        totals["episodes"] += s["episodes"]
        totals["successes"] += int(s.get("successes", 0))
        totals["errors"] += s["errors"]
        totals["missing"] += s["missing"]
        totals["prompt_tokens"] += int(s.get("prompt_tokens") or 0)
        totals["completion_tokens"] += int(s.get("completion_tokens") or 0)
    totals["total_tokens"] = totals["prompt_tokens"] + totals["completion_tokens"]
    totals["cost_usd"] = cost_usd(totals["prompt_tokens"], totals["completion_tokens"], prices)
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "ragen_envs_version": __version__,
        "protocol_version": PROTOCOL_VERSION,
        "agent": agent,
        "created": _now(),
        "prices_usd_per_million_tokens": list(prices) if prices is not None else None,
        "config": config or {},
        "envs": envs,
        "totals": totals,
    }


def load_summary(run_dir: str | Path) -> dict[str, Any]:
    """``run_dir/summary.json``, or a summary rebuilt from its ``episodes.jsonl``."""
    import json

    run_dir = Path(run_dir)
    path = run_dir / SUMMARY_FILE
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("envs"), dict):
            return data
    if not (run_dir / EPISODES_FILE).exists():
        raise FileNotFoundError(f"{run_dir} holds no summary.json and no episodes.jsonl")
    return build_summary(read_episodes(run_dir), agent=run_dir.name, errors=read_errors(run_dir))


# ---------------------------------------------------------------------------- text tables
def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}"


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


_HEADERS = {
    "short": (["env", "n", "success %", "95% CI", "return", "effective %", "valid %", "format err %",
               "reasoning", "agree %", "claims ok %", "turns", "actions", "errors"],
              ["resp tok/turn", "resp tok/ep", "tokens in", "tokens out"], "cost $"),
    "long": (["env", "episodes", "success %", "95 % CI", "mean return", "effective %", "valid %", "format error %",
              "reasoning score", "actions agree %", "claims true %", "mean turns", "mean actions", "errors"],
             ["response tokens / turn", "response tokens / episode", "prompt tokens", "completion tokens"], "cost (USD)"),
}


def summary_rows(summary: dict[str, Any], labels: str = "short", dash: str = "-") -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of the per-env summary table as strings; token and cost columns
    only when known. Shared by the console table and report.html."""
    envs = summary["envs"]
    has_tokens = any(s.get("completion_tokens") for s in envs.values())
    has_cost = any(s.get("cost_usd") is not None for s in envs.values())
    base, token_cols, cost_col = _HEADERS[labels]
    header = base + (token_cols if has_tokens else []) + ([cost_col] if has_cost else [])

    def pct(x: float | None, digits: int = 1) -> str:  # an unknown number (None) shows as ``dash``
        return dash if x is None else f"{100 * x:.{digits}f}"

    def num(x: float | None, digits: int = 2) -> str:
        return dash if x is None else f"{x:.{digits}f}"

    rows = []
    for env_id, s in envs.items():
        if not s.get("episodes"):
            row = [env_id, "0"] + [dash] * (len(base) - 3) + [str(s.get("errors", 0))]
        else:
            lo, hi = s["success_ci95"]
            row = [
                env_id, str(s["episodes"]), pct(s["success_rate"], 2), f"{pct(lo)}{dash}{pct(hi)}",
                num(s["mean_return"], 3), pct(s["mean_action_is_effective"]), pct(s["mean_action_is_valid"]),
                pct(s["mean_format_error"]), num(s.get("reasoning_score"), 3), pct(s.get("actions_agree")),
                pct(s.get("claims_true_rate")), num(s["mean_turns"]), num(s["mean_actions"]), str(s.get("errors", 0)),
            ]
        if has_tokens:
            row += [num(s.get("mean_response_tokens_per_turn"), 1), num(s.get("mean_response_tokens"), 1),
                    str(s.get("prompt_tokens") or 0), str(s.get("completion_tokens") or 0)]
        if has_cost:
            row += [num(s.get("cost_usd"), 4)]
        rows.append(row)
    return header, rows


def format_summary_table(summary: dict[str, Any]) -> str:
    """One row per env: the numbers of the issue's table (tokens and cost when known)."""
    return _table(*summary_rows(summary))


def _success_cell(s: dict[str, Any] | None) -> str:
    if not s or not s.get("episodes"):
        return "-"
    lo, hi = s["success_ci95"]
    return f"{_pct(s['success_rate'])} [{_pct(lo, 0)}-{_pct(hi, 0)}] n={s['episodes']}"


def run_labels(summaries: Sequence[dict[str, Any]], dirs: Sequence[str | Path] | None = None) -> list[str]:
    """Column labels: the agent names, made unique with the run directory when they clash."""
    labels = [str(s.get("agent", f"run {i + 1}")) for i, s in enumerate(summaries)]
    if len(set(labels)) < len(labels):
        names = [Path(d).name for d in dirs] if dirs else [str(i + 1) for i in range(len(labels))]
        labels = [f"{label} ({name})" for label, name in zip(labels, names)]
    return labels


def format_compare_table(summaries: Sequence[dict[str, Any]], labels: Sequence[str]) -> str:
    """Success % [95 % CI] per env (rows) and run (columns), like the paper's Table 5; with
    two runs a last column "diff (pp) B − A": the second run's success minus the first's."""
    env_ids: list[str] = []
    for s in summaries:
        env_ids += [e for e in s["envs"] if e not in env_ids]
    header = ["env"] + list(labels)
    if len(summaries) == 2:  # the direction in the header: second run minus first, percentage points
        header.append(f"diff (pp) {labels[1]} − {labels[0]}")
    rows = []
    for env_id in env_ids:
        cells = [s["envs"].get(env_id) for s in summaries]
        row = [env_id] + [_success_cell(c) for c in cells]
        if len(summaries) == 2:
            a, b = cells
            ok = a and b and a.get("episodes") and b.get("episodes")
            row.append(f"{100 * (b['success_rate'] - a['success_rate']):+.1f}" if ok else "-")
        rows.append(row)
    return _table(header, rows)


# ---------------------------------------------------------------------------- writing
def write_summary_and_report(
    out_dir: str | Path,
    summary: dict[str, Any],
    episodes: Sequence[Episode],
    errors: Sequence[dict] = (),
    compare: Sequence[tuple[str, dict[str, Any]]] = (),
    env_kwargs: dict[str, Any] | None = None,
    frame_episodes: int = 16,
) -> None:
    """Write ``summary.json`` and ``report.html`` (each atomically)."""
    from .report import render_report

    out_dir = Path(out_dir)
    write_atomic(out_dir / SUMMARY_FILE, to_json(summary, indent=2) + "\n")
    shown = [e for e in episodes if e.env_id in summary["envs"]]
    html = render_report(summary, shown, errors, compare=compare, env_kwargs=env_kwargs, frame_episodes=frame_episodes)
    write_atomic(out_dir / REPORT_FILE, html)


def write_results(
    out_dir: str | Path,
    episodes: list[Episode],
    agent: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``episodes.jsonl``, ``summary.json`` and ``report.html`` for played episodes.

    For callers that play episodes themselves (the trainer's final evaluation): episodes
    are grouped by ``env_id``; ``extra`` is stored as the summary's ``config`` (its
    ``env_kwargs``, if any, let the report replay episodes made with non-default env kwargs;
    ``prices`` = (USD per 1M prompt tokens, per 1M completion tokens) adds costs). Replaces
    any ``episodes.jsonl`` already in ``out_dir``. Returns the summary dict.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = dict(extra or {})
    episodes = list(episodes)
    write_episodes(out_dir / EPISODES_FILE, episodes)
    summary = build_summary(episodes, agent=agent, prices=extra.get("prices"), config=extra)
    write_summary_and_report(out_dir, summary, episodes, env_kwargs=extra.get("env_kwargs"))
    return summary
