"""``ragen eval --context-window-mode``: every agent answers the trainer's window of the episode.

The windowed modes must give an agent, turn by turn, exactly
``ragen_envs.protocol.context.context_messages`` over the episode (the trainer's function), and
``full`` (the default) must stay what it was: the whole conversation. Checked with a scripted
agent that records what it is sent (in process), and with an ``openai:`` agent through the CLI
against a local server that logs the requests.
"""

from __future__ import annotations

import json
import threading

import gymnasium as gym
import pytest

from ragen_envs.agents import Agent
from ragen_envs.eval import evaluate, read_episodes
from ragen_envs.protocol.context import context_messages
from ragen_envs.protocol.episode import chat_messages, history_reply

SOKOBAN = {"max_turns": 4, "prompt_style": "minimal"}
# four turns that never solve the puzzle: moves, a wall bump, a format error, a move
REPLIES = ["<think>a</think> <answer>Left</answer>", "<think>b</think><answer>Up || Up</answer>",
           "<think>c</think>nothing", "<think>d</think><answer>Down</answer>"]
SEEDS = [5, 6]
WINDOWS = [("limited_multi_turn", 1), ("limited_multi_turn", 2), ("limited_multi_turn", -1),
           ("single_turn", 1), ("single_turn", 2), ("single_turn", -1)]


class Recorder(Agent):
    """Replies REPLIES in turn; keeps every message list it is sent (in ``seen[seed]``)."""

    name = "recorder"

    def __init__(self, seen: dict, seed: int) -> None:
        self.sent = seen.setdefault(seed, [])

    def act(self, messages):
        self.sent.append(json.loads(json.dumps(messages)))
        return REPLIES[(len(self.sent) - 1) % len(REPLIES)]


def _run(out, **kw):
    seen: dict[int, list] = {}
    result = evaluate(lambda env, seed: Recorder(seen, seed), ["ragen/Sokoban-v0"], SEEDS, out, concurrency=2,
                      progress=False, frame_episodes=0, env_kwargs=SOKOBAN, agent_name="recorder", **kw)
    episodes = {e.seed: e for e in read_episodes(out)}
    return result, seen, episodes


def _record(episode) -> dict:
    d = episode.to_dict()
    d["meta"].pop("elapsed_s")
    return d


def _window(episode, turn, mode, k):
    """The trainer's window of ``episode`` at ``turn``: its observations, replies written back."""
    obs = [t.observation for t in episode.turns]
    replies = [history_reply(t.response, t.info, episode.think) for t in episode.turns]
    return context_messages(obs, replies, turn, mode, k, episode.system_prompt)


def test_full_is_the_default_and_unchanged(tmp_path):
    """Default and explicit full: the whole conversation each turn (the formula eval always
    used: ``chat_messages`` of the observations so far and the replies written back), the same
    records, and no context_window key in config.json / summary.json (a full run's files as before)."""
    result, seen, episodes = _run(tmp_path / "default")
    explicit, seen2, episodes2 = _run(tmp_path / "full", context_window_mode="full", max_context_window=-1)
    assert seen == seen2 and {s: _record(e) for s, e in episodes.items()} == {s: _record(e) for s, e in episodes2.items()}
    for seed, ep in episodes.items():
        assert len(ep.turns) == 4 and len(seen[seed]) == 4
        obs = [t.observation for t in ep.turns]
        replies = [history_reply(t.response, t.info, ep.think) for t in ep.turns]
        for t, messages in enumerate(seen[seed]):
            assert messages == chat_messages(obs[: t + 1], replies[:t], ep.system_prompt)
            assert messages == _window(ep, t, "full", -1)
    for out in ("default", "full"):
        assert "context_window" not in json.loads((tmp_path / out / "config.json").read_text())
        assert "context_window" not in json.loads((tmp_path / out / "summary.json").read_text())["config"]
        assert "context window" not in (tmp_path / out / "report.html").read_text()


@pytest.mark.parametrize("mode,k", WINDOWS)
def test_each_mode_sends_the_trainers_window(tmp_path, mode, k):
    _, full_seen, full_eps = _run(tmp_path / "full")
    result, seen, episodes = _run(tmp_path / "w", context_window_mode=mode, max_context_window=k)
    assert result.ran == len(SEEDS)
    for seed, ep in episodes.items():
        # the same replies make the same episodes: the record does not depend on the window
        assert _record(ep) == _record(full_eps[seed])
        assert [m for m in seen[seed]] == [_window(ep, t, mode, k) for t in range(4)]
        # not vacuous: a real window differs from the whole conversation from some turn on
        differs = [m != f for m, f in zip(seen[seed], full_seen[seed])]
        assert any(differs) == (mode == "single_turn" or k != -1)
        if mode == "limited_multi_turn" and k == 2:
            assert differs == [False, False, True, True]  # the window drops turn 1 at turn 3
            assert [len(m) for m in seen[seed]] == [2, 4, 4, 4]
        if mode == "single_turn":
            assert all(len(m) == 2 for m in seen[seed])
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    assert config["context_window"] == {"mode": mode, "max_context_window": k}
    report = (tmp_path / "w" / "report.html").read_text()
    assert f"context window {mode}, K={k}" in report


