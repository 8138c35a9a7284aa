"""Pair the final evaluations of Echo Trap lab runs (labs/echo_trap.py outputs) episode by
episode: for each lab directory after the first, success pooled over its runs' seeds and the
exact McNemar test against the first on the same (training seed, eval seed) pairs.

    python labs/paired_lab.py runs/filters/top_p runs/filters/top_k runs/filters/min_p runs/filters/snr

Each directory holds runs/<variant>/seed<k>/eval/episodes.jsonl (the trainer's closing
``ragen eval`` run) and metrics.jsonl; ``--variant`` picks the variant (default: the only one).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragen_envs.starpo.stats import mcnemar_exact  # noqa: E402


def load(lab: Path, variant: str | None) -> tuple[dict[tuple[int, int], bool], float]:
    """{(training seed, eval seed): success} over the lab's runs, and the mean kept fraction."""
    runs = lab / "runs"
    if not runs.is_dir():
        raise SystemExit(f"error: {lab} is not an echo_trap.py output directory (no {runs})")
    variants = sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []
    if variant is None:
        if len(variants) != 1:
            raise SystemExit(f"error: {lab} holds variants {variants or 'none'}; pick one with --variant")
        variant = variants[0]
    out: dict[tuple[int, int], bool] = {}
    kept: list[float] = []
    for run in sorted((runs / variant).glob("seed*")):
        episodes = run / "eval" / "episodes.jsonl"
        if not episodes.is_file():
            raise SystemExit(f"error: {episodes} is missing (an unfinished run?)")
        seed = int(run.name[len("seed"):])
        for line in episodes.read_text().splitlines():
            e = json.loads(line)
            out[(seed, int(e["seed"]))] = bool(e["success"])
        for line in (run / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line)
            if "rollout/kept_fraction" in row:
                kept.append(float(row["rollout/kept_fraction"]))
    if not out:
        raise SystemExit(f"error: no finished runs of {variant!r} in {lab}")
    return out, sum(kept) / len(kept) if kept else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labs", nargs="+", type=Path, help="lab output directories; the first is the baseline")
    ap.add_argument("--variant", default=None)
    args = ap.parse_args(argv)
    base, base_kept = load(args.labs[0], args.variant)
    print("| lab | groups kept | success | per seed | only baseline / only this | McNemar p |")
    print("|---|---:|---:|---|---|---:|")
    for lab in args.labs:
        d, kept = (base, base_kept) if lab == args.labs[0] else load(lab, args.variant)
        if sorted(d) != sorted(base):
            raise SystemExit(f"error: {lab} was evaluated on other (seed, eval seed) pairs than {args.labs[0]}")
        keys = sorted(d)
        seeds = sorted({k[0] for k in keys})
        per = " / ".join(f"{100 * sum(d[k] for k in keys if k[0] == s) / sum(1 for k in keys if k[0] == s):.1f}"
                         for s in seeds)
        a = sum(base[k] and not d[k] for k in keys)
        b = sum(d[k] and not base[k] for k in keys)
        p = mcnemar_exact(a, b) if a + b else 1.0
        print(f"| {lab} | {100 * kept:.1f} % | {100 * sum(d.values()) / len(d):.1f} % | {per} | {a} / {b} | {p:.2g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
