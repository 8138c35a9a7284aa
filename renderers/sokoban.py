"""Sokoban drawn from its cell codes: brick walls with depth, stone floor, red target rings,
wooden crates (green once on a target) and the round player.

``draw(codes)`` takes the game's ``grid_codes()`` array (0 wall, 1 floor, 2 target, 3 box on
target, 4 box, 5 player, 6 player on target) and returns an ``(rows * tile, cols * tile, 3)``
uint8 image. The picture depends on the codes only (decorations such as brick colours are a
fixed function of the cell position), so equal states give equal frames.
"""

from __future__ import annotations

import numpy as np

from ._pygame import SUPERSAMPLE, canvas, draw_character, finish, layer, mix, require_pygame, shade

__all__ = ["draw", "draw_fogged", "TILE"]

TILE = 64  # pixels per cell in the result (a multiple of 16 keeps video encoders happy)
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)

MORTAR = (88, 72, 66)
BRICK = (156, 82, 62)
FLOOR_A, FLOOR_B = (206, 195, 172), (198, 186, 162)
TARGET_RED = (214, 64, 58)
WOOD = {"fill": (204, 140, 70), "frame": (158, 100, 44), "plank": (184, 122, 58), "ink": (92, 56, 24)}
GREEN_WOOD = {"fill": (126, 196, 96), "frame": (72, 144, 62), "plank": (98, 172, 80), "ink": (34, 86, 36)}
PLAYER_BLUE = (66, 133, 244)


def _noise(*key: int) -> float:
    """A fixed pseudo-random number in [0, 1) for a cell / brick (no global RNG)."""
    h = 2166136261
    for k in key:
        h = ((h ^ (int(k) & 0xFFFFFFFF)) * 16777619) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 15
    return h / 2**32


def _check_codes(codes) -> np.ndarray:
    arr = np.asarray(codes)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"Sokoban codes must be a non-empty 2-D array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"Sokoban codes must be integers 0..6, got dtype {arr.dtype}")
    if arr.min() < 0 or arr.max() > 6:
        raise ValueError(f"Sokoban codes must be in 0..6, got values {sorted(set(arr.ravel().tolist()) - set(range(7)))}")
    return arr


