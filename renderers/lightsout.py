"""Lights Out drawn from its board: glowing amber lamps (on) and dark glass (off) on a
panel, with the zero-indexed row and column numbers the actions use around it.

``draw(board)`` takes the ``(N, N)`` 0/1 board and returns an
``(MARGIN + N * tile, MARGIN + N * tile, 3)`` uint8 image; equal boards give equal frames.
"""

from __future__ import annotations

import numpy as np

from ._pygame import SUPERSAMPLE, canvas, finish, font, layer, require_pygame, shade, vertical_gradient

__all__ = ["draw", "TILE", "MARGIN"]

TILE = 64  # pixels per cell (multiples of 16 keep video encoders happy)
MARGIN = 32  # the band of row / column numbers
PANEL_TOP, PANEL_BOTTOM = (46, 50, 62), (26, 28, 36)
LAMP_ON, LAMP_OFF = (255, 196, 64), (58, 62, 76)
LABEL = (190, 196, 214)


def _check_board(board) -> np.ndarray:
    arr = np.asarray(board)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.size == 0:
        raise ValueError(f"a Lights Out board must be a non-empty square 2-D array, got shape {arr.shape}")
    if not np.isin(arr, (0, 1)).all():
        raise ValueError("Lights Out board cells must be 0 (off) or 1 (on)")
    return arr.astype(np.int8)


def _lamp(surf, glow, x: int, y: int, t: int, on: bool) -> None:
    pg = require_pygame()
    m = max(2, t // 10)
    lamp = pg.Rect(x + m, y + m, t - 2 * m, t - 2 * m)
    radius = t // 5
    pg.draw.rect(surf, (14, 15, 20), lamp.inflate(m, m), border_radius=radius + m // 2)  # bezel
    base = LAMP_ON if on else LAMP_OFF
    face = pg.Surface(lamp.size, pg.SRCALPHA, 32)
    pg.draw.rect(face, (255, 255, 255, 255), face.get_rect(), border_radius=radius)
    gradient = pg.Surface(lamp.size, pg.SRCALPHA, 32)
    vertical_gradient(gradient, gradient.get_rect(), shade(base, 0.35 if on else 0.12), shade(base, -0.25))
    face.blit(gradient, (0, 0), special_flags=pg.BLEND_RGBA_MULT)
    surf.blit(face, lamp.topleft)
    if on:
        pg.draw.circle(surf, shade(base, 0.7), lamp.center, lamp.width * 0.22)
        for k in range(8, 0, -1):  # halo on its own layer, added after every lamp is drawn
            pg.draw.rect(glow, (255, 200, 80, 6 + 4 * (8 - k)), lamp.inflate(k * m // 2, k * m // 2), border_radius=radius + k * m // 4)
    # glass highlight
    shine = pg.Rect(lamp.left + lamp.width // 6, lamp.top + lamp.height // 10, lamp.width // 2, lamp.height // 6)
    pg.draw.ellipse(surf, shade(base, 0.55 if on else 0.25), shine)


def draw(board, tile: int = TILE) -> np.ndarray:
    """Draw a Lights Out board (1 on, 0 off) as an ``(H, W, 3)`` uint8 image."""
    pg = require_pygame()
    board = _check_board(board)
    if not isinstance(tile, (int, np.integer)) or tile < 16:
        raise ValueError(f"tile must be an integer >= 16 pixels, got {tile!r}")
    s = SUPERSAMPLE
    t, margin = int(tile) * s, MARGIN * s
    n = board.shape[0]
    size = margin + n * t
    surf = canvas(size, size)
    vertical_gradient(surf, surf.get_rect(), PANEL_TOP, PANEL_BOTTOM)
    label_font = font(int(MARGIN * 0.7) * s, bold=True)
    for k in range(n):
        for text_center in ((margin + k * t + t / 2, margin / 2), (margin / 2, margin + k * t + t / 2)):
            img = label_font.render(str(k), True, LABEL)
            surf.blit(img, img.get_rect(center=(int(text_center[0]), int(text_center[1]))))
    glow = layer(surf)
    for r in range(n):
        for c in range(n):
            _lamp(surf, glow, margin + c * t, margin + r * t, t, bool(board[r, c]))
    surf.blit(glow, (0, 0))
    return finish(surf)
