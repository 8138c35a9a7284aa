"""Image observations: the wrapper's space and text, small deterministic PNGs, content parts
through ``ragen eval`` to an OpenAI-compatible endpoint."""

from __future__ import annotations

import base64
import io
import json
import threading
import warnings
from http.server import BaseHTTPRequestHandler, HTTPServer

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pygame")
pytest.importorskip("PIL")

import ragen_envs  # noqa: E402,F401
from ragen_envs.agents import make_agent  # noqa: E402
from ragen_envs.eval import read_episodes, run_episode  # noqa: E402
from ragen_envs.vision import IMAGE_MARKER, ImageObservation, content_parts, png_data_url  # noqa: E402

GRID_IDS = ["ragen/Sokoban-v0", "ragen/LargeSokoban-v0", "ragen/SokobanNewVocab-v0", "ragen/FrozenLake-v0",
            "ragen/LightsOut-v0"]


def _png(url: str) -> bytes:
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    return base64.b64decode(url[len(prefix):])


@pytest.mark.parametrize("env_id", GRID_IDS)
def test_observations_are_in_the_space_small_and_deterministic(env_id):
    env = ImageObservation(gym.make(env_id))
    text_env = gym.make(env_id)
    obs, _ = env.reset(seed=123)
    text_obs, _ = text_env.reset(seed=123)
    assert env.observation_space.contains(obs)
    assert obs["text"].count(IMAGE_MARKER) == 1 and "The meaning of each symbol" not in obs["text"]
    # the same instance: the text around the state is the text env's
    state = text_env.unwrapped.state_text()
    assert obs["text"].split(IMAGE_MARKER)[1] == text_obs.split(state)[1]
    parts = content_parts(obs)
    assert [p["type"] for p in parts] == ["text", "image_url", "text"]
    png = _png(parts[1]["image_url"]["url"])
    assert png.startswith(b"\x89PNG") and len(png) < 8_000  # a few KB
    again, _ = ImageObservation(gym.make(env_id)).reset(seed=123)
    assert np.array_equal(again["image"], obs["image"]) and content_parts(again) == parts
    obs, *_ = env.step("<think>x</think><answer>nonsense</answer>")
    assert env.observation_space.contains(obs) and obs["text"].startswith("Reward:\n")


def test_check_env_passes_on_the_wrapped_env():
    from gymnasium.utils.env_checker import check_env

    env = ImageObservation(gym.make("ragen/Sokoban-v0"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert all("wrapped" in str(w.message) or "unwrapped" in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_options_and_refusals():
    env = ImageObservation(gym.make("ragen/Sokoban-v0"), scale=1, keep_legend=True, keep_text_state=True)
    obs, _ = env.reset(seed=123)
    assert obs["image"].shape == (384, 384, 3) and "The meaning of each symbol" in obs["text"]
    assert f"State:\n{IMAGE_MARKER}\n{env.unwrapped.state_text()}\n" in obs["text"]
    for env_id in ("ragen/Countdown-v0", "ragen/Bandit-v0", "ragen/SokobanPOMDP-v0"):
        with pytest.raises(ValueError):
            ImageObservation(gym.make(env_id))
    with pytest.raises(ValueError, match="scale"):
        ImageObservation(gym.make("ragen/Sokoban-v0"), scale=0)
    assert png_data_url(np.zeros((4, 4, 3), np.uint8)).startswith("data:image/png;base64,")


def test_expert_plays_through_the_wrapper_and_the_record_keeps_text():
    env = ImageObservation(gym.make("ragen/Sokoban-v0"))
    episode = run_episode(env, make_agent("expert", env=env), 123)
    assert episode.success and IMAGE_MARKER in episode.turns[0].observation
    assert isinstance(episode.final_observation, str)


class _Endpoint(BaseHTTPRequestHandler):
    """A chat-completions endpoint that records each request and answers seed 123's plan."""

    requests: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": "<think>push</think><answer>Down || Left || Up</answer>"}}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_eval_sends_content_parts_to_an_openai_endpoint(tmp_path, monkeypatch):
    pytest.importorskip("openai")
    from ragen_envs.eval.harness import evaluate

    server = HTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("RAGEN_VISION_TEST_KEY", "sk-test")
    try:
        agent = make_agent("openai:vision-test", base_url=f"http://127.0.0.1:{server.server_port}/v1",
                           api_key_env="RAGEN_VISION_TEST_KEY", max_retries=0)
        result = evaluate(agent, ["ragen/Sokoban-v0"], [123], tmp_path / "run", progress=False, image_obs=True)
    finally:
        server.shutdown()
    assert result.summary["envs"]["ragen/Sokoban-v0"]["success_rate"] == 1.0
    user = _Endpoint.requests[-1]["messages"][-1]
    assert user["role"] == "user" and [p["type"] for p in user["content"]] == ["text", "image_url", "text"]
    assert _png(user["content"][1]["image_url"]["url"]).startswith(b"\x89PNG")
    (episode,) = read_episodes(tmp_path / "run")
    assert IMAGE_MARKER in episode.turns[0].observation
    assert json.loads((tmp_path / "run" / "config.json").read_text())["image_obs"] is True


def test_frames_decode_to_the_quantised_frame():
    from PIL import Image

    env = ImageObservation(gym.make("ragen/LightsOut-v0"))
    obs, _ = env.reset(seed=1)
    decoded = np.asarray(Image.open(io.BytesIO(_png(content_parts(obs)[1]["image_url"]["url"]))).convert("RGB"))
    assert decoded.shape == obs["image"].shape
    assert np.abs(decoded.astype(int) - obs["image"].astype(int)).mean() < 8  # 64 colours, close to the frame
