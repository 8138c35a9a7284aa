"""Template collapse, shown and seen coming (issue 45 item 4): does RAGEN-2's MI signal fall before success does?

    python labs/template_collapse.py --out runs/template_collapse --seeds 0 1 2 3 4 5 6 7 8 9 --heldout-from 2 --jobs 2
    python labs/template_collapse.py --env ragen/FrozenLake-v1 --out runs/template_collapse_fl --seeds 0 1 2 3 --heldout-from 2 --jobs 2

One command, from a prior whose reasoning depends on the state, to the question's answer per run:

1. the *prior*: a tiny Qwen2-architecture model SFT on expert Sokoban trajectories whose replies
   carry a grounded ``<think>`` text, as the think demo trains (``ragen_envs/starpo/demo.py --think``:
   :func:`~ragen_envs.starpo.sft.run_sft` with ``think_style="grounded"``: "The box is below and left.
   The target is left. I go Down, Left."), so its reasoning names the state it sees; ``--prior DIR``
   reuses a model directory instead (e.g. a ``make demo-think`` SFT model);
2. the variants from that prior, every one GRPO, on the same training seeds: ``vanilla`` (preset
   ``starpo``: no filter, KL 0.001, clip 0.2 / 0.2), ``starpo-s`` (top-25 % groups by return std,
   no KL, clip 0.2 / 0.28) and ``ragen2`` (preset ``ragen2``: the reference's linear top-p 0.9 filter
   over the groups' return std, zero-std groups never kept), with RAGEN-2's collapse metrics on
   (``collapse_detection``: the multi-turn sample, ``num_samples`` pairs every ``compute_freq``
   steps; docs/training.md "RAGEN-2's collapse metrics") and an evaluation every ``eval_every``
   steps; finished runs under ``OUT/runs/VARIANT/seedS`` are reused;
3. per run: the collapse step by the multi-turn labs' rule (``_labs_common.collapse_step`` on
   ``rollout/success``: its 5-step trailing mean below half its peak for good) and by the
   corpus's evaluation label (``diagnostics.collapse_label``), the *MI-warning step*
   (:func:`mi_warning_step`: the first measurement at which the MI estimate is below
   ``fraction`` x the mean of its first ``baseline`` measurements, ``consecutive`` measurements
   in a row; ``--warning-set`` changes the rule, or the signal, on finished runs) and the lead
   (collapse step - warning step); written to ``OUT/template_collapse.json`` (with the per-step
   series) and ``OUT/template_collapse.png`` (one panel column per variant: success, MI estimate,
   retrieval accuracy above chance, share of turns with a ``<think>`` text; seeds as lines;
   collapse steps dashed, warnings as triangles);
4. the reasoning graded against the state: ``claims_chance`` (how often the reasoning checks'
   grounded claims hold when the reasoning ignores the state), each run's grounded-claims series,
   the step that grounding fell (:func:`grounding_fall_step`) and the kind of each collapse
   (:func:`collapse_kind`: template / no think / answer side);
5. every signal (RAGEN-2's MI, MI per sequence, retrieval above chance, MI z-score; the share of
   turns with a think text; grounding above chance; the well-formed share) scored against the
   corpus's collapse label over a grid of rules (:func:`score_signals`): a rule is picked on the
   development seeds and judged on the held-out ones (``--heldout-from SEED``), written to
   ``OUT/template_collapse_signals.md`` and checked against the issue's bar (:func:`meets_bar`);
6. the trainer's own warning rules replayed on the same runs and scored the same way
   (:func:`score_monitor_rules`: the default, ``MULTITURN_MONITOR``, and the development pick
   among ``labs/monitor_noise.py``'s rules), so a rule that meets the bar can ship as it is.

Settings (:data:`SETTINGS`): Sokoban with think replies, 4 turns and a free no-op (``format_penalty=0``,
the multi-turn trap's ``sokoban-free-noop``: a turn without a move pays 0 while each move costs 0.1),
so that vanilla StarPO has a collapse to fall into; ``--env ragen/FrozenLake-v1`` the same on RAGEN-2's
FrozenLake (no cost per move there; its prior trains 3,000 steps: :data:`ENV_PRIOR`); ``--env
ragen/FrozenLake-v0`` runs too, but no recipe tried gives it a grounded prior. ``--smoke``: tiny sizes (the test).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):  # the checkout (ragen_envs) and this folder (_labs_common)
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _labs_common import collapse_step, config_key, parse_kv, run_todo  # noqa: E402

# name -> (preset, overrides): every variant GRPO (no critic), as the multi-turn trap
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "vanilla": ("starpo", {"advantage": "grpo"}),
    "starpo-s": ("starpo-s", {"advantage": "grpo"}),
    "ragen2": ("ragen2", {"advantage": "grpo"}),
}
MI_KEY = "collapse_trajectory_sample/mi_estimate"
RETRIEVAL_KEY = "collapse_trajectory_sample/retrieval_above_chance"
ZSCORE_KEY = "collapse_trajectory_sample/mi_zscore"
MI_SEQ_KEY = "collapse_trajectory_sample/mi_seq_estimate"
VALID_THINK_KEY = "collapse/valid_thinking_rate"
GROUNDING_KEY = "rollout/claims_true"
WARNING_KEYS = (MI_KEY, MI_SEQ_KEY, RETRIEVAL_KEY, ZSCORE_KEY)
# the signals scored against the corpus's collapse label (score_signals): RAGEN-2's four, the share of turns with a
# think text to score, the grounding of the reasoning above chance (the reasoning checks' true-claim rate minus
# claims_chance), which only grid games with the checks have, and the share of well-formed replies (1 - the
# rollouts' format-error rate: the answer side, which the reasoning metrics cannot see)
FORMAT_KEY = "rollout/format_error"
SIGNAL_KEYS = {"mi": MI_KEY, "mi_seq": MI_SEQ_KEY, "retrieval": RETRIEVAL_KEY, "mi_zscore": ZSCORE_KEY,
               "valid_think": VALID_THINK_KEY, "grounding": GROUNDING_KEY, "well_formed": FORMAT_KEY}
SIGNAL_GRID = {"fraction": (0.3, 0.5, 0.7, 0.85), "consecutive": (1, 2, 3)}

SETTINGS: dict[str, Any] = {
    "env_id": "ragen/Sokoban-v0",
    "env_kwargs": {"think": True, "max_turns": 4, "format_penalty": 0.0},
    # the demo's model shape (0.25 M parameters). The pilot's prior (hidden 64 / 2 layers, 1,000 episodes, 400 steps
    # of 16, no context loss) wrote think texts whose grounded claims held 0.26-0.31 of the time, the chance level
    # of a reasoning that ignores the state (claims_chance: 0.246): it had no state dependence to lose
    "tiny_model": {"hidden_size": 64, "num_layers": 4, "num_heads": 4, "intermediate_size": 192},
    "tokenizer": {"vocab_size": 1024},
    # run_sft's arguments: the think demo's grounded SFT, smaller (4,000 episodes, 1,000 steps of 32, with the
    # demo's auxiliary loss on prompts and observations, context_coef 0.5, which teaches the model to read the grid):
    # 56 % success and 74.9 % grounded claims true on 64 EVAL_SEEDS (ragen eval, 4 turns), ~600 s of SFT
    "prior": {"episodes": 4000, "seed_start": 10_000, "steps": 1000, "batch_size": 32, "lr": 2e-3, "warmup": 50,
              "actions_per_turn": 2, "context_coef": 0.5},
    # actor lr 2e-4 (the multi-turn trap's): at 5e-4 vanilla's entropy blew up (0.7 -> 6.2 nats) by step 8 on both
    # pilot seeds, the replies turned to noise and no <think> text was left to score
    "rl": {"steps": 60, "num_groups": 8, "group_size": 4, "max_new_tokens": 40, "actor_lr": 2e-4, "critic_lr": 1e-3,
           "mini_batch_size": 32, "micro_batch_size": 32, "train_seed_start": 50_000, "eval_every": 5,
           "eval_episodes": 32, "probe_every": 0, "save_every": 0, "log_samples": 0, "plots": False,
           "collapse_detection": {"multi_turn_enabled": True, "first_turn_enabled": False, "compute_freq": 2,
                                  "num_samples": 16}},
    "collapse": {"key": "rollout/success", "window": 5, "fraction": 0.5},
    # the MI warning (mi_warning_step): below half the mean of the first two measurements, twice in a row
    "warning": {"key": MI_KEY, "fraction": 0.5, "consecutive": 2, "baseline": 2},
}
# the grid games whose expert writes grounded think texts the reasoning checks grade
ENV_IDS = ("ragen/Sokoban-v0", "ragen/FrozenLake-v0", "ragen/FrozenLake-v1")
# per game, the SFT settings that differ from SETTINGS["prior"]. FrozenLake-v1 (RAGEN-2's defaults: the intended
# move with probability 0.8, map p = 0.9): its grounded claims are learned only after ~1,400 steps (per-token loss on
# the claims 1.05-1.09 nats to step 1,300, then falling; Sokoban's fall at ~650 of its 1,000), so 3,000 steps.
# FrozenLake-v0 has none that works: its slip-optimal expert moves towards the goal on 42 % of turns (Sokoban's
# towards the box on 82 %, v1's on 88 %), and no recipe tried taught this model to read its grid (claims at the
# state-blind level after 1,000-2,000 steps, hidden 64 or 128, with or without a first-turn curriculum)
ENV_PRIOR: dict[str, dict[str, Any]] = {"ragen/FrozenLake-v1": {"steps": 3000}}
SMOKE_CHANGES: dict[str, Any] = {
    "tiny_model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "tokenizer": {"vocab_size": 400},
    "prior": {"episodes": 16, "steps": 20, "batch_size": 8, "lr": 5e-3, "warmup": 5},  # enough for some valid <think> texts
    "rl": {"steps": 3, "num_groups": 2, "group_size": 2, "max_new_tokens": 24, "mini_batch_size": 4,
           "micro_batch_size": 4, "eval_every": 2, "eval_episodes": 4,
           "collapse_detection": {"multi_turn_enabled": True, "first_turn_enabled": False, "compute_freq": 1,
                                  "num_samples": 4}},
}


# run_sft's arguments the lab sets itself (not through --prior-set)
_PRIOR_FIXED = ("env_id", "out_dir", "tiny_model", "tokenizer_kwargs", "env_kwargs", "seed", "think_style",
                "max_new_tokens", "log", "on_step", "model", "data")


def check_prior_changes(prior: dict) -> None:
    """``--prior-set`` changes: each a keyword of ``run_sft`` the lab does not set itself, and
    a number (an integer where the lab's own setting is one) >= 0 where the lab's setting is a
    number; ValueError (one line) otherwise, before anything is built."""
    import inspect

    from ragen_envs.starpo.sft import run_sft

    allowed = sorted(set(inspect.signature(run_sft).parameters) - set(_PRIOR_FIXED))
    for key, value in prior.items():
        if key not in allowed:
            raise ValueError(f"--prior-set {key}: not an SFT setting of this lab; choose from {', '.join(allowed)}")
        base = SETTINGS["prior"].get(key)
        if isinstance(base, (int, float)) and not isinstance(base, bool):
            kind = int if isinstance(base, int) else (int, float)
            if isinstance(value, bool) or not isinstance(value, kind) or value < 0:
                raise ValueError(f"--prior-set {key}: must be {'an integer' if kind is int else 'a number'} >= 0, "
                                 f"got {value!r}")


def settings_for(smoke: bool = False, rl: dict | None = None, prior: dict | None = None,
                 warning: dict | None = None, env_kwargs: dict | None = None, env_id: str | None = None) -> dict[str, Any]:
    """A deep copy of :data:`SETTINGS`, with the smoke sizes and the given changes."""
    s = json.loads(json.dumps(SETTINGS))
    if env_id is not None:
        if env_id not in ENV_IDS:
            raise ValueError(f"--env must be one of {', '.join(ENV_IDS)}; got {env_id!r}")
        s["env_id"] = env_id
        s["prior"].update(ENV_PRIOR.get(env_id, {}))
    if smoke:
        for key in ("tiny_model", "tokenizer"):
            s[key] = dict(SMOKE_CHANGES[key])
        s["prior"].update(SMOKE_CHANGES["prior"])
        s["rl"].update(json.loads(json.dumps(SMOKE_CHANGES["rl"])))
    s["rl"].update(rl or {})
    check_prior_changes(prior or {})
    s["prior"].update(prior or {})
    s["warning"].update(warning or {})
    s["env_kwargs"].update(env_kwargs or {})
    if s["env_kwargs"].get("think") is not True:
        raise ValueError("the collapse metrics score <think> texts: env kwarg think must stay true")
    w = s["warning"]
    if not (isinstance(w["fraction"], (int, float)) and 0 < w["fraction"] < 1):
        raise ValueError(f"warning fraction must be in (0, 1), got {w['fraction']!r}")
    if isinstance(w["consecutive"], bool) or not isinstance(w["consecutive"], int) or w["consecutive"] < 1:
        raise ValueError(f"warning consecutive must be an integer >= 1, got {w['consecutive']!r}")
    if isinstance(w["baseline"], bool) or not isinstance(w["baseline"], int) or w["baseline"] < 1:
        raise ValueError(f"warning baseline must be an integer >= 1, got {w['baseline']!r}")
    if w["key"] not in WARNING_KEYS:
        raise ValueError(f"warning key must be one of {', '.join(WARNING_KEYS)}; got {w['key']!r}")
    return s


# ----------------------------------------------------------------------------- analysis (pure)
def series(rows: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows that carry a finite number under ``key``."""
    pts = [(r["step"], float(r[key])) for r in rows
           if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool) and math.isfinite(r[key])]
    return [s for s, _ in pts], [v for _, v in pts]


