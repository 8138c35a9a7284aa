"""The PettingZoo group env: API checkers, seeding, shared vs independent noise, agents leaving."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

pettingzoo = pytest.importorskip("pettingzoo")

import gymnasium as gym  # noqa: E402
with warnings.catch_warnings():  # pettingzoo.test imports its own deprecated env modules
    warnings.simplefilter("ignore", DeprecationWarning)
    from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

import ragen_envs  # noqa: E402
from ragen_envs.multiagent import GroupRollout, env as aec_env, parallel_env  # noqa: E402
from ragen_envs.vector import member_noise_seed  # noqa: E402

CHECKED_IDS = ["ragen/FrozenLake-v0", "ragen/Sokoban-v0", "ragen/Bandit-v0", "ragen/LightsOut-v0",
               "ragen/Countdown-v0", "ragen/SokobanPOMDP-v0"]
FL_REPLY = "<think>go</think><answer>Down || Right || Down || Right || Up</answer>"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


# --------------------------------------------------------------------------- imports
def test_import_ragen_envs_does_not_load_pettingzoo():
    proc = _run("import sys, ragen_envs; print('pettingzoo' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_missing_pettingzoo_names_the_extra():
    proc = _run(
        "import sys; sys.modules['pettingzoo'] = None\n"
        "try:\n    import ragen_envs.multiagent\n"
        "except ImportError as e:\n    print('ERR', e)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ERR") and 'pip install "ragen-envs[pz]"' in proc.stdout


# --------------------------------------------------------------------------- PettingZoo checkers
@pytest.mark.parametrize("env_id", CHECKED_IDS)
@pytest.mark.parametrize("shared_noise", [True, False])
def test_parallel_api_test_passes_without_warnings(env_id, shared_noise):
    env = parallel_env(env_id, group_size=3, shared_noise=shared_noise)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(env, num_cycles=20)
    env.close()


@pytest.mark.parametrize("env_id", CHECKED_IDS)
@pytest.mark.parametrize("shared_noise", [True, False])
def test_parallel_seed_test_passes(env_id, shared_noise):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_seed_test(lambda: parallel_env(env_id, group_size=3, shared_noise=shared_noise))


def test_registered_with_pettingzoo():
    for spec in ragen_envs.ENV_SPECS:
        assert spec.id in pettingzoo.parallel_registry
    env = pettingzoo.make("parallel", "ragen/FrozenLake-v0", group_size=2, shared_noise=False)
    assert isinstance(env, GroupRollout)
    assert env.possible_agents == ["rollout_0", "rollout_1"] and not env.shared_noise
    env.close()


def test_metadata_and_spaces():
    env = parallel_env("ragen/Sokoban-v0", group_size=2)
    assert env.metadata["name"] == "ragen_group_v0" and env.metadata["is_parallelizable"]
    assert env.agents == []
    a, b = env.possible_agents
    assert env.action_space(a) is env.action_space(a) and env.action_space(a) is not env.action_space(b)
    assert env.observation_space(a) is env.observation_space(a)
    obs, infos = env.reset(seed=9)
    assert set(obs) == set(infos) == {a, b}
    for agent in env.agents:
        assert env.observation_space(agent).contains(obs[agent])
    # a seeded reset seeds each agent's action space: samples reproduce
    first = env.action_space(a).sample()
    env.reset(seed=9)
    assert env.action_space(a).sample() == first
    env.close()


# --------------------------------------------------------------------------- same start, noise
@pytest.mark.parametrize("env_id", CHECKED_IDS)
def test_all_agents_start_from_the_seed_initial_state(env_id):
    env = parallel_env(env_id, group_size=4, shared_noise=False)
    single = gym.make(env_id)
    for seed in (0, 123, 777):
        obs, infos = env.reset(seed=seed)
        expected, _ = single.reset(seed=seed)
        assert all(o == expected for o in obs.values())
        assert all(info["seed"] == seed for info in infos.values())
    env.close()


def _play(env: GroupRollout, seed: int, turns: int = 2):
    """Every agent sends the same replies; returns per-agent lists of (obs, reward, info)."""
    obs, _ = env.reset(seed=seed)
    trace = {a: [obs[a]] for a in env.possible_agents}
    for _ in range(turns):
        if not env.agents:
            break
        obs, rewards, terms, truncs, infos = env.step({a: FL_REPLY for a in env.agents})
        for a in obs:
            trace[a].append((obs[a], rewards[a], terms[a], truncs[a], infos[a]["position"], infos[a]["actions"]))
    return trace


def test_shared_noise_gives_identical_outcomes_for_identical_actions():
    env = parallel_env("ragen/FrozenLake-v0", group_size=6, shared_noise=True)
    for seed in (0, 1, 2, 3, 123, 124, 500):
        trace = _play(env, seed)
        first = trace["rollout_0"]
        assert all(t == first for t in trace.values()), seed
    env.close()


def test_independent_noise_gives_different_outcomes_for_identical_actions():
    env = parallel_env("ragen/FrozenLake-v0", group_size=6, shared_noise=False)
    differing = 0
    seeds = (0, 1, 2, 3, 123, 124, 500)
    for seed in seeds:
        trace = _play(env, seed)
        first = trace["rollout_0"]
        differing += any(t != first for t in trace.values())
    assert differing >= len(seeds) - 1  # six members, ten slippery moves: almost surely split
    env.close()


@pytest.mark.parametrize("shared_noise", [True, False])
def test_group_g_of_make_vec_plays_like_parallel_env_with_seed_plus_g(shared_noise):
    vec = ragen_envs.make_vec("ragen/FrozenLake-v0", 6, group_size=3, shared_noise=shared_noise)
    vec.reset(seed=42)
    v_obs, *_ = vec.step([FL_REPLY] * 6)
    for g in range(2):
        group = parallel_env("ragen/FrozenLake-v0", group_size=3, shared_noise=shared_noise)
        _, infos = group.reset(seed=42 + g)
        expected_noise = [-1] * 3 if shared_noise else [member_noise_seed(42 + g, i) for i in range(3)]
        assert [infos[a]["noise_seed"] for a in group.possible_agents] == expected_noise
        g_obs, *_ = group.step({a: FL_REPLY for a in group.agents})
        assert [g_obs[a] for a in group.possible_agents] == list(v_obs[3 * g : 3 * g + 3])
        group.close()
    vec.close()


def test_noise_seed_option():
    shared = parallel_env("ragen/FrozenLake-v0", group_size=2, shared_noise=True)
    _, infos = shared.reset(seed=5, options={"noise_seed": 11})
    assert {i["noise_seed"] for i in infos.values()} == {11} and {i["seed"] for i in infos.values()} == {5}
    single = gym.make("ragen/FrozenLake-v0")
    single.reset(seed=5, options={"noise_seed": 11})
    obs, *_ = shared.step({a: FL_REPLY for a in shared.agents})
    assert obs["rollout_0"] == obs["rollout_1"] == single.step(FL_REPLY)[0]
    indep = parallel_env("ragen/FrozenLake-v0", group_size=2, shared_noise=False)
    _, infos = indep.reset(seed=5, options={"noise_seed": 11})
    assert [infos[a]["noise_seed"] for a in indep.possible_agents] == [member_noise_seed(11, i) for i in range(2)]


def test_unseeded_resets_keep_the_group_together_and_reproduce():
    a = parallel_env("ragen/Sokoban-v0", group_size=3)
    b = parallel_env("ragen/Sokoban-v0", group_size=3)
    a.reset(seed=3)
    b.reset(seed=3)
    for _ in range(3):
        obs_a, infos_a = a.reset()
        obs_b, _ = b.reset()
        assert obs_a == obs_b
        assert len(set(obs_a.values())) == 1
        assert len({i["seed"] for i in infos_a.values()}) == 1 and a.episode_seed == infos_a["rollout_0"]["seed"]


# --------------------------------------------------------------------------- agents leaving
def test_agents_leave_when_their_episode_ends():
    env = parallel_env("ragen/Sokoban-v0", group_size=2)
    env.reset(seed=123)
    solve = "<think>push it</think><answer>Down || Left || Up</answer>"
    idle = "not an answer"
    obs, rewards, terms, truncs, infos = env.step({"rollout_0": solve, "rollout_1": idle})
    assert terms == {"rollout_0": True, "rollout_1": False} and truncs == {"rollout_0": False, "rollout_1": False}
    assert infos["rollout_0"]["success"] and rewards["rollout_1"] == pytest.approx(-0.1)
    assert env.agents == ["rollout_1"]
    with pytest.raises(ValueError, match="live agent"):
        env.step({"rollout_0": idle, "rollout_1": idle})
    for turn in range(4):
        obs, rewards, terms, truncs, infos = env.step({"rollout_1": idle})
        assert set(obs) == set(rewards) == set(terms) == set(truncs) == set(infos) == {"rollout_1"}
    assert truncs["rollout_1"] and not terms["rollout_1"]
    assert env.agents == []
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})
    env.reset(seed=123)
    assert env.agents == env.possible_agents


def test_state_and_render():
    env = parallel_env("ragen/FrozenLake-v0", group_size=2, render_mode="ansi")
    with pytest.raises(RuntimeError, match="reset"):
        env.state()
    env.reset(seed=123)
    state = env.state()
    assert state.startswith("rollout_0:\n") and "\n\nrollout_1:\n" in state
    assert env.render() == state
    assert parallel_env("ragen/FrozenLake-v0", group_size=1).render() is None


def test_aec_view_runs_to_the_end():
    env = aec_env("ragen/FrozenLake-v0", group_size=3)
    env.reset(seed=7)
    steps = 0
    for agent in env.agent_iter(max_iter=100):
        obs, reward, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else FL_REPLY)
        steps += 1
    assert not env.agents and steps >= 3


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"group_size": 0}, "group_size"),
        ({"group_size": 2.0}, "group_size"),
        ({"shared_noise": "yes"}, "shared_noise"),
        ({"render_mode": "human"}, "render_mode"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        parallel_env("ragen/FrozenLake-v0", **kwargs)


def test_non_text_env_is_rejected():
    with pytest.raises(ValueError, match="ragen/\\* text env"):
        parallel_env("CartPole-v1", group_size=2)
    with pytest.raises(ValueError, match="env_id"):
        parallel_env(None)


def test_bad_step_and_reset_input():
    env = parallel_env("ragen/FrozenLake-v0", group_size=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"rollout_0": "x", "rollout_1": "x"})
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match="noise_seed"):
        env.reset(seed=1, options={"noise_seed": "a"})
    with pytest.raises(ValueError, match="options"):
        env.reset(seed=1, options=[("noise_seed", 1)])
    env.reset(seed=np.int64(1))
    with pytest.raises(ValueError, match="missing"):
        env.step({"rollout_0": "x"})
    with pytest.raises(TypeError, match="str"):
        env.step({"rollout_0": "x", "rollout_1": 3})
    with pytest.raises(ValueError, match="dict"):
        env.step(["x", "x"])
    with pytest.raises(ValueError, match="unknown agent"):
        env.action_space("player_0")
