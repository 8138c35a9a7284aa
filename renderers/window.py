"""The window behind ``render_mode="human"``: shows frames at the env's ``render_fps``.

pygame has one display per process, so every human-mode env of a process draws into the same
window (the last one shown sets its size). Closing the window with its close button stops
the showing for that env (its episodes go on); ``env.close()`` closes it from code.
"""

from __future__ import annotations

import numpy as np

from ._pygame import array_to_surface, require_pygame

__all__ = ["Window"]


class Window:
    """A pygame window that shows ``(H, W, 3)`` uint8 frames, at most ``fps`` per second."""

    def __init__(self, title: str = "ragen-envs", fps: float = 4) -> None:
        if not isinstance(fps, (int, float)) or not fps > 0:
            raise ValueError(f"fps must be a positive number, got {fps!r}")
        self.title = str(title)
        self.fps = float(fps)
        self.closed_by_user = False
        self._screen = None
        self._clock = None

    @property
    def is_open(self) -> bool:
        return self._screen is not None

    def show(self, frame: np.ndarray) -> None:
        """Draw ``frame``, handle window events, then wait to keep the frame rate."""
        if self.closed_by_user:
            return
        pg = require_pygame()
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"a frame must be an (H, W, 3) uint8 array, got {frame.dtype} {frame.shape}")
        height, width = frame.shape[:2]
        if not pg.display.get_init():
            pg.display.init()
        if self._screen is None or self._screen.get_size() != (width, height) or pg.display.get_surface() is not self._screen:
            self._screen = pg.display.set_mode((width, height))
            pg.display.set_caption(self.title)
            self._clock = pg.time.Clock()
        self._screen.blit(array_to_surface(frame), (0, 0))
        pg.display.flip()
        for event in pg.event.get():
            if event.type == pg.QUIT:
                self.closed_by_user = True
                self.close()
                return
        self._clock.tick(self.fps)

    def close(self) -> None:
        """Close the window (safe to call more than once)."""
        if self._screen is None:
            return
        self._screen = None
        self._clock = None
        pg = require_pygame()
        if pg.display.get_init():
            pg.display.quit()