def mi_warning_step(steps: Sequence[int], values: Sequence[float], fraction: float = 0.5,
                    consecutive: int = 2, baseline: int = 1) -> int | None:
    """The first step the MI signal has fallen, or None.

    With measurements v_0..v_{n-1} at ``steps`` and the reference r = mean(v_0..v_{b-1}), the
    first b = ``baseline`` measurements (the prior's reasoning, before or just after the
    first update): the warning is steps[t] for the first t >= b such that
    v_u < fraction · r for every u in t .. t + consecutive − 1 (all of them measured).
    None when r <= 0 (no state dependence to lose) or no such stretch exists.
    """
    if len(steps) != len(values):
        raise ValueError(f"{len(steps)} steps but {len(values)} values")
    if consecutive < 1:
        raise ValueError(f"consecutive must be >= 1, got {consecutive}")
    if baseline < 1:
        raise ValueError(f"baseline must be >= 1, got {baseline}")
    if len(values) <= baseline:
        return None
    ref = sum(values[:baseline]) / baseline
    if ref <= 0:
        return None
    threshold = fraction * ref
    for t in range(baseline, len(values) - consecutive + 1):
        if all(values[u] < threshold for u in range(t, t + consecutive)):
            return steps[t]
    return None


def lead(collapse: int | None, warning: int | None) -> int | None:
    """collapse − warning (steps; > 0: the warning came first), None unless both happened."""
    return collapse - warning if collapse is not None and warning is not None else None


