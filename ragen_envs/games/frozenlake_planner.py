"""Optimal play of slippery FrozenLake under the turn protocol.

In the text protocol an agent sends up to ``max_per_turn`` actions per turn and sees the
state only between turns: the actions of one turn are an open-loop *macro*. With ``T`` turns
and ``A`` actions left, the best achievable probability of reaching the goal obeys

    V(T, A, s) = max over macros m, 1 <= |m| <= min(max_per_turn, A) of
                 G_m(s) + sum_{s'} E_m(s, s') V(T - 1, A - |m|, s'),
    V(0, A, s) = V(T, 0, s) = 0,

where ``G_m(s)`` is the probability that running ``m`` from ``s`` reaches the goal (the
episode stops there) and ``E_m(s, s')`` the probability that it ends on the non-terminal
cell ``s'`` without falling or arriving. Both come from the one-step slip model (the intended
direction with probability ``success_rate``, each perpendicular one with half of the rest:
1/3 each in the paper's model, 0.8 / 0.1 / 0.1 in the newest reference's; a move into the
border stays).
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

from . import frozenlake as fl

__all__ = ["step_matrices", "TurnPlanner", "turn_planner"]



def step_matrices(desc: np.ndarray, slippery: bool = True,
                  success_rate: float = 1.0 / 3.0) -> tuple[np.ndarray, np.ndarray]:
    """One-step matrices for the four actions, from the game's own slip model.

    Returns ``Q`` of shape (4, n, n): probability of moving from non-terminal cell s to
    non-terminal cell s' (rows of terminal cells are 0), and ``g`` of shape (4, n): the
    probability of stepping onto the goal from s.
    """
    desc = np.asarray(desc)
    rows, cols = desc.shape
    n = rows * cols
    Q = np.zeros((4, n, n))
    g = np.zeros((4, n))
    probabilities = fl.outcome_probabilities(success_rate) if slippery else (1.0,)
    for r, c in itertools.product(range(rows), range(cols)):
        if desc[r, c] in (fl.HOLE, fl.GOAL):
            continue
        s = r * cols + c
        for a in fl.ACTIONS:
            for d, prob in zip(fl._outcome_directions(a, slippery), probabilities):
                nr, nc = fl._move((r, c), d, rows)
                if desc[nr, nc] == fl.GOAL:
                    g[a, s] += prob
                elif desc[nr, nc] != fl.HOLE:
                    Q[a, s, nr * cols + nc] += prob
    return Q, g


class TurnPlanner:
    """Exact dynamic programme over (turns left, actions left, cell); see the module doc."""

    def __init__(self, desc: np.ndarray, max_per_turn: int, slippery: bool = True,
                 success_rate: float = 1.0 / 3.0) -> None:
        if max_per_turn < 1:
            raise ValueError(f"max_per_turn must be >= 1, got {max_per_turn}")
        self.desc = np.asarray(desc)
        self.cols = self.desc.shape[1]
        self.max_per_turn = max_per_turn
        Q, g = step_matrices(self.desc, slippery, success_rate)
        # macros[k]: all action tuples of length k; E[k]: (4^k, n, n); G[k]: (4^k, n)
        self.macros: dict[int, list[tuple[int, ...]]] = {1: [(a,) for a in range(4)]}
        self.E: dict[int, np.ndarray] = {1: Q}
        self.G: dict[int, np.ndarray] = {1: g}
        for k in range(2, max_per_turn + 1):
            prev_E, prev_G = self.E[k - 1], self.G[k - 1]
            # extend every macro of length k-1 by each action (macro order: prefix-major)
            self.E[k] = np.einsum("mij,ajk->maik", prev_E, Q).reshape(-1, *Q.shape[1:])
            self.G[k] = (prev_G[:, None, :] + np.einsum("mij,aj->mai", prev_E, g)).reshape(-1, Q.shape[1])
            self.macros[k] = [m + (a,) for m in self.macros[k - 1] for a in range(4)]
        self._values: dict[tuple[int, int], np.ndarray] = {}

    def value(self, turns: int, actions: int) -> np.ndarray:
        """``V(turns, actions, .)`` as a vector over cells (row-major)."""
        return self._solve(turns, actions)[0]

    def _solve(self, turns: int, actions: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        key = (turns, actions)
        if key not in self._values:
            n = self.E[1].shape[1]
            if turns <= 0 or actions <= 0:
                self._values[key] = (np.zeros(n), [()] * n)
            else:
                best = np.full(n, -1.0)
                choice: list[tuple[int, ...]] = [()] * n
                for k in range(1, min(self.max_per_turn, actions) + 1):
                    future = self._solve(turns - 1, actions - k)[0]
                    scores = self.G[k] + self.E[k] @ future  # (4^k, n)
                    idx = scores.argmax(axis=0)  # first best: shortest, then lowest actions
                    top = scores[idx, np.arange(n)]
                    better = top > best + 1e-12
                    best = np.where(better, top, best)
                    for s in np.flatnonzero(better):
                        choice[s] = self.macros[k][idx[s]]
                self._values[key] = (best, choice)
        return self._values[key]

    def best_macro(self, position: tuple[int, int], turns: int, actions: int) -> tuple[int, ...]:
        """The optimal actions to send this turn from ``position``."""
        _, choice = self._solve(turns, actions)
        return choice[position[0] * self.cols + position[1]]


@lru_cache(maxsize=512)
def _cached(desc_key: bytes, shape: tuple[int, int], max_per_turn: int, slippery: bool,
            success_rate: float) -> TurnPlanner:
    desc = np.frombuffer(desc_key, dtype="<U1").reshape(shape)
    return TurnPlanner(desc, max_per_turn, slippery, success_rate)


def turn_planner(desc: np.ndarray, max_per_turn: int, slippery: bool = True,
                 success_rate: float = 1.0 / 3.0) -> TurnPlanner:
    """A cached :class:`TurnPlanner` for this map and slip model."""
    desc = np.ascontiguousarray(desc, dtype="<U1")
    return _cached(desc.tobytes(), desc.shape, int(max_per_turn), bool(slippery), float(success_rate))
