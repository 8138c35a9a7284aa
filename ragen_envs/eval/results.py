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
from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted
from .metrics import cost_usd, summarize
from .store import (
    EPISODES_FILE, REPORT_FILE, SUMMARY_FILE, read_episodes, read_errors, to_json, write_atomic, write_episodes,
)

__all__ = [
    "SUMMARY_SCHEMA_VERSION", "build_summary",
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
    run_dir = Path(run_dir)
    path = run_dir / SUMMARY_FILE
    if path.exists():
        try:
            data = loads_untrusted(path.read_bytes())
        except UntrustedJSONError:  # rebuilt from the episodes below
            data = None
        if isinstance(data, dict) and isinstance(data.get("envs"), dict):
            return data
    if not (run_dir / EPISODES_FILE).exists():
        raise FileNotFoundError(f"{run_dir} holds no summary.json and no episodes.jsonl")
    return build_summary(read_episodes(run_dir), agent=run_dir.name, errors=read_errors(run_dir))


# ---------------------------------------------------------------------------- text tables
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
    from .report import render_report  # noqa: PLC0415 - pygame-free until a report is written

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
