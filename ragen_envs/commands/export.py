"""``ragen export RUN_DIR [RUN_DIR ...] --out FILE.parquet|.jsonl``: episodes as a dataset.

Reads ``ragen eval`` run directories (``episodes.jsonl``) and ``ragen train`` run directories
whose rollouts were kept (``ragen train ... --set save_rollouts=true``: ``rollouts.jsonl``)
and writes one row per episode: the chat ``messages`` exactly as the model saw and wrote
them, per-turn ``rewards``, ``return``, ``success``, ``seed``, ``noise_seed``, ``env_id``,
``env_kwargs``, and for trainer rollouts and ``hf:`` agents with token history the
``token_ids`` and ``loss_mask`` (docs/training.md, "Trajectories as datasets"). The format
follows the file name: Parquet (``.parquet``) or JSON lines (``.jsonl``); both load with
``datasets.load_dataset`` and train with TRL's ``SFTTrainer`` or ``ragen sft --data FILE``.
An existing FILE is refused unless ``--overwrite`` is given; a FILE inside a run directory
being read (its ``episodes.jsonl``, a link to it, any new name there) is refused even
then, so an export never replaces or adds to the record a later ``ragen eval`` resumes
from. Lines that are not an episode (not JSON, an ``env_id`` that is not a string, a seed
outside ``[0, 2**32)``) are skipped and counted; text that UTF-8 cannot hold (a lone
surrogate) is written as U+FFFD and counted.

examples:
  ragen export runs/eval-gpt --out gpt.parquet
  ragen export runs/train --out rollouts.parquet --successful-only
  ragen export runs/a runs/b --out both.jsonl --env ragen/Sokoban-v0
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("export", help="write the episodes of eval or train runs as a dataset file (Parquet / JSONL)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="a ragen eval or ragen train run directory (or its .jsonl)")
    p.add_argument("--out", required=True, help="output file: .parquet or .jsonl")
    p.add_argument("--overwrite", action="store_true", help="replace --out when it exists")
    p.add_argument("--env", dest="env_id", help="only the episodes of this environment id")
    p.add_argument("--successful-only", action="store_true", help="only the episodes that succeeded")
    p.add_argument("--min-return", type=float, help="only the episodes whose return is at least this")
    p.add_argument("--kept-only", action="store_true",
                   help="train rollouts: only the groups the StarPO-S filter kept for the update")
    p.set_defaults(run=run)


_PROGRESS_FROM = 2000  # records; below this no progress line is drawn


def _count_lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
    return n


def output_clash(out: Path, records: Path) -> str | None:
    """Why ``out`` must not be written when ``records`` (a run's episodes.jsonl or
    rollouts.jsonl) is read, or None. Both are compared with symlinks resolved: ``out`` may
    not be the records file or lie anywhere in its run directory (where ``config.json`` and
    ``summary.json`` are read too, and a later ``ragen eval`` / ``ragen train --resume``
    reads and appends)."""
    try:
        real, run_dir = out.resolve(), records.parent.resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        return f"--out {out} cannot be resolved (a symlink loop?)"
    if real == records.resolve():
        return f"--out {out} is the file being exported ({records})"
    if real == run_dir or run_dir in real.parents:
        return f"--out {out} lies inside the run directory {records.parent} being read"
    return None


def run(args) -> int:
    from .._progress import Progress
    from ..cli import CLIError
    from ..eval.store import SkippedLines
    from ..trajectories import (
        DatasetError, check_suffix, locate_records, run_rows, select_rows, text_safe_rows, write_dataset,
    )

    out = Path(args.out)
    skipped = SkippedLines()
    try:
        located = [locate_records(Path(r)) for r in args.runs]
        for records, _ in located:  # before --overwrite is even looked at: an input is never replaced
            clash = output_clash(out, records)
            if clash:
                raise DatasetError(f"{clash}; write the dataset outside it")
        check_suffix(out)
        if out.exists() and not args.overwrite:
            raise DatasetError(f"{out} exists; pass --overwrite to replace it")
        total = sum(_count_lines(path) for path, _ in located)
        rows = []
        bar = Progress(total, "export") if total >= _PROGRESS_FROM else None  # small runs read in a blink
        try:
            for run_path in args.runs:
                rows += run_rows(run_path, progress=bar.update if bar else None, skipped=skipped)
        finally:
            if bar:
                bar.__exit__(None, None, None)
        read = len(rows)
        rows = select_rows(rows, env_id=args.env_id, successful_only=args.successful_only, min_return=args.min_return)
        if args.kept_only:
            rows = [r for r in rows if r["kept"]]
        if not rows:
            raise DatasetError(f"no episode of the {read} read passes the filters")
        rows, replaced = text_safe_rows(rows)
        write_dataset(rows, out, overwrite=args.overwrite)
    except DatasetError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"{exc.filename or out}: {exc.strerror or exc}") from None
    sources = sorted({r["source"] for r in rows})
    with_ids = sum(r["token_ids"] is not None for r in rows)
    notes = [str(skipped)] if skipped.count else []
    if replaced:
        notes.append(f"{replaced} string{'s' if replaced != 1 else ''} with lone surrogates written with U+FFFD")
    print(f"wrote {len(rows)} episodes ({' + '.join(sources)}; {sum(r['success'] for r in rows)} successful; "
          f"{with_ids} with token ids) of {read} read to {out}" + "".join(f"; {n}" for n in notes))
    return 0
