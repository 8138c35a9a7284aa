"""benchmarks/bench_sft_step_ab.py refuses what is not a checkout or a model, in one line."""

from pathlib import Path

import pytest

from bench_loader import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
ab = load_benchmark("bench_sft_step_ab.py", "bench_sft_step_ab")


def test_a_directory_that_is_no_checkout_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        ab.main(["--a", str(tmp_path), "--b", str(ROOT), "--model", str(tmp_path)])
    assert exc.value.code == 2
    assert "is not a ragen-envs checkout" in capsys.readouterr().err


def test_a_model_directory_without_config_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        ab.main(["--a", str(ROOT), "--b", str(ROOT), "--model", str(tmp_path)])
    assert exc.value.code == 2
    assert "is not a model directory" in capsys.readouterr().err
