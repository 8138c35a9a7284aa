"""benchmarks/bench_sft_levers.py (and the timing process it shares with bench_omp_wait.py) runs
every row end to end at one step, and refuses a round count below one."""

import json

import pytest

from bench_loader import load_benchmark

pytest.importorskip("torch")
levers = load_benchmark("bench_sft_levers.py", "bench_sft_levers")


def test_every_lever_row_times_a_step(tmp_path, capsys):
    out = tmp_path / "levers.json"
    assert levers.main(["--rounds", "1", "--steps", "1", "--model-set", "num_layers=1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"flash", "math", "halves"}
    assert all(len(v) == 1 and v[0] > 0 for v in rows.values())
    assert "two 1-thread halves" in capsys.readouterr().out


def test_a_round_count_below_one_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        levers.main(["--rounds", "0"])
    assert exc.value.code == 2
    assert "--rounds and --steps must be >= 1" in capsys.readouterr().err
