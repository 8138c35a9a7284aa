"""Echo Trap diagnostics (RAGEN §4.1): diversity of think texts, early warnings, logging, plots.

The Echo Trap: the policy converges on a few rewarded reasoning templates; the in-group
return std collapses first, gradient-norm spikes follow, then the mean return collapses.
:class:`EchoTrapMonitor` watches the per-step metrics for those signatures;
:func:`think_diversity` measures template repetition; :class:`MetricsLogger` writes
``metrics.jsonl`` (+ console, + TensorBoard when asked); :func:`plot_metrics` draws the
curves to a PNG (matplotlib, from the ``train`` extra).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Sequence

from .monitor import effective_count, significant_drop

__all__ = ["think_diversity", "collapse_label", "EchoTrapMonitor", "replay_monitor", "MONITOR_SIGNALS", "MetricsLogger", "strict_json_row", "plot_metrics", "read_metrics"]

_WORD = re.compile(r"\S+")


def _ngrams(text: str, n: int) -> list[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return [tuple(words)] if words else []
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def think_diversity(texts: Sequence[str], n: int = 2, max_pairs: int = 2000) -> dict[str, float]:
    """Template repetition across a batch of think texts.

    - ``distinct_texts``: distinct texts / texts.
    - ``distinct_ngrams``: distinct word n-grams / all word n-grams (Li et al.'s distinct-n).
    - ``pairwise_similarity``: mean Jaccard similarity of the texts' n-gram sets over pairs
      (the first ``max_pairs`` pairs in order; 1 = every text the same).
    Empty input gives nan everywhere.
    """
    if not texts:
        return {"distinct_texts": float("nan"), "distinct_ngrams": float("nan"), "pairwise_similarity": float("nan")}
    grams = [_ngrams(t, n) for t in texts]
    flat = [g for gs in grams for g in gs]
    sets = [set(gs) for gs in grams]
    sims = []
    for a, b in combinations(range(len(sets)), 2):
        union = sets[a] | sets[b]
        sims.append(len(sets[a] & sets[b]) / len(union) if union else 1.0)
        if len(sims) >= max_pairs:
            break
    return {
        "distinct_texts": len(set(texts)) / len(texts),
        "distinct_ngrams": len(set(flat)) / len(flat) if flat else 0.0,
        "pairwise_similarity": sum(sims) / len(sims) if sims else 1.0,
    }


COLLAPSE_FRACTION = 0.25
COLLAPSE_MIN_EVALS = 2


def collapse_label(steps: Sequence[int], success: Sequence[float], fraction: float = COLLAPSE_FRACTION,
                   min_evals: int = COLLAPSE_MIN_EVALS) -> int | None:
    """The collapse step of a run from its evaluation curve, or None (the run is healthy).

    With evaluations s_0..s_{n-1} at ``steps`` and the running best b_t = max(s_0..s_t):
    the collapse step is steps[t] for the first t with b_t > 0 such that every later
    evaluation stays below the fraction of that best, s_u < fraction · b_t for all u >= t,
    and at least ``min_evals`` evaluations (t included) lie in that stretch (one low final
    evaluation is not a collapse). The definition of docs/monitor.md, fixed before the
    monitor's signals were looked at.
    """
    if len(steps) != len(success):
        raise ValueError(f"{len(steps)} steps but {len(success)} success values")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if min_evals < 1:
        raise ValueError(f"min_evals must be >= 1, got {min_evals}")
    n = len(success)
    # later_max[t] = max(s_t..s_{n-1})
    later_max = [0.0] * n
    acc = -math.inf
    for t in range(n - 1, -1, -1):
        acc = max(acc, float(success[t]))
        later_max[t] = acc
    best = -math.inf
    for t in range(n):
        best = max(best, float(success[t]))
        if n - t < min_evals:
            break
        if best > 0 and later_max[t] < fraction * best:
            return steps[t]
    return None


MONITOR_SIGNALS = ("success_drop", "valid_success_drop", "well_formed_drop", "reward_std_collapse", "grad_norm_spike", "echo_trap", "mi_drop", "entropy_drop")
ROLLBACK_ADVICE = ("roll back to the best checkpoint (DIR/checkpoints/best, the best evaluation so far): "
                   "echo_action='rollback' (ragen train --set echo_action=rollback) does it on the warning")


def _trailing_mean(xs: Sequence[float], w: int) -> float:
    tail = xs[-w:]
    return sum(tail) / len(tail)


class EchoTrapMonitor:
    """Early warnings of a collapse from the per-step metrics (docs/monitor.md).

    Every signal compares a trailing statistic with its own early or best level; the
    signals other than ``success_drop`` and ``grad_norm_spike`` only speak while the policy
    is *not improving* — the trailing rollout success (the mean return where no success is
    given) is at most its early mean (the first ``window`` steps) — so a run whose variance
    and diversity fall because it solved the task stays quiet:

    - ``success_drop``: m_t = mean rollout success over the last ``success_window`` steps
      (from step ``success_window`` - 1 on) falls below ``success_ratio`` x its running best
      max(m_u, u <= t) — the training rollouts show the fall before the evaluation does.
    - ``valid_success_drop``: the same on the success among well-formed replies,
      rollout/well_formed_success (the success of the episodes whose every reply was well
      formed; rows without it: rollout/success / (1 - rollout/format_error)): the answer's quality without the
      format learning that lifts the raw success of every run early on.
    - Both success signals can also ask the fall to exceed ``success_k`` /
      ``valid_success_k`` binomial standard errors (monitor.significant_drop: a one-sided
      two-proportion z test of the window against the best window, n from
      ``rollout/episodes`` or ``episodes``); 0 (the default) is the ratio alone.
      ``monitor.MULTITURN_MONITOR`` is the rule chosen on both corpora (docs/monitor.md).
    - ``well_formed_drop``: the share of episodes whose every reply was well formed
      (rollout/well_formed_episodes; rows without it: 1 - rollout/format_error), mean of the
      last ``success_window`` steps, below ``well_formed_ratio`` x its best window and (with
      ``well_formed_k`` > 0) that many standard errors below it (the same z test, n from
      ``rollout/episodes``): the policy leaving the protocol, as in the multi-turn collapse to
      a reply that makes no move (BENCHMARKS.md#multi-turn-trap). Off (None) unless set.
    - ``reward_std_collapse``: the in-group return std (mean of the last 3 steps) below
      ``std_ratio`` x its early level (max over the first ``window`` steps), not improving.
    - ``grad_norm_spike``: the actor grad norm above ``spike_factor`` x the median of the
      previous (up to 20, at least 5) steps.
    - ``echo_trap``: the probe's think diversity (distinct n-grams) below
      ``diversity_ratio`` x the first probe's, not improving.
    - ``mi_drop``: the probe's MI proxy I(X;Z) (probes.py) below ``mi_ratio`` x the first
      probe's (the first must be > 0), not improving.
    - ``entropy_drop``: the probe's H(Z|X) per token (``probe/entropy``: the mean over the
      sampled replies' tokens of the policy's entropy at that token, whose sum along a reply
      is an unbiased estimate of H(Z|X) by the chain rule; ``probe/h_z_given_x_token`` is the
      same estimand from the tokens' own log-probs, noisier) below ``entropy_ratio`` x the
      first probe's, not improving.

    Defaults (docs/monitor.md, BENCHMARKS.md#collapse-monitor): the warning is ``valid_success_drop`` at
    0.8, the one threshold that warned every development collapse without a false alarm;
    no other signal had such a threshold on the development runs, so ``success_drop``,
    ``mi_drop`` and ``entropy_drop`` are off and the paper's three signatures keep the
    trainer's old thresholds as notes outside the warning. A ratio of None turns its signal
    off. Each signal fires once until its condition clears;
    the ones in ``alarm`` are the warning the trainer acts on (``is_alarm``; echo_action).
    ``state()`` / ``load_state()`` make the monitor part of a checkpoint.
    """

    def __init__(self, std_ratio: float | None = 0.1, spike_factor: float | None = 5.0,
                 diversity_ratio: float | None = 0.5, window: int = 10, *, success_ratio: float | None = None,
                 success_window: int = 5, valid_success_ratio: float | None = 0.8,
                 mi_ratio: float | None = None, entropy_ratio: float | None = None,
                 alarm: Sequence[str] = ("valid_success_drop",), success_k: float = 0.0,
                 valid_success_k: float = 0.0, episodes: int | None = None,
                 well_formed_ratio: float | None = None, well_formed_k: float = 0.0) -> None:
        for name in alarm:
            if name not in MONITOR_SIGNALS:
                raise ValueError(f"unknown monitor signal {name!r}; choose from {', '.join(MONITOR_SIGNALS)}")
        if window < 1 or success_window < 1:
            raise ValueError(f"window and success_window must be >= 1, got {window} and {success_window}")
        for name, k in (("success_k", success_k), ("valid_success_k", valid_success_k), ("well_formed_k", well_formed_k)):
            if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 <= k < math.inf:
                raise ValueError(f"{name} must be a number >= 0, got {k!r}")
        if episodes is not None and (isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1):
            raise ValueError(f"episodes must be an integer >= 1 or None, got {episodes!r}")
        self.success_k, self.valid_success_k, self.episodes = float(success_k), float(valid_success_k), episodes
        self.success_n: list[float | None] = []
        self.valid_n: list[float | None] = []
        self.best_success_n: float | None = None
        self.best_valid_n: float | None = None
        self.std_ratio, self.spike_factor = std_ratio, spike_factor
        self.diversity_ratio, self.window = diversity_ratio, window
        self.success_ratio, self.success_window = success_ratio, success_window
        self.mi_ratio, self.entropy_ratio = mi_ratio, entropy_ratio
        self.valid_success_ratio = valid_success_ratio
        self.well_formed_ratio, self.well_formed_k = well_formed_ratio, float(well_formed_k)
        self.formed: list[float] = []
        self.formed_n: list[float | None] = []
        self.best_formed: float | None = None
        self.best_formed_n: float | None = None
        self.valid: list[float] = []
        self.best_valid: float | None = None
        self.alarm = tuple(alarm)
        self.stds: list[float] = []
        self.returns: list[float] = []
        self.successes: list[float] = []
        self.grads: list[float] = []
        self.best_success: float | None = None
        self.first_probe: tuple[float, float] | None = None  # (diversity, return)
        self.first_mi: float | None = None
        self.first_entropy: float | None = None
        self.active: set[str] = set()

    def state(self) -> dict[str, Any]:
        return {"stds": self.stds, "returns": self.returns, "grads": self.grads,
                "first_probe": self.first_probe, "active": sorted(self.active), "successes": self.successes,
                "best_success": self.best_success, "first_mi": self.first_mi, "first_entropy": self.first_entropy,
                "valid": self.valid, "best_valid": self.best_valid, "success_n": self.success_n,
                "valid_n": self.valid_n, "best_success_n": self.best_success_n, "best_valid_n": self.best_valid_n,
                "formed": self.formed, "formed_n": self.formed_n, "best_formed": self.best_formed,
                "best_formed_n": self.best_formed_n}

    def load_state(self, state: dict[str, Any]) -> None:
        self.stds, self.returns, self.grads = list(state["stds"]), list(state["returns"]), list(state["grads"])
        self.first_probe = tuple(state["first_probe"]) if state["first_probe"] is not None else None
        self.active = set(state["active"])
        # absent in checkpoints written before the redesign: start those signals afresh
        self.successes = list(state.get("successes", []))
        self.best_success = state.get("best_success")
        self.first_mi, self.first_entropy = state.get("first_mi"), state.get("first_entropy")
        self.valid, self.best_valid = list(state.get("valid", [])), state.get("best_valid")
        # absent before the noise-aware test: unknown counts (None) for the steps seen so far
        self.success_n = list(state.get("success_n", [None] * len(self.successes)))
        self.valid_n = list(state.get("valid_n", [None] * len(self.valid)))
        self.best_success_n, self.best_valid_n = state.get("best_success_n"), state.get("best_valid_n")
        # absent before well_formed_drop: that signal starts afresh
        self.formed, self.formed_n = list(state.get("formed", [])), list(state.get("formed_n", []))
        self.best_formed, self.best_formed_n = state.get("best_formed"), state.get("best_formed_n")

    def is_alarm(self, event: str) -> bool:
        """Whether an event (``"name: message"``) is one of the warnings the trainer acts on."""
        return event.split(":", 1)[0] in self.alarm

    def _fire(self, name: str, condition: bool, message: str, events: list[str]) -> None:
        if condition and name not in self.active:
            self.active.add(name)
            advice = f" -> {ROLLBACK_ADVICE}" if name in self.alarm else ""
            events.append(f"{name}: {message}{advice}")
        elif not condition:
            self.active.discard(name)

    def improving(self) -> bool:
        """Whether the trailing success (return where none is logged) is above its early mean."""
        xs = self.successes if self.successes else self.returns
        if not xs:
            return False
        early = statistics.fmean(xs[: self.window])
        return _trailing_mean(xs, min(self.success_window, len(xs))) > early

    def observe(self, row: dict[str, Any]) -> list[str]:
        """Feed one step's metrics row (the trainer's keys); returns the events that fired.
        The episode count behind the step's rates is ``rollout/episodes`` (the trainer logs
        it), else the ``episodes`` given to the constructor."""
        n = row.get("rollout/episodes", self.episodes)
        events = self.update(row["rollout/in_group_std"], row["rollout/return_mean"], row.get("actor/grad_norm"),
                             success=row.get("rollout/success"), episodes=n)
        success, fmt = row.get("rollout/success"), row.get("rollout/format_error")
        share, valid = row.get("rollout/well_formed_episodes"), row.get("rollout/well_formed_success")
        if isinstance(share, (int, float)) and isinstance(valid, (int, float)):
            # the trainer's per-episode count: episodes whose every reply was well formed
            if share > 0:
                events += self._update_valid(valid, None if n is None else n * share)
        elif isinstance(success, (int, float)) and isinstance(fmt, (int, float)) and fmt < 1:
            # rows written before the per-episode count: the share of well-formed turns
            # stands in for the share of well-formed episodes (exact for one-turn replies)
            events += self._update_valid(success / (1.0 - fmt), None if n is None else n * (1.0 - fmt))
        if isinstance(share, (int, float)):
            events += self._update_formed(share, n)
        elif isinstance(fmt, (int, float)):
            # rows written before the per-episode share: the share of well-formed turns
            events += self._update_formed(1.0 - fmt, n)
        if row.get("probe/distinct_ngrams") is not None:
            events += self.update_probe(row["probe/distinct_ngrams"], row["rollout/return_mean"], mi=row.get("probe/mi"),
                                        entropy=row.get("probe/entropy"))
        return events

    def _window_n(self, counts: list[float | None], k: float, name: str) -> float | None:
        """N_eff of the trailing window (monitor.effective_count), None when a count is unknown
        and k = 0 (the ratio alone needs none); a clear error when k > 0 needs it."""
        tail = counts[-self.success_window:]
        if any(c is None for c in tail):
            if k > 0:
                raise ValueError(f"{name} with k = {k} needs the episode count of every step: the rows carry no "
                                 "rollout/episodes (logged by the trainer since the noise-aware test); pass episodes=N")
            return None
        return effective_count(tail)

    def _drop(self, best: float, n_best: float | None, m: float, n_m: float | None, ratio: float, k: float) -> bool:
        if k == 0 or n_best is None or n_m is None:
            return best > 0 and m < ratio * best
        return significant_drop(min(best, 1.0), n_best, min(m, 1.0), n_m, ratio, k)

    def _update_valid(self, valid_success: float, n: float | None = None) -> list[str]:
        events: list[str] = []
        self.valid.append(float(valid_success))
        self.valid_n.append(None if n is None or n <= 0 else float(n))
        if len(self.valid) >= self.success_window:
            m = _trailing_mean(self.valid, self.success_window)
            n_m = self._window_n(self.valid_n, self.valid_success_k if self.valid_success_ratio is not None else 0.0,
                                 "valid_success_drop")
            if self.best_valid is None or m > self.best_valid:
                self.best_valid, self.best_valid_n = m, n_m
            if self.valid_success_ratio is not None:
                k = self.valid_success_k
                self._fire("valid_success_drop",
                           self._drop(self.best_valid, self.best_valid_n, m, n_m, self.valid_success_ratio, k),
                           f"success among well-formed replies (mean of {self.success_window} steps) {m:.3f} < "
                           f"{self.valid_success_ratio} x its best {self.best_valid:.3f}"
                           + (f" and {k} standard errors below it" if k else ""), events)
        return events

    def _update_formed(self, share: float, n: float | None) -> list[str]:
        """One step of ``well_formed_drop`` (the share of well-formed episodes, ``n`` episodes)."""
        events: list[str] = []
        self.formed.append(min(max(float(share), 0.0), 1.0))
        self.formed_n.append(None if n is None or n <= 0 else float(n))
        if len(self.formed) < self.success_window:
            return events
        m = _trailing_mean(self.formed, self.success_window)
        k = self.well_formed_k if self.well_formed_ratio is not None else 0.0
        n_m = self._window_n(self.formed_n, k, "well_formed_drop")
        if self.best_formed is None or m > self.best_formed:
            self.best_formed, self.best_formed_n = m, n_m
        if self.well_formed_ratio is not None:
            self._fire("well_formed_drop",
                       self._drop(self.best_formed, self.best_formed_n, m, n_m, self.well_formed_ratio, k),
                       f"well-formed episodes (mean of {self.success_window} steps) {m:.3f} < {self.well_formed_ratio} x "
                       f"its best {self.best_formed:.3f}" + (f" and {k:g} standard errors below it" if k else ""), events)
        return events

    def update(self, in_group_std: float, return_mean: float, grad_norm: float | None,
               success: float | None = None, episodes: float | None = None) -> list[str]:
        """Feed one step (``episodes``: how many episodes the success rate is from); returns
        the events that fired."""
        events: list[str] = []
        self.stds.append(float(in_group_std))
        self.returns.append(float(return_mean))
        if success is not None and math.isfinite(success):
            self.successes.append(float(success))
            self.success_n.append(None if episodes is None else float(episodes))
            if len(self.successes) >= self.success_window:
                m = _trailing_mean(self.successes, self.success_window)
                n_m = self._window_n(self.success_n, self.success_k if self.success_ratio is not None else 0.0,
                                     "success_drop")
                if self.best_success is None or m > self.best_success:
                    self.best_success, self.best_success_n = m, n_m
                if self.success_ratio is not None:
                    k = self.success_k
                    self._fire("success_drop",
                               self._drop(self.best_success, self.best_success_n, m, n_m, self.success_ratio, k),
                               f"rollout success (mean of {self.success_window} steps) {m:.3f} < {self.success_ratio} x "
                               f"its best {self.best_success:.3f}" + (f" and {k} standard errors below it" if k else ""),
                               events)
        if len(self.stds) > self.window and self.std_ratio is not None:
            early_std = max(self.stds[: self.window])
            recent_std = statistics.fmean(self.stds[-3:])
            self._fire(
                "reward_std_collapse",
                early_std > 0 and recent_std < self.std_ratio * early_std and not self.improving(),
                f"in-group return std {recent_std:.4f} < {self.std_ratio} x early {early_std:.4f} "
                f"while the policy is not improving", events)
        if grad_norm is not None and math.isfinite(grad_norm):
            history = self.grads[-20:]
            if len(history) >= 5 and self.spike_factor is not None:
                med = statistics.median(history)
                self._fire("grad_norm_spike", med > 0 and grad_norm > self.spike_factor * med,
                           f"actor grad norm {grad_norm:.3g} > {self.spike_factor} x median {med:.3g}", events)
            self.grads.append(float(grad_norm))
        return events

    def update_probe(self, diversity: float, return_mean: float, mi: float | None = None,
                     entropy: float | None = None) -> list[str]:
        """Feed one probe result: think-text distinct n-grams, the current mean return and,
        when probed, the MI proxy and H(Z|X) per token."""
        events: list[str] = []
        improving = self.improving() if (self.stds or self.returns) else False
        if mi is not None and math.isfinite(mi):
            if self.first_mi is None:
                self.first_mi = float(mi)
            elif self.mi_ratio is not None:
                self._fire("mi_drop", self.first_mi > 0 and mi < self.mi_ratio * self.first_mi and not improving,
                           f"probe I(X;Z) {mi:.4f} < {self.mi_ratio} x first probe {self.first_mi:.4f}, not improving", events)
        if entropy is not None and math.isfinite(entropy):
            if self.first_entropy is None:
                self.first_entropy = float(entropy)
            elif self.entropy_ratio is not None:
                self._fire("entropy_drop", self.first_entropy > 0 and entropy < self.entropy_ratio * self.first_entropy
                           and not improving, f"probe H(Z|X) {entropy:.3f} nats/token < {self.entropy_ratio} x first probe "
                           f"{self.first_entropy:.3f}, not improving", events)
        if not math.isfinite(diversity):
            return events
        if self.first_probe is None:
            self.first_probe = (float(diversity), float(return_mean))
            return events
        d0, _ = self.first_probe
        if self.diversity_ratio is not None:
            self._fire("echo_trap", d0 > 0 and diversity < self.diversity_ratio * d0 and not improving,
                       f"think diversity {diversity:.3f} < {self.diversity_ratio} x first probe {d0:.3f}, "
                       f"not improving", events)
        return events


def replay_monitor(rows: Sequence[dict[str, Any]], **kwargs: Any) -> dict[str, int | None]:
    """The first step at which each signal of an ``EchoTrapMonitor(**kwargs)`` fires on a
    run's recorded metric rows (fed as the trainer feeds it), and ``"alarm"``: the first
    step of any signal in its ``alarm`` set. Rows without training metrics (the final
    evaluation) are skipped."""
    monitor = EchoTrapMonitor(**kwargs)
    first: dict[str, int | None] = {name: None for name in MONITOR_SIGNALS}
    first["alarm"] = None
    for r in rows:
        if "rollout/in_group_std" not in r:
            continue
        for e in monitor.observe(r):
            name = e.split(":", 1)[0]
            if first.get(name) is None:
                first[name] = r["step"]
            if monitor.is_alarm(e) and first["alarm"] is None:
                first["alarm"] = r["step"]
    return first


def strict_json_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with every non-finite float (NaN, ±Infinity; numpy / torch scalars included)
    replaced by None, so ``json.dumps(..., allow_nan=False)`` writes strict JSON (``null``)."""
    out = {}
    for key, value in row.items():
        if hasattr(value, "item") and not isinstance(value, (str, bytes)):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        elif isinstance(value, dict):
            value = strict_json_row(value)
        elif isinstance(value, (list, tuple)):
            value = [None if isinstance(v, float) and not math.isfinite(v) else v for v in value]
        out[key] = value
    return out


def _dumps(row: dict[str, Any]) -> str:
    return json.dumps(strict_json_row(row), default=_jsonable, allow_nan=False)


class MetricsLogger:
    """Appends one JSON object per step to ``metrics.jsonl``; optional TensorBoard and
    Weights & Biases.

    ``metrics.jsonl`` is strict JSON: a number that is not finite (a NaN loss, an empty
    batch's mean) is written as ``null``. ``tensorboard=True`` writes event files to
    ``DIR/tensorboard`` (``tensorboard --logdir DIR/tensorboard``; the package is in the
    ``train`` extra). ``wandb_project`` logs every row to a Weights & Biases run of that
    project (``wandb`` must be installed; it never is required otherwise); ``run_config`` is
    the run's config for both.
    """

    def __init__(self, out_dir: str | Path, tensorboard: bool = False, resume_step: int | None = None,
                 wandb_project: str | None = None, run_config: dict[str, Any] | None = None) -> None:
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            # Drop rows written after the checkpoint we resume from (they will be redone).
            rows = [r for r in read_metrics(self.path) if r.get("step", -1) < resume_step]
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.unlink(missing_ok=True)
            tmp.write_text("".join(_dumps(r) + "\n" for r in rows))
            tmp.replace(self.path)  # replaces a link in its place, never writes through it
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ImportError('TensorBoard logging needs the tensorboard package: pip install "ragen-envs[train]"') from None
            self.writer = SummaryWriter(str(Path(out_dir) / "tensorboard"))
            if run_config:
                self.writer.add_text("config", "```\n" + json.dumps(run_config, indent=2, default=str) + "\n```", 0)
        self.wandb_run = None
        if wandb_project:
            try:
                import wandb
            except ImportError:
                raise ImportError("wandb=True needs the wandb package (pip install wandb); it is optional") from None
            self.wandb_run = wandb.init(project=wandb_project, config=run_config or {}, dir=str(Path(out_dir)),
                                        name=Path(out_dir).resolve().name, resume="allow" if resume_step else None)

    def log(self, row: dict[str, Any]) -> None:
        from .._fs import open_nofollow

        fd = open_nofollow(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # never appended through a link
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(_dumps(row) + "\n")
        scalars = {k: float(v) for k, v in strict_json_row(row).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        if self.writer is not None:
            for key, value in scalars.items():
                self.writer.add_scalar(key, value, row["step"])
            self.writer.flush()
        if self.wandb_run is not None:
            self.wandb_run.log(scalars, step=int(row["step"]))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def _jsonable(x):
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``; a line that is not a JSON object (torn by a crash,
    edited by hand, an integer of 5,000 digits) carries no row and is skipped."""
    from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted

    rows = []
    for line in Path(path).read_bytes().splitlines():
        try:
            row = loads_untrusted(line) if line.strip() else None
        except UntrustedJSONError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


_PANELS = (
    ("return", ("rollout/return_mean", "rollout/return_max")),
    ("success", ("rollout/success", "eval/success")),
    ("in-group return std", ("rollout/in_group_std", "rollout/in_group_std_kept")),
    ("entropy", ("actor/entropy",)),
    ("response tokens", ("rollout/response_length",)),
    ("grad norm", ("actor/grad_norm", "critic/grad_norm")),
    ("clip fraction", ("actor/pg_clipfrac_high", "actor/pg_clipfrac_low")),
    ("KL", ("actor/approx_kl_old", "actor/kl_ref_k1", "actor/kl_ref_k3")),
    ("critic", ("critic/value_loss", "critic/explained_variance")),
    ("think diversity (probe)", ("probe/distinct_ngrams", "probe/pairwise_similarity", "rollout/distinct_think")),
    ("reasoning score", ("rollout/reasoning_score", "eval/reasoning_score")),
    ("seconds per phase", ("time/rollout", "time/update", "time/eval")),
)


def plot_metrics(metrics: str | Path | Iterable[dict[str, Any]], out_png: str | Path, title: str = "") -> Path:
    """Draw the Echo Trap curves of a run (one panel per signal) to ``out_png``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError('plots need matplotlib: pip install "ragen-envs[train]"') from None
    rows = read_metrics(metrics) if isinstance(metrics, (str, Path)) else list(metrics)
    cols = 4
    nrows = math.ceil(len(_PANELS) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 2.8 * nrows), squeeze=False)
    for ax, (name, keys) in zip(axes.flat, _PANELS):
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="." if len(pts) < 30 else None, label=key if len(keys) > 1 else None)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        if len(keys) > 1 and ax.lines:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(_PANELS):]:
        ax.axis("off")
    events = [(r["step"], e) for r in rows for e in r.get("events", [])]
    for ax in axes.flat:
        for step, _ in events:
            ax.axvline(step, color="red", alpha=0.3, linewidth=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
