"""Sokoban drawn as the reference draws it: gym-sokoban's 16-pixel tiles, one per cell, so a 6x6
room is a 96x96 frame (the reference's ``render('rgb_array')``, VisualSimpleSokoban's images).

``draw(codes)`` takes the game's ``grid_codes()`` array (0 wall, 1 floor, 2 target, 3 box on
target, 4 box, 5 player, 6 player on target) and returns a ``(rows * 16, cols * 16, 3)`` uint8
image: each cell is its code's tile, nothing scaled, blended or decorated, so a frame equals
the reference's pixel for pixel (tests/test_sokoban_v1.py checks recorded frames). numpy only;
no pygame.

The tile pixels are gym-sokoban 0.0.6's ``envs/surface/*.png`` sprites (MIT License, Max-Philipp
B. Schrader), written out below as rows of palette letters.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TILE", "draw"]

TILE = 16
# palette letter -> RGB
PALETTE = {
    ".": (0, 0, 0),  # floor, outlines, the player's eyes
    "g": (41, 202, 26),  # the player
    "b": (176, 61, 0),  # brick
    "m": (176, 154, 142),  # mortar
    "o": (215, 103, 0),  # crate edges
    "w": (215, 114, 0),  # crate planks
    "y": (215, 196, 0),  # crate fill; the frame of a box on a target
    "r": (238, 0, 0),  # target outline
    "s": (239, 22, 22),  # target mark
    "t": (242, 26, 26),  # target centre
}
# One tile per code 0..6: wall, floor, target, box on target, box, player, player on target.
TILES = (
    # wall
    (
        "bbbbbmbbbbbbmbbb",
        "bbbbbmbbbbbbmbbb",
        "bbbbbmbbbbbbmbbb",
        "bbbbbmbbbbbbmbbb",
        "mmmmmmmmmmmmmmmm",
        "mmmmmmmmmmmmmmmm",
        "bbbmbbbbbbbmbbbb",
        "bbbmbbbbbbbmbbbb",
        "bbbmbbbbbbbmbbbb",
        "bbbmbbbbbbbmbbbb",
        "mmmmmmmmmmmmmmmm",
        "mmmmmmmmmmmmmmmm",
        "bbbbbmbbbbbbmbbb",
        "bbbbbmbbbbbbmbbb",
        "bbbbbmbbbbbbmbbb",
        "bbbbbmbbbbbbmbbb",
    ),
    # floor
    (
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
        "................",
    ),
    # box_target
    (
        "................",
        ".ssssssssssssss.",
        ".s............s.",
        ".s............s.",
        ".s............s.",
        ".s.....r......s.",
        ".s....rtr.....s.",
        ".s...rtttr....s.",
        ".s....rtr.....s.",
        ".s.....r......s.",
        ".s............s.",
        ".s............s.",
        ".s............s.",
        ".s............s.",
        ".ssssssssssssss.",
        "................",
    ),
    # box_on_target
    (
        "rrrrrrrrrrrrrrrr",
        "rrrrrrrrrrrrrrrr",
        "rrwwyyyyyyyyyorr",
        "rrywoyyyyyyywwrr",
        "rrywwoyyyyywwyrr",
        "rryywwwyyywwyyrr",
        "rryyyowwywwyyyrr",
        "rryyyyorroyyyyrr",
        "rryyyyorroyyyyrr",
        "rryyyywwywwyyyrr",
        "rryyywwyywwwyyrr",
        "rryowwyyyyowwyrr",
        "rroowyyyyyyowwrr",
        "rrwwyyyyyyyyowrr",
        "rrrrrrrrrrrrrrrr",
        "rrrrrrrrrrrrrrrr",
    ),
    # box
    (
        "oooowwwwwwwwwwoo",
        "oowwyyyyyyyywwwo",
        "owwwyyyyyyyyyoww",
        "wwywoyyyyyyywwyw",
        "wyywwoyyyyywwyyw",
        "wyyywwwyyywwyyyw",
        "wyyyyowwywwyyyyw",
        "wyyyyyooooyyyyyw",
        "wyyyyyooooyyyyyw",
        "wyyyyywwywwyyyyw",
        "wyyyywwyywwwyyyw",
        "wwyowwyyyyowwyyw",
        "wwoowyyyyyyowwww",
        "owwwyyyyyyyyowwo",
        "oowwyyyyyyyywwoo",
        "ooowwwwwwwwwwooo",
    ),
    # player
    (
        "...g........g...",
        "...gg......gg...",
        "....gggggggg....",
        "....gggggggg....",
        "...gg..gg..gg...",
        "..ggg..gg..ggg..",
        ".gggggggggggggg.",
        "gggggggggggggggg",
        "gggggggggggggggg",
        "gggggggggggggggg",
        "gggggggggggggggg",
        "gggggggggggggggg",
        "..gggggggggggg..",
        "....g......g....",
        "....g......g....",
        "....g......g....",
    ),
    # player_on_target
    (
        "...g........g...",
        ".rrggrrrrrrggrr.",
        ".r..gggggggg..r.",
        ".r..gggggggg..r.",
        ".r.gg..gg..gg.r.",
        ".rggg..gg..gggr.",
        ".gggggggggggggg.",
        "gggggggggggggggg",
        "gggggggggggggggg",
        "gggggggggggggggg",
        "gggggggggggggggg",
        "gggggggggggggggg",
        ".rggggggggggggr.",
        ".r..g......g..r.",
        ".rrrgrrrrrrgrrr.",
        "....g......g....",
    ),
)


def _tile_array(rows: tuple[str, ...]) -> np.ndarray:
    return np.array([[PALETTE[c] for c in row] for row in rows], dtype=np.uint8)


_ATLAS = np.stack([_tile_array(rows) for rows in TILES])  # (7, 16, 16, 3)


def draw(codes) -> np.ndarray:
    """The ``(rows * 16, cols * 16, 3)`` uint8 frame of a room's codes 0..6 (one tile a cell)."""
    arr = np.asarray(codes)
    if arr.ndim != 2 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"Sokoban codes must be a non-empty 2-D integer array, got shape {arr.shape}, dtype {arr.dtype}")
    if arr.min() < 0 or arr.max() > 6:
        raise ValueError(f"Sokoban codes must be in 0..6, got values {sorted(set(arr.ravel().tolist()) - set(range(7)))}")
    rows, cols = arr.shape
    # (rows, cols, 16, 16, 3) -> (rows, 16, cols, 16, 3): cell tiles laid side by side
    return np.ascontiguousarray(_ATLAS[arr].transpose(0, 2, 1, 3, 4).reshape(rows * TILE, cols * TILE, 3))
