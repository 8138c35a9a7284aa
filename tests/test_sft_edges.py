"""``ragen sft`` edges (issue 43): episodes longer than the model's context are skipped and
counted (a 1 MB message without being tokenized), ``--resume`` is a one-line ``ragen sft:``
error, the run ends with a held-out success line, and ``--out`` never swallows an input."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("torch")

import ragen_envs  # noqa: E402
from ragen_envs.cli import main as cli_main  # noqa: E402
from ragen_envs.starpo import sft as S  # noqa: E402

ENV = "ragen/Sokoban-v0"
KW = {"max_turns": 2}


def _one_line_error(capsys, argv, match):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    shown = [line.rsplit("\r", 1)[-1] for line in err.rstrip("\n").split("\n")]
    ours = [line for line in shown if line.startswith("ragen ")]
    assert len(ours) == 1 and ours[0] == shown[-1] and re.search(match, ours[0]), err
    assert "Traceback" not in err
    return ours[0]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """The rows of a ``ragen export`` of four expert episodes (Sokoban, 2 turns at most)."""
    from ragen_envs.agents import make_agent
    from ragen_envs.eval import evaluate

    root = tmp_path_factory.mktemp("data")
    evaluate(lambda env, seed: make_agent("expert", env=env), [ENV], [123, 124, 125, 126], root / "run",
             concurrency=1, env_kwargs=KW, progress=False)
    assert cli_main(["export", str(root / "run"), "--out", str(root / "data.jsonl")]) == 0
    return [json.loads(line) for line in (root / "data.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def model(tmp_path_factory, rows):
    """A tiny checkpoint whose context is twice the longest exported episode (expert replies of
    ``ragen sft`` are longer than the exported ones)."""
    from ragen_envs.lm.chat import ChatFormat
    from ragen_envs.models import build_tiny_model, build_tiny_tokenizer

    corpus = [m["content"] for r in rows for m in r["messages"]] + [r["final_observation"] for r in rows]
    tok = build_tiny_tokenizer(corpus, vocab_size=300, split_digits=True)
    fmt = ChatFormat(tok, "<think>")
    longest = max(len(S.message_trajectory(r["messages"], fmt).token_ids) for r in rows)
    path = tmp_path_factory.mktemp("model") / "tiny"
    tok.save_pretrained(path)
    build_tiny_model(tok, hidden_size=32, num_layers=1, intermediate_size=64,
                     max_position_embeddings=2 * longest).save_pretrained(path)
    return path, 2 * longest


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _write_json(path, data):
    path.write_text(json.dumps(data))
    return path


def _with_observation(row, text):
    """``row`` with its first observation replaced by ``text``."""
    row = json.loads(json.dumps(row))
    row["messages"][1]["content"] = text
    return row


def test_the_context_is_the_smaller_real_limit():
    from types import SimpleNamespace as NS

    assert S.model_context(NS(max_position_embeddings=4096), NS(model_max_length=int(1e30))) == 4096
    assert S.model_context(NS(max_position_embeddings=4096), NS(model_max_length=512)) == 512
    assert S.model_context(NS(), NS(model_max_length=2048)) == 2048
    assert S.model_context(NS(max_position_embeddings=None), NS(model_max_length=int(1e30))) is None


def test_min_tokens_never_exceeds_the_tokenizer(model):
    from ragen_envs.lm.chat import load_tokenizer

    tok = load_tokenizer(model[0])
    base, added = S.vocab_char_bounds(tok)
    assert "<|im_end|>" in added and base >= 1
    for text in ("", "Turn 1:\nState:\n#P_#\n", "ab" * 500, "0123456789" * 40, "<|im_end|>" * 30 + "x", "é√" * 50):
        assert S.min_tokens(text, base, added) <= len(tok(text, add_special_tokens=False)["input_ids"])
    assert S.min_tokens("ab" * 500_000, base, added) >= 1_000_000 // base


def test_episodes_longer_than_the_context_are_skipped_and_counted(rows, model, tmp_path, capsys, monkeypatch):
    path, context = model
    exact = _with_observation(rows[0], "0123456789" * (context // 5))  # > context tokens, under the char bound
    huge = _with_observation(rows[1], "ab" * 500_000)  # 1 MB: refused by the char bound alone
    data = _write(tmp_path / "d.jsonl", rows + [exact, huge])
    tokenized = []  # the rows that reach the tokenizer
    real = S.dataset_trajectories
    monkeypatch.setattr(S, "dataset_trajectories", lambda rs, *a, **k: (tokenized.extend(rs), real(rs, *a, **k))[1])
    argv = ["sft", "--data", str(data), "--model", str(path), "--steps", "1", "--batch-size", "2",
            "--config", str(_write_json(tmp_path / "cap.json", {"max_new_tokens": 8})), "--out", str(tmp_path / "out")]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert f"skipped 2 of 6 episodes longer than the model's context ({context} tokens)" in out
    assert "SFT data: 4 episodes" in out
    assert len(tokenized) == 5 and max(len(m["content"]) for r in tokenized for m in r["messages"]) < 10_000
    # none left: one line
    only_long = _write(tmp_path / "long.jsonl", [exact, huge])
    _one_line_error(capsys, argv[:2] + [str(only_long)] + argv[3:-1] + [str(tmp_path / "out2")],
                    rf"all 2 are longer than the model's context \({context} tokens\)")


def test_sft_resume_is_a_one_line_sft_error(capsys):
    for argv in (["sft", ENV, "--resume"], ["sft", ENV, "--out", "runs/x", "--resume", "runs/x"]):
        line = _one_line_error(capsys, argv, r"^ragen sft: error: sft has no --resume")
        assert "--overwrite" in line and "new --out" in line


def test_the_run_ends_with_the_held_out_success(model, tmp_path, capsys):
    """The layouts move past the training seeds (here 30000..30003) and the EVAL_SEEDS; the
    printed rate is the model's on those layouts at temperature 0.5."""
    from ragen_envs.lm.chat import ChatFormat, load_tokenizer
    from ragen_envs.lm.settings import load_settings
    from ragen_envs.starpo.policy import load_policy

    base = ["sft", ENV, "--model", str(model[0]), "--episodes", "4", "--seed-start", "30000", "--steps", "1",
            "--batch-size", "2", "--env-kwarg", "max_turns=2",
            "--config", str(_write_json(tmp_path / "cap.json", {"max_new_tokens": 8}))]  # short replies: a quick check
    assert cli_main(base + ["--heldout", "6", "--out", str(tmp_path / "a")]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "held-out success" in x]
    assert len(lines) == 1
    m = re.search(r"held-out success: ([0-9.]+) \((\d+) of 6 layouts, seeds 30004\.\.30009: no training seed, none of "
                  r"the 256 EVAL_SEEDS 123\.\.378; one episode each at temperature 0\.5", lines[0])
    assert m, lines[0]
    saved = tmp_path / "a" / "model"
    tok = load_tokenizer(saved)
    settings = load_settings(saved)
    again = S.validation_success(load_policy(saved, "cpu"), ChatFormat(tok, settings.reply_prefix), tok.pad_token_id,
                                 ENV, seed_start=30004, episodes=6, max_new_tokens=settings.max_new_tokens,
                                 env_kwargs=KW, temperature=settings.temperature)
    assert float(m.group(1)) == pytest.approx(again, abs=5e-4) and int(m.group(2)) == round(again * 6)
    assert set(range(30004, 30010)).isdisjoint(ragen_envs.EVAL_SEEDS)
    assert cli_main(base + ["--heldout", "0", "--out", str(tmp_path / "b")]) == 0
    assert "held-out" not in capsys.readouterr().out


