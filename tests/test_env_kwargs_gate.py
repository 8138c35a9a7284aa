"""One gate for env kwargs from any source (issue 43, item 3): the command line, config files,
dataset rows, a model folder's saved settings, OpenEnv clients and the other stacks' rows all
pass ``ragen_envs.envs.limits.validate_env_kwargs``; the constructors type-check what
``gym.make`` is given directly (``ragen_envs.envs.checks``)."""

from __future__ import annotations

import json
import socket
import threading

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs
from ragen_envs.envs.checks import check_bool, check_int, check_number
from ragen_envs.envs.limits import BOOLEAN_KWARGS, OPERATOR_ONLY, accepted_kwargs, closest, validate_env_kwargs

# gym.make's own flag, read by gymnasium (not by our constructors)
_GYM_FLAGS = {"disable_env_checker"}


def _boolean_cases():
    for spec in ragen_envs.ENV_SPECS:
        for name in sorted((BOOLEAN_KWARGS - _GYM_FLAGS) & accepted_kwargs(spec.id)):
            yield spec.id, name


@pytest.mark.parametrize("env_id,name", list(_boolean_cases()))
def test_string_booleans_are_refused_by_gym_make_and_numpy_booleans_taken(env_id, name):
    for text in ("false", "no", "0", ""):
        with pytest.raises(ValueError, match=rf"^{name} must be true or false \(a boolean\), got '{text}'$"):
            gym.make(env_id, **{name: text})
    for value in (1, None):
        with pytest.raises(ValueError, match=name):
            gym.make(env_id, **{name: value})
    env = gym.make(env_id, **{name: np.False_})
    stored = {"permute_goals": lambda e: e._permutation is not None}.get(name, lambda e: getattr(e, name))
    assert stored(env.unwrapped) is False


@pytest.mark.parametrize("env_id,kwargs", [
    ("ragen/LightsOut-v0", {"scramble_depth": 5, "size": 3}),
    ("ragen/FrozenLake-v0", {"size": 5}),
    ("ragen/Sokoban-v0", {"num_boxes": 1, "search_depth": 30, "max_turns": 3}),
])
def test_numpy_integers_are_integers_and_play_the_same_instance(env_id, kwargs):
    plain = gym.make(env_id, **kwargs)
    numpy = gym.make(env_id, **{k: np.int64(v) for k, v in kwargs.items()})
    assert plain.reset(seed=7)[0] == numpy.reset(seed=7)[0]
    for k, v in kwargs.items():
        assert type(getattr(numpy.unwrapped, k, v)) is int or k == "max_turns"


def test_the_type_checks_by_hand():
    assert check_bool("x", np.True_) is True
    assert check_int("x", np.int32(3), 1, 5) == 3 and type(check_int("x", np.int32(3))) is int
    assert check_number("x", np.float32(0.5), 0, 1) == 0.5
    for bad in (True, 2.0, "2", None):
        with pytest.raises(ValueError, match="^x must be an integer"):
            check_int("x", bad)
    with pytest.raises(ValueError, match=r"^x must be an integer in \[1, 5\], got 6$"):
        check_int("x", 6, 1, 5)
    for bad in (float("nan"), float("inf"), True, "0.5"):
        with pytest.raises(ValueError, match="^x must be a finite number"):
            check_number("x", bad)
    with pytest.raises(ValueError, match=r"in \(0, 1\], got 0$"):
        check_number("x", 0, 0, 1, low_open=True)