def test_run_episode_takes_the_mode_too():
    from ragen_envs.eval import run_episode

    env = gym.make("ragen/Sokoban-v0", **SOKOBAN)
    try:
        seen: dict[int, list] = {}
        ep = run_episode(env, Recorder(seen, 5), 5, context_window_mode="single_turn", max_context_window=2)
        assert seen[5] == [_window(ep, t, "single_turn", 2) for t in range(4)]
        with pytest.raises(ValueError, match="max_context_window must be -1"):
            run_episode(env, Recorder({}, 5), 5, context_window_mode="single_turn", max_context_window=0)
    finally:
        env.close()


def test_resume_refuses_another_mode(tmp_path):
    from ragen_envs.eval.harness import RunConfigMismatch

    out = tmp_path / "run"
    evaluate("random", ["ragen/Sokoban-v0"], SEEDS[:1], out, progress=False, frame_episodes=0,
             context_window_mode="single_turn", max_context_window=2)
    again = evaluate("random", ["ragen/Sokoban-v0"], SEEDS, out, progress=False, frame_episodes=0,
                     context_window_mode="single_turn", max_context_window=2)
    assert again.skipped == 1 and again.ran == 1
    for kw, said in [({}, "context_window.mode: 'single_turn' there, 'full' now"),
                     ({"context_window_mode": "single_turn", "max_context_window": 3},
                      "context_window.max_context_window: 2 there, 3 now"),
                     ({"context_window_mode": "limited_multi_turn", "max_context_window": 2},
                      "context_window.mode: 'single_turn' there, 'limited_multi_turn' now")]:
        with pytest.raises(RunConfigMismatch, match="other settings") as err:
            evaluate("random", ["ragen/Sokoban-v0"], SEEDS, out, progress=False, frame_episodes=0, **kw)
        assert said in str(err.value) and "\n" not in str(err.value)
    # a full run (or one made before the modes existed) refuses a windowed resume
    full = tmp_path / "full"
    evaluate("random", ["ragen/Sokoban-v0"], SEEDS[:1], full, progress=False, frame_episodes=0)
    with pytest.raises(RunConfigMismatch, match="context_window.mode: 'full' there, 'limited_multi_turn' now"):
        evaluate("random", ["ragen/Sokoban-v0"], SEEDS, full, progress=False, frame_episodes=0,
                 context_window_mode="limited_multi_turn", max_context_window=1)


class _NoLayout(gym.Env):
    """A text env whose observations have no protocol turn block."""

    observation_space = gym.spaces.Text(100)
    action_space = gym.spaces.Text(100)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "pick a number", {"system_prompt": "s"}

    def step(self, action):
        return "done", 0.0, True, False, {}


def test_api_errors_are_one_line(tmp_path):
    if "test/NoLayout-v0" not in gym.registry:
        gym.register("test/NoLayout-v0", entry_point=_NoLayout, disable_env_checker=True)
    for kw, said in [({"context_window_mode": "sliding"}, "context_window_mode must be one of"),
                     ({"context_window_mode": "single_turn", "max_context_window": 0}, "max_context_window must be -1"),
                     ({"max_context_window": 2}, "max_context_window=2 needs context_window_mode"),
                     ({"context_window_mode": "single_turn", "image_obs": True}, "needs text observations")]:
        with pytest.raises(ValueError, match=said) as err:
            evaluate("random", ["ragen/Sokoban-v0"], SEEDS, tmp_path / "x", progress=False, **kw)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="test/NoLayout-v0's are not"):
        evaluate(lambda env, seed: Recorder({}, seed), ["test/NoLayout-v0"], SEEDS, tmp_path / "x", progress=False,
                 context_window_mode="limited_multi_turn", max_context_window=1)
    assert not (tmp_path / "x").exists()  # refused before the run directory is made


# ----------------------------------------------------------------------------- the CLI, an openai: agent
class _LoggingBackend:
    """An OpenAI-compatible backend that logs each request's messages and replies REPLIES by
    turn: the window hides earlier replies, so the turn is read from the state block's header."""

    model_name = "logger"

    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()

    def complete(self, request):
        import re

        from ragen_envs.serve import Completion

        with self.lock:
            self.requests.append(json.loads(json.dumps(request.messages)))
        turn = int(re.findall(r"Turn (\d+)\)?:\nState:", request.messages[-1]["content"])[-1])
        reply = REPLIES[turn - 1]
        return 10, [Completion(reply, "stop", 5)]


def _serve():
    from ragen_envs.serve import make_server, serve_in_thread

    backend = _LoggingBackend()
    server = make_server(backend, "127.0.0.1", 0)
    serve_in_thread(server)
    return server, backend, f"http://127.0.0.1:{server.server_port}/v1"


def _cli(url, out, *extra):
    from ragen_envs.cli import main

    return main(["eval", "ragen/Sokoban-v0", "--agent", "openai:logger", "--base-url", url, "--seeds", "5..6",
                 "--out", str(out), "--quiet", "--concurrency", "1", "--env-kwarg", "max_turns=4",
                 "--env-kwarg", "prompt_style=minimal", *extra])


