"""The one door to pygame: a lazy import with a helpful error, and small drawing helpers.

Every renderer draws on an off-screen surface ``SUPERSAMPLE`` times larger than the result and
scales it down with ``smoothscale``: that antialiases every edge (circles, diagonals, text)
without per-primitive antialiasing calls. Nothing here opens a window or initialises the
display; only :mod:`renderers.window` does, for ``render_mode="human"``.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from gymnasium.error import DependencyNotInstalled

__all__ = [
    "SUPERSAMPLE",
    "Color",
    "require_pygame",
    "font",
    "canvas",
    "finish",
    "surface_to_array",
    "array_to_surface",
    "mix",
    "shade",
    "vertical_gradient",
    "text_fit",
    "clean_text",
    "layer",
    "draw_character",
]

SUPERSAMPLE = 2
Color = tuple[int, int, int]
INSTALL_HINT = 'pip install "ragen-envs[render]"'


def headless() -> bool:
    """No display to draw on: neither X11 (``DISPLAY``) nor Wayland (``WAYLAND_DISPLAY``)."""
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def require_pygame() -> Any:
    """Import pygame (pygame-ce), or raise ``DependencyNotInstalled`` naming the extra.

    Without a display, SDL's video and audio drivers default to ``dummy`` (unless already
    set): otherwise SDL probes Wayland and ALSA and prints "XDG_RUNTIME_DIR is invalid or
    not set" and ALSA errors to stderr on a headless machine (a ``human`` window there has
    nowhere to go anyway)."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    if headless():
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    try:
        import pygame
    except ImportError as exc:
        raise DependencyNotInstalled(
            f"rendering needs pygame (provided by pygame-ce), which is not installed: run `{INSTALL_HINT}`"
        ) from exc
    return pygame


@lru_cache(maxsize=None)
def _font(size: int, bold: bool) -> Any:
    pygame = require_pygame()
    f = pygame.font.Font(None, size)  # pygame's bundled font: no system fonts needed
    f.set_bold(bold)
    return f


def font(size: int, bold: bool = False) -> Any:
    """pygame's bundled font at ``size`` pixels (cached; initialises ``pygame.font`` once)."""
    pygame = require_pygame()
    if not pygame.font.get_init():  # first use, or someone called pygame.quit(): old fonts are dead
        _font.cache_clear()
        pygame.font.init()
    return _font(max(6, int(size)), bool(bold))


def canvas(width: int, height: int, color: Color = (0, 0, 0)) -> Any:
    """An opaque off-screen 32-bit surface filled with ``color``."""
    pygame = require_pygame()
    surface = pygame.Surface((int(width), int(height)), 0, 32)
    surface.fill(color)
    return surface


def surface_to_array(surface: Any) -> np.ndarray:
    """A surface as an ``(H, W, 3)`` uint8 array (a copy)."""
    pygame = require_pygame()
    width, height = surface.get_size()
    raw = pygame.image.tobytes(surface, "RGB")
    return np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3).copy()


def array_to_surface(frame: np.ndarray) -> Any:
    """An ``(H, W, 3)`` uint8 array as a new surface."""
    pygame = require_pygame()
    frame = np.ascontiguousarray(frame, dtype=np.uint8)
    height, width = frame.shape[:2]
    return pygame.image.frombytes(frame.tobytes(), (width, height), "RGB")


