"""Image observations for vision-language agents: the state as a picture, the protocol as text.

:class:`ImageObservation` wraps a grid env (Sokoban, LargeSokoban, SokobanNewVocab, FrozenLake,
Lights Out)
so that each observation is a dict::

    {"text": "...Turn 1:\\nState:\\n<image>\\nYou have 10 actions left. ...", "image": frame}

``text`` is the protocol's observation unchanged (turn header, budgets, format line, reward
lines) except that the state grid is replaced by the marker ``<image>`` (the reference's
VisualSimpleSokoban put a literal ``"<images>"`` there too) and, by default, the symbol legend
is left out (it explains text symbols the picture does not use). ``image`` is the env's
``rgb_array`` frame (``renderers``, procedural, deterministic; a Sokoban env made with
``frame_style="reference"`` draws the reference's 16-px tiles) shrunk by ``scale`` (block
means). Same seed, same instance as the text env: the wrapper only changes how the state is
shown; actions, parsing, rewards and ``info`` are the text env's.

:func:`content_parts` turns an observation into OpenAI-style chat content parts (text, a PNG
``data:`` URL where the marker was, text), the form vision endpoints take; the PNG is
quantised to ``colors`` colours so a frame is a few KB (6x6 Sokoban at the default scale 2:
~4 KB). :func:`text_record` is the observation as one string (the marker kept), which
``ragen eval --image-obs`` stores in ``episodes.jsonl``.

Needs the ``render`` extra (pygame-ce draws the frames, Pillow writes the PNG).
"""

from __future__ import annotations

import base64
import copy
import io
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import DependencyNotInstalled

from .envs.base import CHARSET, MAX_TEXT_LENGTH, TextGameEnv
from .envs.space import CharsetText

__all__ = ["IMAGE_MARKER", "ImageObservation", "content_parts", "png_data_url", "text_record"]

IMAGE_MARKER = "<image>"


def _grid_env(env: gym.Env) -> TextGameEnv:
    base = env.unwrapped
    if type(base).__name__ == "SokobanPOMDPEnv":
        raise ValueError("ImageObservation draws the whole board, which would undo SokobanPOMDP's window; "
                         "use it on ragen/Sokoban-v0")
    if not isinstance(base, TextGameEnv) or not base._legend():
        raise ValueError(
            f"ImageObservation shows a grid state as a picture; {type(base).__name__} has no grid "
            "(use it on ragen/Sokoban-v0 and its variants, ragen/FrozenLake-v0 or ragen/LightsOut-v0)"
        )
    return base


def _shrink(frame: np.ndarray, scale: int) -> np.ndarray:
    if scale == 1:
        return frame
    h, w = frame.shape[0] // scale * scale, frame.shape[1] // scale * scale
    blocks = frame[:h, :w].reshape(h // scale, scale, w // scale, scale, 3).astype(np.uint32)
    # integer rounding of the block mean: the same bytes on every machine
    return ((blocks.sum(axis=(1, 3)) + scale * scale // 2) // (scale * scale)).astype(np.uint8)


class ImageObservation(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Observations ``{"text": str, "image": (H, W, 3) uint8}`` (see the module docstring).

    Args:
        env: a grid env (``ragen/Sokoban-v0``, ``ragen/LargeSokoban-v0``,
            ``ragen/SokobanNewVocab-v0``, ``ragen/FrozenLake-v0``, ``ragen/LightsOut-v0``; not
            ``ragen/SokobanPOMDP-v0``, whose frames show the whole board under fog).
        scale: the frame is shrunk by this integer factor (2: a 6x6 Sokoban is 192x192); None
            (the default): 2, or 1 for a Sokoban env made with ``frame_style="reference"``
            (the reference's 16-px tiles, a 6x6 room 96x96, as its VisualSimpleSokoban).
        colors: the PNG of :func:`content_parts` is quantised to this many colours (2..256).
        keep_legend: keep the symbol legend in the first observation's text.
        keep_text_state: keep the text grid after the marker as well.
    """

    def __init__(self, env: gym.Env, scale: int | None = None, colors: int = 64, keep_legend: bool = False,
                 keep_text_state: bool = False) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, scale=scale, colors=colors, keep_legend=keep_legend,
                                                 keep_text_state=keep_text_state)
        gym.Wrapper.__init__(self, env)
        base = _grid_env(env)
        if scale is None:
            scale = 1 if getattr(base, "frame_style", "default") == "reference" else 2
        for name, value, low, high in (("scale", scale, 1, 16), ("colors", colors, 2, 256)):
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        self.scale, self.colors = scale, colors
        self.keep_legend, self.keep_text_state = bool(keep_legend), bool(keep_text_state)
        # The frame's size is fixed by the env's kwargs: draw a throwaway copy once to learn it.
        probe = copy.deepcopy(base)
        probe.reset(seed=0)
        shape = _shrink(probe._frame(), scale).shape
        probe.close()
        self.observation_space = spaces.Dict({
            "text": CharsetText(MAX_TEXT_LENGTH, min_length=0, charset=CHARSET),
            "image": spaces.Box(0, 255, shape, np.uint8),
        })

    def _observe(self, text: str, first: bool) -> dict[str, Any]:
        base = self.env.unwrapped
        if first and not self.keep_legend and base.legend():
            legend = "\nThe meaning of each symbol in the state is:\n" + ", ".join(
                f"{sym}: {meaning}" for sym, meaning in base.legend().items())
            text = text.replace(legend, "", 1)
        block = f"State:\n{base.state_text()}\n"
        at = text.rfind(block)
        if at >= 0:  # the final observation ("Reward:\n...") shows no state
            shown = f"State:\n{IMAGE_MARKER}\n" + (block[len("State:\n"):] if self.keep_text_state else "")
            text = text[:at] + shown + text[at + len(block):]
        return {"text": text, "image": _shrink(base._frame(), self.scale)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observe(obs, first=True), info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(obs, first=False), reward, terminated, truncated, info


def png_data_url(image: np.ndarray, colors: int = 64) -> str:
    """``data:image/png;base64,...`` of an ``(H, W, 3)`` uint8 image, quantised to ``colors``."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise DependencyNotInstalled('image observations need Pillow: pip install "ragen-envs[render]"') from exc
    picture = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8), "RGB")
    if colors < 256:
        picture = picture.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def content_parts(obs: dict[str, Any], colors: int = 64) -> list[dict[str, Any]]:
    """An image observation as OpenAI chat content parts: the text before the marker, the
    frame as a PNG ``image_url``, the text after it (empty texts left out)."""
    before, marker, after = obs["text"].partition(IMAGE_MARKER)
    parts: list[dict[str, Any]] = []
    if before:
        parts.append({"type": "text", "text": before})
    if marker:
        parts.append({"type": "image_url", "image_url": {"url": png_data_url(obs["image"], colors)}})
    if after:
        parts.append({"type": "text", "text": after})
    return parts


def text_record(obs: Any) -> str:
    """The observation as one string: a text observation itself, an image one its text."""
    return obs if isinstance(obs, str) else obs["text"]
