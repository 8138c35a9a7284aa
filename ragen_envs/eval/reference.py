"""Reference scores: the paper's published success rates and our expert / random baselines.

``reference_scores.json`` (package data beside this module) holds

- ``paper``: where the numbers come from (arXiv 2504.20073v2, the original RAGEN paper);
- ``paper_tables``: every published success-rate table, the numbers copied as the text the
  paper prints (``"27.73"``, ``"23"``), each with its source (``"Table 5"``);
- ``paper_env_ids``: the paper's env names -> our gym ids (the paper's game of each);
- ``paper_columns``: the comparable columns for ``ragen eval --compare paper``: one model
  of one table, its success per gym id;
- ``baselines``: ``expert`` and ``random`` on the 256 ``EVAL_SEEDS`` of every registered id
  with each id's default settings (episodes, successes, success rate, 95 % Wilson interval,
  mean return / turns / actions), written by ``scripts/reference_scores.py``; ``no_expert``:
  the ids whose env has no expert (id -> why), if any.

:func:`load_reference` reads and validates it; :func:`reference_runs` turns a
``--compare`` name into ``(label, summary)`` pairs that the comparison tables take;
:func:`markdown_blocks` renders the tables of ``docs/reference-scores.md``.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Sequence

__all__ = ["REFERENCE_FILE", "REFERENCE_NAMES", "BASELINE_AGENTS", "ReferenceScoresError", "load_reference",
           "validate_reference", "reference_runs", "baseline_entry", "markdown_blocks", "safe_id",
           "reproduce_command", "paper_success"]

REFERENCE_FILE = "reference_scores.json"
SCHEMA_VERSION = 1
BASELINE_AGENTS = ("expert", "random")
# --compare NAME: what each name adds (``reference`` = all of them)
REFERENCE_NAMES = {
    "paper": "the paper's published success rates (one column per model and table)",
    "expert": "our expert agent on the 256 seeds, each id's defaults",
    "random": "our random agent on the 256 seeds, each id's defaults",
    "reference": "paper, expert and random together",
}
PAPER_N = 256  # the paper evaluates on 256 fixed initial states (§3.3); Appendix G: 100
BASELINE_KEYS = ("episodes", "successes", "success_rate", "success_ci95", "mean_return", "mean_turns", "mean_actions")


class ReferenceScoresError(ValueError):
    """``reference_scores.json`` does not hold what :func:`validate_reference` promises."""


def paper_success(text: str) -> float:
    """A published success percentage as printed (``"27.73"``) -> a fraction (0.2773).

    The text must be a plain decimal in [0, 100]: ``"100.00"`` -> 1.0, ``"23"`` -> 0.23.
    """
    if not isinstance(text, str) or not text or not all(c.isdigit() or c == "." for c in text) or text.count(".") > 1:
        raise ReferenceScoresError(f"a published success rate must be decimal text such as '27.73', got {text!r}")
    value = float(text)
    if not 0.0 <= value <= 100.0:
        raise ReferenceScoresError(f"a published success rate is a percentage in [0, 100], got {text!r}")
    return value / 100.0


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ReferenceScoresError(msg)


def validate_reference(data: Any) -> dict[str, Any]:
    """Check the structure promised in the module docstring; returns ``data``.

    Every paper number parses (:func:`paper_success`); every table row has one value per
    column; every paper column names a source table; every baseline entry has
    ``0 <= successes <= episodes``, ``success_rate == successes / episodes`` and a CI that
    holds the rate.
    """
    _need(isinstance(data, dict), "the reference scores must be a JSON object")
    _need(data.get("schema_version") == SCHEMA_VERSION, f"schema_version must be {SCHEMA_VERSION}")
    for key in ("paper", "paper_tables", "paper_env_ids", "paper_columns", "baselines"):
        _need(key in data, f"missing key {key!r}")
    sources: dict[str, set[str]] = {}
    for table in data["paper_tables"]:
        for key in ("key", "source", "title", "row_header", "columns", "rows"):
            _need(key in table, f"paper table {table.get('key')!r} lacks {key!r}")
        sources[table["source"]] = {v for row in table["rows"] for v in row["values"]}
        for row in table["rows"]:
            _need(len(row["values"]) == len(table["columns"]),
                  f"{table['source']} row {row['label']!r}: {len(row['values'])} values for {len(table['columns'])} columns")
            for v in row["values"]:
                paper_success(v)
    for name, env_id in data["paper_env_ids"].items():
        _need(isinstance(env_id, str) and env_id.startswith("ragen/"), f"paper env {name!r} -> {env_id!r} is not a ragen/ id")
    keys = set()
    for col in data["paper_columns"]:
        for key in ("key", "label", "source", "model", "success"):
            _need(key in col, f"paper column {col.get('key')!r} lacks {key!r}")
        _need(col["key"] not in keys, f"paper column key {col['key']!r} twice")
        keys.add(col["key"])
        _need(col["source"] in sources, f"paper column {col['key']!r}: source {col['source']!r} is no table's")
        _need(bool(col["success"]), f"paper column {col['key']!r} has no numbers")
        for env_id, v in col["success"].items():
            paper_success(v)
            _need(v in sources[col["source"]], f"paper column {col['key']!r}: {env_id} {v} is not a number of {col['source']}")
    base = data["baselines"]
    _need(isinstance(base.get("agents"), dict), "baselines.agents must be an object")
    no_expert = base.get("no_expert", {})
    _need(isinstance(no_expert, dict) and all(isinstance(v, str) for v in no_expert.values()),
          "baselines.no_expert must map ids to reasons")
    both = sorted(set(no_expert) & set(base["agents"].get("expert", {})))
    _need(not both, f"baselines: {', '.join(both)} both has expert numbers and is listed in no_expert")
    for agent, per_id in base["agents"].items():
        _need(agent in BASELINE_AGENTS, f"baseline agent {agent!r} is not one of {', '.join(BASELINE_AGENTS)}")
        for env_id, e in per_id.items():
            where = f"baselines {agent} {env_id}"
            for key in BASELINE_KEYS:
                _need(key in e, f"{where} lacks {key!r}")
            n, k = e["episodes"], e["successes"]
            _need(isinstance(n, int) and isinstance(k, int) and 0 <= k <= n and n > 0, f"{where}: bad counts {k}/{n}")
            _need(math.isclose(e["success_rate"], k / n, abs_tol=1e-12), f"{where}: success_rate is not {k}/{n}")
            lo, hi = e["success_ci95"]
            eps = 1e-9  # Wilson's bounds at 0 and n successes are 0 and 1 up to float rounding
            _need(-eps <= lo <= e["success_rate"] + eps and e["success_rate"] - eps <= hi <= 1.0 + eps,
                  f"{where}: CI {lo}..{hi} does not hold the rate")
    return data


@lru_cache(maxsize=1)
def _load_cached() -> str:
    return resources.files(__package__).joinpath(REFERENCE_FILE).read_text(encoding="utf-8")


def load_reference(text: str | None = None) -> dict[str, Any]:
    """The bundled reference scores (or ``text`` as the same JSON), validated; a fresh copy each call."""
    try:
        data = json.loads(_load_cached() if text is None else text)
    except json.JSONDecodeError as exc:
        raise ReferenceScoresError(f"{REFERENCE_FILE} is not JSON: {exc}") from None
    return validate_reference(data)


def safe_id(env_id: str) -> str:
    """A gym id as one folder name: ``ragen/Sokoban-v0`` -> ``ragen_Sokoban-v0``."""
    return env_id.replace("/", "_")


def reproduce_command(env_id: str, agent: str) -> str:
    """The ``ragen eval`` command that reproduces one baseline row (the 256 seeds are the default)."""
    return f"ragen eval {env_id} --agent {agent} --out runs/reference/{agent}/{safe_id(env_id)}"


def baseline_entry(env_summary: dict[str, Any]) -> dict[str, Any]:
    """The stored numbers of one env of a run's ``summary.json`` (:data:`BASELINE_KEYS`)."""
    return {key: env_summary[key] for key in BASELINE_KEYS}


