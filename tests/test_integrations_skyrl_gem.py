"""SkyRL-gym and GEM through their own entry points (``skyrl_gym.make``, ``gem.make``,
``gem.make_vec``): episodes equal a local env replay of the same replies."""

from __future__ import annotations

import gymnasium as gym
import pytest

import ragen_envs
from ragen_envs.protocol import format_answer
from ragen_envs.vector import GroupSeeding, episode_seed, member_noise_seed

skyrl_gym = pytest.importorskip("skyrl_gym")
gem = pytest.importorskip("gem")

from ragen_envs.integrations import gem as ragen_gem  # noqa: E402
from ragen_envs.integrations import skyrl as ragen_skyrl  # noqa: E402

HOSTILE = "no tags \ud800 ünï 𝔘"
# (id, seed, noise seed): Sokoban, FrozenLake with a noise seed, WebShop, Bandit
CASES = [("ragen/Sokoban-v0", 123, None), ("ragen/FrozenLake-v0", 130, 7), ("ragen/WebShop-v0", 5, None),
         ("ragen/Bandit-v0", 3, 11)]


def _reply(env: gym.Env, turn: int) -> str:
    """Turn t: a hostile malformed reply first, then the expert's replies."""
    if turn == 0:
        return HOSTILE
    return format_answer(env.unwrapped._expert_reply_actions(), "plan")


def _local_replay(env_id: str, seed: int, noise_seed: int | None, replies: list[str], **kwargs):
    env = gym.make(env_id, **kwargs)
    obs, info = env.reset(seed=seed, options=None if noise_seed is None else {"noise_seed": noise_seed})
    turns = []
    for reply in replies:
        obs, reward, term, trunc, info = env.step(reply)
        turns.append((obs, reward, term or trunc, info["success"]))
        if term or trunc:
            break
    return turns


def _play(step, env_for_replies: gym.Env, max_turns: int = 20):
    """Plays with ``step`` until done; the replies come from a local twin (same state)."""
    replies, turns = [], []
    for turn in range(max_turns):
        reply = _reply(env_for_replies, turn)
        replies.append(reply)
        env_for_replies.step(reply)
        out = step(reply)
        turns.append(out)
        if out[2]:
            break
    return replies, turns


# ---------------------------------------------------------------------- SkyRL-gym
def test_every_id_is_in_the_skyrl_registry():
    for spec in ragen_envs.ENV_SPECS:
        assert spec.id in skyrl_gym.registry
    ragen_skyrl.register_all()  # idempotent


