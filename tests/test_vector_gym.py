"""Gymnasium's own ``gym.make_vec`` on every id, every mode: each sub-env equals a single env.

Also the observation space itself: ``UnicodeText`` holds every observation, and its
shared-memory create / write / read (Gymnasium's singledispatch functions) round-trip exactly.
"""

from __future__ import annotations

import copy
import multiprocessing as mp

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from gymnasium.spaces.utils import flatten, flatten_space, unflatten
from gymnasium.vector.utils import batch_space, create_shared_memory, read_from_shared_memory, write_to_shared_memory

import ragen_envs
from ragen_envs.envs.base import CHARSET
from ragen_envs.envs.space import NUM_SCALAR_VALUES, CharsetText, UnicodeText
from ragen_envs.envs.webshop import MAX_STATE_CHARS
from ragen_envs.protocol import format_answer
from ragen_envs.vector import GroupSeeding, episode_seed

ENV_IDS = [s.id for s in ragen_envs.ENV_SPECS]
HOSTILE = "no tags at all \ud800 ünïcødé 𝔘 \x00 " + "<answer>" * 3  # lone surrogate, astral, NUL
STEPS = 6


def _replies(env: gym.Env, step: int, member: int) -> str:
    """Step k of member i: the expert's reply, a malformed/hostile one, or a wrong but
    well-formed one, in a rotation that differs between members."""
    base = env.unwrapped
    kind = (step + member) % 3
    if kind == 0:
        return format_answer(base._expert_reply_actions(), "plan")
    if kind == 1:
        return HOSTILE + str(step)
    names = base.action_names()
    if names is None:  # WebShop: free text
        return format_answer([f"search[red shirt ü {step}]"], "look")
    return format_answer([names[(step + member) % len(names)]] * 2, "try")


