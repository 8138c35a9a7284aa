"""labs/paired_lab.py: pairing lab runs episode by episode (McNemar, bootstrap CI of the
difference, sign-flip over seeds), and DIR:VARIANT for one variant of a multi-variant lab."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_loader import load_lab


@pytest.fixture(scope="module")
def pl():
    return load_lab("paired_lab.py", "paired_lab_lab")


def _write_run(root: Path, variant: str, seed: int, successes: list[bool], kept: float) -> None:
    run = root / "runs" / variant / f"seed{seed}"
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "episodes.jsonl").write_text(
        "".join(json.dumps({"seed": 100 + i, "success": s}) + "\n" for i, s in enumerate(successes)))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "rollout/kept_fraction": kept}) + "\n")


def test_split_lab(pl):
    assert pl.split_lab("runs/x:starpo-s-grpo") == (Path("runs/x"), "starpo-s-grpo")
    assert pl.split_lab("runs/x") == (Path("runs/x"), None)
    assert pl.split_lab("a:b/c") == (Path("a:b/c"), None)  # a colon inside the path is not a variant


def test_fmt_p(pl):
    assert (pl.fmt_p(0.0), pl.fmt_p(0.25), pl.fmt_p(3.7e-214)) == ("< 1e-300", "0.25", "3.7e-214")


def test_paired_counts_diff_and_seed_sign_flip(pl):
    """base seed 0: 1000, seed 1: 1100; other seed 0: 1110, seed 1: 1110. Episodes: only other
    3, McNemar p = 2 x 0.5^3 = 0.25; diff = 3 / 8; per-seed differences +0.5, +0.25: of the
    4 sign patterns, 2 reach |sum| >= 0.75, so p = 0.5."""
    T, F = True, False
    base = {(0, 0): T, (0, 1): F, (0, 2): F, (0, 3): F, (1, 0): T, (1, 1): T, (1, 2): F, (1, 3): F}
    other = {(0, 0): T, (0, 1): T, (0, 2): T, (0, 3): F, (1, 0): T, (1, 1): T, (1, 2): T, (1, 3): F}
    r = pl.paired(base, other)
    assert (r["only_base"], r["only_other"]) == (0, 3)
    assert r["mcnemar_p"] == pytest.approx(0.25)
    assert r["diff"] == pytest.approx(0.375) and r["diff_ci"][0] <= 0.375 <= r["diff_ci"][1]
    assert r["per_seed_diff"] == {0: 0.5, 1: 0.25}
    assert r["seed_sign_flip_p"] == pytest.approx(0.5)


def test_variants_of_one_directory(pl, tmp_path, capsys):
    _write_run(tmp_path, "a", 0, [True, False, False, False], 0.25)
    _write_run(tmp_path, "b", 0, [True, True, True, False], 0.5)
    assert pl.main([f"{tmp_path}:a", f"{tmp_path}:b"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[2].startswith(f"| {tmp_path}:a | 25.0 % | 25.0 % |")
    assert rows[3].startswith(f"| {tmp_path}:b | 50.0 % | 75.0 % | 75.0 | 0 / 2 | 0.5 | +50.0 [")
    with pytest.raises(SystemExit, match=r"holds variants \['a', 'b'\]; pick one"):
        pl.main([str(tmp_path)])
    # --seeds: an unfinished run of another seed (no eval yet) is left out, not an error
    (tmp_path / "runs" / "a" / "seed1").mkdir()
    with pytest.raises(SystemExit, match="missing"):
        pl.main([f"{tmp_path}:a", f"{tmp_path}:b"])
    assert pl.main([f"{tmp_path}:a", f"{tmp_path}:b", "--seeds", "0"]) == 0