def claims_chance(env_id: str, env_kwargs: dict | None = None, episodes: int = 400) -> dict[str, float]:
    """How often the reasoning checks' grounded claims hold when the reasoning ignores the state.

    For seeds i = 0 .. n-1 (n = ``episodes``): the expert's grounded reply to the first state of
    seed i (:func:`~ragen_envs.starpo.expert.expert_reply_fn`, "The box is below and left. ... I
    go Down, Left.") is stepped once on seed i (``own``) and once on seed (i + 1) mod n
    (``mismatched``); each rate is Σ ``info["reasoning"]["claims_true"]`` / Σ ``claims``. ``own``
    is 1 by construction (the expert's claims are true); ``mismatched`` is the chance level of a
    reasoning that names *a* state, not this one: what template collapse falls to.
    """
    import gymnasium as gym

    import ragen_envs  # noqa: F401  (registers the ids)
    from ragen_envs.starpo.expert import expert_reply_fn

    if episodes < 2:
        raise ValueError(f"claims_chance needs >= 2 episodes, got {episodes}")
    kwargs = dict(env_kwargs or {})
    a, b = gym.make(env_id, **kwargs), gym.make(env_id, **kwargs)
    reply = expert_reply_fn("grounded", actions_per_turn=2)
    sums = {"own": [0, 0], "mismatched": [0, 0]}
    for i in range(episodes):
        a.reset(seed=i)
        text = reply(a, None)
        b.reset(seed=(i + 1) % episodes)
        for name, env in (("mismatched", b), ("own", a)):
            r = env.step(text)[4].get("reasoning", {})
            sums[name][0] += r.get("claims_true", 0)
            sums[name][1] += r.get("claims", 0)
    a.close(), b.close()
    return {name: (t / n if n else float("nan")) for name, (t, n) in sums.items()}