def finish(surface: Any, scale: int = SUPERSAMPLE) -> np.ndarray:
    """Scale a supersampled drawing down by ``scale`` and return it as an RGB array."""
    pygame = require_pygame()
    if scale != 1:
        width, height = surface.get_size()
        surface = pygame.transform.smoothscale(surface, (width // scale, height // scale))
    return surface_to_array(surface)


def mix(a: Sequence[int], b: Sequence[int], t: float) -> Color:
    """Linear blend of two colours (``t=0`` gives ``a``)."""
    t = min(max(float(t), 0.0), 1.0)
    return tuple(int(round(x + (y - x) * t)) for x, y in zip(a[:3], b[:3]))  # type: ignore[return-value]


def shade(color: Sequence[int], factor: float) -> Color:
    """Lighten (``factor > 0``, towards white) or darken (``factor < 0``, towards black)."""
    return mix(color, (255, 255, 255), factor) if factor >= 0 else mix(color, (0, 0, 0), -factor)


def vertical_gradient(surface: Any, rect: Any, top: Color, bottom: Color) -> None:
    """Fill ``rect`` with a top-to-bottom gradient."""
    pygame = require_pygame()
    rect = pygame.Rect(rect)
    span = max(rect.height - 1, 1)
    for y in range(rect.height):
        pygame.draw.line(surface, mix(top, bottom, y / span), (rect.left, rect.top + y), (rect.right - 1, rect.top + y))


def text_fit(text: str, max_width: int, size: int, min_size: int, bold: bool = True) -> tuple[Any, str]:
    """The largest font in ``[min_size, size]`` that fits ``text`` in ``max_width`` pixels;
    if even ``min_size`` is too wide the text is cut and ends with ``...``."""
    text = clean_text(text)
    for s in range(int(size), int(min_size) - 1, -2):
        f = font(s, bold)
        if f.size(text)[0] <= max_width:
            return f, text
    f = font(min_size, bold)
    while text and f.size(text + "...")[0] > max_width:
        text = text[:-1]
    return f, text + "..."


def clean_text(text: str) -> str:
    """Text pygame can draw on one line: no NULs or control characters, tabs as spaces."""
    text = str(text).replace("\t", "    ")
    return "".join(ch if ch.isprintable() or ch == " " else " " for ch in text)


def layer(surface: Any) -> Any:
    """A fully transparent surface the size of ``surface``, to paint RGBA shapes on and blit."""
    pygame = require_pygame()
    return pygame.Surface(surface.get_size(), pygame.SRCALPHA, 32)


# --------------------------------------------------------------------------- shared sprite
def draw_character(
    surface: Any,
    center: tuple[float, float],
    radius: float,
    body: Color,
    mood: str = "normal",
    beanie: Color | None = None,
    clip_bottom: float | None = None,
) -> None:
    """The player: a round, shaded body with eyes and a mouth.

    ``mood`` is ``"normal"`` (open eyes, small smile), ``"happy"`` (closed ^ ^ eyes, wide
    smile) or ``"dizzy"`` (X eyes, round mouth). ``beanie`` puts a woolly hat of that colour
    on. ``clip_bottom`` hides everything below that y (a body sinking into water).
    """
    pygame = require_pygame()
    if mood not in ("normal", "happy", "dizzy"):
        raise ValueError(f"mood must be 'normal', 'happy' or 'dizzy', got {mood!r}")
    cx, cy, r = float(center[0]), float(center[1]), float(radius)
    old_clip = surface.get_clip()
    base_clip = old_clip
    if clip_bottom is not None:
        base_clip = pygame.Rect(0, 0, surface.get_width(), int(clip_bottom)).clip(old_clip)
    surface.set_clip(base_clip)
    ink = shade(body, -0.6)
    rim = max(2, int(r * 0.08))
    pygame.draw.circle(surface, ink, (cx, cy), r)
    pygame.draw.circle(surface, shade(body, -0.22), (cx, cy), r - rim)
    pygame.draw.circle(surface, body, (cx - 0.07 * r, cy - 0.08 * r), 0.82 * r)
    pygame.draw.ellipse(surface, shade(body, 0.45), pygame.Rect(cx - 0.62 * r, cy - 0.72 * r, 0.42 * r, 0.26 * r))
    # cheeks
    cheek = mix(body, (255, 120, 140), 0.55)
    for side in (-1, 1):
        pygame.draw.ellipse(surface, cheek, pygame.Rect(cx + side * 0.55 * r - 0.13 * r, cy + 0.14 * r, 0.26 * r, 0.16 * r))
    # eyes
    width = max(2, int(r * 0.09))
    for side in (-1, 1):
        ex, ey = cx + side * 0.3 * r, cy - 0.1 * r
        if mood == "happy":
            rect = pygame.Rect(ex - 0.16 * r, ey - 0.08 * r, 0.32 * r, 0.3 * r)
            pygame.draw.arc(surface, ink, rect, 0.15 * np.pi, 0.85 * np.pi, width)
        elif mood == "dizzy":
            d = 0.12 * r
            pygame.draw.line(surface, ink, (ex - d, ey - d), (ex + d, ey + d), width)
            pygame.draw.line(surface, ink, (ex - d, ey + d), (ex + d, ey - d), width)
        else:
            eye = pygame.Rect(ex - 0.19 * r, ey - 0.25 * r, 0.38 * r, 0.5 * r)
            pygame.draw.ellipse(surface, ink, eye.inflate(rim, rim))
            pygame.draw.ellipse(surface, (255, 255, 255), eye)
            pygame.draw.circle(surface, (25, 25, 35), (ex + 0.04 * r, ey + 0.07 * r), 0.13 * r)
            pygame.draw.circle(surface, (255, 255, 255), (ex - 0.01 * r, ey + 0.01 * r), 0.045 * r)
    # mouth
    if mood == "happy":
        mouth = pygame.Rect(cx - 0.26 * r, cy + 0.02 * r, 0.52 * r, 0.42 * r)
        pygame.draw.ellipse(surface, (120, 30, 40), mouth.inflate(0, 0))
        pygame.draw.rect(surface, body, pygame.Rect(mouth.left - 2, mouth.top - 2, mouth.width + 4, mouth.height * 0.45 + 2))
        pygame.draw.line(surface, ink, (mouth.left, mouth.top + mouth.height * 0.45), (mouth.right, mouth.top + mouth.height * 0.45), width)
    elif mood == "dizzy":
        pygame.draw.ellipse(surface, ink, pygame.Rect(cx - 0.09 * r, cy + 0.2 * r, 0.18 * r, 0.22 * r), width)
    else:
        mouth = pygame.Rect(cx - 0.18 * r, cy + 0.04 * r, 0.36 * r, 0.3 * r)
        pygame.draw.arc(surface, ink, mouth, 1.15 * np.pi, 1.85 * np.pi, width)
    if beanie is not None:
        top = pygame.Rect(0, 0, surface.get_width(), int(cy - 0.42 * r))
        surface.set_clip(top.clip(base_clip))
        pygame.draw.circle(surface, shade(beanie, -0.5), (cx, cy), r + 1)
        pygame.draw.circle(surface, beanie, (cx - 0.05 * r, cy + 0.02 * r), r - rim)
        for k in range(-3, 4):  # knitted ribs, inside the dome
            x = cx + k * 0.22 * r
            y_top = cy - math.sqrt(max(r * r - (x - cx) ** 2, 0.0)) + rim
            pygame.draw.line(surface, shade(beanie, -0.2), (x, y_top), (x + 0.05 * r * k, cy - 0.45 * r), max(1, rim // 2))
        surface.set_clip(base_clip)
        brim = pygame.Rect(cx - 0.9 * r, cy - 0.56 * r, 1.8 * r, 0.24 * r)
        pygame.draw.rect(surface, shade(beanie, -0.5), brim.inflate(rim, rim), border_radius=int(0.12 * r + rim))
        pygame.draw.rect(surface, (245, 245, 250), brim, border_radius=int(0.12 * r))
        pygame.draw.circle(surface, shade(beanie, -0.5), (cx, cy - 1.02 * r), 0.2 * r + rim / 2)
        pygame.draw.circle(surface, (250, 250, 255), (cx, cy - 1.02 * r), 0.2 * r)
    surface.set_clip(old_clip)
