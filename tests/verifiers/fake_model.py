"""Scripted episodes played on a local env, and a fake OpenAI-compatible server that answers
with them.

:func:`local_episode` plays one policy's replies on our env directly and keeps what the
model would have seen each turn (``chat_messages`` of the observations and replies so far).
:class:`FakeModel` is a ``POST /v1/chat/completions`` server on 127.0.0.1 that answers a
request whose messages equal one of those transcripts with that turn's reply, records every
request body, and answers anything else with HTTP 400 (so a transcript that differs from the
local one fails the rollout instead of getting a plausible reply).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the ids)
from ragen_envs.agents import make_agent
from ragen_envs.protocol.episode import chat_messages

# replies that break the protocol in different ways: no tags, an unknown action, nothing at
# all, a valid and an invalid action, and a valid answer with whitespace around it (which the
# history must keep as sent)
MALFORMED = (
    "I would move up.",
    "<think>hmm</think><answer>Jump</answer>",
    "",
    "<think>two</think><answer>Up || Sideways</answer>",
    "  \n<think>pad</think><answer>Left</answer>\n  ",
)


@dataclass
class Episode:
    env_id: str
    seed: int
    noise_seed: int | None
    system_prompt: str
    observations: list[str] = field(default_factory=list)  # obs_1 .. obs_T+1 (the last one the final)
    replies: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    format_ok: list[bool] = field(default_factory=list)
    success: bool = False
    terminated: bool = False
    truncated: bool = False

    def transcript(self, turn: int) -> list[dict]:
        """The messages the model receives for reply ``turn`` (0-based)."""
        return chat_messages(self.observations[: turn + 1], self.replies[:turn], self.system_prompt)

    @property
    def conversation(self) -> list[dict]:
        """Every message of the episode the model took part in (the final observation is not sent)."""
        return chat_messages(self.observations[: len(self.replies)], self.replies, self.system_prompt)

    @property
    def episode_return(self) -> float:
        return float(sum(self.rewards))


def local_episode(env_id: str, seed: int, noise_seed: int | None, policy: str, env_kwargs=None) -> Episode:
    """``policy``: ``expert`` (the solver), ``random`` (well-formed random answers) or
    ``malformed`` (:data:`MALFORMED` in turn)."""
    env = gym.make(env_id, **(env_kwargs or {}))
    obs, info = env.reset(seed=seed, options=None if noise_seed is None else {"noise_seed": noise_seed})
    ep = Episode(env_id, seed, noise_seed, info["system_prompt"], observations=[obs])
    agent = None if policy == "malformed" else make_agent(policy, env=env, **({"seed": seed} if policy == "random" else {}))
    done = False
    while not done:
        reply = MALFORMED[len(ep.replies) % len(MALFORMED)] if agent is None else agent.act(ep.transcript(len(ep.replies)))
        obs, reward, terminated, truncated, info = env.step(reply)
        ep.replies.append(reply)
        ep.observations.append(obs)
        ep.rewards.append(float(reward))
        ep.format_ok.append(bool(info["format_ok"]))
        ep.success = bool(info.get("success", False))
        ep.terminated, ep.truncated = bool(terminated), bool(truncated)
        done = terminated or truncated
    env.close()
    return ep


def _key(messages: list[dict]) -> str:
    return json.dumps(messages, sort_keys=True)


class FakeModel:
    """The scripted server; ``with FakeModel(episodes) as model: model.base_url``."""

    def __init__(self, episodes: list[Episode]) -> None:
        self.script: dict[str, str] = {}
        for ep in episodes:
            for turn, reply in enumerate(ep.replies):
                key = _key(ep.transcript(turn))
                if self.script.setdefault(key, reply) != reply:
                    raise ValueError(f"two scripts answer the same transcript differently ({ep.env_id} seed {ep.seed})")
        self.requests: list[dict] = []
        self.arrivals: list[float] = []  # time.perf_counter() of each request
        self.unmatched: list[dict] = []
        self._lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with model._lock:
                    model.arrivals.append(time.perf_counter())
                    model.requests.append(body)
                reply = model.script.get(_key(body.get("messages"))) if self.path == "/v1/chat/completions" else None
                if reply is None:
                    with model._lock:
                        model.unmatched.append(body)
                    self._send(400, {"error": {"message": "no scripted reply for this transcript", "type": "invalid_request_error"}})
                    return
                self._send(200, {
                    "id": f"chatcmpl-{len(model.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeModel":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def request_counts(self) -> dict[str, int]:
        """How often each transcript was asked for (messages reduced to role and content)."""
        counts: dict[str, int] = {}
        for body in self.requests:
            key = _key(body["messages"])
            counts[key] = counts.get(key, 0) + 1
        return counts