def grounding_fall_step(steps: Sequence[int], values: Sequence[float], chance: float, window: int = 5,
                        fraction: float = 0.5, margin: float = 0.2) -> int | None:
    """Template collapse seen in the reasoning itself, or None.

    g_t = values_t − ``chance`` (the true-claim rate above what a state-blind reasoning gets,
    :func:`claims_chance`); the step is ``collapse_step(steps, g, window, fraction)``: the
    trailing ``window``-step mean of g fell below ``fraction`` x its peak and stayed there.
    None also when the mean of the first ``window`` values of g is below ``margin``: a prior
    whose reasoning never tracked the state has no grounding to lose.
    """
    if len(steps) != len(values):
        raise ValueError(f"{len(steps)} steps but {len(values)} values")
    g = [v - chance for v in values]
    head = g[:window]
    if not head or sum(head) / len(head) < margin:
        return None
    return collapse_step(steps, g, window, fraction)


def collapse_kind(eval_collapse: int | None, grounding_fall: int | None, valid_think: Sequence[float]) -> str:
    """What a run's collapse was: ``"healthy"`` (no eval-label collapse), ``"no think"`` (the
    last measured share of turns with a think text < 0.5: nothing left to be a template),
    ``"template"`` (the reasoning's grounding fell, :func:`grounding_fall_step`, while think
    texts stayed), else ``"answer side"`` (the reasoning kept tracking the state; the answers
    or the moves failed)."""
    if eval_collapse is None:
        return "healthy"
    if valid_think and valid_think[-1] < 0.5:
        return "no think"
    return "template" if grounding_fall is not None else "answer side"


def signal_alarm(rows: Sequence[dict], key: str, fraction: float, consecutive: int, baseline: int = 2,
                 offset: float = 0.0, sign: float = 1.0) -> int | None:
    """The first step s = ``sign`` x ``key`` − ``offset`` fell below ``fraction`` x its first
    ``baseline`` measurements' mean, ``consecutive`` measurements in a row
    (:func:`mi_warning_step`)."""
    st, vals = series(rows, key)
    return mi_warning_step(st, [sign * v - offset for v in vals], fraction, consecutive, baseline)


def score_signals(runs: Sequence[dict], chance: float, grid: dict = SIGNAL_GRID) -> list[dict[str, Any]]:
    """Every (signal, fraction, consecutive) of ``grid`` scored on ``runs`` (each ``{"rows",
    "label": {"collapse_step"}, "split"}``) against the corpus's collapse label
    (``_labs_common.score_alarms``: warned = alarm before the eval collapse, late, false alarms
    on healthy runs), on the development and held-out splits apart; ``chosen`` marks, per signal,
    the rule the development runs pick (``choose_rule``)."""
    from _labs_common import score_alarms

    table = []
    for name, key in SIGNAL_KEYS.items():
        # grounding: the true-claim rate above chance; well-formed share: 1 - format error = -(error) - (-1)
        offset, sign = {GROUNDING_KEY: (chance, 1.0), FORMAT_KEY: (-1.0, -1.0)}.get(key, (0.0, 1.0))
        for frac in grid["fraction"]:
            for cons in grid["consecutive"]:
                row = {"signal": name, "fraction": frac, "consecutive": cons}
                for split in ("dev", "heldout"):
                    sub = [r for r in runs if r["split"] == split]
                    alarms = [signal_alarm(r["rows"], key, frac, cons, offset=offset, sign=sign) for r in sub]
                    sc = score_alarms(sub, alarms)
                    row[split] = {k: v for k, v in sc.items() if k != "first_alarm"}
                table.append(row)
    for name in SIGNAL_KEYS:
        pick = choose_rule([r for r in table if r["signal"] == name])
        if pick is not None:
            pick["chosen"] = True
    return table


def choose_rule(rows: Sequence[dict]) -> dict | None:
    """The development runs' pick among one signal's rules: no false alarm on dev, at least one
    collapse warned; then the most warned, the largest median lead, the first in grid order."""
    best = None
    for row in rows:
        d = row["dev"]
        if d["false_alarms"] or not d["warned"]:
            continue
        rank = (d["warned"], d["median_lead"] or 0)
        if best is None or rank > best[0]:
            best = (rank, row)
    return None if best is None else best[1]


