"""Evaluation: run agents on fixed seeds, record episodes, summarise them."""

from .metrics import episode_metrics, summarize, wilson_interval
from .runner import run_episode

__all__ = ["episode_metrics", "run_episode", "summarize", "wilson_interval"]
