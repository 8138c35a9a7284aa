"""Pair the final evaluations of Echo Trap lab runs (labs/echo_trap.py outputs) episode by
episode: for each lab after the first, success pooled over its runs' seeds and, against the
first on the same (training seed, eval seed) pairs, the exact McNemar test, the difference
with a seed-stratified bootstrap 95 % CI, and an exact sign-flip test over the per-seed
differences (the seeds as the unit: with n seeds its p-value is at least 2 / 2^n).

    python labs/paired_lab.py runs/filters/top_p runs/filters/top_k runs/filters/min_p runs/filters/snr
    python labs/paired_lab.py runs/ragen2_filter:starpo-s-grpo runs/ragen2_filter:starpo-s-grpo-ragen2

Each lab is a directory DIR holding runs/<variant>/seed<k>/eval/episodes.jsonl (the trainer's
closing ``ragen eval`` run) and metrics.jsonl, or DIR:VARIANT for one variant of a directory
with several; ``--variant`` picks the variant of the plain DIRs (default: the only one);
``--seeds`` keeps those training seeds only (the others' runs may be unfinished).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragen_envs.starpo.stats import bootstrap_diff_ci, mcnemar_exact, sign_flip_p  # noqa: E402


def split_lab(arg: str) -> tuple[Path, str | None]:
    """``DIR`` -> (DIR, None); ``DIR:VARIANT`` -> (DIR, VARIANT) (the last colon splits)."""
    head, sep, tail = arg.rpartition(":")
    if sep and head and tail and "/" not in tail:
        return Path(head), tail
    return Path(arg), None


def load(lab: Path, variant: str | None, seeds: set[int] | None = None) -> tuple[dict[tuple[int, int], bool], float]:
    """{(training seed, eval seed): success} over the lab's runs (those of ``seeds`` when given),
    and the mean kept fraction."""
    runs = lab / "runs"
    if not runs.is_dir():
        raise SystemExit(f"error: {lab} is not an echo_trap.py output directory (no {runs})")
    variants = sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []
    if variant is None:
        if len(variants) != 1:
            raise SystemExit(f"error: {lab} holds variants {variants or 'none'}; pick one with --variant or {lab}:VARIANT")
        variant = variants[0]
    out: dict[tuple[int, int], bool] = {}
    kept: list[float] = []
    for run in sorted((runs / variant).glob("seed*")):
        seed = int(run.name[len("seed"):])
        if seeds is not None and seed not in seeds:
            continue
        episodes = run / "eval" / "episodes.jsonl"
        if not episodes.is_file():
            raise SystemExit(f"error: {episodes} is missing (an unfinished run?)")
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


def paired(base: dict[tuple[int, int], bool], other: dict[tuple[int, int], bool]) -> dict:
    """``other`` against ``base`` on their (training seed, eval seed) pairs (the same set):
    only_base / only_other episode counts and McNemar's exact p; diff = mean(other - base)
    with its bootstrap CI resampling episodes within each training seed; per-seed success
    differences d_s and the exact sign-flip p over them."""
    keys = sorted(base)
    a = [float(base[k]) for k in keys]
    b = [float(other[k]) for k in keys]
    seeds = sorted({k[0] for k in keys})
    per_seed = {s: (sum(b[i] for i, k in enumerate(keys) if k[0] == s) - sum(a[i] for i, k in enumerate(keys) if k[0] == s))
                / sum(1 for k in keys if k[0] == s) for s in seeds}
    only_a = sum(x > y for x, y in zip(a, b))
    only_b = sum(y > x for x, y in zip(a, b))
    return {"only_base": only_a, "only_other": only_b, "mcnemar_p": mcnemar_exact(only_a, only_b) if only_a + only_b else 1.0,
            "diff": (sum(b) - sum(a)) / len(keys), "diff_ci": bootstrap_diff_ci(a, b, strata=[k[0] for k in keys]),
            "per_seed_diff": per_seed, "seed_sign_flip_p": sign_flip_p(list(per_seed.values()))}


def fmt_p(p: float) -> str:
    """A p-value to 2 significant digits; one that underflowed a double reads "< 1e-300"."""
    return "< 1e-300" if p < 1e-300 else f"{p:.2g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labs", nargs="+", help="lab output directories (DIR or DIR:VARIANT); the first is the baseline")
    ap.add_argument("--variant", default=None)
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="only these training seeds")
    args = ap.parse_args(argv)
    labs = [split_lab(x) for x in args.labs]
    seeds = set(args.seeds) if args.seeds else None
    loaded = [load(lab, variant or args.variant, seeds) for lab, variant in labs]
    base, _ = loaded[0]
    print("| lab | groups kept | success | per seed | only baseline / only this | McNemar p | diff [95 % CI] | seed sign-flip p |")
    print("|---|---:|---:|---|---|---:|---|---:|")
    for name, (d, kept) in zip(args.labs, loaded):
        if sorted(d) != sorted(base):
            raise SystemExit(f"error: {name} was evaluated on other (seed, eval seed) pairs than {args.labs[0]}")
        keys = sorted(d)
        seeds = sorted({k[0] for k in keys})
        per = " / ".join(f"{100 * sum(d[k] for k in keys if k[0] == s) / sum(1 for k in keys if k[0] == s):.1f}"
                         for s in seeds)
        if d is base:
            print(f"| {name} | {100 * kept:.1f} % | {100 * sum(d.values()) / len(d):.1f} % | {per} | — | — | — | — |")
            continue
        r = paired(base, d)
        print(f"| {name} | {100 * kept:.1f} % | {100 * sum(d.values()) / len(d):.1f} % | {per} | {r['only_base']} / "
              f"{r['only_other']} | {fmt_p(r['mcnemar_p'])} | {100 * r['diff']:+.1f} [{100 * r['diff_ci'][0]:+.1f}, "
              f"{100 * r['diff_ci'][1]:+.1f}] | {r['seed_sign_flip_p']:.2g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
