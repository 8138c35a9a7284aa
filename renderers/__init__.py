"""Pictures of the ragen_envs games, drawn procedurally with pygame (pygame-ce): no asset files.

- ``renderers.sokoban.draw(codes)``, ``renderers.frozenlake.draw(desc, position)``,
  ``renderers.bandit.draw(arm_names, last_pull)``, ``renderers.lightsout.draw(board)``,
  ``renderers.rubikscube.draw(stickers)``, ``renderers.game2048.draw(grid)``,
  ``renderers.countdown.draw(numbers, target, answer, correct)``, ``renderers.sudoku.draw(grid, initial)``: a game state as an ``(H, W, 3)`` uint8 image.
- ``renderers.window.Window``: the window of ``render_mode="human"``.
- ``renderers.export``: captions, animated GIF and MP4.

Renderers only read game state; nothing in ``ragen_envs`` depends on them at import time.
Importing this package does not import pygame: the first drawing does, and says which extra
to install (``pip install "ragen-envs[render]"``) when it is missing.
"""

from __future__ import annotations

from . import bandit, countdown, frozenlake, game2048, lightsout, rubikscube, sokoban, sudoku
from .export import EXPORT_FORMATS, caption, caption_frames, save_frames, save_gif, save_mp4

__all__ = [
    "bandit",
    "countdown",
    "frozenlake",
    "game2048",
    "lightsout",
    "rubikscube",
    "sokoban",
    "sudoku",
    "caption",
    "caption_frames",
    "save_frames",
    "save_gif",
    "save_mp4",
    "EXPORT_FORMATS",
]
