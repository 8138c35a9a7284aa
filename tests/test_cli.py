"""The `ragen` command as a user runs it: real subprocesses, stdin through a pipe."""

from __future__ import annotations

import subprocess
import sys

import pytest

RAGEN = [sys.executable, "-m", "ragen_envs.cli"]


def _run(args, stdin: str = "", timeout: float = 60):
    return subprocess.run(RAGEN + args, input=stdin, capture_output=True, text=True, timeout=timeout)


def test_list_shows_every_id_with_budgets():
    import ragen_envs

    out = _run(["list"])
    assert out.returncode == 0
    for spec in ragen_envs.ENV_SPECS:
        assert spec.id in out.stdout
    assert "5 turns, 10 actions" in out.stdout


def test_play_through_a_pipe_solves_sokoban_123():
    out = _run(["play", "ragen/Sokoban-v0", "--seed", "123"], stdin="Down || Left\nUp\n")
    assert out.returncode == 0, out.stderr
    assert "Turn 1:" in out.stdout and "Turn 2:" in out.stdout
    assert "episode solved: success=True" in out.stdout
    assert "Traceback" not in out.stderr


def test_play_shows_penalties_and_quits_cleanly_on_eof():
    out = _run(["play", "ragen/FrozenLake-v0", "--raw"], stdin="no tags here\n")
    assert out.returncode == 0
    assert "penalty -0.10" in out.stdout
    assert out.stdout.rstrip().endswith("bye")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["play", "ragen/Nope-v0"], "unknown environment"),
        (["play", "ragen/Sokoban-v0", "--seed", "x"], "invalid int value"),
        (["play", "ragen/Sokoban-v0", "--seed", "-4"], "--seed"),
        (["play", "ragen/Sokoban-v0", "--env-kwarg", "max_turns=0"], "max_turns"),
        (["render", "ragen/Sokoban-v0", "--agent", "expert", "--out", "x.bmp"], "error"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_user_errors_are_one_line_and_nonzero(args, needle):
    out = _run(args)
    assert out.returncode != 0
    assert needle in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
