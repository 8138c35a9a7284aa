"""Trajectories as datasets: the episodes of a ``ragen eval`` run (``episodes.jsonl``) or of a
``ragen train`` run's rollouts (``rollouts.jsonl``, written with ``save_rollouts``) as one
file that ``datasets.load_dataset("parquet" | "json", data_files=FILE)`` reads, TRL's
``SFTTrainer`` trains on as is (the conversational ``messages`` column), and
``ragen sft --data FILE`` trains from.

One row per episode (:data:`SCHEMA`; ``docs/integrations.md`` "Trajectories as datasets"):

- ``messages``: ``[system, user(obs_0), assistant(reply_0), user(obs_1), ...]`` with each text
  exactly as the model saw it (system prompt, observations) and wrote it (the reply the env
  received). The final observation, which no model saw, is ``final_observation``.
- ``history`` / ``history_replies``: how the model's earlier replies appeared in its later
  prompts. ``"as_written"`` (the trainer, and ``hf:`` agents with token history): the
  replies themselves; ``"reformatted"`` (API and other chat agents, as the reference does):
  each matched reply rewritten as ``<think>..</think><answer>..</answer>``. ``history_replies``
  holds those texts, so the exact prompt of every turn can be rebuilt.
- ``rewards`` (the env's step rewards, format penalties included), ``format_penalties``,
  ``return`` (their sum), ``success``, ``num_turns``, ``terminated``, ``truncated``.
- ``env_id``, ``env_kwargs`` (a JSON object as text: kwargs differ between runs, and a
  Parquet struct cannot be empty), ``seed``, ``noise_seed`` (null = the env's default noise),
  ``think``.
- ``source`` (``"eval"`` / ``"train"``), ``run`` (the run directory), ``agent`` (eval: the
  agent spec; train: the model the run started from),
  ``step``, ``group``, ``member``, ``kept`` (train: the rollout step, its group, and whether
  the StarPO-S filter kept the group for the update).
- ``token_ids`` and ``loss_mask``: the sequence token-in/token-out and 1 exactly on the
  model's own tokens, for trainer rollouts, the trainer's closing evaluation (``DIR/eval``)
  and ``hf:`` agents with token history (:func:`session_tokens`); null for API and other
  agents, whose ids are not known.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .eval.store import (
    CONFIG_FILE, EPISODES_FILE, SUMMARY_FILE, SkippedLines, encode_record, episode_from_record, numbered_jsonl,
)
from .protocol import Episode
from .protocol.jsonsafe import UntrustedJSONError, loads_untrusted, safe_text

__all__ = [
    "DATASET_SCHEMA_VERSION", "ROLLOUTS_FILE", "SUFFIXES", "COLUMNS", "REQUIRED_COLUMNS", "DatasetError",
    "arrow_schema", "check_suffix", "locate_records", "episode_row", "session_tokens", "rollout_record", "run_rows",
    "check_row", "text_safe_rows", "write_dataset", "read_dataset", "select_rows",
]

DATASET_SCHEMA_VERSION = 1
ROLLOUTS_FILE = "rollouts.jsonl"
SUFFIXES = (".parquet", ".jsonl")

# name -> arrow type name (see arrow_schema); the column order of the file
COLUMNS = {
    "messages": "messages", "env_id": "string", "env_kwargs": "string", "seed": "int64", "noise_seed": "int64",
    "think": "bool", "rewards": "list<double>", "format_penalties": "list<double>", "return": "double",
    "success": "bool", "num_turns": "int64", "terminated": "bool", "truncated": "bool",
    "final_observation": "string", "history": "string", "history_replies": "list<string>", "source": "string",
    "run": "string", "agent": "string", "step": "int64", "group": "int64", "member": "int64", "kept": "bool",
    "token_ids": "list<int64>", "loss_mask": "list<int8>", "schema_version": "int64",
}
# what ragen sft --data needs of a file written by anyone
REQUIRED_COLUMNS = ("messages", "env_id", "env_kwargs", "success", "return")


class DatasetError(ValueError):
    """An input that is not a trajectory run or dataset: one readable line."""


def arrow_schema():
    """The pyarrow schema of :data:`COLUMNS` (every column nullable)."""
    import pyarrow as pa

    types = {
        "string": pa.string(), "int64": pa.int64(), "bool": pa.bool_(), "double": pa.float64(),
        "list<double>": pa.list_(pa.float64()), "list<string>": pa.list_(pa.string()),
        "list<int64>": pa.list_(pa.int64()), "list<int8>": pa.list_(pa.int8()),
        "messages": pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
    }
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS.items()])


def episode_row(
    episode: Episode,
    *,
    env_kwargs: dict[str, Any],
    history: str,
    source: str,
    run: str = "",
    agent: str | None = None,
    step: int | None = None,
    group: int | None = None,
    member: int | None = None,
    kept: bool | None = None,
    token_ids: Sequence[int] | None = None,
    loss_mask: Sequence[int] | None = None,
    history_replies: Sequence[str] | None = None,
) -> dict[str, Any]:
    """One dataset row (:data:`COLUMNS`) of ``episode``. ``history`` is ``"as_written"`` or
    ``"reformatted"`` (module docstring); ``history_replies`` overrides the texts it implies
    (e.g. an ``hf:`` agent without prefill fed back its raw text, before the ``<think>``
    completion the env received)."""
    if history not in ("as_written", "reformatted"):
        raise ValueError(f"history must be 'as_written' or 'reformatted', got {history!r}")
    messages = episode.messages(reformat=False)
    replies = [m["content"] for m in episode.messages(reformat=history == "reformatted") if m["role"] == "assistant"]
    if history_replies is not None:
        if len(history_replies) != len(replies):
            raise ValueError(f"history_replies has {len(history_replies)} texts for {len(replies)} turns")
        replies = [str(r) for r in history_replies]
    if token_ids is not None and (loss_mask is None or len(loss_mask) != len(token_ids)):
        raise ValueError("token_ids and loss_mask must have the same length")
    return {
        "messages": messages, "env_id": episode.env_id,
        "env_kwargs": json.dumps(env_kwargs, sort_keys=True, ensure_ascii=False),
        "seed": int(episode.seed), "noise_seed": None if episode.noise_seed is None else int(episode.noise_seed),
        "think": bool(episode.think), "rewards": [float(t.reward) for t in episode.turns],
        "format_penalties": [t.format_penalty for t in episode.turns], "return": episode.total_reward,
        "success": episode.success, "num_turns": len(episode.turns), "terminated": bool(episode.terminated),
        "truncated": bool(episode.truncated), "final_observation": episode.final_observation,
        "history": history, "history_replies": replies, "source": source, "run": run, "agent": agent,
        "step": step, "group": group, "member": member, "kept": kept,
        "token_ids": None if token_ids is None else [int(x) for x in token_ids],
        "loss_mask": None if loss_mask is None else [int(x) for x in loss_mask],
        "schema_version": DATASET_SCHEMA_VERSION,
    }


def rollout_record(traj, step: int, kept: bool) -> dict[str, Any]:
    """The ``rollouts.jsonl`` line of one trainer :class:`~ragen_envs.starpo.rollout.Trajectory`
    (token ids, loss mask, turn ends and the text record). A windowed rollout
    (``context_window_mode`` other than ``full``) adds ``context_window`` (``{"mode",
    "max_context_window"}``) and ``window``: per turn t, ``[s, a, b, n]`` -- s the window's first
    turn; the prompt the policy was given is ``token_ids[0:b]`` when a = 0, else the fresh
    ``[system, user(the window's first user message)]`` encoding (``ChatFormat.first``) followed by
    ``token_ids[a:b]`` (a = b: nothing more, ``single_turn``); b is where reply t starts and n the
    prompt's length in tokens (docs/training.md). A ``full`` row is as before, without them."""
    record = {"step": int(step), "group": int(traj.group), "member": int(traj.member), "kept": bool(kept),
              "token_ids": list(traj.token_ids), "loss_mask": list(traj.loss_mask), "turn_ends": list(traj.turn_ends),
              "truncated_replies": int(traj.truncated_replies), "episode": traj.episode.to_dict()}
    windows = getattr(traj, "turn_windows", None)
    if windows:
        mode, k = traj.context_window
        record["context_window"] = {"mode": mode, "max_context_window": int(k)}
        record["window"] = [[int(x) for x in w] for w in windows]
    return record


# ---------------------------------------------------------------------- reading runs
def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = loads_untrusted(path.read_bytes())
    except UntrustedJSONError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    return data if isinstance(data, dict) else {}


# the config keys a run's rows are made from, and the types they must have (None allowed)
_CONFIG_TYPES = {"env_kwargs": dict, "think": bool, "agent": str, "agent_config": dict, "source": str, "model": str}


def _read_config(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.json``; for episodes written by :func:`ragen_envs.eval.write_results`
    (the trainer's closing evaluation), which has none, the config kept in ``summary.json``.
    :class:`DatasetError` when a key the rows are made from has the wrong type."""
    if (run_dir / CONFIG_FILE).is_file():
        path, config = run_dir / CONFIG_FILE, _read_json(run_dir / CONFIG_FILE)
    elif (run_dir / SUMMARY_FILE).is_file():
        path, summary = run_dir / SUMMARY_FILE, _read_json(run_dir / SUMMARY_FILE)
        config = summary.get("config") if isinstance(summary.get("config"), dict) else {}
        config = {"agent": summary.get("agent"), **config}
    else:
        return {}
    for key, kind in _CONFIG_TYPES.items():
        if config.get(key) is not None and not isinstance(config[key], kind):
            raise DatasetError(f"{path}: {key} must be a {kind.__name__}, not a {type(config[key]).__name__}")
    return config


def locate_records(path: Path) -> tuple[Path, str]:
    """``(records file, "eval" | "train")`` of a run directory or one of its files."""
    if not path.exists():
        raise DatasetError(f"{path} does not exist")
    if path.is_file():
        if path.name == ROLLOUTS_FILE:
            return path, "train"
        if path.suffix == ".jsonl":
            return path, "eval"
        raise DatasetError(f"{path} is neither a run directory nor an {EPISODES_FILE} / {ROLLOUTS_FILE} file")
    if (path / ROLLOUTS_FILE).is_file():
        return path / ROLLOUTS_FILE, "train"
    if (path / EPISODES_FILE).is_file():
        return path / EPISODES_FILE, "eval"
    hint = (f" (a ragen train run keeps its rollouts only with save_rollouts: true; its closing evaluation is "
            f"{path / 'eval'})") if (path / "metrics.jsonl").exists() else ""
    raise DatasetError(f"{path} holds no {EPISODES_FILE} (ragen eval) or {ROLLOUTS_FILE} (ragen train){hint}")


def _eval_history(config: dict[str, Any]) -> str:
    # hf: agents with token history and the trainer's closing evaluation feed replies back as sampled.
    # (An hf: turn cut at a --stop string ends its token history: the next prompt is the text
    # history rendered again, reformatted; such an episode has no token_ids in the export.)
    if (config.get("agent_config") or {}).get("history") == "tokens":
        return "as_written"
    if str(config.get("source", "")).startswith("ragen train"):
        return "as_written"
    return "reformatted"


def session_tokens(turn_records: Sequence[dict[str, Any]]) -> tuple[list[int], list[int]] | None:
    """``(token_ids, loss_mask)`` of an ``hf:`` agent's episode with token history, from the
    per-turn ``tokens`` records it leaves in ``episode.meta["turns"]`` (the ids each turn added
    and sampled): turn k adds its prompt increment (mask 0), the sampled reply (mask 1) and
    the end-of-turn token the history continues with (mask 1 only when that is the token the
    model sampled). None when a turn has no record or did not continue the history (then
    the prompt was rendered from text again and no single sequence holds the episode)."""
    ids: list[int] = []
    mask: list[int] = []
    for k, rec in enumerate(turn_records):
        tokens = rec.get("tokens") if isinstance(rec, dict) else None
        if not isinstance(tokens, dict) or bool(tokens.get("continued")) != (k > 0) or not tokens.get("sampled"):
            return None
        sampled, eot = [int(x) for x in tokens["sampled"]], int(tokens["eot_id"])
        stopped = rec.get("finish_reason") == "stop"
        body = sampled[:-1] if stopped else sampled
        ids += [int(x) for x in tokens["added"]] + body + [eot]
        mask += [0] * len(tokens["added"]) + [1] * len(body) + [int(stopped and sampled[-1] == eot)]
    return (ids, mask) if ids else None


def _env_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    kwargs = dict(config.get("env_kwargs") or {})
    if config.get("think") is not None:
        kwargs["think"] = bool(config["think"])
    return kwargs


def _eval_row(episode: Episode, config: dict[str, Any], history: str, env_kwargs: dict[str, Any], run: str) -> dict[str, Any]:
    """The dataset row of one episode of a ``ragen eval`` run (token ids where its records hold them)."""
    turn_records = episode.meta.get("turns") or []
    tokens = session_tokens(turn_records) if len(turn_records) == len(episode.turns) else None
    ids, mask = episode.meta.get("token_ids"), episode.meta.get("loss_mask")  # the trainer's closing eval
    if tokens is None and isinstance(ids, list) and isinstance(mask, list) and len(ids) == len(mask):
        tokens = (ids, mask)
    replies = None
    if tokens is not None and not (config.get("agent_config") or {}).get("prefill", True):
        replies = [r.get("raw_response", t.response) for r, t in zip(turn_records, episode.turns)]
    return episode_row(episode, env_kwargs=env_kwargs, history=history, source="eval", run=run,
                       agent=config.get("agent"), history_replies=replies,
                       token_ids=tokens[0] if tokens else None, loss_mask=tokens[1] if tokens else None)


def _train_row(obj: dict[str, Any], env_kwargs: dict[str, Any], run: str, start: str | None) -> dict[str, Any]:
    """The dataset row of one ``rollouts.jsonl`` record."""
    for key in ("step", "group", "member"):
        if not isinstance(obj.get(key), int) or isinstance(obj[key], bool):
            raise ValueError(f"{key} must be an integer")
    if not isinstance(obj.get("episode"), dict):
        raise ValueError("episode must be an object")
    return episode_row(episode_from_record(obj["episode"], summarized=False), env_kwargs=env_kwargs, history="as_written",
                       source="train", run=run, agent=start, step=obj["step"], group=obj["group"],
                       member=obj["member"], kept=bool(obj["kept"]), token_ids=obj["token_ids"],
                       loss_mask=obj["loss_mask"])


def run_rows(path: str | Path, progress: Callable[[int], None] | None = None,
             skipped: SkippedLines | None = None) -> list[dict[str, Any]]:
    """The dataset rows of one run: a ``ragen eval`` run directory (or its
    ``episodes.jsonl``), or a ``ragen train`` run directory with ``rollouts.jsonl``.

    Eval runs keep the first record of each (env, seed, noise seed), as the summary does;
    rollouts keep the last record of each (step, group, member) (a resumed run replays the
    steps after its checkpoint). A line that is not JSON, or a record that does not make a
    row (:func:`~ragen_envs.eval.store.episode_from_record`, :func:`check_row`: e.g. an
    ``env_id`` that is not a string, a seed outside ``[0, 2**32)``) is skipped and counted in
    ``skipped``. ``progress(n)`` is called per record read. Raises :class:`DatasetError` for
    anything that is not such a run, or one holding no episode."""
    path = Path(path)
    records, kind = locate_records(path)
    run_dir = records.parent
    config = _read_config(run_dir)
    mine = SkippedLines()
    rows: list[dict[str, Any]] = []
    if kind == "eval":
        history, env_kwargs = _eval_history(config), _env_kwargs(config)
        seen: set[tuple[str, int, int | None]] = set()
        for n, obj in numbered_jsonl(records, mine):
            if progress:
                progress(1)
            try:
                episode = episode_from_record(obj, summarized=False)  # check_row checks what a row holds
                key = (episode.env_id, episode.seed, episode.noise_seed)
                if key in seen:
                    continue
                row = check_row(_eval_row(episode, config, history, env_kwargs, str(run_dir)))
            except (TypeError, KeyError, ValueError, AttributeError, OverflowError) as exc:
                mine.add(f"{records} line {n}", str(exc)[:200])
                continue
            seen.add(key)
            rows.append(row)
    else:
        env_kwargs = dict(config.get("env_kwargs") or {})
        # the model the run started from (the rollouts of step k come from its k-th update)
        start = config.get("model") or (str(run_dir / "model_init") if (run_dir / "model_init").is_dir() else None)
        keyed: dict[tuple[int, int, int], dict[str, Any]] = {}
        for n, obj in numbered_jsonl(records, mine):
            if progress:
                progress(1)
            try:
                row = check_row(_train_row(obj, env_kwargs, str(run_dir), start))
            except (TypeError, KeyError, ValueError, AttributeError, OverflowError) as exc:
                mine.add(f"{records} line {n}", str(exc)[:200])
                continue
            keyed[(row["step"], row["group"], row["member"])] = row
        rows = [keyed[k] for k in sorted(keyed)]
    if skipped is not None and mine.count:
        skipped.count += mine.count
        skipped.first = skipped.first or mine.first
    if not rows:
        raise DatasetError(f"{records} holds no episode" + (f": {mine}" if mine.count else ""))
    return rows


def _ints_in(values: list, lo: int, hi: int) -> bool:
    """Every value an int (bools are not) in ``[lo, hi)``; min/max run in C (token ids: thousands a row)."""
    return not values or (all(type(v) is int for v in values) and lo <= min(values) and max(values) < hi)


def _finite_numbers(values: list) -> bool:
    return all(type(v) in (int, float) for v in values) and all(map(math.isfinite, values))


# column type -> whether a value (not None) fits it
_FITS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "int64": lambda v: type(v) is int and -(1 << 63) <= v < 1 << 63,
    "bool": lambda v: isinstance(v, bool),
    "double": lambda v: type(v) in (int, float) and math.isfinite(v),
    "list<double>": lambda v: isinstance(v, list) and _finite_numbers(v),
    "list<string>": lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
    "list<int64>": lambda v: isinstance(v, list) and _ints_in(v, -(1 << 63), 1 << 63),
    "list<int8>": lambda v: isinstance(v, list) and _ints_in(v, -128, 128),
    "messages": lambda v: isinstance(v, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in v),
}
_COLUMN_FITS = tuple((name, _FITS[kind], kind) for name, kind in COLUMNS.items())


def check_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` when each of its :data:`COLUMNS` is None or fits the column's Arrow type (an
    int64 in range, a finite double, a string, ...), so both formats can write it; else
    ValueError naming the column."""
    for name, fits, kind in _COLUMN_FITS:
        value = row.get(name)
        if value is not None and not fits(value):
            shown = repr(value)
            raise ValueError(f"{name} does not fit the column type {kind}: {shown[:60]}{'...' if len(shown) > 60 else ''}")
    return row


def _unsafe(text: Any) -> bool:
    """``text`` is a string that UTF-8 cannot encode (it holds a lone surrogate); ASCII, as
    almost every text here, is answered without a scan."""
    return isinstance(text, str) and not text.isascii() and safe_text(text) != text


def _safe_column(kind: str, value: Any) -> tuple[Any, int]:
    """``(value with its strings made UTF-8-encodable, how many changed)`` for a column of
    type ``kind`` (``string``, ``list<string>``, ``messages``); ``value`` itself when none did."""
    if kind == "string":
        return (safe_text(value), 1) if _unsafe(value) else (value, 0)
    if not isinstance(value, list):
        return value, 0
    if kind == "list<string>":
        n = sum(map(_unsafe, value))
        return ([safe_text(v) if isinstance(v, str) else v for v in value], n) if n else (value, 0)
    n = sum(_unsafe(v) for m in value if isinstance(m, dict) for v in m.values())  # messages
    if not n:
        return value, 0
    return [{k: safe_text(v) if isinstance(v, str) else v for k, v in m.items()} if isinstance(m, dict) else m
            for m in value], n


_TEXT_COLUMNS = tuple((name, kind) for name, kind in COLUMNS.items() if kind in ("string", "list<string>", "messages"))


def text_safe_rows(rows: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """``(rows, replaced)``: the rows with each lone surrogate code point in a string (which
    UTF-8, hence Parquet and JSON files, cannot hold; an episode file may carry one from a
    ``\\ud800`` escape) replaced by U+FFFD, and how many strings that changed."""
    out, replaced = [], 0
    for row in rows:
        changed = {}
        for name, kind in _TEXT_COLUMNS:
            safe, n = _safe_column(kind, row.get(name))
            if n:
                changed[name] = safe
                replaced += n
        out.append({**row, **changed} if changed else row)
    return out, replaced


# ---------------------------------------------------------------------- files
def check_suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DatasetError(f"{path}: the file name must end in {' or '.join(SUFFIXES)} (the format is read from it)")
    return suffix


def write_dataset(rows: Iterable[dict[str, Any]], out: str | Path, overwrite: bool = False) -> Path:
    """Write ``rows`` to ``out`` (``.parquet``: Arrow schema :func:`arrow_schema`; ``.jsonl``:
    one JSON object a line), through a temporary file; an existing ``out`` is refused
    unless ``overwrite``. A lone surrogate in a text is written as U+FFFD in both formats
    (:func:`text_safe_rows` says how many there were)."""
    out = Path(out)
    suffix = check_suffix(out)
    if out.is_dir():
        raise DatasetError(f"{out} is a directory; give a file name ending in {suffix}")
    if out.exists() and not overwrite:
        raise DatasetError(f"{out} exists; pass --overwrite to replace it")
    rows = list(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{os.getpid()}.tmp"
    try:
        if suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                table = pa.Table.from_pylist([{k: r.get(k) for k in COLUMNS} for r in rows], schema=arrow_schema())
            except UnicodeEncodeError:  # a lone surrogate (text_safe_rows not called first): U+FFFD, as in JSONL
                table = pa.Table.from_pylist([{k: r.get(k) for k in COLUMNS} for r in text_safe_rows(rows)[0]],
                                             schema=arrow_schema())
            pq.write_table(table, tmp)
        else:
            with open(tmp, "wb") as f:
                for r in rows:
                    f.write(encode_record({k: r.get(k) for k in COLUMNS}))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def read_dataset(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a trajectory dataset file (``.parquet`` or ``.jsonl``), checked for
    :data:`REQUIRED_COLUMNS` and well-formed ``messages``; :class:`DatasetError` otherwise."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path} does not exist")
    if path.is_dir():
        raise DatasetError(f"{path} is a directory; pass a dataset file (make one with `ragen export`)")
    suffix = check_suffix(path)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise DatasetError(f"{path} is not a Parquet file: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    else:
        rows = []
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    obj = loads_untrusted(raw, allow_nan=False)
                except UntrustedJSONError as exc:
                    raise DatasetError(f"{path} line {n}: {exc}") from None
                if not isinstance(obj, dict):
                    raise DatasetError(f"{path} line {n} is not a JSON object")
                rows.append(obj)
    if not rows:
        raise DatasetError(f"{path} holds no rows")
    for n, row in enumerate(rows, 1):
        missing = [c for c in REQUIRED_COLUMNS if c not in row]
        if missing:
            raise DatasetError(f"{path} row {n} lacks the column(s) {', '.join(missing)}: not a trajectory dataset "
                               "(make one with `ragen export`)")
        _check_messages(row["messages"], f"{path} row {n}")
        _check_required(row, f"{path} row {n}")
    return rows


def _check_required(row: dict[str, Any], where: str) -> None:
    """The :data:`REQUIRED_COLUMNS` other than ``messages`` hold what readers use them as:
    ``env_id`` a string, ``env_kwargs`` a JSON object (as text, or an object), ``return`` a
    finite number."""
    if not isinstance(row["env_id"], str):
        raise DatasetError(f"{where}: env_id must be a string, not a {type(row['env_id']).__name__}")
    kwargs = row["env_kwargs"]
    if isinstance(kwargs, str):
        try:
            kwargs = loads_untrusted(kwargs, allow_nan=False)
        except UntrustedJSONError as exc:
            raise DatasetError(f"{where}: env_kwargs: {exc}") from None
    if not isinstance(kwargs, dict):
        raise DatasetError(f"{where}: env_kwargs must be a JSON object")
    ret = row["return"]
    if not isinstance(ret, (int, float)) or isinstance(ret, bool) or not math.isfinite(ret):
        raise DatasetError(f"{where}: return must be a finite number")


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list) or len(messages) < 3:
        raise DatasetError(f"{where}: messages must be a list [system, user, assistant, ...]")
    for i, m in enumerate(messages):
        want = "system" if i == 0 else ("user" if i % 2 else "assistant")
        if not isinstance(m, dict) or m.get("role") != want or not isinstance(m.get("content"), str):
            raise DatasetError(f"{where}: message {i} must be {{'role': '{want}', 'content': str}}")


def select_rows(rows: Sequence[dict[str, Any]], *, env_id: str | None = None, successful_only: bool = False,
                min_return: float | None = None) -> list[dict[str, Any]]:
    """The rows of ``env_id`` (all when None), successful only, with ``return >= min_return``."""
    out = []
    for row in rows:
        if env_id is not None and row["env_id"] != env_id:
            continue
        if successful_only and not row["success"]:
            continue
        if min_return is not None and float(row["return"]) < min_return:
            continue
        out.append(row)
    return out
