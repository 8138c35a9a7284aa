"""Partially observed Sokoban: what the player sees of a :class:`~ragen_envs.games.sokoban.Sokoban`.

The game, its levels and its dynamics are Sokoban's unchanged (same generator, same seeds, same
instances); only the view differs. As in the reference's POMDP mode (``partial_obs``), the
player sees the ``(2 * radius + 1) x (2 * radius + 1)`` cells centred on itself; cells beyond
the board's edge are seen as walls (the board is walled, so they look like more wall).
"""

from __future__ import annotations

import numpy as np

from .sokoban import WALL, Sokoban

__all__ = ["MAX_RADIUS", "visible_mask", "window_codes"]

MAX_RADIUS = 8


def _check_radius(radius: int) -> int:
    if not isinstance(radius, (int, np.integer)) or isinstance(radius, bool) or not 1 <= radius <= MAX_RADIUS:
        raise ValueError(f"window must be an integer in [1, {MAX_RADIUS}] (the view's half-width), got {radius!r}")
    return int(radius)


def window_codes(game: Sokoban, radius: int) -> np.ndarray:
    """The seen cells as grid codes (0..6, ``PLAYER_ON_TARGET`` included), the player at the
    centre; outside the board: ``WALL``."""
    radius = _check_radius(radius)
    codes = game.grid_codes()
    rows, cols = codes.shape
    pr, pc = game.player
    out = np.full((2 * radius + 1, 2 * radius + 1), WALL, dtype=codes.dtype)
    r0, r1 = max(pr - radius, 0), min(pr + radius + 1, rows)
    c0, c1 = max(pc - radius, 0), min(pc + radius + 1, cols)
    out[r0 - pr + radius : r1 - pr + radius, c0 - pc + radius : c1 - pc + radius] = codes[r0:r1, c0:c1]
    return out


def visible_mask(game: Sokoban, radius: int) -> np.ndarray:
    """A boolean board-shaped mask of the cells inside the player's window."""
    radius = _check_radius(radius)
    rows, cols = game.shape
    pr, pc = game.player
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    return (np.abs(r - pr) <= radius) & (np.abs(c - pc) <= radius)
