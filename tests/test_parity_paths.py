"""Issue 19 item 5: the same scripted replies on the same seeds through every path of the main
venv give the local env's episodes (texts, per-turn rewards, returns, episode ends, success).
The scripts and the comparison live in tests/parity.py; the verl path is checked in its own
venv (tests/verl/test_parity_verl.py)."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

from parity import CASES, Episode, Turn, assert_same_episode, reference_episodes

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module", params=CASES, ids=[c[0].split("/")[1] for c in CASES])
def case(request):
    env_id, kwargs, noise = request.param
    return env_id, kwargs, reference_episodes(env_id, kwargs, noise)


def _blank(ref: Episode, system_prompt: str, first: str) -> Episode:
    return Episode(ref.env_id, dict(ref.env_kwargs), ref.seed, ref.noise_seed, system_prompt, first)


def test_the_scripts_cover_what_they_claim(case):
    env_id, _, refs = case
    assert len(refs) == 60
    assert any(e.success for e in refs)  # the expert solves (every id here is solvable)
    assert any(t.reward < 0 for e in refs for t in e.turns)  # format penalties happen
    assert any(t.truncated or (t.terminated and not t.success) for e in refs for t in e.turns) or env_id.endswith(
        "WebShop-v0")
    assert len({len(e.turns) for e in refs}) > 1  # episodes of different lengths


def test_local_replay_is_deterministic(case):
    env_id, kwargs, refs = case
    for ref in refs:
        env = gym.make(env_id, **kwargs)
        obs, info = env.reset(seed=ref.seed, options=ref.options)
        got = _blank(ref, info["system_prompt"], obs)
        for reply in ref.replies:
            obs, r, term, trunc, info = env.step(reply)
            got.turns.append(Turn(reply, obs, float(r), bool(term), bool(trunc), bool(info["success"])))
        assert_same_episode(got, ref, "local replay")


# ----------------------------------------------------------------------------- vectors
def _play_vector(vec, refs: list[Episode]) -> list[Episode]:
    """Sub-env i plays refs[i]: reset one at a time (reset_mask, for its own noise seed),
    then every sub-env steps its own replies; steps after an episode's end are ignored
    (Gymnasium's next-step autoreset)."""
    n = len(refs)
    out: list[Episode] = []
    seeds = [r.seed for r in refs]
    for i, ref in enumerate(refs):
        mask = np.zeros(n, dtype=bool)
        mask[i] = True
        obs, info = vec.reset(seed=seeds, options={"reset_mask": mask, **(ref.options or {})})
        out.append(_blank(ref, str(info["system_prompt"][i]), str(obs[i])))
    done = [False] * n
    t = 0
    while not all(done):
        actions = tuple(refs[i].replies[t] if not done[i] else "" for i in range(n))
        obs, rew, term, trunc, info = vec.step(actions)
        for i in range(n):
            if not done[i]:
                out[i].turns.append(Turn(actions[i], str(obs[i]), float(rew[i]), bool(term[i]), bool(trunc[i]),
                                         bool(info["success"][i])))
                done[i] = bool(term[i] or trunc[i])
        t += 1
    return out


def test_ragen_make_vec(case):
    import ragen_envs

    env_id, kwargs, refs = case
    vec = ragen_envs.make_vec(env_id, len(refs), **kwargs)
    try:
        for got, ref in zip(_play_vector(vec, refs), refs):
            assert_same_episode(got, ref, "ragen_envs.make_vec")
    finally:
        vec.close()


@pytest.mark.parametrize("mode", ["sync", "async", "vector_entry_point"])
def test_gymnasium_make_vec(case, mode):
    """Gymnasium's own make_vec with its defaults (async: shared memory on)."""
    env_id, kwargs, refs = case
    refs = refs if mode != "async" else refs[::6]  # async: 10 episodes (a process each)
    vec = gym.make_vec(env_id, len(refs), vectorization_mode=mode, **kwargs)
    try:
        for got, ref in zip(_play_vector(vec, refs), refs):
            assert_same_episode(got, ref, f"gym.make_vec({mode})")
    finally:
        vec.close()


# ----------------------------------------------------------------------------- SkyRL-gym, GEM
def test_skyrl_gym_make(case):
    import skyrl_gym

    import ragen_envs.integrations.skyrl as rskyrl

    env_id, kwargs, refs = case
    for ref in refs:
        env = skyrl_gym.make(env_id, extras=rskyrl.episode_extras(ref.seed, ref.noise_seed, kwargs))
        messages, _ = env.init([])
        got = _blank(ref, messages[0]["content"], messages[1]["content"])
        for reply in ref.replies:
            out = env.step(reply)
            md = out["metadata"]
            # the next user message is the observation; once done it rides in the metadata
            obs = md["observation"] if out["done"] else out["observations"][0]["content"]
            assert obs == md["observation"]
            got.turns.append(Turn(reply, obs, float(out["reward"]), md["terminated"], md["truncated"], bool(md["success"])))
        assert env.get_metrics()["return"] == pytest.approx(ref.episode_return)
        env.close()
        assert_same_episode(got, ref, "skyrl_gym.make")


def test_gem_make_and_make_vec(case):
    import gem

    import ragen_envs.integrations.gem  # noqa: F401  (registers the ids)

    env_id, kwargs, refs = case
    for ref in refs:
        env = gem.make(env_id, seed=ref.seed, noise_seed=ref.noise_seed, **kwargs)
        obs, info = env.reset()
        got = _blank(ref, info["system_prompt"], obs)
        for reply in ref.replies:
            obs, r, term, trunc, info = env.step(reply)
            got.turns.append(Turn(reply, obs, float(r), bool(term), bool(trunc), bool(info["success"])))
        env.close()
        assert_same_episode(got, ref, "gem.make")


# ----------------------------------------------------------------------------- PettingZoo
def test_pettingzoo_group_rollout(case):
    """A group of 3 rollouts of one seed: the expert's, the random and the malformed replies
    side by side (the members are independent plays of the same initial state)."""
    from ragen_envs.multiagent import parallel_env

    env_id, kwargs, refs = case
    by_seed: dict[int, list[Episode]] = {}
    for r in refs:
        by_seed.setdefault(r.seed, []).append(r)
    for seed, group in by_seed.items():
        if group[0].noise_seed is not None:
            continue  # a group shares its seed's noise stream; noise seeds per member are below
        pz = parallel_env(env_id, group_size=len(group), **kwargs)
        obs, infos = pz.reset(seed=seed)
        agents = list(pz.agents)
        got = {a: _blank(ref, infos[a]["system_prompt"], obs[a]) for a, ref in zip(agents, group)}
        step = 0
        while pz.agents:
            actions = {a: group[agents.index(a)].replies[step] for a in pz.agents}
            obs, rewards, terms, truncs, infos = pz.step(actions)
            for a in actions:
                got[a].turns.append(Turn(actions[a], obs[a], float(rewards[a]), bool(terms[a]), bool(truncs[a]),
                                         bool(infos[a]["success"])))
            step += 1
        for a, ref in zip(agents, group):
            assert_same_episode(got[a], ref, "pettingzoo")
        pz.close()


# ----------------------------------------------------------------------------- OpenEnv
def test_openenv_server_over_its_websocket(case):
    """The OpenEnv app (``ragen openenv-server``) over its /ws route, one session per episode."""
    import json

    from fastapi.testclient import TestClient

    from ragen_envs.integrations.openenv import create_ragen_app

    env_id, kwargs, refs = case
    app = create_ragen_app(env_id, env_kwargs=kwargs)
    with TestClient(app) as client:
        for ref in refs:
            with client.websocket_connect("/ws") as ws:
                data = {"seed": ref.seed, **({"noise_seed": ref.noise_seed} if ref.noise_seed is not None else {})}
                ws.send_text(json.dumps({"type": "reset", "data": data}))
                msg = json.loads(ws.receive_text())
                assert msg["type"] == "observation", msg
                o = msg["data"]["observation"]
                got = _blank(ref, o["system_prompt"], o["observation"])
                for reply in ref.replies:
                    ws.send_text(json.dumps({"type": "step", "data": {"reply": reply}}))
                    msg = json.loads(ws.receive_text())
                    assert msg["type"] == "observation", msg
                    o = msg["data"]["observation"]
                    got.turns.append(Turn(reply, o["observation"], float(msg["data"]["reward"]), o["terminated"],
                                          o["truncated"], bool(o["info"]["success"])))
                assert msg["data"]["done"]
                assert_same_episode(got, ref, "openenv /ws")


# ----------------------------------------------------------------------------- TRL rollout_func
def test_trl_rollout_func_episode_layer(case, tmp_path_factory):
    """The episodes TRL's ``rollout_func`` plays (``play_episodes``: token ids in, env steps
    out) with a scripted generator that returns each reply's token ids: the texts the env
    receives decode back exactly, so the episodes equal the local ones."""
    from ragen_envs.integrations import trl as rtrl
    from ragen_envs.lm.chat import ChatFormat, load_tokenizer
    from ragen_envs.models import build_tiny_checkpoint

    env_id, kwargs, refs = case
    path = build_tiny_checkpoint(tmp_path_factory.mktemp("parity_trl") / "tiny", hidden_size=16, num_layers=1,
                                 intermediate_size=32)
    tok = load_tokenizer(path)
    fmt = ChatFormat(tok, "")
    specs = [rtrl.EpisodeSpec(env_id, r.seed, r.noise_seed, kwargs) for r in refs]
    turn = {i: 0 for i in range(len(refs))}
    live_index: list[int] = list(range(len(refs)))

    def generate(prompts):
        outs = []
        for i in live_index[: len(prompts)]:
            text = _spell(refs[i].replies[turn[i]])
            turn[i] += 1
            outs.append((tok.encode(text, add_special_tokens=False) + [fmt.eot_id], True, None))
        return outs

    # play_episodes batches the live episodes in order; track which are live
    eps = []
    for i, spec in enumerate(specs):
        live_index[:] = [i]
        eps += rtrl.play_episodes([spec], generate, fmt)
    for ep, ref in zip(eps, refs):
        got = _blank(ref, ep.system_prompt, ep.observations[0])
        for k, reply in enumerate(ep.replies):
            info = ep.infos[k]
            got.turns.append(Turn(reply, ep.observations[k + 1], ep.rewards[k], k == len(ep.replies) - 1 and ep.terminated,
                                  k == len(ep.replies) - 1 and ep.truncated, bool(info["success"])))
        # a tokenizer cannot spell a lone surrogate: it reaches the env as U+FFFD, which is
        # what the env itself turns it into, so the episode is still the local one
        assert ep.replies == [_spell(r) for r in ref.replies]
        assert_same_episode(got, ref, "trl rollout_func")


def _spell(text: str) -> str:
    """``text`` as a tokenizer can encode it: lone surrogates become U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if any(
        0xD800 <= ord(c) <= 0xDFFF for c in text) else text


# ----------------------------------------------------------------------------- TRL environment_factory
def test_trl_environment_factory_tool_calls(case):
    """The class TRL's ``environment_factory`` builds, driven as TRL drives it: ``reset(**row)``
    with the dataset's columns, one ``act(reply)`` tool call per turn (the tool result is the
    observation), ``get_reward()`` at the end. The texts are what TRL puts in the
    conversation: the row's system message, the reset text, the tool results."""
    from ragen_envs.integrations import trl as rtrl

    env_id, kwargs, refs = case
    cls = rtrl.make_environment_factory(env_id, **kwargs)
    rows = rtrl.make_environment_dataset(env_id, [r.seed for r in refs], [r.noise_seed for r in refs], **kwargs)
    for ref, row in zip(refs, rows):
        env = cls()
        first = env.reset(**row)
        got = _blank(ref, row["prompt"][0]["content"], first)
        for reply in ref.replies:
            obs = env.act(reply)
            got.turns.append(Turn(reply, obs, env.rewards[-1], env.done, False, bool(env.infos[-1]["success"])))
        # the tool API says only whether the episode is over (no terminated / truncated split)
        assert env.get_reward() == pytest.approx(ref.episode_return) and env.unplayed_turns == 0
        assert_same_episode(got, ref, "trl environment_factory", end_kind=False)
