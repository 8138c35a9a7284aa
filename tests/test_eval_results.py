"""The evaluation harness in process: run directory, resume, errors apart, metrics, summary
schema, ``write_results``, the comparison table, and ``report.html`` in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from urllib.parse import quote

import gymnasium as gym
import numpy as np
import pytest

from ragen_envs.agents import Agent, AgentFatalError, AgentRequestError, make_agent
from ragen_envs.eval import (
    SUMMARY_SCHEMA_VERSION, evaluate, format_compare_table, read_episodes, run_episode, summarize,
    wilson_interval, write_results,
)
from ragen_envs.eval.frames import downscale, png_bytes, rgb_available
from ragen_envs.eval.harness import TooManyErrors
from ragen_envs.eval.store import RunLockedError, RunStore
from ragen_envs.protocol import Episode, Turn

SEEDS = list(range(123, 129))


def sequential(spec, env_id, seeds):
    env = gym.make(env_id)
    out = []
    for seed in seeds:
        agent = make_agent(spec, env=env, **({"seed": seed} if spec == "random" else {}))
        out.append(run_episode(env, agent, seed, env_id=env_id))
    env.close()
    return out


def strip_meta(ep: Episode) -> dict:
    d = ep.to_dict()
    d["meta"] = {}
    return json.loads(json.dumps(d))


# ----------------------------------------------------------------------------- harness
@pytest.mark.parametrize("spec", ["expert", "random"])
def test_concurrent_evaluate_equals_sequential_episodes(tmp_path, spec):
    envs = ["ragen/Sokoban-v0", "ragen/FrozenLake-v0", "ragen/Bandit-v0"]
    result = evaluate(spec, envs, SEEDS, tmp_path, concurrency=5, progress=False, frame_episodes=0)
    assert result.ran == 18 and result.skipped == 0
    got = {(e.env_id, e.seed): strip_meta(e) for e in read_episodes(tmp_path)}
    for env_id in envs:
        want = sequential(spec, env_id, SEEDS)
        assert [got[(env_id, e.seed)] for e in want] == [strip_meta(e) for e in want]
        expected = summarize(want)
        s = result.summary["envs"][env_id]
        for key, value in expected.items():
            assert s[key] == pytest.approx(value), key
        assert s["errors"] == 0 and s["missing"] == 0 and s["seeds_requested"] == 6


def test_resume_runs_only_the_missing_and_cuts_a_torn_line(tmp_path):
    first = evaluate("expert", ["ragen/Sokoban-v0"], SEEDS[:4], tmp_path, progress=False, frame_episodes=0)
    assert first.ran == 4
    path = tmp_path / "episodes.jsonl"
    before = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"env_id": "ragen/Sokoban-v0", "seed": 127, "tur')  # a line torn by a power loss
    again = evaluate("expert", ["ragen/Sokoban-v0"], SEEDS, tmp_path, progress=False, frame_episodes=0)
    assert again.ran == 2 and again.skipped == 4
    data = path.read_bytes()
    assert data.startswith(before) and data.count(b"\n") == 6
    assert [json.loads(line)["seed"] for line in data.splitlines()] == SEEDS
    done = evaluate("expert", ["ragen/Sokoban-v0"], SEEDS, tmp_path, progress=False, frame_episodes=0)
    assert done.ran == 0 and done.summary["envs"]["ragen/Sokoban-v0"]["episodes"] == 6
    # the summary covers the requested seeds only
    part = evaluate("expert", ["ragen/Sokoban-v0"], SEEDS[:2], tmp_path, progress=False, frame_episodes=0)
    assert part.summary["envs"]["ragen/Sokoban-v0"]["episodes"] == 2


def test_think_off_reaches_the_env_and_the_config(tmp_path):
    result = evaluate("expert", ["ragen/Sokoban-v0"], SEEDS[:2], tmp_path, env_kwargs={"think": False},
                      progress=False, frame_episodes=0)
    episodes = read_episodes(tmp_path)
    assert all(not e.think and e.turns[0].response.startswith("<answer>") for e in episodes)
    assert "<think>" not in episodes[0].turns[0].observation.split("Always output:")[1]
    assert json.loads((tmp_path / "config.json").read_text())["think"] is False
    assert result.summary["envs"]["ragen/Sokoban-v0"]["success_rate"] == 1.0


def test_one_writer_per_run_directory(tmp_path):
    with RunStore(tmp_path):
        with pytest.raises(RunLockedError, match="another process"):
            RunStore(tmp_path)
    RunStore(tmp_path).close()  # released


class Flaky(Agent):
    """Fails the seeds it is told to, else plays the expert."""

    name = "flaky"

    def __init__(self, env, seed, bad, exc):
        self.expert = make_agent("expert", env=env)
        self.fail = seed in bad
        self.exc = exc

    def act(self, messages):
        if self.fail:
            raise self.exc
        return self.expert.act(messages)


def test_errors_are_recorded_apart_and_retried(tmp_path):
    def broken(env, seed):
        return Flaky(env, seed, {124}, AgentRequestError("gave up after 6 attempts: 503")) if seed != 126 else \
            Flaky(env, seed, {126}, KeyError("bug"))

    result = evaluate(broken, ["ragen/Sokoban-v0"], SEEDS, tmp_path, progress=False, frame_episodes=0,
                      agent_name="flaky")
    s = result.summary["envs"]["ragen/Sokoban-v0"]
    assert result.errors == 2 and s["errors"] == 2 and s["error_seeds"] == [124, 126]
    assert s["episodes"] == 4 and s["success_rate"] == 1.0  # errors are not failures of the model
    assert "gave up" in s["error_reasons"]["124"] and "KeyError" in s["error_reasons"]["126"]
    records = [json.loads(x) for x in (tmp_path / "errors.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} == {"request", "exception"}
    assert "traceback" in next(r for r in records if r["kind"] == "exception")
    fixed = evaluate(lambda env, seed: make_agent("expert", env=env), ["ragen/Sokoban-v0"], SEEDS, tmp_path,
                     progress=False, frame_episodes=0, agent_name="flaky")
    assert fixed.ran == 2 and fixed.summary["envs"]["ragen/Sokoban-v0"]["errors"] == 0


def test_many_errors_in_a_row_stop_the_run(tmp_path):
    def dead(env, seed):
        return Flaky(env, seed, set(SEEDS), AgentRequestError("connection refused"))

    with pytest.raises(TooManyErrors, match="3 episodes in a row"):
        evaluate(dead, ["ragen/Sokoban-v0"], SEEDS, tmp_path, progress=False, stop_after_errors=3, concurrency=1)


def test_fatal_error_stops_at_once(tmp_path):
    calls = []

    def fatal(env, seed):
        calls.append(seed)
        return Flaky(env, seed, set(SEEDS), AgentFatalError("authentication failed"))

    with pytest.raises(AgentFatalError):
        evaluate(fatal, ["ragen/Sokoban-v0"], SEEDS, tmp_path, progress=False, concurrency=2)
    assert len(calls) <= 2 and not (tmp_path / "episodes.jsonl").exists()


# ----------------------------------------------------------------------------- metrics
def test_wilson_interval_known_values():
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0) and wilson_interval(0, 5)[0] == 0.0


def _usage_episode(seed, completions, prompts, source="api"):
    ep = sequential("expert", "ragen/FrozenLake-v0", [seed])[0]
    ep.meta["turns"] = [
        {"raw_response": t.response, "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
         "usage_source": source, "latency_s": 0.5, "attempts": 1, "finish_reason": "stop"}
        for t, c, p in zip(ep.turns, completions, prompts)
    ]
    return ep


def test_token_means_and_cost():
    a = _usage_episode(123, [10] * 5, [100] * 5)
    b = _usage_episode(124, [30] * 5, [200] * 5)
    s = summarize([a, b], prices=(2.0, 8.0))
    ta, tb = len(a.turns), len(b.turns)
    assert s["mean_response_tokens"] == pytest.approx((10 * ta + 30 * tb) / 2)  # per episode (reference)
    assert s["mean_response_tokens_per_turn"] == pytest.approx((10 * ta + 30 * tb) / (ta + tb))
    assert s["prompt_tokens"] == 100 * ta + 200 * tb and s["completion_tokens"] == 10 * ta + 30 * tb
    assert s["cost_usd"] == pytest.approx(s["prompt_tokens"] * 2e-6 + s["completion_tokens"] * 8e-6)
    assert s["token_count_source"] == "api" and s["mean_latency_s"] == pytest.approx(0.5)
    assert "mean_response_tokens" not in summarize(sequential("expert", "ragen/Bandit-v0", [123]))


def test_effective_and_valid_follow_the_reference():
    ep = Episode(env_id="x", seed=1, turns=[
        Turn("o", "r", 0.0, {"action_is_effective": True, "action_is_valid": True, "format_ok": True, "n_executed": 2}),
        Turn("o", "r", -0.1, {"action_is_effective": False, "action_is_valid": False, "format_ok": False, "n_executed": 0}),
        Turn("o", "r", 0.0, {"action_is_effective": False, "action_is_valid": True, "format_ok": True, "n_executed": 1}),
    ])
    s = summarize([ep])
    assert s["mean_action_is_effective"] == pytest.approx(1 / 3)
    assert s["mean_action_is_valid"] == pytest.approx(2 / 3)
    assert s["mean_format_error"] == pytest.approx(1 / 3) and s["mean_actions"] == 3


# ----------------------------------------------------------------------------- write_results
def test_write_results_contract(tmp_path):
    episodes = sequential("expert", "ragen/Sokoban-v0", SEEDS[:3]) + sequential("random", "ragen/Bandit-v0", SEEDS[:4])
    summary = write_results(tmp_path / "final", episodes, "trainer:step-200", extra={"step": 200})
    assert summary["schema_version"] == SUMMARY_SCHEMA_VERSION and summary["agent"] == "trainer:step-200"
    assert list(summary["envs"]) == ["ragen/Sokoban-v0", "ragen/Bandit-v0"]
    assert summary["envs"]["ragen/Bandit-v0"]["episodes"] == 4 and summary["config"]["step"] == 200
    on_disk = json.loads((tmp_path / "final" / "summary.json").read_text())
    assert on_disk["envs"] == json.loads(json.dumps(summary["envs"]))
    assert [strip_meta(e) for e in read_episodes(tmp_path / "final")] == [strip_meta(e) for e in episodes]
    assert (tmp_path / "final" / "report.html").stat().st_size > 1000


def test_compare_table_lines_up_runs():
    a = {"agent": "A", "envs": {"e1": summarize(sequential("expert", "ragen/Bandit-v0", SEEDS))}}
    b = {"agent": "B", "envs": {"e1": summarize(sequential("random", "ragen/Bandit-v0", SEEDS)), "e2": {"episodes": 0}}}
    text = format_compare_table([a, b], ["A", "B"])
    rows = text.splitlines()
    assert rows[0].split()[:3] == ["env", "A", "B"] and "diff (pp)" in rows[0]
    diff = 100 * (b["envs"]["e1"]["success_rate"] - a["envs"]["e1"]["success_rate"])
    assert rows[2].startswith("e1") and f"{diff:+.1f}" in rows[2] and "n=6" in rows[2]
    assert rows[3].startswith("e2") and rows[3].split()[1] == "-"


def test_png_encoder_round_trip():
    image = np.random.default_rng(0).integers(0, 256, size=(7, 5, 3), dtype=np.uint8)
    data = png_bytes(image)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    pil = pytest.importorskip("PIL.Image")
    import io

    assert np.array_equal(np.asarray(pil.open(io.BytesIO(data)).convert("RGB")), image)
    small = downscale(np.zeros((384, 384, 3), np.uint8), 240)
    assert small.shape == (192, 192, 3)


def test_report_is_self_contained(tmp_path):
    evaluate("expert", ["ragen/Sokoban-v0", "ragen/Bandit-v0"], SEEDS[:2], tmp_path, progress=False)
    page = (tmp_path / "report.html").read_text()
    assert "default-src 'none'" in page  # the page may not fetch anything
    assert not re.search(r"https?://", page)
    assert "<link" not in page and not re.search(r"<script[^>]+src=", page)
    assert all(src.startswith("data:") for src in re.findall(r'src="([^"]*)"', page))


# ----------------------------------------------------------------------------- Chromium
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium_dom(url: str, budget_ms: int = 5000) -> tuple[str, str]:
    """``--dump-dom`` of ``url`` after the page's scripts ran; returns (DOM, browser log)."""
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
            capture_output=True, text=True, timeout=120,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout, result.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_in_headless_chromium(tmp_path):
    base, other = tmp_path / "run", tmp_path / "other"
    envs = ["ragen/Sokoban-v0", "ragen/FrozenLake-v0", "ragen/Bandit-v0"]
    evaluate("random", envs, SEEDS[:3], other, progress=False, frame_episodes=0)
    from ragen_envs.eval import load_summary

    def flaky(env, seed):
        return Flaky(env, seed, {125} if env.spec.id == "ragen/Bandit-v0" else set(), AgentRequestError("HTTP 503"))

    evaluate(flaky, envs, SEEDS[:3], base, progress=False, agent_name="expert", frame_episodes=2,
             compare=[("random", load_summary(other))])
    page = base / "report.html"
    ep = next(e for e in read_episodes(base) if e.env_id == "ragen/Sokoban-v0" and e.seed == 124)

    dom, log = chromium_dom(page.as_uri() + "#env=" + quote("ragen/Sokoban-v0", safe="") + "&seed=124&turn=1")
    assert "CONSOLE" not in log, [line for line in log.splitlines() if "CONSOLE" in line]
    assert 'data-viewer-ready="1"' in dom
    table = re.search(r'<table id="summary-table">.*?</table>', dom, re.S).group(0)
    assert all(env_id in table for env_id in envs)
    assert '<svg id="success-chart"' in dom and '<table id="compare-table">' in dom
    assert '<table id="errors-table">' in dom and "HTTP 503" in dom
    header = re.search(r'<div id="episode-header">(.*?)</div>', dom, re.S).group(1)
    assert "ragen/Sokoban-v0, seed 124" in header
    box = re.search(r'<div id="turn-box">.*', dom, re.S).group(0)
    assert ep.turns[0].info["think"] in box and ep.turns[0].info["answer"] in box
    if rgb_available():
        assert re.search(r'<img[^>]+src="data:image/png;base64,', dom)  # the rendered frame
    else:
        assert '<pre class="grid" id="frame-text">' in dom

    # a seed past the frame budget shows the text grid; turn=end shows the final state
    dom, log = chromium_dom(page.as_uri() + "#env=" + quote("ragen/FrozenLake-v0", safe="") + "&seed=125&turn=end")
    assert "CONSOLE" not in log
    assert '<pre class="grid" id="frame-text">' in dom and '<div id="end-box">' in dom
    assert "ragen/FrozenLake-v0, seed 125" in dom
