"""The summary as text tables: the console table of ``ragen eval``, the comparison of several
runs, and the rows the HTML report draws (one function builds both)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Sequence

__all__ = ["pct", "num", "summary_rows", "format_summary_table", "run_labels", "format_compare_table",
           "context_window_label"]


def pct(x: float | None, digits: int = 1, dash: str = "-") -> str:
    """A fraction as a percentage with ``digits`` decimals; ``dash`` for an unknown (None)."""
    return dash if x is None else f"{100 * x:.{digits}f}"


def num(x: float | None, digits: int = 2, dash: str = "-") -> str:
    return dash if x is None else f"{x:.{digits}f}"


def context_window_label(mode: str | None, k: int | None = -1) -> str:
    """How a run's context mode is named in its table and report: ``""`` for ``full`` (or
    none recorded), else e.g. ``"limited_multi_turn, K=2"`` / ``"single_turn, K=-1 (no limit)"``.

    >>> context_window_label("full"), context_window_label("single_turn", 2), context_window_label("single_turn", -1)
    ('', 'single_turn, K=2', 'single_turn, K=-1 (no limit)')
    """
    if mode in (None, "full"):
        return ""
    return f"{mode}, K={k}" + (" (no limit)" if k == -1 else "")


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

    p, n = partial(pct, dash=dash), partial(num, dash=dash)  # an unknown number (None) shows as dash
    rows = []
    for env_id, s in envs.items():
        if not s.get("episodes"):
            row = [env_id, "0"] + [dash] * (len(base) - 3) + [str(s.get("errors", 0))]
        else:
            lo, hi = s["success_ci95"]
            row = [
                env_id, str(s["episodes"]), p(s["success_rate"], 2), f"{p(lo)}{dash}{p(hi)}",
                n(s["mean_return"], 3), p(s["mean_action_is_effective"]), p(s["mean_action_is_valid"]),
                p(s["mean_format_error"]), n(s.get("reasoning_score"), 3), p(s.get("actions_agree")),
                p(s.get("claims_true_rate")), n(s["mean_turns"]), n(s["mean_actions"]), str(s.get("errors", 0)),
            ]
        if has_tokens:
            row += [n(s.get("mean_response_tokens_per_turn"), 1), n(s.get("mean_response_tokens"), 1),
                    str(s.get("prompt_tokens") or 0), str(s.get("completion_tokens") or 0)]
        if has_cost:
            row += [n(s.get("cost_usd"), 4)]
        rows.append(row)
    return header, rows


def format_summary_table(summary: dict[str, Any]) -> str:
    """One row per env: the numbers of the issue's table (tokens and cost when known)."""
    return _table(*summary_rows(summary))


def _success_cell(s: dict[str, Any] | None) -> str:
    """``"21.9 [17-27] n=256"``; a published number without a CI (a ``--compare paper``
    column) as printed: ``"27.73"``."""
    if not s or not s.get("episodes"):
        return "-"
    if s.get("success_ci95") is None:
        return str(s.get("published") or pct(s["success_rate"], 2))
    lo, hi = s["success_ci95"]
    return f"{pct(s['success_rate'])} [{pct(lo, 0)}-{pct(hi, 0)}] n={s['episodes']}"


def run_labels(summaries: Sequence[dict[str, Any]], dirs: Sequence[str | Path] | None = None) -> list[str]:
    """Column labels: the agent names, made unique with the run directory when they clash."""
    labels = [str(s.get("agent", f"run {i + 1}")) for i, s in enumerate(summaries)]
    if len(set(labels)) < len(labels):
        names = [Path(d).name for d in dirs] if dirs else [str(i + 1) for i in range(len(labels))]
        labels = [f"{label} ({name})" for label, name in zip(labels, names)]
    return labels


def format_compare_table(summaries: Sequence[dict[str, Any]], labels: Sequence[str]) -> str:
    """Success % [95 % CI] per env (rows) and run (columns), like the paper's Table 5 (a
    published reference number as printed, without CI); with two runs a last column
    "diff (pp) B − A": the second run's success minus the first's."""
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
