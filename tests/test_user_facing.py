"""Small things a user meets: episodes.jsonl lines carry the outcome at top level, no .lock
after a clean exit, the report's tables fit the page, show – for checks an agent does not
produce, label the comparison's direction and offer CSV; `ragen play` shows the final state;
no SDL warnings in headless runs; the README's install from a checkout."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from ragen_envs.cli import main as cli_main
from ragen_envs.eval import evaluate, load_summary
from ragen_envs.eval.store import RunLockedError, RunStore, read_episodes
from ragen_envs.protocol import Episode

ROOT = Path(__file__).resolve().parents[1]
SEEDS = [123, 124, 125]


def test_episode_lines_carry_the_outcome_at_top_level_and_old_lines_still_read(tmp_path):
    evaluate("expert", ["ragen/Sokoban-v0", "ragen/FrozenLake-v0"], SEEDS, tmp_path, progress=False, frame_episodes=0)
    lines = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    episodes = read_episodes(tmp_path)
    assert len(lines) == len(episodes) == 6
    by_key = {(e.env_id, e.seed): e for e in episodes}
    for line in lines:
        ep = by_key[(line["env_id"], line["seed"])]
        assert line["success"] is ep.success and line["return"] == pytest.approx(ep.total_reward)
        assert line["num_turns"] == len(line["turns"]) == len(ep.turns)
        assert line["actions"] == [a for t in line["turns"] for a in t["info"]["actions"]]
        assert len(line["actions"]) == ep.num_actions
    assert any(line["success"] for line in lines) and any(not line["success"] for line in lines)  # lake slips
    ep = episodes[0]
    assert Episode.from_dict(ep.to_dict()) == ep  # the outcome keys are derived, not fields
    old = {k: v for k, v in ep.to_dict().items() if k not in ("success", "return", "num_turns", "actions")}
    assert Episode.from_dict(old) == ep  # files written before the outcome keys read the same
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "episodes.jsonl").write_text(json.dumps(old) + "\n")
    assert read_episodes(tmp_path / "old") == [ep]


def test_no_lock_file_after_a_clean_exit_and_the_lock_still_excludes(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["eval", "ragen/Bandit-v0", "--agent", "expert", "--seeds", "2", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert (out / "episodes.jsonl").exists() and not (out / ".lock").exists()
    first = RunStore(out)
    assert (out / ".lock").exists()
    with pytest.raises(RunLockedError):
        RunStore(out)
    first.close()
    assert not (out / ".lock").exists()
    with RunStore(out):  # the lock is taken again on a new file, and excludes again
        with pytest.raises(RunLockedError):
            RunStore(out)
    assert not (out / ".lock").exists()


# ----------------------------------------------------------------------------- report.html
def _csv_from_link(page: str, name: str) -> list[list[str]]:
    href = re.search(rf'<a class="csv" download="{name}" href="data:text/csv;charset=utf-8,([^"]*)"', page).group(1)
    return list(csv.reader(io.StringIO(unquote(href))))


def test_report_tables_fit_show_dashes_label_the_direction_and_offer_csv(tmp_path):
    envs = ["ragen/Sokoban-v0", "ragen/Bandit-v0"]
    evaluate("random", envs, SEEDS, tmp_path / "a", progress=False, frame_episodes=0)
    evaluate("expert", envs[:1], SEEDS, tmp_path / "b", progress=False, frame_episodes=0, agent_name="expert",
             compare=[("random", load_summary(tmp_path / "a"))], env_kwargs={"think": False})
    page = (tmp_path / "b" / "report.html").read_text()
    summary = load_summary(tmp_path / "b")
    # wide tables scroll inside their box instead of widening the page
    assert re.search(r'<div class="table-scroll"><table id="summary-table">', page)
    assert re.search(r'<div class="table-scroll"><table id="compare-table">', page)
    assert re.search(r"\.table-scroll \{[^}]*overflow-x: auto", page)
    # with think off no reply has a think text: the reasoning checks are "–", not 0
    s = summary["envs"]["ragen/Sokoban-v0"]
    assert s["reasoning_score"] is None and s["actions_agree"] is None
    table = re.search(r'<table id="summary-table">.*?</table>', page, re.S).group(0)
    row = re.search(r"<tr><td class=\"l\">ragen/Sokoban-v0</td>(.*?)</tr>", table).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    head = re.findall(r"<th>(.*?)</th>", table)
    assert cells[head.index("reasoning score") - 1] == "–" and cells[head.index("actions agree %") - 1] == "–"
    # the comparison says which way it subtracts, and the numbers follow it
    cmp_table = re.search(r'<table id="compare-table">.*?</table>', page, re.S).group(0)
    assert "random − expert (pp)" in cmp_table
    sok = re.search(r"<tr><td class=\"l\">ragen/Sokoban-v0</td>(.*?)</tr>", cmp_table).group(1)
    diff = float(re.findall(r"<td[^>]*>(.*?)</td>", sok)[-1])
    rand = load_summary(tmp_path / "a")["envs"]["ragen/Sokoban-v0"]["success_rate"]
    assert diff == pytest.approx(100 * (rand - s["success_rate"]), abs=0.05) and diff < 0
    # CSV of both tables, inside the self-contained page
    rows = _csv_from_link(page, "summary.csv")
    assert rows[0][:4] == ["env", "episodes", "successes", "success_rate"] and rows[1][0] == "ragen/Sokoban-v0"
    rec = dict(zip(rows[0], rows[1]))
    assert int(rec["episodes"]) == 3 and float(rec["success_rate"]) == s["success_rate"] and rec["reasoning_score"] == ""
    rows = _csv_from_link(page, "compare.csv")
    assert rows[0][0] == "env" and rows[0][-1] == "random − expert"
    rec = dict(zip(rows[0], rows[1]))
    assert float(rec["random − expert"]) == pytest.approx(rand - s["success_rate"])
    assert [r[0] for r in rows[1:]] == envs and rows[2][-1] == ""  # Bandit: only one run has it


def test_console_compare_table_names_the_direction(tmp_path):
    from ragen_envs.eval import format_compare_table

    evaluate("random", ["ragen/Sokoban-v0"], SEEDS, tmp_path / "a", progress=False, frame_episodes=0)
    evaluate("expert", ["ragen/Sokoban-v0"], SEEDS, tmp_path / "b", progress=False, frame_episodes=0)
    text = format_compare_table([load_summary(tmp_path / "b"), load_summary(tmp_path / "a")], ["expert", "random"])
    assert "random − expert" in text.splitlines()[0]


# ----------------------------------------------------------------------------- play, headless
def _ragen(args, stdin="", env=None):
    return subprocess.run([sys.executable, "-m", "ragen_envs.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env=env)


def test_play_shows_the_final_state():
    out = _ragen(["play", "ragen/Sokoban-v0", "--seed", "123"], stdin="Down || Left\nUp\n")
    assert out.returncode == 0, out.stderr
    final = out.stdout.split("[final state]\n", 1)[1]
    import gymnasium as gym

    env = gym.make("ragen/Sokoban-v0")
    env.reset(seed=123)
    env.step("<think></think><answer>Down || Left</answer>")
    assert env.step("<think></think><answer>Up</answer>")[4]["success"]
    assert final.startswith(env.unwrapped.state_text())  # the solved board, box on its target
    assert "episode solved" in final


def test_headless_rendering_prints_no_sdl_warnings(tmp_path):
    pytest.importorskip("pygame")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER")}
    code = ("import gymnasium as gym, ragen_envs\n"
            "e = gym.make('ragen/Sokoban-v0', render_mode='human'); e.reset(seed=1); e.step('<answer>Up</answer>'); e.close()\n"
            "e = gym.make('ragen/FrozenLake-v0', render_mode='rgb_array'); e.reset(seed=1); print(e.render().shape)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "XDG_RUNTIME_DIR" not in out.stderr and "ALSA" not in out.stderr, out.stderr
    gif = _ragen(["render", "ragen/Sokoban-v0", "--seed", "5", "--agent", "expert", "--out", str(tmp_path / "e.gif")],
                 env=env)
    assert gif.returncode == 0 and gif.stderr == "", gif.stderr


def test_docs_show_the_install_from_a_checkout_and_the_run_directory_files():
    readme = (ROOT / "docs" / "usage.md").read_text()
    assert 'pip install -e ".[all]"' in readme and "git clone" in readme
    training = (ROOT / "docs" / "training.md").read_text()
    for needle in ("model_init/", "--overwrite", "--print-config", "--profile", "tensorboard", "wandb", "null"):
        assert needle in training, needle