def bar_shares(score: dict) -> bool:
    """The issue's bar as shares, on any number of runs: warned / collapsing >= 8/9, median lead
    >= 5 steps, false alarms / healthy <= 1/12."""
    if not score["collapsing"] or not score["healthy"]:
        return False
    return (score["warned"] / score["collapsing"] >= 8 / 9 and (score["median_lead"] or 0) >= 5
            and score["false_alarms"] / score["healthy"] <= 1 / 12)


def meets_bar(score: dict) -> bool:
    """The issue's bar for a multi-turn default: at least 9 collapses and 12 healthy runs scored
    (the bar's own counts: fewer cannot show it), and :func:`bar_shares`."""
    return score["collapsing"] >= 9 and score["healthy"] >= 12 and bar_shares(score)


def score_monitor_rules(runs: Sequence[dict]) -> list[dict[str, Any]]:
    """The trainer's own warning rules, replayed on each run's metric rows
    (:func:`~ragen_envs.starpo.diagnostics.replay_monitor`, fed as the trainer feeds its
    ``EchoTrapMonitor``) and scored like :func:`score_signals` (dev and held-out apart, against
    the corpus's collapse label): the trainer's default, ``monitor.MULTITURN_MONITOR``, and the
    development runs' pick among ``labs/monitor_noise.py``'s rules (``_labs_common``) (each drop signal alone over
    its grid, and each union of a success signal with ``well_formed_drop``; its
    ``choose_rule``): the method docs/monitor.md chose ``MULTITURN_MONITOR`` by. A rule that
    meets the bar here is a rule the trainer can ship as it is. Runs as in
    :func:`score_signals`; ``rule`` names the rule, ``kwargs`` its ``monitor`` setting."""
    import _labs_common as rules  # the rule grid and its replay (monitor_noise.py chooses among them)
    from _labs_common import score_alarms

    from ragen_envs.starpo.diagnostics import replay_monitor
    from ragen_envs.starpo.monitor import MULTITURN_MONITOR

    index = {split: [i for i, r in enumerate(runs) if r["split"] == split] for split in ("dev", "heldout")}

    def scored(name: str, kwargs: dict, alarms: Sequence[int | None], chosen: bool = False) -> dict[str, Any]:
        row: dict[str, Any] = {"rule": name, "kwargs": kwargs, "chosen": chosen}
        for split, idx in index.items():
            sc = score_alarms([runs[i] for i in idx], [alarms[i] for i in idx])
            row[split] = {k: v for k, v in sc.items() if k != "first_alarm"}
        return row

    table = []
    for name, kwargs in (("trainer default", {}), ("MULTITURN_MONITOR", dict(MULTITURN_MONITOR))):
        table.append(scored(name, kwargs, [replay_monitor(r["rows"], **kwargs)["alarm"] for r in runs]))
    fires = rules.first_fires(runs)
    pick = rules.choose_rule(runs, index["dev"], fires, rules.union_candidates()) if index["dev"] else None
    if pick is not None:
        kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in rules.rule_kwargs(pick["rule"]).items()
                  if v is not None}
        table.append(scored(f"dev pick: {rules.rule_name(pick['rule'])}", kwargs,
                            rules.rule_alarms(pick["rule"], fires, range(len(runs))), chosen=True))
    return table


def monitor_rules_markdown(table: Sequence[dict]) -> list[str]:
    """:func:`score_monitor_rules` as a table: dev and held-out counts, the bar's shares and the bar."""
    lines = ["| trainer rule | dev warned | dev false | held-out warned | median lead | late | held-out false | "
             "bar's shares | bar (>= 9 and 12 runs) |", "|---|---:|---:|---:|---:|---:|---:|:---:|:---:|"]
    for r in table:
        h = r["heldout"]
        lines.append(f"| {r['rule']} | {_count_cells(r)} | {'yes' if bar_shares(h) else 'no'} | "
                     f"{'yes' if meets_bar(h) else 'no'} |")
    return lines


def _count_cells(row: dict) -> str:
    """The table cells dev warned | dev false | held-out warned | median lead | late | held-out false."""
    d, h = row["dev"], row["heldout"]
    return (f"{d['warned']}/{d['collapsing']} | {d['false_alarms']}/{d['healthy']} | {h['warned']}/{h['collapsing']} | "
            f"{'-' if h['median_lead'] is None else h['median_lead']} | {h['late']} | {h['false_alarms']}/{h['healthy']}")


