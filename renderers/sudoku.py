"""Sudoku drawn from its grid: paper-white cells, thick lines between the boxes, the puzzle's
numbers in dark ink on grey, placed numbers in blue, numbers in conflict in red.

``draw(grid, initial)`` takes the ``(N, N)`` grid (0 empty) and the puzzle it started from
and returns an ``(2 * MARGIN + N * TILE, 2 * MARGIN + N * TILE, 3)`` uint8 image; equal
states give equal frames.
"""

from __future__ import annotations

import numpy as np

from ._pygame import SUPERSAMPLE, canvas, finish, font, require_pygame

__all__ = ["draw", "TILE", "MARGIN"]

TILE = 48  # pixels per cell (9 * 48 + 2 * 8 = 448, a multiple of 16)
MARGIN = 8
BACKGROUND, PAPER, GIVEN_CELL = (40, 44, 52), (250, 248, 240), (226, 224, 216)
INK, PLACED, CLASH, LINE = (30, 30, 36), (40, 90, 200), (210, 40, 40), (60, 60, 70)


def _check(grid, initial) -> tuple[np.ndarray, np.ndarray]:
    arr, start = np.asarray(grid), np.asarray(initial)
    n = arr.shape[0] if arr.ndim == 2 else 0
    b = int(round(n ** 0.5))
    if arr.ndim != 2 or arr.shape != (n, n) or n == 0 or b * b != n or start.shape != arr.shape:
        raise ValueError(f"a Sudoku grid and its puzzle must be equal square arrays with a square side, "
                         f"got shapes {arr.shape} and {start.shape}")
    if (arr < 0).any() or (arr > n).any() or (start < 0).any() or (start > n).any():
        raise ValueError(f"Sudoku cells must be 0 (empty) or 1..{n}")
    return arr.astype(np.int64), start.astype(np.int64)


def _clashing(grid: np.ndarray) -> set[tuple[int, int]]:
    n = grid.shape[0]
    b = int(round(n ** 0.5))
    out = set()
    for r in range(n):
        for c in range(n):
            v = grid[r, c]
            box = grid[r // b * b:r // b * b + b, c // b * b:c // b * b + b]
            if v and ((grid[r] == v).sum() > 1 or (grid[:, c] == v).sum() > 1 or (box == v).sum() > 1):
                out.add((r, c))
    return out


def draw(grid, initial, tile: int = TILE) -> np.ndarray:
    """Draw a Sudoku state as an ``(H, W, 3)`` uint8 image."""
    pg = require_pygame()
    grid, initial = _check(grid, initial)
    if not isinstance(tile, (int, np.integer)) or tile < 16:
        raise ValueError(f"tile must be an integer >= 16 pixels, got {tile!r}")
    s = SUPERSAMPLE
    t, margin = int(tile) * s, MARGIN * s
    n = grid.shape[0]
    b = int(round(n ** 0.5))
    side = 2 * margin + n * t
    surf = canvas(side, side, BACKGROUND)
    clashing = _clashing(grid)
    digits = font(int(t * 0.62), bold=True)
    for r in range(n):
        for c in range(n):
            rect = pg.Rect(margin + c * t, margin + r * t, t, t)
            pg.draw.rect(surf, GIVEN_CELL if initial[r, c] else PAPER, rect)
            v = int(grid[r, c])
            if v:
                colour = INK if initial[r, c] else (CLASH if (r, c) in clashing else PLACED)
                img = digits.render(str(v), True, colour)
                surf.blit(img, img.get_rect(center=rect.center))
    for k in range(n + 1):
        width = 3 * s if k % b == 0 else max(1, s)
        at = margin + k * t
        pg.draw.line(surf, LINE, (at, margin), (at, margin + n * t), width)
        pg.draw.line(surf, LINE, (margin, at), (margin + n * t, at), width)
    return finish(surf)
