"""Episodes as pictures: captions under frames, animated GIF (Pillow) and MP4 (imageio-ffmpeg).

    frames = [env.render()]                      # render_mode="rgb_array"
    ...                                          # one frame after each step
    save_gif(frames, "episode.gif", captions=["Start", "Turn 1: Down || Left"], fps=2)

Every captioned frame of one file gets a band of the same height (the longest caption's), so
all frames share one size. GIF note: Pillow stores identical consecutive frames as one frame
shown for their summed time (the animation is the same; the file has fewer frames).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
from gymnasium.error import DependencyNotInstalled

from ._pygame import INSTALL_HINT, SUPERSAMPLE, array_to_surface, canvas, clean_text, font, require_pygame, surface_to_array

__all__ = ["caption", "caption_frames", "save_gif", "save_mp4", "save_frames", "EXPORT_FORMATS"]

EXPORT_FORMATS = (".gif", ".mp4")
BAND_COLOR = (28, 28, 36)
TEXT_COLOR = (236, 236, 242)
FONT_SIZE = 18
PAD = 8


def _as_frame(frame, index: int | None = None) -> np.ndarray:
    arr = np.asarray(frame)
    where = "" if index is None else f" (frame {index})"
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"a frame must be an (H, W, 3) image array{where}, got shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise ValueError(f"a frame must have dtype uint8{where}, got {arr.dtype}")
    return np.ascontiguousarray(arr[:, :, :3])


def _wrap(text: str, f, width: int) -> list[str]:
    """Greedy word wrap to ``width`` pixels; newlines start new lines; over-long words break."""
    lines: list[str] = []
    for paragraph in str(text).split("\n"):
        line = ""
        for word in clean_text(paragraph).split(" "):
            if not word:
                continue
            candidate = f"{line} {word}" if line else word
            if f.size(candidate)[0] <= width:
                line = candidate
                continue
            if line:
                lines.append(line)
            while f.size(word)[0] > width and len(word) > 1:  # break a word wider than a line
                cut = len(word) - 1
                while cut > 1 and f.size(word[:cut])[0] > width:
                    cut -= 1
                lines.append(word[:cut])
                word = word[cut:]
            line = word
        lines.append(line)
    while len(lines) > 1 and not lines[-1]:
        lines.pop()
    return lines or [""]


# Caption text is laid out and drawn at SUPERSAMPLE times the size, then scaled down:
# smoother glyphs than small hinted text.
def _band_lines(text: str, width: int, font_size: int) -> list[str]:
    return _wrap(text, font(font_size * SUPERSAMPLE), max(width - 2 * PAD, 8) * SUPERSAMPLE)


def _band_height(n_lines: int, font_size: int) -> int:
    raw = 2 * PAD + n_lines * font(font_size * SUPERSAMPLE).get_linesize() / SUPERSAMPLE
    return int(math.ceil(raw / 16) * 16)  # keep sizes multiples of 16 for video encoders


def caption(frame: np.ndarray, text: str, min_lines: int = 1, max_lines: int = 4, font_size: int = FONT_SIZE) -> np.ndarray:
    """``frame`` with a dark band underneath holding ``text``, word-wrapped to the frame's width.

    The band fits ``max(min_lines, lines needed)`` lines, at most ``max_lines`` (the last shown
    line then ends with ``...``). Returns a new ``(H + band, W, 3)`` uint8 array.
    """
    pg = require_pygame()
    frame = _as_frame(frame)
    if not isinstance(min_lines, int) or not isinstance(max_lines, int) or not 0 <= min_lines <= max_lines or max_lines < 1:
        raise ValueError(f"need 0 <= min_lines <= max_lines and max_lines >= 1, got {min_lines}, {max_lines}")
    height, width = frame.shape[:2]
    k = SUPERSAMPLE
    big = font(font_size * k)
    lines = _band_lines(text, width, font_size)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        last = lines[-1]
        while last and big.size(last + "...")[0] > (width - 2 * PAD) * k:
            last = last[:-1]
        lines[-1] = last + "..."
    band = _band_height(max(min_lines, len(lines)), font_size)
    strip = canvas(width * k, band * k, BAND_COLOR)
    pg.draw.line(strip, (70, 70, 86), (0, 0), (width * k - 1, 0), k)
    y = PAD * k
    for line in lines:
        if line:
            strip.blit(big.render(line, True, TEXT_COLOR), (PAD * k, y))
        y += big.get_linesize()
    surf = canvas(width, height + band, BAND_COLOR)
    surf.blit(array_to_surface(frame), (0, 0))
    surf.blit(pg.transform.smoothscale(strip, (width, band)), (0, height))
    return surface_to_array(surf)


def caption_frames(frames: Sequence[np.ndarray], captions: Sequence[str], max_lines: int = 4, font_size: int = FONT_SIZE) -> list[np.ndarray]:
    """Caption every frame, all with the band height of the longest caption (one frame size)."""
    frames = [_as_frame(f, i) for i, f in enumerate(frames)]
    captions = [str(c) for c in captions]
    if len(captions) != len(frames):
        raise ValueError(f"got {len(captions)} captions for {len(frames)} frames: give one caption per frame")
    need = max((len(_band_lines(c, f.shape[1], font_size)) for f, c in zip(frames, captions)), default=1)
    lines = max(1, min(need, max_lines))
    return [caption(f, c, min_lines=lines, max_lines=max_lines, font_size=font_size) for f, c in zip(frames, captions)]


def _prepare(frames, captions, fps) -> list[np.ndarray]:
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    if isinstance(frames, np.ndarray) and frames.ndim == 3:
        raise ValueError("frames must be a list of (H, W, 3) images (got a single image)")
    frames = list(frames)
    if not frames:
        raise ValueError("no frames to save")
    frames = caption_frames(frames, captions) if captions is not None else [_as_frame(f, i) for i, f in enumerate(frames)]
    shape = frames[0].shape
    for i, f in enumerate(frames):
        if f.shape != shape:
            raise ValueError(f"all frames must have the same size: frame 0 is {shape}, frame {i} is {f.shape}")
    return frames


def save_gif(frames: Sequence[np.ndarray], path: str | os.PathLike, captions: Sequence[str] | None = None, fps: float = 2) -> Path:
    """Write ``frames`` (``(H, W, 3)`` uint8) as a looping animated GIF at ``fps`` frames a second."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise DependencyNotInstalled(f"GIF export needs Pillow, which is not installed: run `{INSTALL_HINT}`") from exc
    frames = _prepare(frames, captions, fps)
    path = Path(path)
    images = [Image.fromarray(f, "RGB").quantize(256, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE) for f in frames]
    duration = max(20, int(round(1000 / fps)))  # GIF stores centiseconds; most viewers clamp < 20 ms
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=duration, loop=0, optimize=False)
    return path


