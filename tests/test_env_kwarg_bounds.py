"""Env kwargs from outside the code are bounded by the operator (issue 20, item 3): one table
(``ragen_envs.envs.limits``) for OpenEnv clients, ``--env-kwarg`` of the commands and config
files; a reset past its time budget, or whose client left, stops; SIGTERM stops the server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import ragen_envs
from ragen_envs.games.sokoban import generate_level_with_retry

try:  # imported this way so that the behaviour tests below also run (and fail) on a checkout without them
    from ragen_envs.envs.limits import (BOUNDED_BY_THE_ENV, DEFAULT_BOUNDS, OPERATOR_ONLY, accepted_kwargs, check_env_kwargs,
                                        parse_kwarg_limits)
    from ragen_envs.games.budget import WorkCancelled, check_budget, work_budget
except ImportError:  # pragma: no cover
    pass

HOSTILE = [({"dim_room": [60, 60], "num_boxes": 20}, "dim_room"), ({"search_depth": 10**7}, "search_depth"),
           ({"max_turns": 10**9}, "max_turns"), ({"num_boxes": 20}, "num_boxes"), ({"p": 0.01}, "p"),
           ({"max_actions": 10**12}, "max_actions"), ({"low_name": "x" * 10_000}, "low_name")]


HUGE = json.dumps({"type": "reset", "data": {"seed": 1, "dim_room": [60, 60], "num_boxes": 20}})


def test_every_keyword_of_every_env_is_bounded_somewhere():
    groups = (set(DEFAULT_BOUNDS), set(BOUNDED_BY_THE_ENV), set(OPERATOR_ONLY))
    assert not (groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2])
    for spec in ragen_envs.ENV_SPECS:
        loose = set(accepted_kwargs(spec.id)) - set().union(*groups)
        assert not loose, (spec.id, loose)  # a new keyword needs a bound (or a reason it needs none)
        check_env_kwargs(spec.kwargs)  # the registered defaults lie inside the bounds


@pytest.mark.parametrize("kwargs,name", HOSTILE)
def test_out_of_bounds_kwargs_are_one_line_errors_and_a_flag_widens_them(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}=.*--kwarg-limit {name}=(HIGH|LOW\.\.\d+)\)$"):
        check_env_kwargs(kwargs)
    wide = parse_kwarg_limits([f"{k}=0..1e12" for k in kwargs])
    check_env_kwargs(kwargs, wide)


def test_parse_kwarg_limits_refuses_nonsense():
    for bad in ["max_turns", "nope=3", "max_turns=abc", "max_turns=5..1", "p=nan"]:
        with pytest.raises(ValueError, match="--kwarg-limit"):
            parse_kwarg_limits([bad])
    assert parse_kwarg_limits(["max_turns=500"])["max_turns"] == (1, 500.0)


def test_a_budget_stops_level_generation_and_is_free_outside_one():
    start = time.monotonic()
    with pytest.raises(WorkCancelled, match="time budget of 0.3 s"), work_budget(0.3):
        generate_level_with_retry(1, rows=60, cols=60, num_boxes=20)
    assert time.monotonic() - start < 3.0
    gone = threading.Event()
    gone.set()
    with pytest.raises(WorkCancelled, match="cancelled"), work_budget(None, gone):
        generate_level_with_retry(1, rows=60, cols=60, num_boxes=20)
    check_budget()  # outside a budget: never raises
    a = generate_level_with_retry(5, rows=8, cols=8, num_boxes=2)
    with work_budget(30.0):
        b = generate_level_with_retry(5, rows=8, cols=8, num_boxes=2)
    assert (a.room_state == b.room_state).all()  # a budget changes no level


@pytest.mark.parametrize("command", [["eval", "ragen/Sokoban-v0", "--agent", "random", "--seeds", "1"],
                                     ["play", "ragen/Sokoban-v0"], ["openenv-server", "ragen/Sokoban-v0", "--port", "0"]])
def test_commands_refuse_unbounded_env_kwargs_in_one_line(command, capsys, tmp_path):
    from ragen_envs.cli import main

    extra = ["--out", str(tmp_path / "run")] if command[0] == "eval" else []
    assert main([*command, *extra, "--env-kwarg", "search_depth=10000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "search_depth" in err and "--kwarg-limit" in err, err
    assert not (tmp_path / "run").exists()


def test_openenv_client_resets_are_bounded():
    from fastapi.testclient import TestClient

    from ragen_envs.integrations.openenv import create_ragen_app

    with TestClient(create_ragen_app("ragen/Sokoban-v0")) as client:
        for kwargs, name in HOSTILE[:4]:
            answers: list = []  # on a thread: a server that takes the reset (main) would hang the test run
            t = threading.Thread(target=lambda: answers.append(client.post("/reset", json={"seed": 1, **kwargs})),
                                 daemon=True)
            t.start()
            t.join(timeout=20)
            assert answers, f"no answer in 20 s to a reset with {kwargs}"
            r = answers[0]
            assert r.status_code == 400 and r.json()["detail"].startswith(f"{name}="), r.json()
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {"seed": 1, "dim_room": [60, 60], "num_boxes": 20}})
            err = ws.receive_json()["data"]
            assert err["code"] == "EXECUTION_ERROR" and "dim_room" in err["message"]
            ws.send_json({"type": "reset", "data": {"seed": 1, "max_turns": 7}})  # within the bounds: served
            assert ws.receive_json()["data"]["observation"]["info"]["turns_left"] == 7


# ---------------------------------------------------------------------- a real server process
def _start(*args: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "ragen_envs.cli", "openenv-server", "ragen/Sokoban-v0", "--port", "0",
                          "--kwarg-limit", "dim_room=60", "--kwarg-limit", "num_boxes=20", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()
    m = re.search(r"on http://(127\.0\.0\.1:\d+)$", line.strip())
    if not m:
        p.kill()
        raise AssertionError((line, p.stderr.read()))
    return p, f"ws://{m.group(1)}/ws"


def _busy(pid: int, seconds: float = 2.0) -> float:
    """The largest share of samples over ``seconds`` in which one thread of the process is
    runnable (state R). A computation left running keeps its thread runnable all the time however
    loaded the machine is (its CPU time is not: on a machine shared with other jobs it may get a
    tenth of a core); the threads of an idle server wake briefly now and then."""
    samples = 0
    hits: dict[str, int] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                state = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            hits[tid] = hits.get(tid, 0) + (state == "R")
        samples += 1
        time.sleep(0.05)
    return max(hits.values(), default=0) / samples


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait()
    p.stdout.close()
    p.stderr.close()


def test_a_reset_past_its_budget_is_cancelled_and_the_session_goes_on():
    from fastapi.testclient import TestClient

    from ragen_envs.integrations.openenv import create_ragen_app

    wide = parse_kwarg_limits(["dim_room=60", "num_boxes=20"])
    with TestClient(create_ragen_app("ragen/Sokoban-v0", kwarg_bounds=wide, reset_timeout_s=1.0)) as client:
        with client.websocket_connect("/ws") as ws:
            start = time.monotonic()
            ws.send_text(HUGE)
            err = ws.receive_json()["data"]  # main: no answer in 120 s
            assert "reset budget of 1 s" in err["message"] and time.monotonic() - start < 6.0, err
            ws.send_json({"type": "step", "data": {"reply": "<answer>Up</answer>"}})
            assert "reset" in ws.receive_json()["data"]["message"]  # no half-built episode to step
            ws.send_json({"type": "reset", "data": {"seed": 1}})
            assert ws.receive_json()["type"] == "observation"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_departing_client_frees_its_reset_and_sigterm_stops_the_server_in_time():
    import websockets.sync.client as wsc

    p, url = _start("--reset-timeout", "600")
    try:
        with wsc.connect(url, open_timeout=10) as ws:
            ws.send(HUGE)
            time.sleep(0.5)
        # the client has left; its reset would run for hours (main: 10+ min of a core)
        time.sleep(1.0)
        assert _busy(p.pid) < 0.6  # main: the reset's thread is runnable in every sample
        with wsc.connect(url, open_timeout=10) as ws:  # a reset still running at SIGTERM
            ws.send(HUGE)
            time.sleep(0.5)
            start = time.monotonic()
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            # goal 2 s (uvicorn gives running tasks 1 s, then cancels them); loose for a loaded machine
            assert p.poll() is not None and time.monotonic() - start < 4.0, time.monotonic() - start
        assert "Traceback" not in p.stderr.read()
    finally:
        _stop(p)
