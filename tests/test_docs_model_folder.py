"""The ``hf:`` examples in ``ragen serve --help`` and docs/eval.md name folders a run really
writes (issue 43: ``hf:runs/train/final`` and ``openai:final`` were shown, but a run's model is
``DIR/model``), and the ``openai:NAME`` that follows a ``ragen serve hf:PATH`` example is a name
that server answers to."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragen_envs.cli import build_parser
from ragen_envs._rundir import WRITES
from ragen_envs.serve import served_name

ROOT = Path(__file__).resolve().parents[1]


def _serve_help() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices["serve"].format_help()


def _texts() -> dict[str, str]:
    return {"ragen serve --help": _serve_help(), "docs/eval.md": (ROOT / "docs" / "eval.md").read_text()}


# the folders a run of `ragen train` / `ragen sft` saves a loadable model into
MODEL_FOLDERS = {"model", "model_init"}


def test_the_model_folders_are_ones_train_and_sft_write():
    assert MODEL_FOLDERS <= WRITES["train"] and "model" in WRITES["sft"]


@pytest.mark.parametrize("where", ["ragen serve --help", "docs/eval.md"])
def test_documented_hf_run_paths_name_a_folder_the_run_writes(where):
    text = _texts()[where]
    paths = re.findall(r"hf:(runs/[\w./-]+)", text)
    assert paths, f"{where} has no hf:runs/... example any more"
    for path in paths:
        parts = path.rstrip(":.").split("/")
        run_dir, leaf = parts[1], parts[2] if len(parts) > 2 else ""
        if run_dir in ("demo",):  # a demo writes DIR/starpo/model and DIR/sft/model
            assert parts[-1] in MODEL_FOLDERS, path
            continue
        assert leaf in MODEL_FOLDERS or leaf == "checkpoints", (where, path)


@pytest.mark.parametrize("where", ["ragen serve --help", "docs/eval.md"])
def test_the_openai_name_after_a_serve_example_is_one_the_server_answers_to(where):
    text = _texts()[where]
    pairs = re.findall(r"ragen serve hf:(\S+).*?\n.*?--agent openai:(\S+) --base-url http://127\.0\.0\.1", text)
    assert pairs, f"{where}: no serve-then-eval example found"
    for path, name in pairs:
        answers = {served_name(path), Path(path).name, path, f"hf:{path}"}
        assert name in answers, (where, path, name, answers)
