"""labs/transfer.py (paper Table 3's transfer rows): its table and argument checks, and
one real `ragen eval` round trip on a tiny model."""

from __future__ import annotations

import json

import pytest
from bench_loader import load_lab

@pytest.fixture(scope="module")
def transfer():
    return load_lab("transfer.py", "transfer_bench")


def test_table_pools_runs_and_pairs_seeds(transfer):
    env = "ragen/Bandit-v0"
    # label A: two runs (seeds 1-4 each), label B: two runs; pairs: run k of A with run k of B
    a = [{env: {1: True, 2: True, 3: False, 4: True}}, {env: {1: True, 2: False, 3: False, 4: False}}]
    b = [{env: {1: False, 2: True, 3: False, 4: False}}, {env: {1: True, 2: False, 3: True, 4: False}}]
    rows, numbers = transfer.table({"A": a, "B": b}, [env], "ragen/Bandit-v0")
    assert numbers[env]["A"]["success"] == pytest.approx(4 / 8) and numbers[env]["A"]["n"] == 8
    assert numbers[env]["B"]["success"] == pytest.approx(3 / 8)
    # discordant: run 0 seeds 1 and 4 only A; run 1 seed 3 only B -> 2 vs 1, exact two-sided p = 1
    assert numbers[env]["paired"]["only_a"] == 2 and numbers[env]["paired"]["only_b"] == 1
    assert numbers[env]["paired"]["mcnemar_p"] == pytest.approx(1.0)
    assert "100.00 / 81.25" in rows[-1]  # the paper's Bandit -> Bandit row
    assert rows[-1].startswith("| Bandit-v0 → Bandit-v0 | 50.0 % (4/8)")


def test_parse_models_names_what_is_wrong(transfer, tmp_path):
    with pytest.raises(ValueError, match="LABEL=DIR"):
        transfer.parse_models(["nolabel"])
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        transfer.parse_models([f"X={tmp_path}"])
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="twice"):
        transfer.parse_models([f"X={tmp_path}", f"X={tmp_path}"])
    assert transfer.parse_models([f"X={tmp_path},{tmp_path}"]) == {"X": [str(tmp_path), str(tmp_path)]}


def test_transfer_runs_ragen_eval_on_each_env(transfer, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ragen_envs.starpo.demo import QUICK, build_demo_model

    model = build_demo_model(tmp_path / "m", QUICK)
    out = tmp_path / "out"
    assert transfer.main(["--out", str(out), "--model", f"Tiny={model}", "--envs", "ragen/Bandit-v0",
                          "ragen/BanditRev-v0", "--seeds", "3"]) == 0
    result = json.loads((out / "transfer.json").read_text())
    assert set(result["results"]) == {"ragen/Bandit-v0", "ragen/BanditRev-v0"}
    assert all(v["Tiny"]["n"] == 3 for v in result["results"].values())
    assert (out / "transfer.md").read_text().count("\n") == 4  # header, rule, two envs


def test_transfer_reports_a_failed_eval_without_a_traceback(transfer, tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    code = transfer.main(["--out", str(tmp_path / "out"), "--model", f"X={tmp_path / 'm'}", "--envs", "ragen/Nope-v0"])
    err = capsys.readouterr().err
    assert code == 2 and "error: ragen eval of X" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "transfer.json").exists()
