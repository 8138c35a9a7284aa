"""The run directory on disk: ``episodes.jsonl``, ``errors.jsonl``, ``config.json``, a lock.

Crash safety: each finished episode is one ``os.write`` of one complete line to a file opened
with ``O_APPEND``, so a process killed at any moment (SIGKILL included) leaves every line
whole — the kernel completes or never starts the write. Only power loss can leave a torn
last line; :class:`RunStore` cuts it off when it opens the file again. Readers keep the first
record of each ``(env_id, seed)`` key, so a line is never counted twice, and skip every line
that is not an episode record (:func:`episode_from_record`: hostile or hand-edited text never
stops a reader), counting them in a :class:`SkippedLines` for the command to say. Other files
(``summary.json``, ``report.html``, ``config.json``) are written to a temporary name and
moved into place with ``os.replace``.

Nothing is written through a link: a symlink inside the directory that leads out of it is
refused when the store opens (:class:`~ragen_envs._fs.LinkOutError`), the appended files
and the lock are opened with ``O_NOFOLLOW``, and the replaced files are renamed over
(a link in their place is replaced, never followed).

Every record is made JSON-safe before it is written (``ragen_envs.protocol.jsonsafe``):
surrogate code points become U+FFFD, the agent's ``redact`` (API key -> ``***``) runs over
every string, and a record holding a non-finite number or a value JSON cannot hold raises
:class:`RecordError` instead of being written (the harness makes it that episode's error).
"""

from __future__ import annotations

import json
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .._fs import check_no_links_out, open_nofollow
from ..envs.base import check_seed
from ..protocol import Episode, json_safe, safe_text
from ..protocol.jsonsafe import UntrustedJSONError, loads_untrusted
from .metrics import episode_metrics, episode_usage

__all__ = [
    "EPISODES_FILE", "ERRORS_FILE", "CONFIG_FILE", "SUMMARY_FILE", "REPORT_FILE",
    "RecordError", "RunLockedError", "RunStore", "SkippedLines", "encode_record", "episode_from_record",
    "numbered_jsonl", "read_jsonl", "read_episodes", "read_errors", "write_atomic", "to_json",
]

EPISODES_FILE = "episodes.jsonl"
ERRORS_FILE = "errors.jsonl"
CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
LOCK_FILE = ".lock"


class RunLockedError(RuntimeError):
    """Another process is writing to the same run directory."""


class RecordError(ValueError):
    """A record that cannot be written as JSON (a non-finite number, a value JSON cannot hold)."""