def test_the_gate_names_the_source_the_keyword_and_the_closest_valid_one():
    with pytest.raises(ValueError, match=r"^row 3: unknown keyword 'max_trns' for ragen/Sokoban-v0 "
                                         r"\(did you mean 'max_turns'\?\); accepted: "):
        validate_env_kwargs("ragen/Sokoban-v0", {"max_trns": 3}, source="row 3")
    with pytest.raises(ValueError, match=r"^unknown environment 'ragen/Sokoban-v1' \(did you mean 'ragen/Sokoban-v0'\?\)"):
        validate_env_kwargs("ragen/Sokoban-v1", {}, source="")
    with pytest.raises(ValueError, match=r"^f: unknown environment \['ragen/Sokoban-v0'\]; known: "):
        validate_env_kwargs(["ragen/Sokoban-v0"], {}, source="f")
    assert closest("ragen/frozenlake-v0", ragen_envs.EVAL_SEEDS and [s.id for s in ragen_envs.ENV_SPECS]) \
        == "ragen/FrozenLake-v0"
    with pytest.raises(ValueError, match="^f: think must be true or false"):
        validate_env_kwargs("ragen/Sokoban-v0", {"think": "false"}, source="f")
    with pytest.raises(ValueError, match="^f: env kwargs must be an object"):
        validate_env_kwargs("ragen/Sokoban-v0", ["think"], source="f")
    with pytest.raises(ValueError, match="^f: env kwarg names must be strings"):
        validate_env_kwargs("ragen/Sokoban-v0", {1: 2}, source="f")
    with pytest.raises(ValueError, match=r"^f: max_turns=1000: .*--kwarg-limit max_turns=HIGH\)$"):
        validate_env_kwargs("ragen/Sokoban-v0", {"max_turns": 1000}, source="f")
    assert validate_env_kwargs("ragen/Sokoban-v0", None, source="f") == {}


@pytest.mark.parametrize("name", sorted(OPERATOR_ONLY))
def test_operator_only_keywords_come_from_the_operator_alone(name):
    env_id = "ragen/WebShop-v0"
    assert name in accepted_kwargs(env_id)
    with pytest.raises(ValueError, match=rf"^a file: {name} is an operator-only setting, never taken from a file "
                                         rf"or a client \(the operator gives it on the command line: --env-kwarg {name}=...\)$"):
        validate_env_kwargs(env_id, {name: "x"}, source="a file")
    assert validate_env_kwargs(env_id, {name: "x"}, source="--env-kwarg", operator=True) == {name: "x"}