def summarize(rows: Sequence[dict], settings: dict) -> dict[str, Any]:
    """One run's series and marks: per-step rollout success, eval success, MI estimate,
    retrieval accuracy above chance and MI z-score; the collapse steps (the lab rule on
    rollout success, the corpus's eval label), the MI-warning step and the lead."""
    from ragen_envs.starpo.diagnostics import collapse_label

    c, w = settings["collapse"], settings["warning"]
    out: dict[str, Any] = {}
    for name, key in (("rollout_success", "rollout/success"), ("eval_success", "eval/success"),
                      ("mi_estimate", MI_KEY), ("mi_seq_estimate", MI_SEQ_KEY), ("retrieval_above_chance", RETRIEVAL_KEY), ("mi_zscore", ZSCORE_KEY),
                      ("mi_upper_bound", "collapse_trajectory_sample/mi_upper_bound"),
                      ("valid_thinking_rate", VALID_THINK_KEY), ("grounding", GROUNDING_KEY),
                      ("eval_grounding", "eval/claims_true"), ("format_error", FORMAT_KEY)):
        st, vals = series(rows, key)
        out[name] = {"steps": st, "values": vals}
    rs = out["rollout_success"]
    out["collapse_step"] = collapse_step(rs["steps"], rs["values"], c["window"], c["fraction"]) if rs["steps"] else None
    ev = out["eval_success"]
    out["eval_collapse_step"] = collapse_label(ev["steps"], ev["values"]) if ev["steps"] else None
    ws, wv = series(rows, w["key"])
    out["mi_warning_step"] = mi_warning_step(ws, wv, w["fraction"], w["consecutive"], w["baseline"])
    out["lead"] = lead(out["collapse_step"], out["mi_warning_step"])
    chance = settings.get("claims_chance")
    g = out["grounding"]
    out["grounding_fall_step"] = (grounding_fall_step(g["steps"], g["values"], chance, c["window"])
                                  if chance is not None and g["steps"] else None)
    out["kind"] = collapse_kind(out["eval_collapse_step"], out["grounding_fall_step"], out["valid_thinking_rate"]["values"])
    out["eval_lead"] = lead(out["eval_collapse_step"], out["mi_warning_step"])
    # the metrics' cost: median time of one multi-turn sample / median time of a step without one
    times = [r["time/collapse_multi_turn"] for r in rows if isinstance(r.get("time/collapse_multi_turn"), (int, float))]
    plain = [r["time/step"] for r in rows
             if isinstance(r.get("time/step"), (int, float)) and "time/collapse_multi_turn" not in r]
    if times and plain:
        out["collapse_cost_over_step"] = statistics.median(times) / statistics.median(plain)
    return out


# ----------------------------------------------------------------------------- the prior and the runs
def build_prior(out: Path, settings: dict, log=print) -> Path:
    """The grounded-think SFT prior (reused when ``OUT/prior/model`` exists)."""
    from ragen_envs.starpo.sft import run_sft

    model_dir = out / "prior" / "model"
    if (model_dir / "config.json").exists():
        return model_dir
    log(f"prior: grounded-think SFT, {settings['prior']}")
    return Path(run_sft(settings["env_id"], str(out / "prior"), tiny_model=settings["tiny_model"],
                        tokenizer_kwargs=settings["tokenizer"], env_kwargs=settings["env_kwargs"], seed=0,
                        think_style="grounded", max_new_tokens=settings["rl"]["max_new_tokens"],
                        log=lambda _m: None, **settings["prior"]))


def specs_for(variants: Sequence[str], seeds: Sequence[int]) -> list[dict[str, Any]]:
    specs = []
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
        preset, over = VARIANTS[v]
        specs += [{"variant": v, "seed": s, "preset": preset, "overrides": dict(over)} for s in seeds]
    return specs


def run(out: Path, settings: dict, variants: Sequence[str], seeds: Sequence[int], jobs: int = 1,
        prior: Path | None = None, log=print, heldout_from: int | None = None) -> dict[str, Any]:
    """Prior, runs (reused when finished), JSON, figure; returns the report. Runs with a seed
    >= ``heldout_from`` are the held-out split of :func:`score_signals` (None: all development)."""
    from ragen_envs.starpo.diagnostics import read_metrics

    t0 = time.monotonic()
    specs = specs_for(variants, seeds)
    for spec in specs:  # refuse bad settings before the prior
        config_key(spec, settings, "")
    out.mkdir(parents=True, exist_ok=True)
    if prior is None:
        tp = time.monotonic()
        prior = build_prior(out, settings, log=log)
        log(f"prior ready: {prior} ({time.monotonic() - tp:.0f} s)")
    elif not (Path(prior) / "config.json").exists():
        raise ValueError(f"--prior {prior} is not a model directory (no config.json)")
    todo = []
    for spec in specs:
        d = out / "runs" / spec["variant"] / f"seed{spec['seed']}"
        if not (d / "result.json").exists():
            todo.append((spec, str(prior), settings, str(d)))
            continue
        done = json.loads((d / "config.json").read_text())
        done.pop("out_dir", None)
        if json.dumps(done, sort_keys=True) != config_key(spec, settings, str(prior)):
            raise ValueError(f"{d} was trained with other settings (or another prior); use another --out")
    log(f"{len(specs)} runs ({len(specs) - len(todo)} already done), {jobs} at once")
    run_todo(todo, jobs, log)
    chance = claims_chance(settings["env_id"], settings["env_kwargs"])
    scored = {**settings, "claims_chance": chance["mismatched"]}
    runs, labelled = [], []
    for spec in specs:
        d = out / "runs" / spec["variant"] / f"seed{spec['seed']}"
        result = json.loads((d / "result.json").read_text())
        rows = read_metrics(d / "metrics.jsonl")
        s = summarize(rows, scored)
        succ = result["final_success"]
        split = "heldout" if heldout_from is not None and spec["seed"] >= heldout_from else "dev"
        runs.append({"variant": spec["variant"], "seed": spec["seed"], "split": split,
                     "final_success": sum(succ) / len(succ) if succ else None, "wall_s": result["wall_s"],
                     "cpu_s": result["cpu_s"], **s})
        labelled.append({"rows": rows, "split": split, "label": {"collapse_step": s["eval_collapse_step"]}})
    table = score_signals(labelled, chance["mismatched"])
    monitor_rules = score_monitor_rules(labelled)
    report = {"settings": settings, "variants": list(variants), "seeds": list(seeds), "prior": str(prior),
              "heldout_from": heldout_from, "claims_chance": chance, "runs": runs, "signals": table,
              "monitor_rules": monitor_rules, "wall_s": time.monotonic() - t0}
    plot(runs, list(variants), scored, out / "template_collapse.png")
    (out / "template_collapse.json").write_text(json.dumps(report, indent=2))
    (out / "template_collapse_signals.md").write_text("\n".join(signals_markdown(table) + [""]
                                                                + monitor_rules_markdown(monitor_rules)) + "\n")
    for line in report_lines(report):
        log(line)
    return report