def test_cli_openai_agent_gets_the_window_and_resume_is_checked(tmp_path, capsys, monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    server, backend, url = _serve()
    try:
        out = tmp_path / "run"
        assert _cli(url, out, "--context-window-mode", "limited_multi_turn", "--max-context-window", "2") == 0
        printed = capsys.readouterr()
        assert "context window limited_multi_turn, K=2" in printed.out
        assert "context window limited_multi_turn, K=2" in printed.err
        episodes = sorted(read_episodes(out), key=lambda e: e.seed)
        assert [len(e.turns) for e in episodes] == [4, 4]
        want = [_window(ep, t, "limited_multi_turn", 2) for ep in episodes for t in range(4)]
        assert backend.requests == want
        assert json.loads((out / "config.json").read_text())["context_window"] == {
            "mode": "limited_multi_turn", "max_context_window": 2}
        # resuming with the same flags: nothing to play; with another mode: one line, exit 2
        assert _cli(url, out, "--context-window-mode", "limited_multi_turn", "--max-context-window", "2") == 0
        assert len(backend.requests) == 8
        capsys.readouterr()
        assert _cli(url, out) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]  # after the "evaluating ..." line
        assert err.startswith("ragen eval: error:") and "context_window.mode: 'limited_multi_turn' there, 'full' now" in err
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("flags,said", [
    (["--context-window-mode", "sliding"], "argument --context-window-mode: invalid choice"),
    (["--context-window-mode", "single_turn", "--max-context-window", "0"], "max_context_window must be -1"),
    (["--context-window-mode", "limited_multi_turn", "--max-context-window", "-2"], "max_context_window must be -1"),
    (["--max-context-window", "3"], "max_context_window=3 needs context_window_mode"),
    (["--context-window-mode", "single_turn", "--image-obs"], "not with --image-obs"),
    (["--max-context-window", "x"], "invalid int value"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, flags, said):
    from ragen_envs.cli import main

    out = tmp_path / "run"
    try:
        code = main(["eval", "ragen/Sokoban-v0", "--agent", "random", "--seeds", "2", "--out", str(out), *flags])
    except SystemExit as exc:  # argparse's own errors (one line too: ragen's parser prints no usage)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragen eval: error:") and said in err and "\n" not in err, err
    assert not out.exists()


# ----------------------------------------------------------------------------- hf: with token history
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ragen_envs.models import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("m"), hidden_size=32, num_layers=1, intermediate_size=64)


@pytest.mark.parametrize("mode,k", [("limited_multi_turn", 2), ("limited_multi_turn", 1), ("single_turn", 2),
                                    ("full", -1)])
def test_hf_token_history_feeds_the_trainers_prompt_ids(tmp_path, tiny_model, mode, k):
    """An ``hf:`` agent with token history is fed, token for token, the prompts the trainer's
    rollout (``collect_rollouts`` with the same mode) builds for the same replies: its sampled
    ids are replayed through the trainer's loop and both prompt lists compared."""
    from ragen_envs.agents import make_agent
    from ragen_envs.starpo.policy import ChatFormat, load_tokenizer
    from ragen_envs.starpo.rollout import collect_rollouts
    from ragen_envs.trajectories import session_tokens

    agent = make_agent(f"hf:{tiny_model}", temperature=1.0, max_tokens=5, history="tokens", prefill=True,
                       think=True)
    fed = []
    generate = agent.sampler.generate

    def spy(prompts, **kw):
        fed.extend(list(p) for p in prompts)
        return generate(prompts, **kw)

    agent.sampler.generate = spy
    try:
        evaluate(agent, ["ragen/Sokoban-v0"], [5], tmp_path, concurrency=1, env_kwargs=SOKOBAN, progress=False,
                 frame_episodes=0, context_window_mode=mode, max_context_window=k)
    finally:
        agent.close()
    (ep,) = read_episodes(tmp_path)
    assert len(ep.turns) == 4
    replies = iter([(r["tokens"]["sampled"], r["finish_reason"] == "stop") for r in ep.meta["turns"]])
    trainer_prompts = []

    def responder(prompts, envs):
        trainer_prompts.extend(list(p) for p in prompts)
        return [next(replies) for _ in prompts]

    fmt = ChatFormat(load_tokenizer(tiny_model), "<think>")
    (traj,) = collect_rollouts("ragen/Sokoban-v0", 5, 1, 1, responder, fmt, env_kwargs=SOKOBAN,
                               context_window_mode=mode, max_context_window=k)
    assert [t.response for t in traj.episode.turns] == [t.response for t in ep.turns]
    assert fed == trainer_prompts
    if mode != "full":
        assert traj.turn_prompts == trainer_prompts
    if mode == "full" or (mode == "limited_multi_turn" and k > 1):
        # the episode's one sequence goes on behind the window: `ragen export` rebuilds the trainer's
        assert session_tokens(ep.meta["turns"]) == (traj.token_ids, traj.loss_mask)
