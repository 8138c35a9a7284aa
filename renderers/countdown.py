"""Countdown drawn as a game-show board: the target on a lit display, the numbers on tiles
below, and once answered the expression with a green (correct) or red (wrong) bar.

``draw(numbers, target, answer=None, correct=False)`` returns a ``(SIZE[1], SIZE[0], 3)``
uint8 image; equal arguments give equal frames.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ._pygame import SUPERSAMPLE, canvas, finish, font, layer, require_pygame, shade, text_fit, vertical_gradient

__all__ = ["draw", "SIZE"]

SIZE = (512, 320)  # (width, height) of the result
BACK_TOP, BACK_BOTTOM = (20, 40, 92), (8, 16, 44)
DISPLAY = (10, 12, 16)
DIGITS = (255, 170, 40)
TILE = (236, 240, 250)
INK = (24, 30, 60)
RIGHT, WRONG = (40, 170, 80), (200, 60, 60)


def _centered(surf, text: str, f, color, center) -> None:
    img = f.render(text, True, color)
    surf.blit(img, img.get_rect(center=(int(center[0]), int(center[1]))))


def draw(numbers: Sequence[int], target: int, answer: str | None = None, correct: bool = False) -> np.ndarray:
    """Draw a Countdown instance (and the answer, once given)."""
    pg = require_pygame()
    try:
        numbers = [int(n) for n in numbers]
        target = int(target)
    except (TypeError, ValueError):
        raise ValueError(f"numbers must be integers and target an integer, got {numbers!r}, {target!r}") from None
    if not 1 <= len(numbers) <= 8:
        raise ValueError(f"draw takes 1 to 8 numbers, got {len(numbers)}")
    s = SUPERSAMPLE
    width, height = SIZE[0] * s, SIZE[1] * s
    surf = canvas(width, height)
    vertical_gradient(surf, surf.get_rect(), BACK_TOP, BACK_BOTTOM)
    _centered(surf, "COUNTDOWN", font(26 * s, bold=True), (200, 214, 255), (width / 2, 22 * s))

    # the target display, glowing
    display = pg.Rect(0, 0, 200 * s, 84 * s)
    display.center = (width // 2, 92 * s)
    glow = layer(surf)
    for k in range(10, 0, -1):
        pg.draw.rect(glow, (*DIGITS, 4 + 3 * (10 - k)), display.inflate(k * 5 * s, k * 5 * s), border_radius=(14 + 3 * k) * s)
    surf.blit(glow, (0, 0))
    pg.draw.rect(surf, (70, 74, 90), display.inflate(10 * s, 10 * s), border_radius=16 * s)
    pg.draw.rect(surf, DISPLAY, display, border_radius=12 * s)
    target_font, shown = text_fit(str(target), display.width - 20 * s, 70 * s, 20 * s)
    _centered(surf, shown, target_font, DIGITS, display.center)

    # the number tiles
    tile_w, gap = 88 * s, 14 * s
    row_w = len(numbers) * tile_w + (len(numbers) - 1) * gap
    x0 = (width - row_w) // 2
    for k, n in enumerate(numbers):
        tile = pg.Rect(x0 + k * (tile_w + gap), 158 * s, tile_w, 66 * s)
        pg.draw.rect(surf, shade(INK, -0.4), tile.move(3 * s, 4 * s), border_radius=10 * s)  # shadow
        face = pg.Surface(tile.size, pg.SRCALPHA, 32)
        pg.draw.rect(face, (255, 255, 255, 255), face.get_rect(), border_radius=10 * s)
        gradient = pg.Surface(tile.size, pg.SRCALPHA, 32)
        vertical_gradient(gradient, gradient.get_rect(), TILE, shade(TILE, -0.18))
        face.blit(gradient, (0, 0), special_flags=pg.BLEND_RGBA_MULT)
        surf.blit(face, tile.topleft)
        number_font, shown = text_fit(str(n), tile.width - 12 * s, 46 * s, 16 * s)
        _centered(surf, shown, number_font, INK, tile.center)

    # the answer bar
    bar = pg.Rect(24 * s, 250 * s, width - 48 * s, 48 * s)
    if answer is None:
        pg.draw.rect(surf, shade(BACK_BOTTOM, 0.15), bar, border_radius=10 * s)
        _centered(surf, "use each number once", font(20 * s), (150, 164, 210), bar.center)
    else:
        answer = answer if len(answer) <= 80 else answer[:77] + "..."  # text_fit trims char by char
        color = RIGHT if correct else WRONG
        pg.draw.rect(surf, shade(color, -0.4), bar.inflate(4 * s, 4 * s), border_radius=12 * s)
        pg.draw.rect(surf, color, bar, border_radius=10 * s)
        text = f"{answer} = {target}" if correct else f"{answer}  (not {target})"
        answer_font, shown = text_fit(text, bar.width - 20 * s, 30 * s, 12 * s)
        _centered(surf, shown, answer_font, (255, 255, 255), bar.center)
    return finish(surf)
