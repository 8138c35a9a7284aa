"""The two-armed bandit drawn as two slot machines, each with its arm's name on the marquee.

``draw(arm_names, last_pull)`` takes the two names in action order and ``None`` before the pull
or ``(arm, reward)`` after it. The pulled machine glows gold, its lever is down and its window
shows the payout (with coins in the tray when it paid); the other one is dimmed.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ._pygame import SUPERSAMPLE, canvas, clean_text, finish, font, layer, mix, require_pygame, shade, text_fit, vertical_gradient

__all__ = ["draw", "SIZE"]

SIZE = (640, 384)  # (width, height) of the result
BACKDROP_TOP, BACKDROP_BOTTOM = (52, 34, 84), (16, 10, 30)
CABINETS = ((58, 104, 206), (146, 72, 178))  # arm 1, arm 2
GOLD = (255, 200, 60)
CREAM = (252, 246, 228)
INK = (26, 18, 38)
PAID_GREEN = (34, 150, 70)


def _check(arm_names, last_pull) -> tuple[tuple[str, str], tuple[int, float] | None]:
    if isinstance(arm_names, str) or not isinstance(arm_names, Sequence) or len(arm_names) != 2:
        raise ValueError(f"arm_names must be a pair of names, got {arm_names!r}")
    names = (clean_text(arm_names[0]).strip(), clean_text(arm_names[1]).strip())
    if last_pull is None:
        return names, None
    try:
        arm, reward = last_pull
        arm, reward = int(arm), float(reward)
    except (TypeError, ValueError):
        raise ValueError(f"last_pull must be None or (arm, reward), got {last_pull!r}") from None
    if arm not in (0, 1) or not math.isfinite(reward):
        raise ValueError(f"last_pull must have arm 0 or 1 and a finite reward, got {last_pull!r}")
    return names, (arm, reward)


def _payout_text(reward: float) -> str:
    return f"+{reward:.2f}" if reward > 0 else f"{reward:.2f}"


def _blit_centered(surf, text: str, f, color, center: tuple[float, float]) -> None:
    img = f.render(text, True, color)
    surf.blit(img, img.get_rect(center=(int(center[0]), int(center[1]))))


def _machine(surf, x: float, y: float, s: int, index: int, name: str, state: str, reward: float | None) -> None:
    """One slot machine with its top-left corner at ``(x, y)``; ``state`` is ``idle``,
    ``pulled`` or ``other`` (the arm not chosen)."""
    pg = require_pygame()
    w, h = 190 * s, 252 * s
    body = pg.Rect(int(x), int(y + 34 * s), w, h - 34 * s)
    color = CABINETS[index]
    if state == "pulled":  # gold glow
        glow = layer(surf)
        for k in range(12, 0, -1):
            pg.draw.rect(glow, (*GOLD, int(10 + 120 * (1 - k / 12) ** 2)), body.inflate(k * 4 * s, k * 4 * s), border_radius=(22 + 2 * k) * s)
        surf.blit(glow, (0, 0))

    # lever (behind the cabinet's right side): up when idle, down once pulled
    pivot = (body.right + 6 * s, body.top + 96 * s)
    knob = (body.right + 30 * s, body.top + (170 if state == "pulled" else 14) * s)
    pg.draw.rect(surf, shade((150, 150, 165), -0.4), pg.Rect(body.right - 2 * s, pivot[1] - 14 * s, 16 * s, 28 * s), border_radius=5 * s)
    pg.draw.rect(surf, (170, 170, 186), pg.Rect(body.right, pivot[1] - 12 * s, 12 * s, 24 * s), border_radius=4 * s)
    pg.draw.line(surf, (70, 70, 84), pivot, knob, 9 * s)
    pg.draw.line(surf, (200, 200, 214), pivot, knob, 5 * s)
    pg.draw.circle(surf, (120, 16, 28), knob, 15 * s)
    pg.draw.circle(surf, (226, 44, 60), knob, 13 * s)
    pg.draw.circle(surf, (255, 170, 170), (knob[0] - 4 * s, knob[1] - 5 * s), 4 * s)

    # cabinet
    pg.draw.rect(surf, shade(color, -0.55), body.inflate(6 * s, 6 * s), border_radius=22 * s)
    pg.draw.rect(surf, shade(color, -0.2), body, border_radius=20 * s)
    face = body.inflate(-16 * s, -16 * s).move(-2 * s, -2 * s)
    face_img = pg.Surface(face.size, pg.SRCALPHA, 32)  # rounded mask ...
    pg.draw.rect(face_img, (255, 255, 255, 255), face_img.get_rect(), border_radius=14 * s)
    gradient = pg.Surface(face.size, pg.SRCALPHA, 32)  # ... times a gradient
    vertical_gradient(gradient, gradient.get_rect(), shade(color, 0.22), shade(color, -0.08))
    face_img.blit(gradient, (0, 0), special_flags=pg.BLEND_RGBA_MULT)
    surf.blit(face_img, face.topleft)
    pg.draw.line(surf, shade(color, 0.5), (face.left + 14 * s, face.top + 3 * s), (face.right - 14 * s, face.top + 3 * s), 3 * s)

    # marquee with the arm's name and a row of bulbs
    marquee = pg.Rect(int(x + 8 * s), int(y), w - 16 * s, 58 * s)
    pg.draw.rect(surf, shade(GOLD, -0.55), marquee.inflate(6 * s, 6 * s), border_radius=16 * s)
    pg.draw.rect(surf, GOLD, marquee.inflate(2 * s, 2 * s), border_radius=15 * s)
    plate = marquee.inflate(-12 * s, -12 * s)
    pg.draw.rect(surf, INK, plate, border_radius=10 * s)
    for k in range(9):
        bx = marquee.left + 14 * s + k * (marquee.width - 28 * s) / 8
        lit = (k + (1 if state == "pulled" else 0)) % 2 == 0
        pg.draw.circle(surf, (255, 250, 210) if lit else (255, 170, 60), (bx, marquee.top + 3 * s), 4 * s)
    name_font, shown = text_fit(name, plate.width - 16 * s, 30 * s, 14 * s)
    _blit_centered(surf, shown, name_font, (255, 232, 150), plate.center)

    # reel window with the payout
    window = pg.Rect(0, 0, w - 52 * s, 78 * s)
    window.midtop = (body.centerx, body.top + 28 * s)
    pg.draw.rect(surf, shade(color, -0.6), window.inflate(12 * s, 12 * s), border_radius=12 * s)
    pg.draw.rect(surf, CREAM, window, border_radius=8 * s)
    pg.draw.rect(surf, mix(CREAM, INK, 0.12), pg.Rect(window.left, window.top, window.width, 12 * s), border_top_left_radius=8 * s, border_top_right_radius=8 * s)
    for k in (1, 2):
        lx = window.left + k * window.width / 3
        pg.draw.line(surf, mix(CREAM, INK, 0.1), (lx, window.top + 6 * s), (lx, window.bottom - 6 * s), 2 * s)
    if state == "pulled" and reward is not None:
        text, col = _payout_text(reward), (PAID_GREEN if reward > 0 else (170, 60, 60))
    elif state == "other":
        text, col = "-", (170, 160, 150)
    else:
        text, col = "? ? ?", (120, 110, 130)
    value_font, shown = text_fit(text, window.width - 16 * s, 46 * s, 20 * s)
    _blit_centered(surf, shown, value_font, col, window.center)
    _blit_centered(surf, f"ARM {index + 1}", font(17 * s, bold=True), shade(color, 0.75), (body.centerx, window.bottom + 22 * s))

    # coin tray
    tray = pg.Rect(0, 0, w - 60 * s, 34 * s)
    tray.midbottom = (body.centerx, body.bottom - 18 * s)
    pg.draw.rect(surf, shade(color, -0.6), tray.inflate(8 * s, 8 * s), border_radius=10 * s)
    pg.draw.rect(surf, (20, 16, 26), tray, border_radius=8 * s)
    if state == "pulled" and reward is not None and reward > 0:
        coins = max(1, min(7, int(math.ceil(reward * 5))))
        for k in range(coins):
            cx = tray.centerx + (k - (coins - 1) / 2) * 18 * s
            cy = tray.bottom - 12 * s - (6 * s if k % 2 else 0)
            pg.draw.circle(surf, shade(GOLD, -0.45), (cx, cy), 12 * s)
            pg.draw.circle(surf, GOLD, (cx, cy), 10 * s)
            pg.draw.circle(surf, shade(GOLD, 0.5), (cx - 3 * s, cy - 3 * s), 3 * s)

    if state == "other":  # the arm not chosen fades back
        dim = layer(surf)
        pg.draw.rect(dim, (12, 8, 22, 120), pg.Rect(x - 4 * s, y - 4 * s, w + 50 * s, h + 8 * s), border_radius=22 * s)
        surf.blit(dim, (0, 0))


def draw(arm_names: Sequence[str], last_pull: tuple[int, float] | None) -> np.ndarray:
    """Draw the bandit: both arms by name, and the last pull (``(arm, reward)``) if any."""
    pg = require_pygame()
    names, pull = _check(arm_names, last_pull)
    s = SUPERSAMPLE
    width, height = SIZE[0] * s, SIZE[1] * s
    surf = canvas(width, height)
    vertical_gradient(surf, surf.get_rect(), BACKDROP_TOP, BACKDROP_BOTTOM)
    lights = layer(surf)
    for cx in (0.27, 0.71):
        for k in range(8, 0, -1):
            pg.draw.ellipse(lights, (255, 230, 180, 6 + 3 * (8 - k)), pg.Rect(0, 0, 300 * s * k / 8, 90 * s * k / 8).move(cx * width - 150 * s * k / 8, 318 * s - 45 * s * k / 8))
    surf.blit(lights, (0, 0))
    floor = pg.Rect(0, 330 * s, width, height - 330 * s)
    vertical_gradient(surf, floor, (40, 26, 60), (24, 14, 36))
    pg.draw.line(surf, (86, 60, 120), (0, floor.top), (width, floor.top), 2 * s)

    title_font = font(30 * s, bold=True)
    _blit_centered(surf, "Two-Armed Bandit", title_font, (255, 214, 90), (width / 2, 22 * s))
    if pull is None:
        subtitle = "Which arm pays more? Pull one."
    else:
        subtitle = f"Pulled {names[pull[0]]}: {_payout_text(pull[1])}"
    sub_font, subtitle = text_fit(subtitle, width - 40 * s, 20 * s, 12 * s, bold=False)
    _blit_centered(surf, subtitle, sub_font, (226, 214, 246), (width / 2, 48 * s))

    for index, left in enumerate((64, 352)):
        if pull is None:
            state, reward = "idle", None
        elif pull[0] == index:
            state, reward = "pulled", pull[1]
        else:
            state, reward = "other", None
        _machine(surf, left * s, 68 * s, s, index, names[index], state, reward)
    return finish(surf)
