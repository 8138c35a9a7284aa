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


def test_a_failing_timing_process_ends_the_command_in_one_line():
    """A shape the model cannot take fails in the timing process: the command exits 1 naming
    the child's error, without a traceback."""
    import subprocess
    import sys

    from bench_loader import BENCHMARKS

    proc = subprocess.run([sys.executable, str(BENCHMARKS / "bench_sft_levers.py"), "--rounds", "1", "--steps", "1",
                           "--model-set", "hidden_size=abc"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    assert "bench_sft_levers.py: error: a timing process failed (exit 1):" in proc.stderr
    assert "hidden_size" in proc.stderr and "Traceback" not in proc.stderr
