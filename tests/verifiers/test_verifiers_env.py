"""verifiers 0.4 (`verifiers.v1`) in .venv-verifiers (`make test-verifiers`), with verifiers' own
entry points against a local fake model server (tests/verifiers/fake_model.py) that answers with
scripted replies (the expert's, random well-formed ones, malformed ones):

- `vf-eval ragen-envs-verifiers ...` (flags, and `@ file.toml`) as a subprocess;
- the Python API it runs (`load_environment`, `env.serving()`, `env.run_slot`), as the docs show it.

Every request the model received equals the local replay's transcript of the same replies and
seeds (the server answers nothing else), each row's rollouts start from one initial state, and
each trace's messages, reward, per-turn rewards and success equal the local episode's.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import verifiers.v1 as vf
from pydantic import ValidationError

from fake_model import FakeModel, local_episode
from ragen_envs.integrations.verifiers import TASKSET_ID, RagenTasksetConfig, load_environment

VF_EVAL = str(Path(sys.executable).with_name("vf-eval"))


def _vf_eval(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """vf-eval with a fresh HOME (no Prime login, its cache in ``cwd``) and every HTTP(S) proxy
    pointed at a closed port, so a request for anything but the loopback fake would fail."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("PRIME_", "OPENAI_", "HTTP", "ALL_PROXY"))}
    dead = "http://127.0.0.1:9"
    env.update(HOME=str(cwd), RAGEN_FAKE_KEY="sk-fake", HTTP_PROXY=dead, HTTPS_PROXY=dead, ALL_PROXY=dead,
               NO_PROXY="127.0.0.1,localhost")
    return subprocess.run([VF_EVAL, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def _traces(out_dir: Path) -> list[dict]:
    (path,) = out_dir.glob("*/traces.jsonl")
    return [trace for line in path.read_text().splitlines() for trace in json.loads(line)["traces"]]


def _trace_messages(trace: dict) -> list[dict]:
    """The trace's one conversation, as role/content dicts (a sampled empty reply is stored
    without content; verifiers sends it back as "")."""
    return [{"role": n["message"]["role"], "content": n["message"].get("content") or ""} for n in trace["nodes"]]


def _check_run(model: FakeModel, traces: list[dict], episodes: dict, rollouts: int) -> None:
    assert not model.unmatched, f"{len(model.unmatched)} requests matched no local transcript"
    expected = {json.dumps(ep.transcript(t), sort_keys=True): rollouts for ep in episodes.values()
                for t in range(len(ep.replies))}
    assert model.request_counts() == expected  # every turn of every rollout, and nothing else
    assert all(set(body) == {"model", "messages"} for body in model.requests)
    assert len(traces) == rollouts * len(episodes)
    by_row: dict = {}
    for trace in traces:
        data = trace["task"]["data"]
        ep = episodes[(data["seed"], data.get("noise_seed"))]
        by_row.setdefault((ep.seed, ep.noise_seed), []).append(trace)
        assert trace["ok"], trace["errors"]
        assert (data["prompt"], data["system_prompt"]) == (ep.observations[0], ep.system_prompt)
        assert _trace_messages(trace) == ep.conversation
        record = trace["info"]["ragen"]
        assert record["rewards"] == ep.rewards
        assert record["format_ok"] == ep.format_ok
        assert (record["success"], record["terminated"], record["truncated"]) == (ep.success, ep.terminated, ep.truncated)
        assert record["final_observation"] == ep.observations[-1]
        assert record["ended_by"] == "env"
        assert trace["rewards"] == {"episode_return": {"score": ep.episode_return, "weight": 1.0}}
        assert trace["metrics"] == {"success": float(ep.success), "env_turns": float(len(ep.replies)),
                                    "format_errors": float(sum(not ok for ok in ep.format_ok))}
    assert sorted(len(group) for group in by_row.values()) == [rollouts] * len(episodes)


def test_vf_eval_cli_plays_the_protocol_on_sokoban(tmp_path):
    """Six Sokoban rows (3 expert, 1 random, 2 malformed), two rollouts each, through vf-eval's flags."""
    policies = {0: "expert", 1: "expert", 2: "expert", 3: "random", 4: "malformed", 5: "malformed"}
    episodes = {(s, None): local_episode("ragen/Sokoban-v0", s, None, p) for s, p in policies.items()}
    assert {ep.success for ep in episodes.values()} == {True, False}
    assert not all(all(ep.format_ok) for ep in episodes.values())
    with FakeModel(list(episodes.values())) as model:
        proc = _vf_eval([TASKSET_ID, "--env.taskset.env-id", "ragen/Sokoban-v0",
                         "--env.taskset.seeds", *map(str, policies), "-r", "2", "-m", "fake-model",
                         "--client.base-url", model.base_url, "--client.api-key-var", "RAGEN_FAKE_KEY",
                         "--no-push", "--no-rich", "-o", str(tmp_path / "out")], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _check_run(model, _traces(tmp_path / "out"), episodes, rollouts=2)


def test_vf_eval_toml_with_noise_seeds_and_env_kwargs(tmp_path):
    """FrozenLake (slippery) rows with noise seeds and a constructor keyword, from a TOML file."""
    seeds, noise = [0, 1, 2, 3], [1000, 1007, 1014, 1021]
    policies = ["expert", "expert", "random", "malformed"]
    kwargs = {"max_turns": 3}
    episodes = {(s, n): local_episode("ragen/FrozenLake-v0", s, n, p, kwargs) for s, n, p in zip(seeds, noise, policies)}
    assert max(len(ep.replies) for ep in episodes.values()) == 3  # the kwarg took effect
    with FakeModel(list(episodes.values())) as model:
        (tmp_path / "eval.toml").write_text(f"""\
model = "fake-model"
num_rollouts = 2
push = false
output_dir = "{tmp_path / 'out'}"

[client]
base_url = "{model.base_url}"
api_key_var = "RAGEN_FAKE_KEY"

[env.taskset]
id = "{TASKSET_ID}"
env_id = "ragen/FrozenLake-v0"
seeds = {seeds}
noise_seeds = {noise}
env_kwargs = {{ max_turns = 3 }}
""")
        proc = _vf_eval(["@", str(tmp_path / "eval.toml"), "--no-rich"], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _check_run(model, _traces(tmp_path / "out"), episodes, rollouts=2)


def test_python_api_snippet_on_webshop_and_a_verifiers_turn_limit():
    """The docs' Python snippet (WebShop, expert, groups of 2); then a verifiers turn limit
    that ends episodes before the env does: the reward is the return of the turns played."""
    seeds = [0, 1]
    episodes = {(s, None): local_episode("ragen/WebShop-v0", s, None, "expert") for s in seeds}
    short = {(s, None): local_episode("ragen/Sokoban-v0", s, None, "malformed") for s in (3, 6)}
    assert all(len(ep.replies) > 2 for ep in short.values())
    with FakeModel([*episodes.values(), *short.values()]) as model:
        # --- the snippet (docs/integrations.md) ---
        env = load_environment("ragen/WebShop-v0", seeds=[0, 1])
        ctx = vf.ModelContext(model="fake-model", client=vf.EvalClientConfig(base_url=model.base_url,
                                                                              api_key_var="RAGEN_FAKE_KEY"))

        async def evaluate(env, rollouts_per_row=2):
            async with env.serving():
                slots = [slot for task in env.taskset for slot in env.slots(task, rollouts_per_row)]
                return await asyncio.gather(*(env.run_slot(slot, ctx) for slot in slots))

        results = asyncio.run(evaluate(env))
        for episode in results:
            trace = episode.traces[0]
            print(trace.task.data.seed, trace.ok, trace.reward, trace.info["ragen"]["rewards"])
        # --- end of the snippet ---
        traces = [json.loads(e.traces[0].model_dump_json()) for e in results]
        _check_run(model, traces, episodes, rollouts=2)

        limited = load_environment("ragen/Sokoban-v0", seeds=[3, 6],
                                   player=vf.AgentConfig(runtime=vf.SubprocessConfig(), max_turns=2))
        for episode in asyncio.run(evaluate(limited, 1)):
            trace = episode.traces[0]
            ep = short[(trace.task.data.seed, None)]
            record = trace.info["ragen"]
            assert record["ended_by"] == "agent" and not record["terminated"] and not record["truncated"]
            assert record["rewards"] == ep.rewards[:2]
            assert trace.reward == sum(ep.rewards[:2])
            assert _trace_messages(json.loads(trace.model_dump_json())) == ep.transcript(1) + [
                {"role": "assistant", "content": ep.replies[1]}]
        assert not model.unmatched

        # a failed model call (the fake has no script for seed 9: HTTP 400) fails the trace,
        # ends the episode before any step, and the row reports no return
        (failed,) = asyncio.run(evaluate(load_environment("ragen/Sokoban-v0", seeds=[9]), 1))
        trace = failed.traces[0]
        assert not trace.ok and "400" in trace.errors[-1].message
        assert trace.info["ragen"]["ended_by"] == "agent" and trace.info["ragen"]["rewards"] == []
        assert len(model.unmatched) == 1


def test_taskset_config_refuses_bad_rows_up_front():
    with pytest.raises(ValidationError, match="unknown environment 'ragen/Nope-v0'"):
        RagenTasksetConfig(id=TASKSET_ID, env_id="ragen/Nope-v0")
    with pytest.raises(ValidationError, match="noise_seeds has 1 entries for 2 seeds"):
        RagenTasksetConfig(id=TASKSET_ID, env_id="ragen/FrozenLake-v0", seeds=[1, 2], noise_seeds=[3])
    with pytest.raises(ValidationError, match=r"seeds must be integers in \[0, 2\*\*32\)"):
        RagenTasksetConfig(id=TASKSET_ID, seeds=[-1])
    # the default rows are the 256 eval seeds, built lazily (-n 3 builds three)
    env = load_environment("ragen/Bandit-v0")
    tasks = list(env.taskset.take(3))
    assert [t.data.seed for t in tasks] == [123, 124, 125]
    assert all(t.data.prompt and t.data.system_prompt for t in tasks)