@pytest.mark.parametrize("env_id,seed,noise_seed", CASES)
def test_skyrl_make_episode_equals_local_replay(env_id, seed, noise_seed):
    env = skyrl_gym.make(env_id, extras=ragen_skyrl.episode_extras(seed, noise_seed))
    messages, metadata = env.init([{"role": "user", "content": "ignored"}])
    twin = gym.make(env_id)
    first, info = twin.reset(seed=seed, options=None if noise_seed is None else {"noise_seed": noise_seed})
    assert messages == [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": first}]
    assert metadata["seed"] == seed and metadata["noise_seed"] == (-1 if noise_seed is None else noise_seed)

    def step(reply):
        out = env.step(reply)
        shown = out["observations"][0]["content"] if out["observations"] else None
        assert shown in (None, out["metadata"]["observation"]) and (shown is None) == out["done"]
        return out["metadata"]["observation"], out["reward"], out["done"], out["metadata"]["success"]

    replies, turns = _play(step, twin)
    assert turns == _local_replay(env_id, seed, noise_seed, replies)
    metrics = env.get_metrics()
    assert metrics["turns"] == len(turns) and metrics["return"] == pytest.approx(sum(t[1] for t in turns))
    assert metrics["success"] == float(turns[-1][3])
    env.close()


def test_skyrl_extras_nested_env_config_and_errors():
    env = skyrl_gym.make("ragen/Sokoban-v0", env_config={"max_turns": 2},
                         extras={"extra_info": {"seed": 124, "env_kwargs": {"think": False}}, "reward_spec": {}})
    messages, _ = env.init([])
    assert env.max_turns == 2 and messages[1]["content"] == gym.make("ragen/Sokoban-v0", think=False).reset(seed=124)[0]
    assert env.step("x")["done"] is False and env.step("y")["done"] is True
    with pytest.raises(ValueError, match="'seed'"):
        skyrl_gym.make("ragen/Sokoban-v0", extras={})
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
        skyrl_gym.make("ragen/Sokoban-v0", extras={"seed": -1}).init([])


# ---------------------------------------------------------------------- GEM
def test_every_id_is_in_the_gem_registry():
    from gem.envs.registration import ENV_REGISTRY

    for spec in ragen_envs.ENV_SPECS:
        assert spec.id in ENV_REGISTRY
    ragen_gem.register_all()  # idempotent


@pytest.mark.parametrize("env_id,seed,noise_seed", CASES)
def test_gem_make_episode_equals_local_replay(env_id, seed, noise_seed):
    env = gem.make(env_id, seed=seed, noise_seed=noise_seed)
    obs, info = env.reset()
    twin = gym.make(env_id)
    assert (obs, info) == twin.reset(seed=seed, options=None if noise_seed is None else {"noise_seed": noise_seed})

    def step(reply):
        obs, reward, term, trunc, info = env.step(reply)
        return obs, reward, term or trunc, info["success"]

    replies, turns = _play(step, twin)
    assert turns == _local_replay(env_id, seed, noise_seed, replies)
    assert env.reset()[1]["seed"] == episode_seed(seed, 1)  # the next episode of the sequence
    assert env.reset(seed=seed)[0] == obs_of(env_id, seed, noise_seed=None)


def _close(envs):  # GEM's vector envs have no close()
    for env in envs.envs:
        env.close()


def obs_of_kw(env_id, seed, **kwargs):
    return gym.make(env_id, **kwargs).reset(seed=seed)[0]


def obs_of(env_id, seed, noise_seed=None):
    return gym.make(env_id).reset(seed=seed, options=None if noise_seed is None else {"noise_seed": noise_seed})[0]


def test_gem_make_vec_seeds_groups_and_autoreset():
    # make_vec passes seed=seed+i to each constructor
    envs = gem.make_vec(["ragen/Sokoban-v0"] * 2, seed=40)
    obs, infos = envs.reset()
    assert [i["seed"] for i in infos] == [40, 41] and obs == [obs_of("ragen/Sokoban-v0", s) for s in (40, 41)]
    _close(envs)
    # groups: members of a group share the initial state; without shared noise their slips differ
    envs = gem.make_vec(["ragen/FrozenLake-v0"] * 4,
                        vec_kwargs=ragen_gem.group_vec_kwargs(4, group_size=2, seed=130, shared_noise=False))
    obs, infos = envs.reset()
    assert [i["seed"] for i in infos] == [130, 130, 131, 131] and obs[0] == obs[1] != obs[2] == obs[3]
    assert [i["noise_seed"] for i in infos] == [member_noise_seed(s, m) for s, m in ((130, 0), (130, 1), (131, 0), (131, 1))]
    # every member over 12 steps (several episodes) equals a local replay of its replies, with
    # GEM's same-step autoreset: a final step's observation and info are the next reset's
    twins = [GroupSeeding(gym.make("ragen/FrozenLake-v0"), m, shared_noise=False) for m in (0, 1, 0, 1)]
    for twin, seed in zip(twins, (130, 130, 131, 131)):
        twin.reset(seed=seed)
    for k in range(12):
        replies = [_reply(twin, (k + i) % 3) for i, twin in enumerate(twins)]
        obs, rewards, terms, truncs, infos = envs.step(replies)
        for i, twin in enumerate(twins):
            t_obs, t_reward, t_term, t_trunc, t_info = twin.step(replies[i])
            assert (rewards[i], terms[i], truncs[i]) == (t_reward, t_term, t_trunc), (k, i)
            if t_term or t_trunc:
                t_obs, t_info = twin.reset()
            assert (obs[i], infos[i]) == (t_obs, t_info), (k, i)
    _close(envs)
    # GEM's autoreset (same step): a finished env starts the next episode of its sequence
    envs = gem.make_vec(["ragen/Bandit-v0"] * 2, vec_kwargs=ragen_gem.group_vec_kwargs(2, group_size=2, seed=3),
                        async_mode=True)
    envs.reset()
    obs, rewards, terms, _, infos = envs.step([format_answer(["Dragon"], "x")] * 2)
    assert list(terms) == [True, True] and rewards[0] == rewards[1]
    assert [i["seed"] for i in infos] == [episode_seed(3, 1)] * 2 and obs[0] == obs[1]
    _close(envs)


def test_gem_spawn_and_random_action():
    env = gem.make("ragen/FrozenLake-v0", seed=5, max_turns=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.spawn(same_state=True)
    obs, info = env.reset()
    twin = env.spawn(same_state=True)
    assert twin.reset()[0] == obs and twin.env.unwrapped.budget.max_turns == 2
    other = env.spawn(max_actions=3).reset()[0]  # same seed, other budget
    assert other == obs_of_kw("ragen/FrozenLake-v0", 5, max_actions=3) != obs
    reply = env.sample_random_action()
    assert gym.make("ragen/FrozenLake-v0").unwrapped.action_space.contains(reply)
    assert env.step(reply)[4]["format_ok"]
    web = gem.make("ragen/WebShop-v0", seed=1)
    web.reset()
    assert web.step(web.sample_random_action())[4]["format_ok"]


def test_our_gymnasium_class_registered_directly_in_gem_takes_the_seed():
    """The issue's failure: GEM's make_vec passes seed= to the constructor of a raw class."""
    if "raw/FrozenLake" not in gem.envs.registration.ENV_REGISTRY:
        gem.register("raw/FrozenLake", entry_point="ragen_envs.envs.frozenlake:FrozenLakeEnv")
    envs = gem.make_vec(["raw/FrozenLake"] * 2, seed=9)
    obs, infos = envs.reset()
    assert obs == [obs_of("ragen/FrozenLake-v0", 9), obs_of("ragen/FrozenLake-v0", 10)]
    env = gym.make("ragen/Sokoban-v0", seed=12)
    first, _ = env.reset()
    second, _ = env.reset()
    ref = gym.make("ragen/Sokoban-v0")
    assert first == ref.reset(seed=12)[0] and second == ref.reset()[0]
    with pytest.raises(ValueError, match="seed must be"):
        gym.make("ragen/Sokoban-v0", seed=-3)


def test_the_docs_skyrl_and_gem_snippets_run(capsys):
    from test_vector_gym import doc_snippet

    namespace: dict = {}
    exec(compile(doc_snippet("SkyRL-gym"), "integrations.md", "exec"), namespace)
    assert namespace["messages"][1]["content"] == obs_of("ragen/Sokoban-v0", 123)
    namespace = {}
    exec(compile(doc_snippet("GEM"), "integrations.md", "exec"), namespace)
    twin = gym.make("ragen/FrozenLake-v0")
    twin.reset(seed=123, options={"noise_seed": 7})
    assert namespace["obs"] == twin.step("<think>go</think><answer>Left</answer>")[0]
    assert [i["seed"] for i in namespace["infos"]] == [123] * 4 + [124] * 4