def reference_runs(name: str, env_ids: Iterable[str] | None = None,
                   data: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(label, summary)`` pairs for ``--compare NAME``, restricted to ``env_ids`` (None: all).

    A paper column becomes a summary whose env entries carry ``success_rate`` (the published
    percentage / 100), ``episodes`` 256 (the paper's evaluation set), ``success_ci95`` None (not
    published) and ``published`` (the text as printed); a baseline keeps its own CI and counts.
    Columns with no number for any of ``env_ids`` are left out. Raises :class:`KeyError` for
    a name not in :data:`REFERENCE_NAMES`.
    """
    if name not in REFERENCE_NAMES:
        raise KeyError(name)
    data = data or load_reference()
    wanted = None if env_ids is None else list(env_ids)

    def keep(ids: Iterable[str]) -> list[str]:
        ids = list(ids)
        return ids if wanted is None else [e for e in wanted if e in ids]

    runs: list[tuple[str, dict[str, Any]]] = []
    if name in ("paper", "reference"):
        for col in data["paper_columns"]:
            ids = keep(col["success"])
            envs = {e: {"episodes": PAPER_N, "success_rate": paper_success(col["success"][e]), "success_ci95": None,
                        "published": col["success"][e], "source": col["source"]} for e in ids}
            if envs:
                runs.append((col["label"], {"agent": col["label"], "reference": "paper", "envs": envs}))
    for agent in BASELINE_AGENTS:
        if name in (agent, "reference"):
            per_id = data["baselines"]["agents"].get(agent, {})
            envs = {e: dict(per_id[e]) for e in keep(per_id)}
            if envs:
                label = f"{agent} (reference)"
                runs.append((label, {"agent": label, "reference": agent, "envs": envs}))
    return runs


# ---------------------------------------------------------------------------- markdown
def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: Iterable[int] = (0,)) -> str:
    """A Markdown table; the columns ``left`` align left, the others (numbers) right."""
    left = set(left)
    align = ["---" if i in left else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}"


def markdown_blocks(data: dict[str, Any]) -> dict[str, str]:
    """The generated parts of ``docs/reference-scores.md``, by block name.

    ``paper``: each published table (numbers as printed, with its source); ``compare``: the
    paper columns beside our expert / random per gym id; ``baselines``: expert and random per
    registered id with 95 % CI, mean return and turns, and the command that reproduces it.
    """
    parts = []
    for t in data["paper_tables"]:
        parts.append(f"**{t['source']}**: {t['title']} ({t['unit']}).\n\n"
                     + _md_table([t["row_header"]] + list(t["columns"]), [[r["label"]] + list(r["values"]) for r in t["rows"]]))
    paper = "\n\n".join(parts)

    agents = data["baselines"]["agents"]
    ids: list[str] = []
    for col in data["paper_columns"]:
        ids += [e for e in col["success"] if e not in ids]
    header = ["id"] + [c["label"] for c in data["paper_columns"]] + [f"{a} (ours)" for a in BASELINE_AGENTS]
    rows = []
    for env_id in ids:
        row = [f"`{env_id}`"] + [c["success"].get(env_id, "–") for c in data["paper_columns"]]
        row += [_pct(agents[a][env_id]["success_rate"], 2) if env_id in agents.get(a, {}) else "–" for a in BASELINE_AGENTS]
        rows.append(row)
    compare = _md_table(header, rows)

    all_ids: list[str] = []
    for ids_of in [agents.get(a, {}) for a in BASELINE_AGENTS] + [data["baselines"].get("no_expert", {})]:
        all_ids += [e for e in ids_of if e not in all_ids]
    rows = []
    for env_id in all_ids:
        for a in BASELINE_AGENTS:
            e = agents.get(a, {}).get(env_id)
            if e is None:
                why = data["baselines"].get("no_expert", {}).get(env_id) if a == "expert" else None
                rows.append([f"`{env_id}`", a, "–", "–", "–", "–", "–", f"no expert: {why}" if why else "not measured"])
                continue
            lo, hi = e["success_ci95"]
            rows.append([f"`{env_id}`", a, f"{e['successes']}/{e['episodes']}", _pct(e["success_rate"], 2),
                         f"{_pct(lo)}–{_pct(hi)}", f"{e['mean_return']:.3f}", f"{e['mean_turns']:.2f}",
                         f"`{reproduce_command(env_id, a)}`"])
    baselines = _md_table(["id", "agent", "successes", "success %", "95 % CI", "mean return", "mean turns",
                           "reproduce"], rows, left=(0, 1, 7))
    return {"paper": paper, "compare": compare, "baselines": baselines}


def replace_blocks(doc: str, blocks: dict[str, str]) -> str:
    """``doc`` with the text between ``<!-- BEGIN generated:NAME -->`` and ``<!-- END
    generated:NAME -->`` replaced by ``blocks[NAME]`` (each marker pair must be present once)."""
    for name, body in blocks.items():
        begin, end = f"<!-- BEGIN generated:{name} -->", f"<!-- END generated:{name} -->"
        if doc.count(begin) != 1 or doc.count(end) != 1 or doc.index(begin) > doc.index(end):
            raise ReferenceScoresError(f"the doc needs one {begin} ... {end} pair")
        head, rest = doc.split(begin)
        _, tail = rest.split(end)
        doc = f"{head}{begin}\n{body}\n{end}{tail}"
    return doc
