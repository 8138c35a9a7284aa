"""The states an episode went through, for the report's trajectory viewer.

An episode record holds text, not pictures, so the viewer replays it: reset with the same
seed (and noise seed), step with the recorded replies, and after each step keep the ansi
text grid (``env.unwrapped.state_text()``) and, when the ``renderers`` package and pygame
are importable and the env offers ``render_mode="rgb_array"``, the rendered frame as a PNG.
The replay is checked against the recorded observations; an episode that does not replay
(played with other env kwargs) keeps its observations only.
"""

from __future__ import annotations

import base64
import os
import struct
import zlib
from typing import Any

import gymnasium as gym
import numpy as np

from ..protocol import Episode

__all__ = ["png_bytes", "png_data_uri", "downscale", "EpisodeReplayer", "rgb_available"]


def png_bytes(image: np.ndarray) -> bytes:
    """A PNG file of an ``(H, W, 3)`` or ``(H, W, 4)`` uint8 image (8 bits per channel)."""
    arr = np.ascontiguousarray(np.asarray(image))
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"need an (H, W, 3|4) uint8 image, got shape {arr.shape} dtype {arr.dtype}")
    height, width, channels = arr.shape
    raw = np.concatenate([np.zeros((height, 1), np.uint8), arr.reshape(height, width * channels)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2 if channels == 3 else 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + chunk(b"IEND", b"")


def png_data_uri(image: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode("ascii")


def downscale(image: np.ndarray, max_side: int) -> np.ndarray:
    """Shrink by an integer factor (box average) until the longer side is at most ``max_side``."""
    h, w = image.shape[:2]
    factor = -(-max(h, w) // max_side)
    if factor <= 1:
        return image
    h2, w2 = h // factor, w // factor
    img = image[: h2 * factor, : w2 * factor].astype(np.float32)
    img = img.reshape(h2, factor, w2, factor, -1).mean(axis=(1, 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def rgb_available() -> bool:
    """The optional renderers package and pygame can be imported."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # no banner on stdout
    try:
        import pygame  # noqa: F401
        import renderers  # noqa: F401
    except ImportError:
        return False
    return True


def _offers_rgb(env_id: str) -> bool:
    """The registered env class lists ``rgb_array`` among its render modes."""
    try:
        from gymnasium.envs.registration import load_env_creator

        entry = gym.spec(env_id).entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception:  # noqa: BLE001 - unknown id: no pictures
        return False
    return "rgb_array" in (getattr(creator, "metadata", None) or {}).get("render_modes", ())


class EpisodeReplayer:
    """Replays episodes of one env id; keeps one env (text) and one rgb env per kwargs."""

    def __init__(self, env_kwargs: dict[str, Any] | None = None, rgb: bool = True, max_side: int = 240) -> None:
        self.env_kwargs = dict(env_kwargs or {})
        self.rgb = rgb and rgb_available()
        self.max_side = max_side
        self._envs: dict[tuple, gym.Env | None] = {}

    def _env(self, env_id: str, think: bool, rgb: bool) -> gym.Env | None:
        key = (env_id, think, rgb)
        if rgb and not _offers_rgb(env_id):
            return None
        if key not in self._envs:
            kwargs = dict(self.env_kwargs)
            kwargs.setdefault("think", think)
            if rgb:
                kwargs["render_mode"] = "rgb_array"
            try:
                self._envs[key] = gym.make(env_id, **kwargs)
            except Exception:  # noqa: BLE001 - unknown id, no rgb mode, bad kwargs: no replay
                self._envs[key] = None
        return self._envs[key]

    def replay(self, episode: Episode, frames: bool = True) -> dict[str, Any]:
        """``{"states": [text per state], "frames": [png data URI per state] | None}``.

        State 0 is the one after reset, state k the one after turn k. ``states`` is empty
        when the episode cannot be replayed; ``frames`` is None without rgb rendering.
        """
        if frames and self.rgb:
            env = self._env(episode.env_id, episode.think, True)
            if env is not None:
                try:
                    result = self._replay(env, episode, True)
                except Exception:  # noqa: BLE001 - a renderer failure only costs the pictures
                    result = None
                if result is not None:
                    return result
        env = self._env(episode.env_id, episode.think, False)
        if env is None:
            return {"states": [], "frames": None}
        try:
            return self._replay(env, episode, False) or {"states": [], "frames": None}
        except Exception:  # noqa: BLE001 - an unreplayable record keeps its observations
            return {"states": [], "frames": None}

    def _replay(self, env: gym.Env, episode: Episode, rgb: bool) -> dict[str, Any] | None:
        options = None if episode.noise_seed is None else {"noise_seed": episode.noise_seed}
        obs, _ = env.reset(seed=episode.seed, options=options)
        if episode.turns and obs != episode.turns[0].observation:
            return None
        base = env.unwrapped
        states = [base.state_text()]
        pictures = [self._frame(env)] if rgb else []
        for i, turn in enumerate(episode.turns):
            obs, *_ = env.step(turn.response)
            expected = episode.turns[i + 1].observation if i + 1 < len(episode.turns) else episode.final_observation
            if expected and obs != expected:
                return None
            states.append(base.state_text())
            if rgb:
                pictures.append(self._frame(env))
        return {"states": states, "frames": pictures if rgb and all(pictures) else None}

    def _frame(self, env: gym.Env) -> str | None:
        image = env.render()
        if not isinstance(image, np.ndarray) or image.ndim != 3:
            return None
        return png_data_uri(downscale(image.astype(np.uint8, copy=False), self.max_side))

    def close(self) -> None:
        for env in self._envs.values():
            if env is not None:
                env.close()
        self._envs = {}
