"""Hostile files and bodies (issue 43): every JSON read of text from outside the process
survives a 5,000-digit integer, 100,000-deep nesting, NaN and bytes that are not UTF-8 — a
line of a JSONL file is skipped and counted, a single-document file is one line of error,
never a traceback; `ragen export` never writes over what it reads; an unreachable remote
WebShop is one line; the `--out` refusals say what each command does."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from pathlib import Path

import pytest

from ragen_envs.cli import CLIError
from ragen_envs.cli import main as cli_main
from ragen_envs.protocol.jsonsafe import UntrustedJSONError, loads_untrusted

BIG_INT = "1" * 5000
DEEP = "[" * 100_000
HOSTILE_LINES = [BIG_INT, DEEP, '{"a": NaN}', '{"a": 1e999}', "[1, 2]"]
EXPERT_EVAL = ["eval", "ragen/Bandit-v0", "--agent", "expert", "--report-frames", "0"]


def _one_line_error(capsys, argv) -> str:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ the one parse
@pytest.mark.parametrize("text,reason", [(BIG_INT, "digits"), (DEEP, "depth"), (b'"\xff"', "encoding"),
                                         ("{", "syntax"), ('{"a": NaN}', "non-finite"), ("-Infinity", "non-finite"),
                                         ("1e999", "non-finite")])
def test_loads_untrusted_turns_every_failure_into_one_short_valueerror(text, reason):
    with pytest.raises(UntrustedJSONError) as info:
        loads_untrusted(text, allow_nan=False)
    assert isinstance(info.value, ValueError) and info.value.reason == reason
    assert "\n" not in str(info.value) and len(str(info.value)) < 120


def test_loads_untrusted_returns_what_json_returns():
    assert loads_untrusted(b'{"a": [1, 2.5, "\\u00e9"]}') == {"a": [1, 2.5, "é"]}
    assert loads_untrusted("1" * 4000) == int("1" * 4000)
    assert loads_untrusted("NaN") != loads_untrusted("NaN")  # allowed unless the caller refuses it


# ------------------------------------------------------------------ eval runs: read, resume, export
@pytest.fixture()
def hostile_run(tmp_path, capsys):
    """A 3-episode Bandit eval run whose episodes.jsonl then gets hostile lines: the five of
    HOSTILE_LINES, bytes that are not UTF-8, an env_id that is a list, a seed of 2**100, and one
    good episode (seed 999) whose final observation holds a lone surrogate."""
    run = tmp_path / "run"
    assert cli_main(EXPERT_EVAL + ["--seeds", "123..125", "--out", str(run), "--quiet"]) == 0
    capsys.readouterr()
    path = run / "episodes.jsonl"
    good = json.loads(path.read_text().splitlines()[0])
    lines = [*HOSTILE_LINES, json.dumps({**good, "env_id": ["ragen/Bandit-v0"]}), json.dumps({**good, "seed": 2**100})]
    surrogate = json.dumps({**good, "seed": 999, "final_observation": "a\ud800b"})  # JSON escape \ud800
    with open(path, "ab") as f:
        f.write("\n".join(lines).encode() + b"\n\xff\xfe\n" + surrogate.encode() + b"\n")
    return run, len(lines) + 1


def test_read_episodes_skips_and_counts_every_hostile_line(hostile_run):
    from ragen_envs.eval.store import SkippedLines, read_episodes

    run, bad = hostile_run
    skipped = SkippedLines()
    episodes = read_episodes(run, skipped)
    assert sorted(e.seed for e in episodes) == [123, 124, 125, 999]
    assert skipped.count == bad and "line 4: an integer of more than 4300 digits" in skipped.first


def test_eval_resumes_past_hostile_lines_and_says_how_many(hostile_run, capsys):
    run, bad = hostile_run
    assert cli_main(EXPERT_EVAL + ["--seeds", "123..125", "--out", str(run)]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and f"warning: {bad} unreadable lines skipped" in out.err
    assert "0 episodes played now, 3 resumed" in out.out


def test_export_skips_and_counts_and_writes_lone_surrogates_as_replacement(hostile_run, tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    run, bad = hostile_run
    out = tmp_path / "data.parquet"
    assert cli_main(["export", str(run), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"wrote 4 episodes" in said and f"{bad} unreadable lines skipped" in said
    assert "1 string with lone surrogates written with U+FFFD" in said
    rows = {r["seed"]: r for r in pq.read_table(out).to_pylist()}
    assert sorted(rows) == [123, 124, 125, 999] and rows[999]["final_observation"] == "a\ufffdb"


@pytest.mark.parametrize("target", ["episodes.jsonl", "config.json", "summary.json", "new.jsonl", "sub/x.parquet"])
def test_export_never_writes_into_the_run_it_reads(hostile_run, tmp_path, capsys, target):
    run, _ = hostile_run
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    link = tmp_path / "link.jsonl"
    link.symlink_to(run / target)
    for out, given in ((run / target, run), (link, run), (run / target, run / "episodes.jsonl")):
        err = _one_line_error(capsys, ["export", str(given), "--out", str(out), "--overwrite"])
        assert "being exported" in err or "inside the run directory" in err, err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert not (run / "new.jsonl").exists() and not (run / "sub").exists()


def test_export_of_a_run_with_only_hostile_records_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes.jsonl").write_text(
        "\n".join([BIG_INT, json.dumps({"env_id": ["x"], "seed": 1}), json.dumps({"env_id": "ragen/Bandit-v0",
                                                                                "seed": 2**100})]) + "\n")
    err = _one_line_error(capsys, ["export", str(run), "--out", str(tmp_path / "x.jsonl")])
    assert "holds no episode: 3 unreadable lines skipped" in err


def test_a_hostile_config_json_is_one_line_or_replaced(tmp_path, capsys):
    from ragen_envs.eval.harness import check_run_config
    from ragen_envs.eval.results import load_summary

    run = tmp_path / "run"
    assert cli_main(EXPERT_EVAL + ["--seeds", "123..123", "--out", str(run), "--quiet"]) == 0
    capsys.readouterr()
    (run / "summary.json").write_text(DEEP)
    assert load_summary(run)["totals"]["episodes"] == 1  # rebuilt from episodes.jsonl
    (run / "config.json").write_text(BIG_INT)
    assert check_run_config(run, {"agent": "expert"}) == {"agent": "expert"}
    err = _one_line_error(capsys, ["export", str(run), "--out", str(tmp_path / "x.jsonl")])
    assert "config.json: an integer of more than 4300 digits" in err
    (run / "config.json").write_text(json.dumps({"agent": ["a list"], "env_ids": []}))
    assert "agent must be a str" in _one_line_error(capsys, ["export", str(run), "--out", str(tmp_path / "x.jsonl")])


@pytest.mark.parametrize("line,match", [(BIG_INT, "line 2: an integer of more than 4300 digits"),
                                        (DEEP, "line 2: nested too deeply"),
                                        ('{"a": NaN}', "line 2: non-finite number NaN"),
                                        ("ENV_ID", "row 2: env_id must be a string, not a list"),
                                        ("KWARGS", "row 2: env_kwargs: nested too deeply")])
def test_read_dataset_names_the_hostile_line_in_one_line(tmp_path, line, match):
    from ragen_envs.trajectories import DatasetError, read_dataset

    row = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                        {"role": "assistant", "content": "a"}],
           "env_id": "ragen/Bandit-v0", "env_kwargs": "{}", "success": True, "return": 1.0}
    if line == "ENV_ID":
        line = json.dumps({**row, "env_id": ["ragen/Bandit-v0"]})
    elif line == "KWARGS":
        line = json.dumps({**row, "env_kwargs": DEEP})
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(row) + "\n" + line + "\n")
    with pytest.raises(DatasetError, match=match) as info:
        read_dataset(path)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ other files read
@pytest.mark.parametrize("name,text,match", [("c.json", BIG_INT, "more than 4300 digits"),
                                             ("c.json", DEEP, "nested too deeply"),
                                             ("c.json", '{"lr": NaN}', "non-finite"),
                                             ("c.yaml", "lr: " + BIG_INT, "4300 digits"),
                                             ("c.yaml", "[" * 3000, "nested too deeply"),
                                             ("c.yaml", b"lr: \xff", "not UTF-8")])
def test_config_files_are_one_line_errors(tmp_path, name, text, match):
    pytest.importorskip("yaml")
    from ragen_envs.commands.configfile import load_config_file

    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CLIError, match=f"--config {path}: .*{match}") as info:
        load_config_file(path)
    assert "\n" not in str(info.value)


def test_train_with_a_hostile_config_is_one_line(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(DEEP)
    err = _one_line_error(capsys, ["train", "ragen/Bandit-v0", "--config", str(path), "--out", str(tmp_path / "o")])
    assert "nested too deeply" in err and not (tmp_path / "o").exists()


def test_extra_body_is_one_line_error(tmp_path, capsys):
    for body, match in ((BIG_INT, "4300 digits"), (DEEP, "nested too deeply"), ('{"x": NaN}', "non-finite")):
        err = _one_line_error(capsys, ["eval", "ragen/Bandit-v0", "--agent", "openai:m", "--extra-body", body,
                                       "--out", str(tmp_path / "o")])
        assert "--extra-body" in err and match in err, err


def test_run_kind_file_and_protocol_settings_and_episode_prompts(tmp_path):
    from ragen_envs._rundir import run_kind
    from ragen_envs.integrations.episodes import PROMPT_TAG, parse_episode_prompt, spec_from_row
    from ragen_envs.lm.settings import SETTINGS_FILE, load_settings

    (tmp_path / ".ragen-run").write_text("[" * 4096)
    assert run_kind(tmp_path) == "unknown"
    (tmp_path / SETTINGS_FILE).write_text(DEEP)
    with pytest.raises(ValueError, match="unreadable protocol settings .nested too deeply"):
        load_settings(tmp_path)
    for spec in (DEEP, BIG_INT, json.dumps({"env_id": ["ragen/Bandit-v0"], "seed": 1}),
                 json.dumps({"env_id": "ragen/Bandit-v0", "seed": 1, "env_kwargs": [1]})):
        with pytest.raises(ValueError, match="malformed episode prompt"):
            parse_episode_prompt(PROMPT_TAG + spec)
    with pytest.raises(ValueError, match="malformed extra_info"):
        spec_from_row({"extra_info": {"env_id": "ragen/Bandit-v0", "seed": 1, "env_kwargs": DEEP}})


def test_metrics_and_checkpoint_manifest(tmp_path):
    from ragen_envs.starpo.diagnostics import read_metrics

    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n' + BIG_INT + "\n" + DEEP + '\n[1]\n{"step": 1}\n')
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 0}, {"step": 1}]
    pytest.importorskip("torch")
    from ragen_envs.starpo.checkpoint import MANIFEST, verify_checkpoint

    (tmp_path / "ck").mkdir()
    for text in (DEEP, BIG_INT):
        (tmp_path / "ck" / MANIFEST).write_text(text)
        assert verify_checkpoint(tmp_path / "ck").startswith(f"unreadable {MANIFEST}")


# ------------------------------------------------------------------ WebShop
@pytest.mark.parametrize("content,match", [(DEEP.encode(), "nested too deeply"),
                                           (BIG_INT.encode(), "more than 4300 digits"),
                                           # mtime=0: a stable test id (xdist's workers must collect the same ids)
                                           (gzip.compress(b'{"format": 1}', mtime=0)[:-9], "not a readable gzip file"),
                                           ("PRODUCTS", "does not hold valid products")],
                         ids=["deep", "big-int", "truncated-gzip", "no-products"])
def test_webshop_server_catalog_file_is_one_line(tmp_path, capsys, content, match):
    from ragen_envs.webshop.catalog import CATALOG_FORMAT

    if content == "PRODUCTS":
        content = json.dumps({"format": CATALOG_FORMAT, "products": [{"no": "title"}]}).encode()
    path = tmp_path / "catalog.json"
    path.write_bytes(content)
    err = _one_line_error(capsys, ["webshop-server", "--port", "0", "--catalog", str(path)])
    assert match in err, err


def test_webshop_real_data_files_are_one_line(tmp_path):
    from ragen_envs.webshop.engine import WebShopData

    (tmp_path / "items.json").write_text(DEEP)
    (tmp_path / "attrs.json").write_text("{}")
    with pytest.raises(ValueError, match="products file .* nested too deeply"):
        WebShopData.from_webshop_files(tmp_path / "items.json", tmp_path / "attrs.json")


def test_an_unreachable_remote_webshop_is_one_line(tmp_path, capsys):
    import gymnasium as gym

    from ragen_envs.webshop.remote import RemoteWebShopError

    url = f"http://127.0.0.1:{_free_port()}"  # nobody listens there
    kwargs = ["--env-kwarg", "backend=remote", "--env-kwarg", f"base_url={url}", "--env-kwarg", "retries=0"]
    for argv in (["eval", "ragen/WebShop-v0", "--agent", "random", "--seeds", "2", "--out", str(tmp_path / "o"),
                  *kwargs],
                 ["play", "ragen/WebShop-v0", *kwargs],
                 ["play", "ragen/WebShop-v0", *kwargs, "--env-kwarg", "num_goals=100"]):
        assert "cannot reach the WebShop server" in _one_line_error(capsys, argv)
    with pytest.raises(RemoteWebShopError, match="cannot reach"):  # still the documented type
        gym.make("ragen/WebShop-v0", backend="remote", base_url=url, retries=0)


def test_a_remote_webshop_that_does_not_speak_http_is_its_error(tmp_path):
    import gymnasium as gym

    from ragen_envs.webshop.remote import RemoteWebShopError

    srv = socket.create_server(("127.0.0.1", 0))

    def babble():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"garbage\r\n\r\n")

    threading.Thread(target=babble, daemon=True).start()
    try:
        with pytest.raises(RemoteWebShopError, match="BadStatusLine"):
            gym.make("ragen/WebShop-v0", backend="remote", base_url=f"http://127.0.0.1:{srv.getsockname()[1]}",
                     retries=0)
    finally:
        srv.close()


# ------------------------------------------------------------------ run directories
@pytest.mark.parametrize("kind,other,has_overwrite", [("train", "eval", True), ("sft", "eval", True),
                                                      ("eval", "train", False), ("demo", "train", False)])
def test_out_refusals_say_what_the_command_does(tmp_path, kind, other, has_overwrite):
    from ragen_envs._rundir import claim_run_dir

    claim_run_dir(tmp_path / "run", kind=other, resume=True)
    (tmp_path / "run" / "notes.txt").write_text("x")  # so that it is not an empty run
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    for out in (tmp_path / "run", tmp_path / "mine"):
        with pytest.raises(CLIError) as info:
            claim_run_dir(out, kind=kind, resume=kind in ("eval", "demo"))
        msg = str(info.value)
        assert ("--overwrite" in msg) == has_overwrite, msg
        assert " a eval" not in msg and " a sft" not in msg, msg
        if not has_overwrite:
            assert "nothing else is ever replaced or deleted" in msg, msg


def test_eval_into_a_train_run_does_not_mention_overwrite(tmp_path, capsys):
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "metrics.jsonl").write_text('{"step": 0}\n')
    err = _one_line_error(capsys, EXPERT_EVAL + ["--seeds", "2", "--out", str(tmp_path / "rl")])
    assert "not an eval run" in err and "--overwrite" not in err and "resumed" in err, err


# ------------------------------------------------------------------ OpenEnv
def test_openenv_http_bodies_with_nan_get_a_400_line():
    pytest.importorskip("openenv")
    from fastapi.testclient import TestClient

    from ragen_envs.integrations.openenv import create_ragen_app

    json_headers = {"content-type": "application/json"}
    with TestClient(create_ragen_app("ragen/Sokoban-v0"), raise_server_exceptions=False) as client:
        for route, body in [("/reset", '{"seed": NaN}'), ("/reset", '{"seed": 5, "max_turns": Infinity}'),
                            ("/reset", '{"seed": 1e999}'), ("/reset", '{"seed": ' + BIG_INT + "}"), ("/reset", DEEP),
                            ("/step", '{"action": {"reply": NaN}}'),
                            ("/step", '{"action": {"reply": "x"}, "timeout_s": -Infinity}')]:
            r = client.post(route, content=body, headers=json_headers)
            assert r.status_code == 400 and r.json()["detail"].startswith("request body: "), (route, body[:40], r.text)
            assert "\n" not in r.json()["detail"]
        assert client.post("/reset", content="{", headers=json_headers).status_code == 422  # FastAPI's own
        assert client.post("/reset", json={"seed": 5}).status_code == 200


@pytest.fixture(scope="module")
def openenv_url():
    """`ragen openenv-server ragen/Sokoban-v0` (its own uvicorn server) on a free port, in a thread."""
    pytest.importorskip("openenv")
    import asyncio
    import time

    from ragen_envs.commands.openenv_server import _serve, build_server

    server = build_server("ragen/Sokoban-v0", "127.0.0.1", 0, 4)
    sock = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=lambda: asyncio.run(_serve(server, sock)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


REFUSED_RESETS = [({"bogus": 1}, "unknown keyword"), ({"seed": -1}, "seed must be an integer"),
                  ({"seed": 2**40}, "seed must be an integer"), ({"seed": 1.5}, "seed must be an integer"),
                  ({"noise_seed": -3}, "noise_seed must be"), ({"max_turns": 1000}, "max_turns must be in"),
                  ({"render_mode": "human"}, "set by the server operator"),
                  ({"base_url": "http://x"}, "set by the server operator"),
                  ({"format_penalty": float("nan")}, "NaN"), ({"max_turns": 3, "nope": 1}, "unknown keyword")]


def test_openenv_refused_resets_keep_the_running_episode(openenv_url):
    from ragen_envs.envs.limits import OPERATOR_ONLY
    from ragen_envs.integrations.openenv import SERVER_ONLY_KWARGS, RagenAction, RagenEnvClient

    reply = RagenAction(reply="<think>t</think><answer>Up</answer>")
    with RagenEnvClient(base_url=openenv_url).sync() as client:
        for kwargs, match in REFUSED_RESETS:
            client.reset(seed=9)
            client.step(reply)
            with pytest.raises(RuntimeError, match=match) as info:
                client.reset(**{"seed": 9, **kwargs})
            if "unknown keyword" in match:
                accepted = str(info.value).split("accepted: ", 1)[1]
                assert not [k for k in OPERATOR_ONLY | SERVER_ONLY_KWARGS if repr(k) in accepted], accepted
            after = client.step(reply)  # the episode goes on: its second turn
            assert after.observation.info["turn"] == 2, (kwargs, after.observation.info)
            assert client.state().turn == 2