def _wall(surf, x: int, y: int, t: int, r: int, c: int, open_below: bool, open_above: bool) -> None:
    pg = require_pygame()
    cell = pg.Rect(x, y, t, t)
    surf.fill(MORTAR, cell)
    old = surf.get_clip()
    surf.set_clip(cell)
    gap = max(2, t // 32)
    rows, bh, bw = 4, t // 4, t // 2
    for i in range(rows):
        offset = 0 if (r * rows + i) % 2 == 0 else -bw // 2
        for j in range(-1, 3):
            bx = x + offset + j * bw
            color = shade(BRICK, (_noise(r, c, i, j) - 0.5) * 0.22)
            brick = pg.Rect(bx + gap // 2, y + i * bh + gap // 2, bw - gap, bh - gap)
            pg.draw.rect(surf, color, brick, border_radius=gap)
            pg.draw.line(surf, shade(color, 0.25), brick.topleft, (brick.right - 1, brick.top), gap)
            pg.draw.line(surf, shade(color, -0.3), (brick.left, brick.bottom - 1), (brick.right - 1, brick.bottom - 1), gap)
    surf.set_clip(old)
    if open_above:  # lit top edge of the wall block
        pg.draw.rect(surf, shade(BRICK, 0.35), pg.Rect(x, y, t, gap * 2))
    if open_below:  # the block's front face, in shadow: walls stand up from the floor
        face = pg.Rect(x, y + t - t // 5, t, t // 5)
        surf.fill(shade(MORTAR, -0.25), face)
        for j in range(3):
            bx = x + j * bw - (bw // 2 if (r + c) % 2 else 0)
            pg.draw.rect(surf, shade(BRICK, -0.38), pg.Rect(bx + gap // 2, face.top + gap, bw - gap, face.height - 2 * gap).clip(face))
        pg.draw.line(surf, shade(MORTAR, -0.5), (x, y + t - 1), (x + t - 1, y + t - 1), gap)


def _floor(surf, x: int, y: int, t: int, r: int, c: int) -> None:
    pg = require_pygame()
    base = FLOOR_A if (r + c) % 2 == 0 else FLOOR_B
    cell = pg.Rect(x, y, t, t)
    surf.fill(shade(base, -0.12), cell)  # grout
    g = max(2, t // 40)
    stone = cell.inflate(-2 * g, -2 * g)
    pg.draw.rect(surf, base, stone, border_radius=3 * g)
    pg.draw.line(surf, shade(base, 0.3), (stone.left + 2 * g, stone.top + g), (stone.right - 2 * g, stone.top + g), g)
    pg.draw.line(surf, shade(base, -0.08), (stone.left + 2 * g, stone.bottom - g), (stone.right - 2 * g, stone.bottom - g), g)
    for k in range(5):  # speckles
        sx = stone.left + int(_noise(r, c, k, 1) * stone.width)
        sy = stone.top + int(_noise(r, c, k, 2) * stone.height)
        pg.draw.circle(surf, shade(base, -0.1 - 0.08 * _noise(r, c, k, 3)), (sx, sy), max(1, t // 48))


def _target(surf, x: int, y: int, t: int, bold: bool) -> None:
    pg = require_pygame()
    cx, cy = x + t / 2, y + t / 2
    floorish = mix(FLOOR_A, TARGET_RED, 0.12)
    outer = 0.36 * t if bold else 0.32 * t
    pg.draw.circle(surf, shade(TARGET_RED, -0.3), (cx, cy), outer + t * 0.015)
    pg.draw.circle(surf, TARGET_RED, (cx, cy), outer)
    pg.draw.circle(surf, floorish, (cx, cy), outer - 0.07 * t)
    pg.draw.circle(surf, TARGET_RED, (cx, cy), 0.12 * t)
    pg.draw.circle(surf, shade(TARGET_RED, 0.35), (cx - 0.03 * t, cy - 0.03 * t), 0.04 * t)


def _crate(surf, x: int, y: int, t: int, wood: dict) -> None:
    pg = require_pygame()
    m = int(0.1 * t)
    box = pg.Rect(x + m, y + m, t - 2 * m, t - 2 * m)
    radius = max(2, t // 24)
    edge = max(2, t // 28)
    pg.draw.rect(surf, wood["ink"], box.inflate(edge, edge), border_radius=radius + edge // 2)
    pg.draw.rect(surf, wood["fill"], box, border_radius=radius)
    # wood grain on the panel
    for k in range(1, 6):
        gy = box.top + k * box.height // 6
        pg.draw.line(surf, shade(wood["fill"], -0.08), (box.left, gy), (box.right - 1, gy), max(1, t // 64))
    # diagonal cross planks
    inner = box.inflate(-int(0.2 * t), -int(0.2 * t))
    plank = max(3, int(0.11 * t))
    for a, b in ((inner.topleft, inner.bottomright), ((inner.right, inner.top), (inner.left, inner.bottom))):
        pg.draw.line(surf, wood["ink"], a, b, plank + 2 * edge)
    for a, b in ((inner.topleft, inner.bottomright), ((inner.right, inner.top), (inner.left, inner.bottom))):
        pg.draw.line(surf, wood["plank"], a, b, plank)
        pg.draw.line(surf, shade(wood["plank"], 0.2), (a[0], a[1] - plank // 4), (b[0], b[1] - plank // 4), max(1, plank // 4))
    # frame planks around the panel
    band = int(0.13 * t)
    for rect in (
        pg.Rect(box.left, box.top, box.width, band),
        pg.Rect(box.left, box.bottom - band, box.width, band),
        pg.Rect(box.left, box.top, band, box.height),
        pg.Rect(box.right - band, box.top, band, box.height),
    ):
        pg.draw.rect(surf, wood["frame"], rect, border_radius=radius)
        pg.draw.rect(surf, wood["ink"], rect, max(1, edge // 2), border_radius=radius)
    pg.draw.line(surf, shade(wood["frame"], 0.3), (box.left + radius, box.top + edge), (box.right - radius, box.top + edge), edge)
    for nx, ny in (box.topleft, box.topright, box.bottomleft, box.bottomright):  # nails
        px = nx + (band // 2 if nx == box.left else -band // 2)
        py = ny + (band // 2 if ny == box.top else -band // 2)
        pg.draw.circle(surf, wood["ink"], (px, py), max(2, t // 30))
        pg.draw.circle(surf, shade(wood["frame"], 0.45), (px - 1, py - 1), max(1, t // 70))


def draw(codes: np.ndarray, tile: int = TILE) -> np.ndarray:
    """Draw a Sokoban state (cell codes 0..6) as an ``(H, W, 3)`` uint8 image."""
    pg = require_pygame()
    codes = _check_codes(codes)
    if not isinstance(tile, (int, np.integer)) or tile < 8:
        raise ValueError(f"tile must be an integer >= 8 pixels, got {tile!r}")
    t = int(tile) * SUPERSAMPLE
    rows, cols = codes.shape
    surf = canvas(cols * t, rows * t, MORTAR)

    def is_wall(r: int, c: int) -> bool:
        return not (0 <= r < rows and 0 <= c < cols) or codes[r, c] == WALL

    for r in range(rows):
        for c in range(cols):
            if codes[r, c] == WALL:
                _wall(surf, c * t, r * t, t, r, c, open_below=not is_wall(r + 1, c), open_above=not is_wall(r - 1, c))
            else:
                _floor(surf, c * t, r * t, t, r, c)

    # Shadows: walls cast onto the floor below / right of them; crates and the player cast
    # soft shadows down-right. One translucent layer so overlaps do not darken twice.
    shadows = layer(surf)
    depth = int(0.22 * t)
    for r in range(rows):
        for c in range(cols):
            if codes[r, c] == WALL:
                continue
            x, y = c * t, r * t
            if is_wall(r - 1, c):
                for k in range(depth):
                    a = int(110 * (1 - k / depth) ** 1.6)
                    pg.draw.line(shadows, (20, 10, 5, a), (x, y + k), (x + t - 1, y + k))
            if is_wall(r, c - 1):
                for k in range(depth):
                    a = int(80 * (1 - k / depth) ** 1.6)
                    pg.draw.line(shadows, (20, 10, 5, a), (x + k, y + k if is_wall(r - 1, c) else y), (x + k, y + t - 1))
            code = codes[r, c]
            if code in (BOX, BOX_ON_TARGET):
                m = int(0.1 * t)
                pg.draw.rect(shadows, (20, 10, 5, 90), pg.Rect(x + m + t // 14, y + m + t // 12, t - 2 * m, t - 2 * m), border_radius=t // 16)
            elif code in (PLAYER, PLAYER_ON_TARGET):
                pg.draw.ellipse(shadows, (20, 10, 5, 85), pg.Rect(x + 0.24 * t, y + 0.7 * t, 0.56 * t, 0.2 * t))
    surf.blit(shadows, (0, 0))

    glow = layer(surf)
    for r in range(rows):
        for c in range(cols):
            x, y = c * t, r * t
            code = codes[r, c]
            if code in (TARGET, PLAYER_ON_TARGET):
                _target(surf, x, y, t, bold=code == PLAYER_ON_TARGET)
            elif code == BOX_ON_TARGET:
                pg.draw.rect(glow, (150, 255, 120, 110), pg.Rect(x + t // 20, y + t // 20, t - t // 10, t - t // 10), border_radius=t // 8)
    surf.blit(glow, (0, 0))

    for r in range(rows):
        for c in range(cols):
            x, y = c * t, r * t
            code = codes[r, c]
            if code == BOX:
                _crate(surf, x, y, t, WOOD)
            elif code == BOX_ON_TARGET:
                _crate(surf, x, y, t, GREEN_WOOD)
            elif code in (PLAYER, PLAYER_ON_TARGET):
                draw_character(surf, (x + t / 2, y + 0.47 * t), 0.29 * t, PLAYER_BLUE)
    return finish(surf)


FOG = (18, 20, 32)


def draw_fogged(codes: np.ndarray, visible: np.ndarray, tile: int = TILE) -> np.ndarray:
    """Draw a Sokoban state with the cells outside ``visible`` (a boolean mask of the board's
    shape: what a partially observing player sees) under dark fog."""
    frame = draw(codes, tile)
    visible = np.asarray(visible, dtype=bool)
    if visible.shape != np.asarray(codes).shape:
        raise ValueError(f"visible must have the board's shape {np.asarray(codes).shape}, got {visible.shape}")
    hidden = np.repeat(np.repeat(~visible, tile, axis=0), tile, axis=1)
    fogged = frame.copy()
    # 80 % fog: the layout stays faintly readable for a person watching, the view stands out
    fogged[hidden] = (0.2 * frame[hidden] + 0.8 * np.array(FOG)).astype(np.uint8)
    return fogged