def _py(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _py(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_py(v) for v in value)
    return value


def _member_info(infos: dict, i: int) -> dict:
    """Sub-env i's info out of Gymnasium's batched info dict (arrays + ``_key`` masks)."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_") or not infos[f"_{key}"][i]:
            continue
        out[key] = _member_info(value, i) if isinstance(value, dict) else _py(value[i])
    return out


class _Reference:
    """A single env that plays what sub-env i of a vector plays, autoreset included."""

    def __init__(self, env_id: str, seed: int, grouped: bool) -> None:
        env = gym.make(env_id)
        self.env = GroupSeeding(env, 0) if grouped else env
        self.obs, self.info = self.env.reset(seed=seed)
        self.done = False

    def step(self, reply: str):
        if self.done:  # Gymnasium's next-step autoreset: the reply is ignored
            self.done = False
            self.obs, self.info = self.env.reset()
            return self.obs, 0.0, False, False, self.info
        obs, reward, term, trunc, info = self.env.step(reply)
        self.done = term or trunc
        return obs, reward, term, trunc, info


def _assert_same_as_single_envs(vec: gym.vector.VectorEnv, env_id: str, seed: int, grouped: bool) -> None:
    n = vec.num_envs
    refs = [_Reference(env_id, seed + i, grouped) for i in range(n)]
    obs, infos = vec.reset(seed=seed)
    assert isinstance(obs, tuple) and all(type(o) is str for o in obs)
    for i, ref in enumerate(refs):
        assert obs[i] == ref.obs
        assert _member_info(infos, i) == _py(ref.info)
        assert vec.single_observation_space.contains(obs[i])
    for step in range(STEPS):
        replies = [_replies(ref.env, step, i) if not ref.done else "ignored" for i, ref in enumerate(refs)]
        obs, rewards, terms, truncs, infos = vec.step(tuple(replies))
        for i, ref in enumerate(refs):
            r_obs, r_reward, r_term, r_trunc, r_info = ref.step(replies[i])
            assert obs[i] == r_obs, (env_id, step, i)
            assert rewards[i] == r_reward and terms[i] == r_term and truncs[i] == r_trunc, (env_id, step, i)
            assert _member_info(infos, i) == _py(r_info), (env_id, step, i)
            assert vec.single_observation_space.contains(obs[i])


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_gym_make_vec_equals_single_envs(env_id, mode):
    vec = gym.make_vec(env_id, 2, vectorization_mode=mode)
    try:
        _assert_same_as_single_envs(vec, env_id, 123, grouped=mode == "vector_entry_point")
    finally:
        vec.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gym_make_vec_async_shared_memory_equals_single_envs(env_id):
    vec = gym.make_vec(env_id, 2, vectorization_mode="async")  # Gymnasium's defaults: shared memory on
    try:
        assert vec.shared_memory
        _assert_same_as_single_envs(vec, env_id, 7, grouped=False)
    finally:
        vec.close()


def test_async_live_view_without_copy_and_our_make_vec_async():
    vec = gym.make_vec("ragen/FrozenLake-v0", 2, vectorization_mode="async", vector_kwargs={"copy": False})
    single = gym.make("ragen/FrozenLake-v0")
    obs, _ = vec.reset(seed=3)
    first = single.reset(seed=3)[0]
    assert obs[0] == first and len(obs) == 2 and list(obs)[0] == first
    kept = copy.deepcopy(obs)  # a tuple of str: stays as it was
    vec.step(("x", "x"))
    assert obs[0] == single.step("x")[0] and kept[0] == first and type(kept) is tuple
    vec.close()
    groups = ragen_envs.make_vec("ragen/Sokoban-v0", 4, group_size=2, vectorization_mode="async")
    obs, info = groups.reset(seed=40)
    assert groups.env.shared_memory and obs[0] == obs[1] == gym.make("ragen/Sokoban-v0").reset(seed=40)[0]
    assert obs[2] == obs[3] != obs[0] and list(info["seed"]) == [40, 40, 41, 41]
    groups.close()


def test_vector_entry_point_groups_and_default_mode():
    vec = gym.make_vec("ragen/FrozenLake-v0", 4, group_size=2, shared_noise=False)  # default mode: the entry point
    obs, info = vec.reset(seed=9)
    assert list(info["seed"]) == [9, 9, 10, 10] and obs[0] == obs[1] and obs[2] == obs[3]
    assert list(info["noise_seed"])[0] != list(info["noise_seed"])[1]
    assert vec.spec.id == "ragen/FrozenLake-v0"
    vec.close()
    for spec in ragen_envs.ENV_SPECS:
        assert gym.spec(spec.id).vector_entry_point.startswith("ragen_envs.vector:make_vec_")
        gym.spec(spec.id).to_json()  # string entry points: the spec stays serialisable
    with pytest.raises(ValueError, match="group_size"):
        gym.make_vec("ragen/Sokoban-v0", 3, vectorization_mode="vector_entry_point", group_size=2)


def test_autoreset_of_a_group_vector_uses_episode_seeds():
    vec = gym.make_vec("ragen/Bandit-v0", 2, vectorization_mode="vector_entry_point", group_size=2)
    vec.reset(seed=5)
    vec.step(("a", "b"))  # one turn: both end
    obs, _, _, _, info = vec.step(("", ""))
    assert list(info["seed"]) == [episode_seed(5, 1)] * 2 and obs[0] == obs[1]
    vec.close()


# ---------------------------------------------------------------------- the space itself
SAMPLES = ["", "a", "Turn 1:\nState:\n#P√O#", "ünï 𝔘 \x00 \uffff \U0010ffff \ud7ff \ue000", "x" * 50]


def test_unicode_text_contains_every_scalar_value_and_no_surrogate():
    space = UnicodeText(50)
    for s in SAMPLES:
        assert space.contains(s) and s in space
    assert not space.contains("\ud800") and not space.contains("x" * 51) and not space.contains(b"x")
    assert len(space.character_set) == NUM_SCALAR_VALUES == 0x110000 - 0x800
    assert "\U0010ffff" in space.character_set and "\udfff" not in space.character_set
    for ch in ("\x00", "\ud7ff", "\ue000", "\U0010ffff"):
        assert space.character_list[int(space.character_index(ch))] == ch
    assert space == UnicodeText(50) != UnicodeText(51) and space != gym.spaces.Text(50)
    space.seed(0)
    for _ in range(20):
        assert space.contains(space.sample())
    assert space.sample(mask=(3, None)) and len(space.sample(mask=(3, None))) == 3


def test_unicode_text_characters_is_built_once_and_in_index_order():
    # Gymnasium's vector envs read characters[0] once per sub-env: the 4.4 MB string is shared
    a, b = UnicodeText(50).characters, UnicodeText(7).characters
    assert a is b and len(a) == NUM_SCALAR_VALUES
    assert (a[0], a[0xD7FF], a[0xD800], a[-1]) == ("\x00", "\ud7ff", "\ue000", "\U0010ffff")


def test_charset_text_copies_share_the_tables_and_sample_on_their_own():
    # Gymnasium's vector envs deep-copy the action space once per sub-env: a copy shares the
    # (never written) character tables, but not the random generator
    env = gym.make("ragen/Sokoban-v0")
    space = env.action_space
    assert isinstance(space, CharsetText) and isinstance(space, gym.spaces.Text)
    plain = gym.spaces.Text(4096, min_length=0, charset=CHARSET)
    assert space == plain and repr(space) == repr(plain)
    space.seed(3)
    clone = copy.deepcopy(space)
    assert clone is not space and clone == space
    assert clone.character_set is space.character_set and clone.character_list is space.character_list
    assert clone.np_random is not space.np_random
    assert clone.sample() == space.sample()  # the same generator state, copied
    clone.seed(4)
    after = space.sample()
    space.seed(3)
    space.sample()
    assert space.sample() == after  # seeding the copy left the original's stream alone
    # a container's deep copy keeps one copy per object (the memo)
    pair = copy.deepcopy([space, space])
    assert pair[0] is pair[1] and pair[0] is not space
    batched = gym.make_vec("ragen/Sokoban-v0", 3).action_space  # copies of sub-env 0's space
    first = batched.spaces[0]
    assert all(sub == space and sub.character_set is first.character_set for sub in batched.spaces)
    assert len({id(sub.np_random) for sub in batched.spaces}) == 3


def test_unicode_text_flatten_round_trip_and_batching():
    space = UnicodeText(50)
    for s in SAMPLES:
        flat = flatten(space, s)
        assert flat.shape == (50,) and flatten_space(space).contains(flat)
        assert unflatten(space, flat) == s
    batched = batch_space(space, 3)
    assert all(sub == space for sub in batched.spaces)


@pytest.mark.parametrize("ctx", [mp, mp.get_context("spawn")])
def test_unicode_text_shared_memory_round_trip(ctx):
    space = UnicodeText(50)
    memory = create_shared_memory(space, n=len(SAMPLES), ctx=ctx)
    view = read_from_shared_memory(space, memory, n=len(SAMPLES))  # read once, as AsyncVectorEnv does
    for i, s in enumerate(SAMPLES):
        write_to_shared_memory(space, i, s, memory)
    assert copy.deepcopy(view) == tuple(SAMPLES)
    write_to_shared_memory(space, 1, "longer now", memory)
    write_to_shared_memory(space, 4, "", memory)
    assert view[1] == "longer now" and view[4] == "" and view[0] == ""
    with pytest.raises(ValueError, match="51 characters"):
        write_to_shared_memory(space, 0, "x" * 51, memory)
    with pytest.raises(ValueError, match="surrogate"):
        write_to_shared_memory(space, 0, "a\ud800", memory)


def test_names_that_reach_the_prompt_stay_in_the_space():
    with pytest.raises(ValueError, match="64 characters"):
        gym.make("ragen/Bandit-v0", low_name="x" * 65)
    with pytest.raises(ValueError, match="surrogate"):
        gym.make("ragen/Bandit-v0", low_name="bad\ud800")
    env = gym.make("ragen/FrozenLake-v0")
    with pytest.raises(ValueError, match="64 characters"):
        env.unwrapped.set_vocabulary(actions={"Up": "U" * 65})
    env.unwrapped.set_vocabulary(actions={"Up": "Hoch 𝔘", "Left": "Links"})
    obs, _ = env.reset(seed=1)
    assert "Hoch 𝔘" in obs and env.observation_space.contains(obs)
    with pytest.raises(ValueError, match=r"\[4, 100\]"):
        gym.make("ragen/Sokoban-v0", dim_room=(101, 6))


def doc_snippet(heading: str) -> str:
    """The first ```python block under ``## heading`` of docs/integrations.md."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_docs_gymnasium_vectors_snippet_runs():
    namespace: dict = {}
    exec(compile(doc_snippet("Gymnasium vectors"), "integrations.md", "exec"), namespace)
    assert list(namespace["infos"]["seed"]) == [123] * 4 + [124] * 4
    assert namespace["rewards"].shape == (4,)


def test_async_spawned_workers_register_the_space_too():
    """A spawned worker imports the env module (and with it the space's shared-memory
    functions) before it writes its first observation."""
    vec = gym.make_vec("ragen/Bandit-v0", 2, vectorization_mode="async", vector_kwargs={"context": "spawn"})
    try:
        obs, _ = vec.reset(seed=4)
        assert obs == tuple(gym.make("ragen/Bandit-v0").reset(seed=s)[0] for s in (4, 5))
    finally:
        vec.close()


def test_webshop_observations_fit_and_an_oversized_page_raises():
    env = gym.make("ragen/WebShop-v0")
    obs, _ = env.reset(seed=0)
    base = env.unwrapped
    # everything but the state text is small next to the room the space leaves for it
    assert len(obs) - len(base.state_text()) < 4_000
    assert base.observation_space.max_length - MAX_STATE_CHARS == 65_536
    base._shown = "x" * MAX_STATE_CHARS
    with pytest.raises(RuntimeError, match="more than 131072"):
        base.state_text()


@settings(max_examples=40, deadline=None)
@given(replies=st.lists(st.text(st.characters(exclude_categories=()), max_size=300),  # lone surrogates too
                        min_size=1, max_size=4),
       env_id=st.sampled_from(["ragen/Sokoban-v0", "ragen/WebShop-v0", "ragen/Bandit-v0"]))
def test_any_reply_gives_observations_in_the_space(replies, env_id):
    env = _ENVS.setdefault(env_id, gym.make(env_id))
    obs, _ = env.reset(seed=len(replies))
    assert env.observation_space.contains(obs)
    for reply in replies:
        for text in (reply, format_answer([f"search[{reply}]"] if env_id.endswith("WebShop-v0") else [reply], reply)):
            obs, _, term, trunc, _ = env.step(text)
            assert env.observation_space.contains(obs)
            if term or trunc:
                return


def test_constructor_seed_is_the_first_unseeded_reset_and_survives_a_failed_one():
    env = gym.make("ragen/FrozenLake-v0", seed=21)
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"bogus": 1})
    assert env.reset()[1]["seed"] == 21
    assert env.reset(seed=3)[1]["seed"] == 3


_ENVS: dict = {}


def test_wrappers_need_an_explicit_mode():
    """Gymnasium's rule once a vector entry point is registered (documented)."""
    with pytest.raises(gym.error.Error, match="wrappers"):
        gym.make_vec("ragen/Bandit-v0", 2, wrappers=[gym.wrappers.RecordEpisodeStatistics])
    vec = gym.make_vec("ragen/Bandit-v0", 2, vectorization_mode="sync",
                       wrappers=[gym.wrappers.RecordEpisodeStatistics])
    vec.reset(seed=0)
    assert "episode" in vec.step(("a", "b"))[4]
    vec.close()