class _Listener:
    """A TCP port that counts the connections made to it (none may be made)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def listener():
    lst = _Listener()
    yield lst
    lst.close()


def _settings(env_kwargs):
    return {"format": "ragen-envs/protocol-settings", "version": 1, "env_id": "ragen/WebShop-v0",
            "env_kwargs": env_kwargs, "reply_prefix": "<think>", "max_new_tokens": 52, "eot_token": None,
            "temperature": 0.5, "history": "tokens"}


def test_a_model_folder_cannot_send_the_evaluation_to_another_host(tmp_path, listener, capsys):
    from ragen_envs.cli import main

    model = tmp_path / "model"
    model.mkdir()
    (model / "ragen_protocol.json").write_text(json.dumps(_settings({"backend": "remote", "base_url": listener.url})))
    assert main(["eval", "ragen/WebShop-v0", "--agent", f"hf:{model}", "--out", str(tmp_path / "e"), "--seeds", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "backend is an operator-only setting" in err and "ragen_protocol.json" in err, err
    assert listener.connections == 0
    assert not (tmp_path / "e").exists()


def test_saved_settings_never_carry_operator_settings(tmp_path):
    from ragen_envs.lm.settings import ProtocolSettings, load_settings, save_settings

    settings = ProtocolSettings(env_id="ragen/WebShop-v0", env_kwargs={"think": False, "backend": "mini",
                                                                        "render_mode": "rgb_array"})
    save_settings(tmp_path, settings)
    assert json.loads((tmp_path / "ragen_protocol.json").read_text())["env_kwargs"] == {"think": False}
    assert load_settings(tmp_path).env_kwargs == {"think": False}
    for bad, what in (({"think": "false"}, "think must be true or false"), ({"thinq": True}, "did you mean 'think'")):
        (tmp_path / "ragen_protocol.json").write_text(json.dumps(_settings(bad)))
        with pytest.raises(ValueError, match=what):
            load_settings(tmp_path)


def _dataset_row(env_kwargs):
    return {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                         {"role": "assistant", "content": "<think>a</think><answer>search[x]</answer>"}],
            "env_id": "ragen/WebShop-v0", "env_kwargs": json.dumps(env_kwargs), "success": True, "return": 1.0}


@pytest.mark.parametrize("env_kwargs,what", [
    (lambda url: {"backend": "remote", "base_url": url}, "backend is an operator-only setting"),
    (lambda url: {"catalog": "/etc/passwd"}, "catalog is an operator-only setting"),
    (lambda url: {"tips": "false"}, "tips must be true or false"),
    (lambda url: {"max_turn": 3}, "did you mean 'max_turns'"),
])
def test_a_dataset_row_cannot_reach_operator_settings(tmp_path, listener, capsys, env_kwargs, what):
    from ragen_envs.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(_dataset_row(env_kwargs(listener.url))) + "\n")
    assert main(["sft", "--data", str(data), "--out", str(tmp_path / "s"), "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"ragen sft: error: --data {data}: env_kwargs: ") and what in err, err
    assert listener.connections == 0


def test_command_line_typos_name_the_flag_and_the_closest_name(tmp_path, capsys):
    from ragen_envs.cli import main

    assert main(["train", "ragen/Sokoban-v0", "--set", "num_groups", "--out", str(tmp_path / "t")]) == 2
    assert capsys.readouterr().err.strip() == "ragen train: error: --set expects KEY=VALUE, got 'num_groups'"
    assert main(["train", "ragen/Sokoban-v0", "--env-kwarg", "max_trns=3", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragen train: error: --env-kwarg: unknown keyword 'max_trns' for ragen/Sokoban-v0 "
                          "(did you mean 'max_turns'?)"), err
    assert not (tmp_path / "t").exists()
    for command in (["play", "ragen/Sokoban-v1"], ["eval", "ragen/Sokoban-v1", "--agent", "random", "--out", str(tmp_path / "e")]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert "unknown environment 'ragen/Sokoban-v1' (did you mean 'ragen/Sokoban-v0'?)" in err and err.count("\n") == 0
    assert main(["play", "ragen/Sokoban-v0", "--env-kwarg", "think=maybe"]) == 2
    assert "think must be true or false" in capsys.readouterr().err


def test_episode_prompts_and_rows_pass_the_gate():
    from ragen_envs.integrations.episodes import episode_prompt, parse_episode_prompt, spec_from_row

    good = episode_prompt("ragen/Sokoban-v0", 5, None, {"max_turns": np.int64(3)})
    assert parse_episode_prompt(good).env_kwargs == {"max_turns": 3}
    for kwargs, what in (({"backend": "remote", "base_url": "http://x"}, "backend is an operator-only setting"),
                         ({"think": "false"}, "think must be true or false"),
                         ({"max_trns": 2}, "did you mean 'max_turns'")):
        with pytest.raises(ValueError, match=what):
            episode_prompt("ragen/WebShop-v0", 5, None, kwargs)
        prompt = "ragen-episode:" + json.dumps({"env_id": "ragen/WebShop-v0", "seed": 5, "env_kwargs": kwargs})
        with pytest.raises(ValueError, match=f"^malformed episode prompt .*{what}"):
            parse_episode_prompt(prompt)
        with pytest.raises(ValueError, match=what):
            spec_from_row({"extra_info": {"env_id": "ragen/WebShop-v0", "seed": 5, "env_kwargs": json.dumps(kwargs)}})
    for seed in (2**70, -1, 2**32):
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
            parse_episode_prompt("ragen-episode:" + json.dumps({"env_id": "ragen/Sokoban-v0", "seed": seed}))
    deep = "ragen-episode:" + "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match="^malformed episode prompt"):
        parse_episode_prompt(deep)


def test_trl_dataset_seeds_are_checked_in_one_line():
    from ragen_envs.integrations.trl import make_dataset

    for bad in ([2**70], [-3], [True]):
        with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*32\), got "):
            make_dataset("ragen/Sokoban-v0", bad)
    with pytest.raises(ValueError, match=r"^noise_seed must be an integer in \[0, 2\*\*32\)"):
        make_dataset("ragen/Sokoban-v0", [1], [2**40])
    assert make_dataset("ragen/Sokoban-v0", [np.int64(3)])["seed"] == [3]