def test_heldout_start_skips_the_taken_seeds():
    assert S.heldout_start(30000, 64, set(range(123, 379))) == 30000
    assert S.heldout_start(30000, 64, {29999, 30010, 30070}) == 30071
    assert S.heldout_start(100, 10, set(range(123, 379))) == 100
    assert S.heldout_start(120, 10, set(range(123, 379))) == 379


def test_out_never_swallows_an_input(rows, model, tmp_path, capsys):
    run = tmp_path / "run"
    _write(tmp_path / "seed.jsonl", rows)
    assert cli_main(["sft", "--data", str(tmp_path / "seed.jsonl"), "--model", str(model[0]), "--steps", "1",
                     "--batch-size", "2", "--config", str(_write_json(tmp_path / "cap.json", {"max_new_tokens": 8})),
                     "--out", str(run)]) == 0
    capsys.readouterr()
    inside = _write(run / "data.jsonl", rows)  # a run directory that now holds the dataset too
    before = sorted(p.name for p in run.iterdir())
    line = _one_line_error(capsys, ["sft", "--data", str(inside), "--model", str(model[0]), "--out", str(run),
                                    "--overwrite"], r"--data .*data\.jsonl lies inside --out")
    assert "--overwrite" in line and inside.read_text() and sorted(p.name for p in run.iterdir()) == before
    _one_line_error(capsys, ["sft", "--data", str(tmp_path / "seed.jsonl"), "--model", str(run / "model"),
                             "--out", str(run), "--overwrite"], r"--model .* lies inside --out")
    assert (run / "model" / "config.json").exists()


def test_the_tools_format_refuses_token_ids_before_claiming_out(rows, tmp_path, capsys):
    data = _write(tmp_path / "d.jsonl", rows)
    _one_line_error(capsys, ["sft", "--data", str(data), "--format", "tools", "--token-ids", "--out",
                             str(tmp_path / "out")], r"drop --token-ids to train the tools format")
    assert not (tmp_path / "out").exists()
