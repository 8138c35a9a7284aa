"""2048 drawn from its board: rounded tiles on a board, each tile coloured by its value
(warmer and brighter as it grows) with the value written on it.

``draw(grid)`` takes the ``(N, N)`` board (0 empty, else a power of two) and returns an
``(MARGIN * 2 + N * TILE, MARGIN * 2 + N * TILE, 3)`` uint8 image; equal boards give equal frames.
"""

from __future__ import annotations

import numpy as np

from ._pygame import SUPERSAMPLE, canvas, finish, mix, require_pygame, shade, text_fit, vertical_gradient

__all__ = ["draw", "TILE", "MARGIN", "tile_colour"]

TILE = 64  # pixels per cell
MARGIN = 8
BOARD, EMPTY = (187, 173, 160), (205, 193, 180)
DARK_TEXT, LIGHT_TEXT = (119, 110, 101), (249, 246, 242)
_LOW, _MID, _HIGH = (238, 228, 218), (246, 124, 95), (237, 194, 46)


def tile_colour(value: int) -> tuple[int, int, int]:
    """The colour of a tile: from pale (2) through orange (64) to gold (2048 and beyond)."""
    if value <= 0:
        return EMPTY
    k = int(value).bit_length() - 1  # log2
    if k <= 6:
        return mix(_LOW, _MID, (k - 1) / 5)
    return mix(_MID, _HIGH, min(1.0, (k - 6) / 5))


def _check_grid(grid) -> np.ndarray:
    arr = np.asarray(grid)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"a 2048 board must be a non-empty square 2-D integer array, got {arr!r}")
    if (arr < 0).any() or any(v & (v - 1) for v in arr.ravel().tolist() if v):
        raise ValueError("2048 tiles must be 0 (empty) or powers of two")
    return arr


def draw(grid, tile: int = TILE) -> np.ndarray:
    """Draw a 2048 board as an ``(H, W, 3)`` uint8 image."""
    pg = require_pygame()
    grid = _check_grid(grid)
    if not isinstance(tile, (int, np.integer)) or tile < 16:
        raise ValueError(f"tile must be an integer >= 16 pixels, got {tile!r}")
    s = SUPERSAMPLE
    t, margin = int(tile) * s, MARGIN * s
    n = grid.shape[0]
    size = 2 * margin + n * t
    surf = canvas(size, size, BOARD)
    vertical_gradient(surf, surf.get_rect(), shade(BOARD, 0.12), shade(BOARD, -0.12))
    gap = max(2, t // 16)
    for r in range(n):
        for c in range(n):
            value = int(grid[r, c])
            rect = pg.Rect(margin + c * t + gap, margin + r * t + gap, t - 2 * gap, t - 2 * gap)
            colour = tile_colour(value)
            pg.draw.rect(surf, shade(colour, -0.2), rect.move(0, gap // 2), border_radius=t // 10)  # its edge
            pg.draw.rect(surf, colour, rect, border_radius=t // 10)
            if value:
                font, text = text_fit(str(value), rect.width - 2 * gap, int(t * 0.45), max(6, t // 6))
                img = font.render(text, True, DARK_TEXT if value <= 8 else LIGHT_TEXT)
                surf.blit(img, img.get_rect(center=rect.center))
    return finish(surf)