def _json_default(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return item()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def to_json(data: Any, indent: int | None = None) -> str:
    """JSON text that encodes as UTF-8: NaN/inf raise ValueError; surrogate code points
    (which ``ensure_ascii=False`` leaves raw, inside strings only) become U+FFFD."""
    return safe_text(json.dumps(data, ensure_ascii=False, indent=indent, default=_json_default, allow_nan=False))


def encode_record(record: dict, redact: Callable[[str], str] | None = None) -> bytes:
    """One JSONL line (bytes) of ``record``, redacted and made JSON-safe; :class:`RecordError`
    when it cannot be written."""
    try:
        return (to_json(json_safe(record, redact)) + "\n").encode("utf-8")
    except (ValueError, TypeError, RecursionError) as exc:
        raise RecordError(f"the record cannot be written as JSON: {type(exc).__name__}: {exc}") from None


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # umask applies, as for open()
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@dataclass
class SkippedLines:
    """The lines a reader skipped: how many, and where and why the first one was, so a
    command can say it in one line (``str()``) instead of silently reading less."""

    count: int = 0
    first: str = ""

    def add(self, where: str, why: str) -> None:
        self.count += 1
        if not self.first:
            self.first = f"{where}: {why}"

    def __str__(self) -> str:
        return f"{self.count} unreadable line{'s' if self.count != 1 else ''} skipped (first: {self.first})"


def read_jsonl(path: str | Path, skipped: SkippedLines | None = None) -> Iterator[dict]:
    """The JSON objects of a JSONL file, skipping every line that is not one: a torn last
    line (power loss), text that is not JSON or does not parse safely (an integer of more
    than 4,300 digits, nesting too deep, NaN: ``loads_untrusted``), a JSON value that is
    not an object. Each skipped line is counted in ``skipped``; blank lines are not."""
    for _, obj in numbered_jsonl(path, skipped):
        yield obj


def numbered_jsonl(path: str | Path, skipped: SkippedLines | None = None) -> Iterator[tuple[int, dict]]:
    """:func:`read_jsonl` with each object's line number."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                if raw.strip() and skipped is not None:
                    skipped.add(f"{path} line {n}", "torn (no newline at the end)")
                return  # torn last line (power loss): ignored, and cut off by RunStore
            if not raw.strip():
                continue
            try:
                obj = loads_untrusted(raw, allow_nan=False)  # nothing we write holds NaN
            except UntrustedJSONError as exc:
                if skipped is not None:
                    skipped.add(f"{path} line {n}", str(exc))
                continue
            if isinstance(obj, dict):
                yield n, obj
            elif skipped is not None:
                skipped.add(f"{path} line {n}", f"a JSON {type(obj).__name__}, not an object")


_FIELD_TYPES = {"system_prompt": str, "think": bool, "turns": list, "final_observation": str, "terminated": bool,
                "truncated": bool, "meta": dict}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def episode_from_record(record: dict[str, Any], summarized: bool = True) -> Episode:
    """The :class:`Episode` of one ``episodes.jsonl`` record, checked so that everything
    that reads episodes (the summary, the report, ``ragen export``) can use it: ``env_id`` a
    string, ``seed`` / ``noise_seed`` integers in ``[0, 2**32)`` (as every env takes), each
    field of its type, rewards finite numbers, and (``summarized``) the per-episode metrics
    the summary computes computable and finite. ValueError (one line, naming the field)
    otherwise."""
    env_id = record.get("env_id")
    if not isinstance(env_id, str):
        raise ValueError(f"env_id must be a string, got a {type(env_id).__name__}")
    check_seed("seed", record.get("seed"))
    if record.get("noise_seed") is not None:
        check_seed("noise_seed", record["noise_seed"])
    for key, kind in _FIELD_TYPES.items():
        if key in record and not isinstance(record[key], kind):
            raise ValueError(f"{key} must be a {kind.__name__}, got a {type(record[key]).__name__}")
    for i, turn in enumerate(record.get("turns", [])):
        if not (isinstance(turn, dict) and type(turn.get("observation")) is str and type(turn.get("response")) is str
                and type(turn.get("info")) is dict and _is_number(turn.get("reward"))):
            raise ValueError(f"turn {i} must be {{observation: str, response: str, reward: a finite number, "
                             "info: object}")
    try:
        episode = Episode.from_dict(record)
        if summarized:  # what the summary computes of every episode (info and meta are free-form: probe them)
            numbers = [*episode_metrics(episode).values(), *episode_usage(episode).values(), episode.num_actions]
            episode.outcome()
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        raise ValueError(f"not an episode record ({type(exc).__name__}: {str(exc)[:120]})") from None
    if summarized and not all(map(math.isfinite, [v for v in numbers if type(v) is float])):
        raise ValueError("not an episode record (a metric is not a finite number)")
    return episode


def read_episodes(path: str | Path, skipped: SkippedLines | None = None) -> list[Episode]:
    """The episodes of ``episodes.jsonl`` (or a run directory), first record per
    (env_id, seed, noise_seed); lines that are not an episode record
    (:func:`episode_from_record`) are skipped and counted in ``skipped``."""
    path = Path(path)
    if path.is_dir():
        path = path / EPISODES_FILE
    seen: set[tuple[str, int, int | None]] = set()
    out = []
    for n, obj in numbered_jsonl(path, skipped):
        try:
            episode = episode_from_record(obj)
        except ValueError as exc:
            if skipped is not None:
                skipped.add(f"{path} line {n}", str(exc))
            continue
        key = (episode.env_id, episode.seed, episode.noise_seed)
        if key not in seen:
            seen.add(key)
            out.append(episode)
    return out


def read_errors(path: str | Path, skipped: SkippedLines | None = None) -> list[dict]:
    """The records of ``errors.jsonl`` (or a run directory's) whose ``env_id`` is a string
    and ``seed`` an integer (what the summary keys them by); others are skipped and counted."""
    path = Path(path)
    if path.is_dir():
        path = path / ERRORS_FILE
    out = []
    for n, obj in numbered_jsonl(path, skipped):
        seed = obj.get("seed")
        if isinstance(obj.get("env_id"), str) and isinstance(seed, int) and not isinstance(seed, bool):
            out.append(obj)
        elif skipped is not None:
            skipped.add(f"{path} line {n}", "env_id must be a string and seed an integer")
    return out


class RunStore:
    """Append-only writer of one run directory; holds an exclusive lock while open.

    The lock is ``flock`` on ``DIR/.lock``; :meth:`close` deletes the file while still
    holding the lock, so a clean exit leaves no ``.lock`` behind. A process that opened the
    file just before it was deleted notices (the path no longer names the inode it locked)
    and opens the new one, so two writers never both hold "the" lock.
    """

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        check_no_links_out(self.dir)  # LinkOutError: DIR/episodes.jsonl -> elsewhere is never appended to
        self._lock_fd: int | None = _acquire_lock(self.dir / LOCK_FILE, self.dir)
        self._fds: dict[str, int] = {}

    def _fd(self, name: str) -> int:
        if name not in self._fds:
            path = self.dir / name
            _cut_torn_tail(path)
            self._fds[name] = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fds[name]

    def _append(self, name: str, record: dict, redact: Callable[[str], str] | None = None) -> None:
        data = encode_record(record, redact)  # RecordError before anything is written
        fd = self._fd(name)
        written = os.write(fd, data)
        if written != len(data):  # only on a full disk: leave no half line behind
            os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - written)
            raise OSError(f"short write to {self.dir / name} (disk full?)")

    def append_episode(self, episode: Episode, redact: Callable[[str], str] | None = None) -> None:
        """Append one episode line; :class:`RecordError` (nothing written) when it cannot be
        JSON. ``redact`` runs over every string of the record (e.g. the agent's key redaction)."""
        self._append(EPISODES_FILE, episode.to_dict(), redact)

    def append_error(self, record: dict, redact: Callable[[str], str] | None = None) -> None:
        self._append(ERRORS_FILE, record, redact)

    def finished_keys(self, skipped: SkippedLines | None = None) -> set[tuple[str, int]]:
        """(env_id, seed) of the finished evaluation episodes (default noise); unreadable
        lines are counted in ``skipped`` (and played again)."""
        return {(e.env_id, e.seed) for e in read_episodes(self.dir / EPISODES_FILE, skipped) if e.noise_seed is None}

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        if self._lock_fd is not None:
            try:
                os.unlink(self.dir / LOCK_FILE)  # still locked: nobody else holds this file
            except OSError:
                pass
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _acquire_lock(path: Path, run_dir: Path) -> int:
    """An fd holding ``flock(LOCK_EX)`` on ``path``, which still names that file (see
    :class:`RunStore`); :class:`RunLockedError` when another process holds it."""
    while True:
        fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
            return fd
        except OSError:
            os.close(fd)
            raise RunLockedError(f"another process is writing to {run_dir} (wait for it, or use another --out)") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:  # deleted by the previous holder between our open and flock
            same = False
        if same:
            return fd
        os.close(fd)


def _cut_torn_tail(path: Path) -> None:
    """Truncate ``path`` after its last newline (drops a line torn by a power loss)."""
    if not os.path.lexists(path):
        return
    fd = open_nofollow(path, os.O_RDWR)
    size = os.fstat(fd).st_size
    if size == 0:
        os.close(fd)
        return
    with os.fdopen(fd, "rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        pos, chunk = size, 1 << 16
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            block = f.read(pos - start)
            i = block.rfind(b"\n")
            if i >= 0:
                f.truncate(start + i + 1)
                return
            pos = start
        f.truncate(0)


def write_episodes(path: str | Path, episodes: Iterable[Episode]) -> None:
    """Write a whole ``episodes.jsonl`` at once (atomically)."""
    write_atomic(path, "".join(to_json(e.to_dict()) + "\n" for e in episodes))
