"""FrozenLake drawn from its map and the player's cell: cracked blue ice, dark holes with a
snowy rim, a red flag on the goal and the player in a woolly hat.

``draw(desc, position)`` takes the map (a 2-D array of ``S F H G`` characters) and the
player's ``(row, col)``. A player on a hole is drawn sinking (X eyes, splash, red frame); a
player on the goal celebrates (closed happy eyes, gold glow and sparkles, gold frame).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ._pygame import SUPERSAMPLE, canvas, draw_character, finish, layer, mix, require_pygame, shade, vertical_gradient

__all__ = ["draw", "TILE"]

TILE = 96  # pixels per cell in the result
ICE_TOP, ICE_BOTTOM = (218, 238, 251), (178, 215, 243)
CRACK = (118, 164, 206)
WATER, DEEP = (22, 48, 88), (6, 16, 38)
SNOW = (240, 248, 255)
PLAYER_ORANGE = (246, 152, 62)
BEANIE_RED = (206, 44, 62)
ALARM_RED = (226, 44, 44)
GOLD = (255, 196, 40)


def _rng(r: int, c: int, salt: int) -> np.random.Generator:
    """Decorations are a fixed function of the cell (no global RNG, same map, same picture)."""
    return np.random.default_rng([int(r), int(c), int(salt), 0x1CE])


def _check(desc, position) -> tuple[np.ndarray, tuple[int, int]]:
    arr = np.asarray(desc)
    if arr.dtype.kind == "S":
        arr = arr.astype(str)
    if arr.ndim == 1 and arr.dtype.kind == "U" and arr.size and len({len(row) for row in arr.tolist()}) == 1:
        arr = np.array([list(row) for row in arr.tolist()])  # ["SFFF", "FHFH", ...]
    if arr.ndim != 2 or arr.size == 0 or arr.dtype.kind != "U":
        raise ValueError(f"FrozenLake desc must be a non-empty 2-D array of 'S F H G' characters, got {arr.dtype} {arr.shape}")
    bad = sorted(set(arr.ravel().tolist()) - set("SFHG"))
    if bad:
        raise ValueError(f"FrozenLake desc may hold only 'S', 'F', 'H', 'G', got {bad}")
    try:
        row, col = (int(v) for v in position)
    except (TypeError, ValueError):
        raise ValueError(f"position must be (row, col) integers, got {position!r}") from None
    if not (0 <= row < arr.shape[0] and 0 <= col < arr.shape[1]):
        raise ValueError(f"position {(row, col)} is outside the {arr.shape[0]}x{arr.shape[1]} map")
    return arr, (row, col)


def _ice(surf, x: int, y: int, t: int, r: int, c: int) -> None:
    pg = require_pygame()
    cell = pg.Rect(x, y, t, t)
    tint = (_rng(r, c, 0).random() - 0.5) * 0.06
    vertical_gradient(surf, cell, shade(ICE_TOP, tint), shade(ICE_BOTTOM, tint))
    edge = max(2, t // 48)
    pg.draw.line(surf, (250, 253, 255), cell.topleft, (cell.right - 1, cell.top), edge)
    pg.draw.line(surf, (250, 253, 255), cell.topleft, (cell.left, cell.bottom - 1), edge)
    pg.draw.line(surf, shade(ICE_BOTTOM, -0.18), (cell.left, cell.bottom - 1), (cell.right - 1, cell.bottom - 1), edge)
    pg.draw.line(surf, shade(ICE_BOTTOM, -0.18), (cell.right - 1, cell.top), (cell.right - 1, cell.bottom - 1), edge)
    # sheen: two parallel diagonal glints
    for k, (a, b) in enumerate(((0.12, 0.42), (0.2, 0.3))):
        w = max(2, int(t * (0.035 if k == 0 else 0.02)))
        pg.draw.line(surf, mix(ICE_TOP, (255, 255, 255), 0.75), (x + a * t, y + b * t), (x + b * t, y + a * t), w)
    # cracks: a few jagged polylines with a bright lip
    rng = _rng(r, c, 1)
    for _ in range(int(rng.integers(1, 3))):
        px, py = x + t * rng.uniform(0.3, 0.8), y + t * rng.uniform(0.35, 0.85)
        angle = rng.uniform(0, 2 * math.pi)
        points = [(px, py)]
        for _ in range(int(rng.integers(3, 5))):
            angle += rng.uniform(-0.9, 0.9)
            step = t * rng.uniform(0.07, 0.14)
            px = min(max(px + step * math.cos(angle), x + 3), x + t - 4)
            py = min(max(py + step * math.sin(angle), y + 3), y + t - 4)
            points.append((px, py))
        lw = max(1, t // 64)
        pg.draw.lines(surf, (252, 254, 255), False, [(p[0] + lw, p[1] + lw) for p in points], lw)
        pg.draw.lines(surf, CRACK, False, points, lw + 1)
        bx, by = points[len(points) // 2]
        branch = angle + rng.choice([-1.0, 1.0]) * 1.2
        pg.draw.line(surf, CRACK, (bx, by), (bx + 0.08 * t * math.cos(branch), by + 0.08 * t * math.sin(branch)), lw)


def _blob(cx: float, cy: float, radius: float, squash: float, rng: np.random.Generator, n: int = 28):
    phase = rng.uniform(0, 2 * math.pi)
    wobble = rng.uniform(0.03, 0.07, size=n)
    pts = []
    for k in range(n):
        a = 2 * math.pi * k / n
        rr = radius * (1 + 0.06 * math.sin(3 * a + phase) + wobble[k] - 0.05)
        pts.append((cx + rr * math.cos(a), cy + squash * rr * math.sin(a)))
    return pts


def _scale(points, cx: float, cy: float, f: float):
    return [(cx + (px - cx) * f, cy + (py - cy) * f) for px, py in points]


def _hole(surf, x: int, y: int, t: int, r: int, c: int) -> tuple[float, float]:
    """Draw a hole; returns its water centre."""
    pg = require_pygame()
    cx, cy = x + t / 2, y + t * 0.52
    rim = _blob(cx, cy, 0.43 * t, 0.82, _rng(r, c, 2))
    pg.draw.polygon(surf, shade(ICE_BOTTOM, -0.25), _scale(rim, cx, cy + 0.02 * t, 1.04))
    pg.draw.polygon(surf, SNOW, rim)
    water = _scale(rim, cx, cy, 0.84)
    pg.draw.polygon(surf, (70, 110, 160), _scale(water, cx, cy - 0.02 * t, 1.03))  # icy inner wall
    pg.draw.polygon(surf, WATER, water)
    for f in (0.75, 0.55, 0.35):
        pg.draw.polygon(surf, mix(WATER, DEEP, 1.15 - f), _scale(water, cx, cy + 0.03 * t, f))
    lw = max(2, t // 60)
    for k, f in enumerate((0.62, 0.4)):
        rect = pg.Rect(0, 0, 0.7 * t * f, 0.22 * t * f)
        rect.center = (cx + (0.06 - 0.1 * k) * t, cy + (0.02 + 0.06 * k) * t)
        pg.draw.arc(surf, (70, 110, 160), rect, 0.1 * math.pi, 0.9 * math.pi, lw)
    pg.draw.arc(surf, (180, 215, 240), pg.Rect(cx - 0.22 * t, cy - 0.2 * t, 0.2 * t, 0.1 * t), 0.5 * math.pi, math.pi, lw)
    return cx, cy


def _flag(surf, x: float, y: float, t: int, size: float = 1.0) -> None:
    """A chequered finish flag whose pole stands at ``(x, y)`` (its foot), on a snow mound;
    ``size`` scales it."""
    pg = require_pygame()
    t = t * size
    pg.draw.ellipse(surf, shade(ICE_BOTTOM, -0.2), pg.Rect(x - 0.17 * t, y - 0.05 * t, 0.36 * t, 0.13 * t))
    pg.draw.ellipse(surf, SNOW, pg.Rect(x - 0.17 * t, y - 0.08 * t, 0.34 * t, 0.13 * t))
    top = y - 0.62 * t
    pw = max(3, int(0.035 * t))
    width, height, cols, rows = 0.3 * t, 0.22 * t, 4, 3

    def cloth(u: float, v: float) -> tuple[float, float]:  # a gentle wave along the cloth
        return (x + pw / 2 + u * width, top + 0.03 * t + v * height - 0.02 * t * u + 0.028 * t * math.sin(u * 2 * math.pi))

    outline = [cloth(k / 8, 0) for k in range(9)] + [cloth(k / 8, 1) for k in range(8, -1, -1)]
    pg.draw.polygon(surf, (40, 40, 52), _scale(outline, x + width / 2, top + 0.14 * t, 1.07))
    for i in range(cols):
        for j in range(rows):
            quad = []
            for u, v in ((i, j), (i + 0.5, j), (i + 1, j), (i + 1, j + 1), (i + 0.5, j + 1), (i, j + 1)):
                quad.append(cloth(u / cols, v / rows))
            pg.draw.polygon(surf, (36, 36, 46) if (i + j) % 2 else (250, 250, 252), quad)
    pg.draw.line(surf, (70, 52, 40), (x, y - 0.02 * t), (x, top), pw)
    pg.draw.line(surf, (150, 118, 92), (x - pw / 3, y - 0.02 * t), (x - pw / 3, top), max(1, pw // 3))
    pg.draw.circle(surf, shade(GOLD, -0.4), (x, top), 0.04 * t)
    pg.draw.circle(surf, GOLD, (x - 0.008 * t, top - 0.008 * t), 0.03 * t)


def _star(surf, cx: float, cy: float, radius: float, color, points: int = 5, inner: float = 0.45) -> None:
    pg = require_pygame()
    pts = []
    for k in range(2 * points):
        a = -math.pi / 2 + k * math.pi / points
        rr = radius if k % 2 == 0 else radius * inner
        pts.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
    pg.draw.polygon(surf, color, pts)


def _start_mark(surf, x: int, y: int, t: int) -> None:
    pg = require_pygame()
    rect = pg.Rect(0, 0, 0.7 * t, 0.32 * t)
    rect.center = (x + t / 2, y + 0.72 * t)
    for k in range(12):
        a = 2 * math.pi * k / 12
        pg.draw.arc(surf, (150, 192, 228), rect, a, a + math.pi / 9, max(2, t // 48))


def draw(desc: np.ndarray | Sequence[str], position: tuple[int, int], tile: int = TILE) -> np.ndarray:
    """Draw a FrozenLake map (a 2-D array of characters or a list of row strings) with the
    player at ``position`` as an ``(H, W, 3)`` uint8 image."""
    pg = require_pygame()
    desc, (row, col) = _check(desc, position)
    if not isinstance(tile, (int, np.integer)) or tile < 16:
        raise ValueError(f"tile must be an integer >= 16 pixels, got {tile!r}")
    t = int(tile) * SUPERSAMPLE
    rows, cols = desc.shape
    surf = canvas(cols * t, rows * t, ICE_BOTTOM)
    under = desc[row, col]
    for r in range(rows):
        for c in range(cols):
            _ice(surf, c * t, r * t, t, r, c)
    hole_centres = {}
    for r in range(rows):
        for c in range(cols):
            x, y = c * t, r * t
            cell = desc[r, c]
            if cell == "H":
                if (r, c) == (row, col):  # fallen: the ice around the hole turns red
                    tint = layer(surf)
                    pg.draw.rect(tint, (*ALARM_RED, 60), pg.Rect(x, y, t, t))
                    surf.blit(tint, (0, 0))
                hole_centres[(r, c)] = _hole(surf, x, y, t, r, c)
            elif cell == "S" and (r, c) != (row, col):
                _start_mark(surf, x, y, t)
            elif cell == "G":
                arrived = (r, c) == (row, col)
                if arrived:  # golden glow behind the winner
                    glow = layer(surf)
                    for k in range(10, 0, -1):
                        pg.draw.circle(glow, (*GOLD, int(150 * (1 - k / 10) + 10)), (x + t / 2, y + t / 2), 0.5 * t * k / 10)
                    surf.blit(glow, (0, 0))
                _flag(surf, x + (0.6 if arrived else 0.34) * t, y + 0.84 * t, t, 1.0 if arrived else 1.2)

    x, y = col * t, row * t
    if under == "H":  # fallen: sunk to the chin, X eyes, arms up, splash, framed in red
        cx, cy = hole_centres[(row, col)]
        body_r = 0.24 * t
        lw = max(2, t // 40)
        for side in (-1, 1):  # arms waving for help
            hx, hy = cx + side * 0.33 * t, cy - 0.3 * t
            pg.draw.line(surf, shade(PLAYER_ORANGE, -0.6), (cx + side * 0.16 * t, cy), (hx, hy), int(0.07 * t))
            pg.draw.line(surf, PLAYER_ORANGE, (cx + side * 0.16 * t, cy), (hx, hy), int(0.045 * t))
            pg.draw.circle(surf, shade(PLAYER_ORANGE, -0.6), (hx, hy), 0.05 * t)
            pg.draw.circle(surf, PLAYER_ORANGE, (hx, hy), 0.05 * t - lw)
        draw_character(surf, (cx, cy - 0.04 * t), body_r, PLAYER_ORANGE, mood="dizzy", beanie=BEANIE_RED, clip_bottom=cy + 0.07 * t)
        ring = pg.Rect(0, 0, 0.66 * t, 0.16 * t)
        ring.center = (cx, cy + 0.06 * t)
        pg.draw.arc(surf, (200, 232, 252), ring, math.pi, 2 * math.pi, lw)  # water line in front
        ring = ring.inflate(0.16 * t, 0.06 * t)
        pg.draw.arc(surf, (120, 170, 215), ring, 1.08 * math.pi, 1.92 * math.pi, lw)
        for k, (dx, dy, size) in enumerate(((-0.2, -0.38, 0.04), (0.22, -0.4, 0.035), (-0.36, -0.12, 0.03), (0.37, -0.14, 0.032))):
            px, py = cx + dx * t, cy + dy * t
            pg.draw.circle(surf, (110, 170, 230), (px, py), size * t)
            pg.draw.circle(surf, (240, 250, 255), (px - size * t / 3, py - size * t / 3), size * t * 0.45)
        frame = pg.Rect(x, y, t, t).inflate(-t // 20, -t // 20)
        pg.draw.rect(surf, ALARM_RED, frame, max(4, t // 16), border_radius=t // 10)
    elif under == "G":  # arrived: celebrating beside the flag, sparkles, framed in gold
        shadow = layer(surf)
        pg.draw.ellipse(shadow, (20, 40, 80, 70), pg.Rect(x + 0.13 * t, y + 0.73 * t, 0.42 * t, 0.12 * t))
        surf.blit(shadow, (0, 0))
        draw_character(surf, (x + 0.34 * t, y + 0.58 * t), 0.22 * t, PLAYER_ORANGE, mood="happy", beanie=BEANIE_RED)
        for sx, sy, s in ((0.14, 0.2, 0.07), (0.86, 0.12, 0.05), (0.9, 0.62, 0.06), (0.1, 0.78, 0.045), (0.56, 0.08, 0.04)):
            _star(surf, x + sx * t, y + sy * t, s * t * 1.25, shade(GOLD, -0.35), points=4, inner=0.3)
            _star(surf, x + sx * t, y + sy * t, s * t, (255, 240, 150), points=4, inner=0.3)
        frame = pg.Rect(x, y, t, t).inflate(-t // 20, -t // 20)
        pg.draw.rect(surf, GOLD, frame, max(4, t // 16), border_radius=t // 10)
    else:
        shadow = layer(surf)
        pg.draw.ellipse(shadow, (20, 40, 80, 70), pg.Rect(x + 0.25 * t, y + 0.74 * t, 0.5 * t, 0.13 * t))
        surf.blit(shadow, (0, 0))
        draw_character(surf, (x + 0.5 * t, y + 0.55 * t), 0.25 * t, PLAYER_ORANGE, beanie=BEANIE_RED)
    return finish(surf)