def save_mp4(frames: Sequence[np.ndarray], path: str | os.PathLike, captions: Sequence[str] | None = None, fps: float = 2) -> Path:
    """Write ``frames`` as an H.264 MP4 (needs the ``imageio-ffmpeg`` package and its ffmpeg)."""
    try:
        import imageio_ffmpeg
    except ImportError as exc:
        raise DependencyNotInstalled("MP4 export needs imageio-ffmpeg, which is not installed: run `pip install imageio-ffmpeg`") from exc
    frames = _prepare(frames, captions, fps)
    height, width = frames[0].shape[:2]
    pad_h, pad_w = (-height) % 16, (-width) % 16  # yuv420p needs even sizes; 16 avoids rescaling
    if pad_h or pad_w:
        frames = [np.pad(f, ((0, pad_h), (0, pad_w), (0, 0))) for f in frames]
    path = Path(path)
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (width + pad_w, height + pad_h),
        fps=float(fps),
        codec="libx264",
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        macro_block_size=16,
        ffmpeg_log_level="error",
    )
    writer.send(None)
    try:
        for f in frames:
            writer.send(np.ascontiguousarray(f))
    finally:
        writer.close()
    return path


def save_frames(frames: Sequence[np.ndarray], path: str | os.PathLike, captions: Sequence[str] | None = None, fps: float = 2) -> Path:
    """:func:`save_gif` or :func:`save_mp4`, chosen by the file extension."""
    suffix = Path(path).suffix.lower()
    if suffix == ".gif":
        return save_gif(frames, path, captions, fps)
    if suffix == ".mp4":
        return save_mp4(frames, path, captions, fps)
    raise ValueError(f"unsupported file type {suffix or '(none)'!r} for {os.fspath(path)!r}: use one of {', '.join(EXPORT_FORMATS)}")
