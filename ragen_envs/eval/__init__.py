"""Evaluation: run agents on fixed seeds, record episodes, summarise them, write a report.

- :func:`run_episode` / :func:`arun_episode`: one episode -> one :class:`~ragen_envs.protocol.Episode`.
- :func:`evaluate`: many episodes concurrently into a run directory (``episodes.jsonl``,
  ``errors.jsonl``, ``config.json``, ``summary.json``, ``report.html``), resumable.
- :func:`write_results`: the same files for episodes played elsewhere (the trainer).
- :func:`summarize`, :func:`episode_metrics`, :func:`wilson_interval`: the numbers.
- :mod:`ragen_envs.eval.reference`: the paper's published success rates and our expert /
  random baselines (``reference_scores.json``), for ``ragen eval --compare paper``.

``docs/eval.md`` documents the files and the summary schema.
"""

from .metrics import cost_usd, episode_metrics, episode_usage, summarize, wilson_interval
from .runner import arun_episode, run_episode
from .results import SUMMARY_SCHEMA_VERSION, build_summary, load_summary, write_results
from .tables import format_compare_table, format_summary_table
from .store import read_episodes, read_errors

__all__ = [
    "SUMMARY_SCHEMA_VERSION",
    "arun_episode",
    "build_summary",
    "cost_usd",
    "episode_metrics",
    "episode_usage",
    "evaluate",
    "evaluate_async",
    "format_compare_table",
    "format_summary_table",
    "load_summary",
    "read_episodes",
    "read_errors",
    "run_episode",
    "summarize",
    "wilson_interval",
    "write_results",
]


def __getattr__(name: str):
    # the harness imports asyncio machinery and the agents; load it on first use
    if name in ("evaluate", "evaluate_async"):
        from . import harness

        return getattr(harness, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
