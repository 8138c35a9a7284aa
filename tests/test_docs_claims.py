"""What README.md and docs/*.md claim is what the code does (issue 43, item 6): the Python
examples print what their comments say, and the documented command chains run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_EXPECT = re.compile(r"^(?P<code>\s*print\(.*\))\s+#\s*(?P<want>.+)$")


def _blocks(path: Path, lang: str) -> list[str]:
    return [m.group(2) for m in _FENCE.finditer(path.read_text(encoding="utf-8")) if m.group(1) == lang]


def _examples() -> list[tuple[str, str, list[str]]]:
    """``(name, code, expected lines)`` of every Python block whose prints carry the expected
    output as a comment."""
    out = []
    for path in DOCS:
        for i, block in enumerate(_blocks(path, "python")):
            want = [m.group("want").strip() for line in block.splitlines() if (m := _EXPECT.match(line))]
            if want:
                out.append((f"{path.name}#{i}", block, want))
    return out


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("name,code,want", _examples(), ids=[e[0] for e in _examples()])
def test_python_examples_print_what_their_comments_say(name, code, want, tmp_path):
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == want, name


def test_there_are_examples_to_check():
    assert {name.split("#")[0] for name, _, _ in _examples()} >= {"README.md", "webshop.md"}


def _readme_commands() -> dict[str, str]:
    """docs/usage.md's ``ragen ...`` command lines (comments cut; the README's long command list
    moved there), keyed by their first words."""
    lines = {}
    for block in _blocks(ROOT / "docs" / "usage.md", "bash"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("ragen "):
                lines[line] = line
    return lines


def _ragen(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragen_envs.cli", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=300)


def test_the_readme_export_then_sft_chain_runs_on_its_own_eval_run(tmp_path):
    """docs/usage.md evaluates gpt-4o on two envs into runs/gpt4o, exports it and fine-tunes on the
    file: the same commands (the agent swapped for the expert, 2 seeds; sft stopped after
    resolving its data with --print-config) must run."""
    commands = _readme_commands()
    evals = [c for c in commands if c.startswith("ragen eval ") and "--out runs/gpt4o" in c]
    export = [c for c in commands if c.startswith("ragen export runs/gpt4o ")]
    sft = [c for c in commands if c.startswith("ragen sft ") and "--data gpt4o.parquet" in c]
    assert len(evals) == len(export) == len(sft) == 1, (evals, export, sft)
    eval_args = shlex.split(evals[0])[1:]
    i = eval_args.index("--agent")
    eval_args[i + 1] = "expert"
    res = _ragen([*eval_args, "--seeds", "2", "--quiet"], tmp_path)
    assert res.returncode == 0, res.stderr
    for command, extra in ((export[0], []), (sft[0], ["--print-config"])):
        res = _ragen([*shlex.split(command)[1:], *extra], tmp_path)
        assert res.returncode == 0, (command, res.stderr)
    assert "data: gpt4o.parquet" in res.stdout


def test_the_usage_doc_says_how_to_turn_on_tensorboard_and_wandb():
    """TensorBoard is off unless asked for (the README once said "when installed")."""
    from ragen_envs.starpo.config import StarPOConfig

    readme = " ".join((ROOT / "docs" / "usage.md").read_text().split())
    for name in ("tensorboard", "wandb"):
        assert getattr(StarPOConfig(), name) is False
        assert f"`--set {name}=true`" in readme, name
    assert "when installed" not in readme.split("metrics.jsonl")[1][:200]
