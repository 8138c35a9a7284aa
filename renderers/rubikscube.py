"""The 2x2 Rubik's Cube drawn as an unfolded net: U on top, L F R B across the middle, D
below, each sticker a rounded tile of its colour with the face's letter beside the face.

``draw(state)`` takes the 24 stickers (faces U L F R B D, 4 each, colours 0..5 =
W O G R B Y) and returns an ``(3 * FACE + 2 * MARGIN, 4 * FACE + 2 * MARGIN, 3)`` uint8
image; equal states give equal frames.
"""

from __future__ import annotations

import numpy as np

from ._pygame import SUPERSAMPLE, canvas, finish, font, require_pygame, shade, vertical_gradient

__all__ = ["draw", "STICKER", "MARGIN", "COLOURS"]

STICKER = 32  # pixels per sticker
FACE = 2 * STICKER + 16  # a face and the gap around it
MARGIN = 16
COLOURS = ((245, 245, 240), (255, 140, 20), (30, 170, 70), (210, 30, 40), (30, 90, 210), (250, 215, 30))
BACK_TOP, BACK_BOTTOM = (40, 44, 56), (22, 24, 32)
LABEL = (190, 196, 214)
# where each face sits in the net, in (column, row) face units; faces in the order U L F R B D
_NET = ((1, 0), (0, 1), (1, 1), (2, 1), (3, 1), (1, 2))


def _check_state(state) -> np.ndarray:
    arr = np.asarray(state)
    if arr.shape != (24,) or not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() > 5:
        raise ValueError(f"a cube state is 24 stickers with colours 0..5, got {arr!r}")
    return arr


def draw(state) -> np.ndarray:
    """Draw a 2x2 cube's stickers as an unfolded net (an ``(H, W, 3)`` uint8 image)."""
    pg = require_pygame()
    state = _check_state(state)
    s = SUPERSAMPLE
    face, margin, sticker = FACE * s, MARGIN * s, STICKER * s
    width, height = 4 * face + 2 * margin, 3 * face + 2 * margin
    surf = canvas(width, height)
    vertical_gradient(surf, surf.get_rect(), BACK_TOP, BACK_BOTTOM)
    label_font = font(12 * s, bold=True)
    gap = 2 * s
    for f, (col, row) in enumerate(_NET):
        x0 = margin + col * face + (face - 2 * sticker) // 2
        y0 = margin + row * face + (face - 2 * sticker) // 2
        pg.draw.rect(surf, (12, 12, 16), pg.Rect(x0 - gap, y0 - gap, 2 * sticker + 2 * gap, 2 * sticker + 2 * gap),
                     border_radius=4 * s)
        for k in range(4):
            r, c = divmod(k, 2)
            colour = COLOURS[int(state[4 * f + k])]
            tile = pg.Rect(x0 + c * sticker + gap, y0 + r * sticker + gap, sticker - 2 * gap, sticker - 2 * gap)
            pg.draw.rect(surf, colour, tile, border_radius=3 * s)
            shine = pg.Rect(tile.left + tile.width // 6, tile.top + tile.height // 8, tile.width // 2, tile.height // 6)
            pg.draw.ellipse(surf, shade(colour, 0.35), shine)
        img = label_font.render("ULFRBD"[f], True, LABEL)
        surf.blit(img, img.get_rect(topleft=(margin + col * face + 2 * s, margin + row * face)))
    return finish(surf)