def signals_markdown(table: Sequence[dict]) -> list[str]:
    """The ROC-style table of :func:`score_signals`: one row per (signal, rule), dev and held-out
    counts side by side; the development runs' pick of each signal marked."""
    lines = ["| signal | alarm: below x start | in a row | dev warned | dev false | held-out warned | median lead | late | "
             "held-out false | dev pick |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in table:
        lines.append(f"| {r['signal']} | {r['fraction']} | {r['consecutive']} | {_count_cells(r)} | "
                     f"{'yes' if r.get('chosen') else ''} |")
    return lines


def report_lines(report: dict) -> list[str]:
    w = report["settings"]["warning"]
    lines = [f"MI warning: {w['key']} below {w['fraction']} x the mean of its first {w['baseline']} measurements, "
             f"{w['consecutive']} measurements in a row; "
             "collapse: 5-step mean rollout success below half its peak for good (eval label in brackets)"]
    ch = report.get("claims_chance")
    if ch:
        lines.append(f"grounded claims true when the reasoning ignores the state (claims_chance): {ch['mismatched']:.3f}")
    for r in report["runs"]:
        g = r.get("grounding", {}).get("values") or []
        if g:
            lines.append(f"{r['variant']:<9} seed {r['seed']} ({r.get('split', 'dev')}): {r.get('kind')}; grounded claims true "
                         f"{statistics.mean(g[:5]):.2f} (first 5 steps) -> {statistics.mean(g[-5:]):.2f} (last 5), "
                         f"grounding fell at {r.get('grounding_fall_step')}")
    for row in report.get("signals", []):
        if row.get("chosen"):
            d, h = row["dev"], row["heldout"]
            lines.append(f"signal {row['signal']} (dev pick: < {row['fraction']} x start, {row['consecutive']} in a row): "
                         f"dev {d['warned']}/{d['collapsing']} warned, {d['false_alarms']}/{d['healthy']} false; held-out "
                         f"{h['warned']}/{h['collapsing']} warned (median lead {h['median_lead']}), {h['late']} late, "
                         f"{h['false_alarms']}/{h['healthy']} false; the bar's shares: {bar_shares(h)}, the bar "
                         f"(>= 9 collapses and 12 healthy runs scored): {meets_bar(h)}")
    for row in report.get("monitor_rules", []):
        d, h = row["dev"], row["heldout"]
        lines.append(f"trainer rule {row['rule']}: dev {d['warned']}/{d['collapsing']} warned, {d['false_alarms']}/"
                     f"{d['healthy']} false; held-out {h['warned']}/{h['collapsing']} warned (median lead "
                     f"{h['median_lead']}), {h['late']} late, {h['false_alarms']}/{h['healthy']} false; the bar's "
                     f"shares: {bar_shares(h)}, the bar: {meets_bar(h)}")
    for r in report["runs"]:
        mi = r["mi_estimate"]["values"]
        lines.append(f"{r['variant']:<9} seed {r['seed']}: collapse step {r['collapse_step']} [{r['eval_collapse_step']}], "
                     f"MI-warning step {r['mi_warning_step']}, lead {r['lead']} [{r['eval_lead']}]; "
                     f"MI {mi[0] if mi else float('nan'):.3f} -> {mi[-1] if mi else float('nan'):.3f}, "
                     f"final eval success {r['final_success']}, {r['wall_s']:.0f} s wall, collapse metrics "
                     f"{r.get('collapse_cost_over_step', float('nan')):.2f}x a step without them")
    return lines


def plot(runs: Sequence[dict], variants: Sequence[str], settings: dict, out_png: Path) -> Path:
    """One column per variant; rows: rollout success (5-step mean) and eval success, MI
    estimate (nats / token), retrieval accuracy above chance, the share of turns with a
    ``<think>`` text (without one there is nothing to score). Seeds as lines; a dashed line at
    each run's collapse step (lab rule), a triangle at its MI-warning step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from _labs_common import smooth

    fig, axes = plt.subplots(6, len(variants), figsize=(max(5 * len(variants), 11), 17), squeeze=False, sharex="col")
    for j, v in enumerate(variants):
        mine = [r for r in runs if r["variant"] == v]
        for i, r in enumerate(mine):
            color = f"C{i}"
            rs = r["rollout_success"]
            axes[0][j].plot(rs["steps"], smooth(rs["values"], settings["collapse"]["window"]), color=color)
            ev = r["eval_success"]
            axes[0][j].plot(ev["steps"], ev["values"], color=color, ls=":", marker="o", ms=3)
            axes[1][j].plot(r["mi_estimate"]["steps"], r["mi_estimate"]["values"], color=color, marker=".")
            axes[2][j].plot(r["retrieval_above_chance"]["steps"], r["retrieval_above_chance"]["values"], color=color,
                            marker=".")
            axes[3][j].plot(r["valid_thinking_rate"]["steps"], r["valid_thinking_rate"]["values"], color=color, marker=".")
            g = r.get("grounding") or {"steps": [], "values": []}
            axes[4][j].plot(g["steps"], smooth(g["values"], settings["collapse"]["window"]), color=color)
            wf = r.get("format_error") or {"steps": [], "values": []}
            axes[5][j].plot(wf["steps"], smooth([1.0 - v for v in wf["values"]], settings["collapse"]["window"]), color=color)
            if r.get("grounding_fall_step") is not None:
                axes[4][j].plot([r["grounding_fall_step"]], [settings.get("claims_chance") or 0.0], marker="x", color=color)
            mi, b = r["mi_estimate"]["values"], settings["warning"]["baseline"]
            if len(mi) > b and sum(mi[:b]) > 0 and settings["warning"]["key"] == MI_KEY:
                axes[1][j].axhline(settings["warning"]["fraction"] * sum(mi[:b]) / b, color=color, lw=0.6, alpha=0.5)
            for ax in axes[:, j]:
                if r["collapse_step"] is not None:
                    ax.axvline(r["collapse_step"], color=color, ls="--", lw=0.9)
                if r["mi_warning_step"] is not None:
                    ax.plot([r["mi_warning_step"]], [ax.get_ylim()[1]], marker="v", color=color, clip_on=False)
        # the band over seeds: the evaluations' range and median at each evaluation step all runs share
        evs = [r["eval_success"] for r in mine if r["eval_success"]["steps"]]
        common = sorted(set.intersection(*(set(e["steps"]) for e in evs))) if evs else []
        if len(evs) > 1 and common:
            at = [[dict(zip(e["steps"], e["values"]))[t] for e in evs] for t in common]
            axes[0][j].fill_between(common, [min(a) for a in at], [max(a) for a in at], color="grey", alpha=0.2,
                                    label="eval, range over seeds")
            axes[0][j].plot(common, [statistics.median(a) for a in at], color="k", lw=1.5, label="eval, median")
        axes[0][j].set_title(f"{v}: success", fontsize=10)
        axes[1][j].set_title(f"{v}: MI estimate (nats / token)", fontsize=10)
        axes[2][j].set_title(f"{v}: retrieval accuracy above chance", fontsize=10)
        axes[2][j].axhline(0.0, color="k", lw=0.5)
        axes[3][j].set_title(f"{v}: turns with a <think> text to score", fontsize=10)
        axes[4][j].set_title(f"{v}: grounded claims true (5-step mean; x: grounding fell)", fontsize=10)
        axes[5][j].set_title(f"{v}: well-formed replies (1 - format error, 5-step mean)", fontsize=10)
        if settings.get("claims_chance") is not None:
            axes[4][j].axhline(settings["claims_chance"], color="k", lw=0.6, ls=":")
        axes[0][j].plot([], [], color="grey", label="rollout (5-step mean)")
        axes[0][j].plot([], [], color="grey", ls=":", marker="o", ms=3, label="eval")
        axes[0][j].legend(fontsize=7, loc="upper right")
        for ax in axes[:, j]:
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=7)
    rl, w = settings["rl"], settings["warning"]
    fig.suptitle(f"{settings['env_id']} {json.dumps(settings['env_kwargs'])}, grounded-think prior, P x N = "
                 f"{rl['num_groups']} x {rl['group_size']}, GRPO, actor lr {rl['actor_lr']}\n(dashed: collapse step,\n"
                 f"5-step mean rollout success < half its peak for good; v: MI warning, {w['key'].split('/')[-1]} < "
                 f"{w['fraction']} x mean of first {w['baseline']}, {w['consecutive']} in a row; thin line: that threshold)", fontsize=9)
    # one legend for the seeds' colours (the i-th seed of every column has colour C{i})
    from matplotlib.lines import Line2D

    seeds = sorted({r["seed"] for r in runs}, key=[r["seed"] for r in runs].index)
    fig.legend([Line2D([], [], color=f"C{i}") for i in range(len(seeds))], [f"seed {s}" for s in seeds],
               loc="lower center", ncol=min(len(seeds), 10), fontsize=8)
    fig.tight_layout(rect=(0, 0.02, 1, 0.96))
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=72)
    plt.close(fig)
    return out_png



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/template_collapse")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--env", default=SETTINGS["env_id"], help=f"one of {', '.join(ENV_IDS)}")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="an rl setting, e.g. steps=40")
    parser.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=JSON",
                        help="an env kwarg (prior and RL), e.g. format_penalty=-0.1")
    parser.add_argument("--prior-set", action="append", default=[], metavar="KEY=JSON", help="an SFT setting, e.g. steps=800")
    parser.add_argument("--warning-set", action="append", default=[], metavar="KEY=JSON",
                        help="the MI-warning rule: fraction, consecutive, key")
    parser.add_argument("--prior", default=None, help="reuse this model directory as the prior")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--heldout-from", type=int, default=None, metavar="SEED",
                        help="runs with a seed >= SEED are the held-out split the signals are scored on")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps (the test)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    try:
        settings = settings_for(args.smoke, parse_kv(args.set, "--set", parser),
                                parse_kv(args.prior_set, "--prior-set", parser),
                                parse_kv(args.warning_set, "--warning-set", parser),
                                parse_kv(args.env_kwarg, "--env-kwarg", parser), args.env)
        if args.prior and not (Path(args.prior) / "config.json").exists():
            raise ValueError(f"--prior {args.prior} is not a model directory (no config.json)")
        run(Path(args.out), settings, args.variants, args.seeds, jobs=args.jobs,
            prior=Path(args.prior) if args.prior else None, heldout_from=args.heldout_from)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
