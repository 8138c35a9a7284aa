"""Sokoban: level generation, push dynamics and an optimal solver (pure mechanics, no text).

Cell codes (gym-sokoban's): ``WALL 0, FLOOR 1, TARGET 2, BOX_ON_TARGET 3, BOX 4, PLAYER 5``;
``PLAYER_ON_TARGET 6`` only appears in :func:`Sokoban.grid_codes` (the renderer's view).

Level generation (:func:`generate_level`) reproduces the reference generator (RAGEN's adaptation
of gym-sokoban) draw by draw, as specified in the project's reference notes
(instance-generation.md, section "Sokoban"). Two private generators are
seeded with the level seed, ``P = random.Random(seed)`` and ``L = numpy.random.RandomState(seed)``
(what the reference got from seeding the process-global ``random`` / ``np.random``). Per try:

1. *Topology* (``P``): a random walk of ``num_steps`` steps inside the room stamps one of five
   3x3 floor masks around each position; the border is then forced to wall.
2. *Placement* (``L``): the player, then each target, on a uniformly drawn floor cell
   (row-major lists). Boxes start on their targets. Too few floor cells is a hard failure.
3. *Reverse play* (no randomness): a depth-first search over "pull" moves from the solved
   state, bounded by a time-to-live of ``search_depth`` per path and 300,000 explored states.
   Each newly explored state scores ``swaps * displacement`` (``swaps``: how often the pulled
   box changed along the path; 0 unless every target is empty); the first state with the
   highest score becomes the puzzle.

Tries repeat (same ``P``/``L`` streams) until the puzzle's displacement is positive; then a short
random player walk (``P``) moves the player away from the box it last pulled.

The reference re-seeded failed generations with Python's per-process salted ``hash``, which
nobody can reproduce; :func:`generate_level_with_retry` replaces it with :func:`retry_seed`.

Dynamics (:class:`Sokoban`) are gym-sokoban's push actions and reward; :func:`solve` is a
breadth-first search returning one shortest action list.
"""

from __future__ import annotations

import operator
import random
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from .budget import check_budget

__all__ = [
    "WALL",
    "FLOOR",
    "TARGET",
    "BOX_ON_TARGET",
    "BOX",
    "PLAYER",
    "PLAYER_ON_TARGET",
    "UP",
    "DOWN",
    "LEFT",
    "RIGHT",
    "ACTIONS",
    "ACTION_DELTAS",
    "MAX_EXPLORED_STATES",
    "SokobanGenerationError",
    "SokobanLevel",
    "SokobanStep",
    "Sokoban",
    "generate_level",
    "generate_level_with_retry",
    "retry_seed",
    "solve",
]

WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER = 0, 1, 2, 3, 4, 5
PLAYER_ON_TARGET = 6

UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
ACTIONS = (UP, DOWN, LEFT, RIGHT)
ACTION_DELTAS = {UP: (-1, 0), DOWN: (1, 0), LEFT: (0, -1), RIGHT: (0, 1)}

# Reward terms of gym-sokoban's ``_calc_reward``.
STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVED_REWARD = 10.0

# ``random.Random.sample(seq, 1)[0]`` (the reference's call) and ``choice(seq)`` both take
# ``seq[_randbelow(len(seq))]``: the same draw, and choice is much cheaper.

_TLS = threading.local()


def _thread_random_state() -> np.random.RandomState:
    """One legacy RandomState per thread, re-seeded per level (never the global one)."""
    rs = getattr(_TLS, "random_state", None)
    if rs is None:
        rs = _TLS.random_state = np.random.RandomState(0)
    return rs


# Global cap on states the reverse-play search explores (the reference's constant).
MAX_EXPLORED_STATES = 300_000

# Topology walk: directions and 3x3 floor masks, in the reference's order (the order fixes
# which item a given ``sample`` draw picks). Masks are (row, col) offsets inside the window.
_WALK_DIRECTIONS = [(1, 0), (0, 1), (-1, 0), (0, -1)]
_FLOOR_MASKS = [
    ((1, 0), (1, 1), (1, 2)),  # middle row
    ((0, 1), (1, 1), (2, 1)),  # middle column
    ((1, 0), (1, 1), (2, 1)),
    ((1, 0), (1, 1), (2, 0), (2, 1)),
    ((1, 1), (1, 2), (2, 1)),
]

# Derived seeds step by a large prime so consecutive base seeds do not share retry seeds.
_RETRY_STRIDE = 1_000_003
_SEED_MODULUS = 2**32


class SokobanGenerationError(RuntimeError):
    """Level generation failed for this seed (too little floor, or no box could be moved)."""


# --------------------------------------------------------------------------------------------
# Level


@dataclass(frozen=True, eq=False)
class SokobanLevel:
    """A generated puzzle.

    ``room_fixed``: 0 wall / 1 floor / 2 target. ``room_state``: codes 0..5 (boxes, player).
    ``seed``: the seed whose draws produced it. Arrays are stored as read-only int8 copies.
    """

    room_fixed: np.ndarray
    room_state: np.ndarray
    seed: int

    def __post_init__(self) -> None:
        fixed = np.array(self.room_fixed, dtype=np.int8)
        state = np.array(self.room_state, dtype=np.int8)
        if fixed.ndim != 2 or fixed.shape != state.shape:
            raise ValueError(f"room arrays must be 2-D of one shape, got {fixed.shape} and {state.shape}")
        if int(np.count_nonzero(state == PLAYER)) != 1:
            raise ValueError("room_state must hold exactly one player (code 5)")
        fixed.setflags(write=False)
        state.setflags(write=False)
        # Frozen dataclass: bypass the frozen __setattr__ once, to store the normalised arrays.
        object.__setattr__(self, "room_fixed", fixed)
        object.__setattr__(self, "room_state", state)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SokobanLevel):
            return NotImplemented
        return (
            self.seed == other.seed
            and np.array_equal(self.room_fixed, other.room_fixed)
            and np.array_equal(self.room_state, other.room_state)
        )

    def __hash__(self) -> int:
        return hash((self.seed, self.room_fixed.shape, self.room_fixed.tobytes(), self.room_state.tobytes()))


# --------------------------------------------------------------------------------------------
# Generation


def _check_seed(seed: int) -> int:
    seed = operator.index(seed)
    if not 0 <= seed < _SEED_MODULUS:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    return seed


def _room_topology(py_rng: random.Random, rows: int, cols: int, num_steps: int, p_change: float) -> list[int]:
    """Step 1: the floor plan as a flat row-major list (0 wall, 1 floor). Draws from ``P`` only."""
    floor = [0] * (rows * cols)
    direction = py_rng.choice(_WALK_DIRECTIONS)
    # randint includes both ends: the start may sit on the last row/column until the first clamp.
    row = py_rng.randint(1, rows - 1)
    col = py_rng.randint(1, cols - 1)
    for _ in range(num_steps):
        if py_rng.random() < p_change:
            direction = py_rng.choice(_WALK_DIRECTIONS)
        row = max(min(row + direction[0], rows - 2), 1)
        col = max(min(col + direction[1], cols - 2), 1)
        mask = py_rng.choice(_FLOOR_MASKS)
        # The reference adds mask counts; only "count > 0" survives, so marking is enough.
        for dr, dc in mask:
            floor[(row - 1 + dr) * cols + (col - 1 + dc)] = FLOOR
    for c in range(cols):
        floor[c] = WALL
        floor[(rows - 1) * cols + c] = WALL
    for r in range(rows):
        floor[r * cols] = WALL
        floor[r * cols + cols - 1] = WALL
    return floor


def _place_player_and_targets(np_rng: np.random.RandomState, room: list[int], num_boxes: int) -> int:
    """Step 2: mark the player (5) and targets (2) in ``room`` in place; return the player cell.

    Draws from ``L`` only, indexing row-major lists of the cells still coded floor.
    """
    floor_cells = [i for i, code in enumerate(room) if code == FLOOR]
    if len(floor_cells) <= num_boxes + 1:
        raise SokobanGenerationError(
            f"not enough floor cells ({len(floor_cells)}) for one player and {num_boxes} boxes"
        )
    player = floor_cells[np_rng.randint(len(floor_cells))]
    room[player] = PLAYER
    for _ in range(num_boxes):
        free = [i for i, code in enumerate(room) if code == FLOOR]
        room[free[np_rng.randint(len(free))]] = TARGET
    return player


def _reverse_play(
    structure: list[int], state: list[int], player: int, cols: int, search_depth: int
) -> tuple[bytes, tuple[int, ...], int]:
    """Step 3: pull-only depth-first search from the solved ``state``.

    Returns ``(best state, best box positions per target, best displacement)``; the state still
    codes pulled boxes as 3 wherever they stand (the caller turns them into 4).

    Equivalent to the reference's recursive search, run with an explicit stack so deep
    ``search_depth`` values cannot hit Python's recursion limit. Every search state is pushed
    with its ``ttl`` already decremented (``left``); children are pushed in reverse action order
    so they are popped (= "called") in the reference's order up, down, left, right.

    Reference details kept on purpose:
    * the explored-set key is the whole grid, including the 4 (never pulled) / 3 (pulled) codes;
    * a state first reached late on a path is expanded only with the ttl it had then;
    * ``swaps`` counts changes of the last pulled box along the path (the first pull counts:
      ``last_pull`` starts as "none"); moves without a pull keep ``last_pull``.
    """
    targets = [i for i, code in enumerate(structure) if code == TARGET]
    num_targets = len(targets)
    target_rc = [divmod(t, cols) for t in targets]
    deltas = [dr * cols + dc for dr, dc in (ACTION_DELTAS[a] for a in ACTIONS)]
    deltas_reversed = deltas[::-1]

    def displacement(boxes: tuple[int, ...]) -> int:
        total = 0
        for (tr, tc), box in zip(target_rc, boxes):
            br, bc = divmod(box, cols)
            total += abs(tr - br) + abs(tc - bc)
        return total

    root = bytes(state)
    root_boxes = tuple(targets)  # box k starts on target k (targets in row-major order)
    best_score = -1
    best_state = root
    best_boxes = root_boxes
    explored: set[bytes] = set()
    # Entry: (grid, player cell, boxes, swaps, index of the last pulled box or -1,
    #         ttl after this state's decrement).
    stack = [(root, player, root_boxes, 0, -1, search_depth - 1)]
    popped = 0
    while stack:
        grid, pos, boxes, swaps, last_pull, left = stack.pop()
        popped += 1
        if not popped & 255:
            check_budget()
        if left <= 0:
            continue
        if len(explored) >= MAX_EXPLORED_STATES:
            break  # the explored set only grows: every later call would return at once
        if grid in explored:
            continue
        score = 0
        if grid.count(TARGET) == num_targets:  # every target empty (not under box nor player)
            score = swaps * displacement(boxes)
        if score > best_score:
            best_score, best_state, best_boxes = score, grid, boxes
        explored.add(grid)
        if left - 1 <= 0:
            continue  # children would return immediately
        for d in deltas_reversed:
            nxt = pos + d
            if grid[nxt] != FLOOR and grid[nxt] != TARGET:
                continue  # blocked: the child equals this (explored) state, a no-op call
            child = bytearray(grid)
            child[pos] = structure[pos]
            child[nxt] = PLAYER
            child_boxes = boxes
            child_swaps = swaps
            child_last = last_pull
            behind = pos - d
            if grid[behind] == BOX_ON_TARGET or grid[behind] == BOX:
                child[pos] = BOX_ON_TARGET  # the reference codes a pulled box 3 wherever it lands
                child[behind] = structure[behind]
                child_last = boxes.index(behind)
                child_boxes = boxes[:child_last] + (pos,) + boxes[child_last + 1 :]
                if child_last != last_pull:
                    child_swaps = swaps + 1
            key = bytes(child)
            if key not in explored:
                stack.append((key, nxt, child_boxes, child_swaps, child_last, left - 1))
    return best_state, best_boxes, displacement(best_boxes)


def _random_player_walk(
    py_rng: random.Random, structure: list[int], state: list[int], cols: int, displacement: int
) -> None:
    """Step 5 (RAGEN's addition): move the player 1-3 cells without revisiting, in place."""
    move_probability = 0.8 if displacement == 1 else 0.5
    if py_rng.random() > move_probability:
        return
    pos = state.index(PLAYER)
    visited = [pos]
    deltas = [dr * cols + dc for dr, dc in (ACTION_DELTAS[a] for a in ACTIONS)]
    for _ in range(3):
        moves = [
            pos + d for d in deltas if state[pos + d] in (FLOOR, TARGET) and pos + d not in visited
        ]
        if not moves:
            return
        nxt = py_rng.choice(moves)
        state[pos] = structure[pos]
        state[nxt] = PLAYER
        pos = nxt
        visited.append(pos)
        if py_rng.random() > 0.5:
            return


def generate_level(
    seed: int,
    rows: int = 6,
    cols: int = 6,
    num_boxes: int = 1,
    search_depth: int = 300,
    num_steps: int | None = None,
    p_change: float = 0.35,
    tries: int = 4,
) -> SokobanLevel:
    """Generate the reference puzzle for ``seed`` (see the module docstring).

    ``seed`` must be in ``[0, 2**32)`` (what ``numpy.random.RandomState`` accepts).
    ``num_steps`` defaults to ``int(1.7 * (rows + cols))``.

    Raises :class:`SokobanGenerationError` when the floor plan has too few cells, or when no
    try moved a box (the two failures after which the reference re-seeded).
    """
    seed = _check_seed(seed)
    if rows < 3 or cols < 3:
        raise ValueError(f"room must be at least 3x3, got {rows}x{cols}")
    if num_boxes < 1:
        raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
    if search_depth < 2:
        # With ttl 1 the reference explores nothing and crashes on an empty best state.
        raise ValueError(f"search_depth must be >= 2, got {search_depth}")
    if tries < 1:
        raise ValueError(f"tries must be >= 1, got {tries}")
    if num_steps is None:
        num_steps = int(1.7 * (rows + cols))

    py_rng = random.Random(seed)
    np_rng = _thread_random_state()
    np_rng.seed(seed)  # re-seeding is ~65 us cheaper than constructing; same stream
    for _ in range(tries):
        check_budget()
        room = _room_topology(py_rng, rows, cols, num_steps, p_change)
        player = _place_player_and_targets(np_rng, room, num_boxes)
        structure = list(room)
        structure[player] = FLOOR
        state = [BOX if code == TARGET else code for code in room]  # boxes start on targets
        best, _, displacement = _reverse_play(structure, state, player, cols, search_depth)
        if displacement > 0:
            break
    else:
        raise SokobanGenerationError(f"seed {seed}: no box could be moved in {tries} tries")

    final = [BOX if code == BOX_ON_TARGET else code for code in best]
    _random_player_walk(py_rng, structure, final, cols, displacement)
    return SokobanLevel(
        room_fixed=np.array(structure, dtype=np.int8).reshape(rows, cols),
        room_state=np.array(final, dtype=np.int8).reshape(rows, cols),
        seed=seed,
    )


def retry_seed(seed: int, k: int) -> int:
    """The ``k``-th fallback seed of ``seed``: ``(seed + k * 1_000_003) % 2**32``.

    Our deterministic replacement for the reference's ``abs(hash(str(seed))) % 2**32``, which
    depends on the per-process string-hash salt. ``k = 0`` gives ``seed`` itself.
    """
    return (operator.index(seed) + operator.index(k) * _RETRY_STRIDE) % _SEED_MODULUS


def generate_level_with_retry(
    seed: int,
    rows: int = 6,
    cols: int = 6,
    num_boxes: int = 1,
    search_depth: int = 300,
    num_steps: int | None = None,
    p_change: float = 0.35,
    tries: int = 4,
    max_retries: int = 100,
) -> SokobanLevel:
    """:func:`generate_level` on ``seed``, then on ``retry_seed(seed, k)`` for k = 1, 2, ...

    Returns the first level generated; its ``.seed`` says which seed produced it. Raises
    :class:`SokobanGenerationError` if ``seed`` and all ``max_retries`` derived seeds fail.
    """
    seed = _check_seed(seed)
    for k in range(max_retries + 1):
        check_budget()
        try:
            return generate_level(
                retry_seed(seed, k),
                rows=rows,
                cols=cols,
                num_boxes=num_boxes,
                search_depth=search_depth,
                num_steps=num_steps,
                p_change=p_change,
                tries=tries,
            )
        except SokobanGenerationError:
            continue
    raise SokobanGenerationError(f"seed {seed}: generation failed for it and {max_retries} retry seeds")


# --------------------------------------------------------------------------------------------
# Dynamics


@dataclass(frozen=True, init=False)
class SokobanStep:
    """The result of one action."""

    reward: float
    moved: bool  # the player's position changed
    solved: bool  # every target holds a box after the action
    boxes_on_target: int

    # frozen dataclass, own __init__: writing __dict__ directly costs half of the generated
    # per-field object.__setattr__, and this is built on every action (the hot path).
    def __init__(self, reward: float, moved: bool, solved: bool, boxes_on_target: int) -> None:
        d = self.__dict__
        d["reward"], d["moved"], d["solved"], d["boxes_on_target"] = reward, moved, solved, boxes_on_target


def _check_action(action: int) -> int:
    try:
        index = operator.index(action)
    except TypeError:
        raise ValueError(f"action must be an int in 0..3, got {action!r}") from None
    if index not in ACTION_DELTAS:
        raise ValueError(f"action must be an int in 0..3, got {action!r}")
    return index


class Sokoban:
    """A Sokoban game with gym-sokoban's push actions and rewards.

    An action moves the player one cell; moving into a box pushes it when the cell beyond is
    floor or an empty target, otherwise a box or wall blocks the move. Every action costs 0.1
    (even a blocked one); +1 when the number of boxes on targets rises, -1 when it falls, +10
    when every target holds a box.
    """

    def __init__(self, level: SokobanLevel) -> None:
        self._fixed = np.array(level.room_fixed, dtype=np.int8)
        self._fixed.setflags(write=False)
        # The state lives in a bytearray (row-major int8 codes) that the numpy view shares:
        # a step reads and writes single cells, which costs ~30 ns on a bytearray and ~100 ns
        # on a numpy array, and bytes.count replaces numpy's count_nonzero(state == code).
        self._cells = bytearray(np.ascontiguousarray(level.room_state, dtype=np.int8).tobytes())
        self._fixed_cells = self._fixed.tobytes()
        self._rows, self._cols = self._fixed.shape
        self._state = np.frombuffer(self._cells, dtype=np.int8).reshape(self._fixed.shape)
        row, col = np.argwhere(self._state == PLAYER)[0]
        self._player = (int(row), int(col))
        # The reference starts this counter at 0; generated puzzles never start with a box on a
        # target, so counting keeps parity and stays right for hand-made levels.
        self._boxes_on_target = self._cells.count(BOX_ON_TARGET)
        self._num_targets = self._fixed_cells.count(TARGET)

    # -- views ---------------------------------------------------------------------------

    @property
    def room_fixed(self) -> np.ndarray:
        """Walls / floor / targets (read-only view)."""
        return self._fixed

    @property
    def room_state(self) -> np.ndarray:
        """Current codes 0..5 (read-only view; use :meth:`grid_codes` for the 6 code)."""
        view = self._state.view()
        view.setflags(write=False)
        return view

    @property
    def shape(self) -> tuple[int, int]:
        return self._state.shape  # type: ignore[return-value]

    @property
    def player(self) -> tuple[int, int]:
        return self._player

    @property
    def boxes_on_target(self) -> int:
        return self._boxes_on_target

    @property
    def num_boxes(self) -> int:
        return self._cells.count(BOX) + self._cells.count(BOX_ON_TARGET)

    @property
    def solved(self) -> bool:
        """No empty target and none hidden under the player (gym-sokoban's check)."""
        return self._boxes_on_target == self._num_targets

    def grid_codes(self) -> np.ndarray:
        """A copy of the state with the player coded 6 when standing on a target."""
        codes = self._state.copy()
        if self._fixed[self._player] == TARGET:
            codes[self._player] = PLAYER_ON_TARGET
        return codes

    def grid_bytes(self) -> bytes:
        """:meth:`grid_codes` as bytes, row-major (one byte per cell; what a text view reads)."""
        row, col = self._player
        i = row * self._cols + col
        if self._fixed_cells[i] == TARGET:
            return b"".join((self._cells[:i], b"\x06", self._cells[i + 1:]))
        return bytes(self._cells)

    def key(self) -> bytes:
        """Hashable fingerprint of the movable state (same level implied)."""
        return bytes(self._cells)

    def copy(self) -> Sokoban:
        clone = Sokoban.__new__(Sokoban)
        clone._fixed = self._fixed  # read-only, safe to share
        clone._fixed_cells = self._fixed_cells
        clone._rows, clone._cols = self._rows, self._cols
        clone._cells = bytearray(self._cells)
        clone._state = np.frombuffer(clone._cells, dtype=np.int8).reshape(self._fixed.shape)
        clone._player = self._player
        clone._boxes_on_target = self._boxes_on_target
        clone._num_targets = self._num_targets
        return clone

    # -- dynamics ------------------------------------------------------------------------

    def _inside(self, row: int, col: int) -> bool:
        return 0 <= row < self._rows and 0 <= col < self._cols

    def step(self, action: int) -> SokobanStep:
        """Apply one action (UP, DOWN, LEFT, RIGHT). Raises ValueError for anything else."""
        reward, moved, solved = self.advance(action)
        return SokobanStep(reward, moved, solved, self._boxes_on_target)

    def advance(self, action: int) -> tuple[float, bool, bool]:
        """:meth:`step` without its result object: the same checks and the same move;
        returns ``(reward, moved, solved)`` (the text env's hot path)."""
        delta = ACTION_DELTAS.get(action) if type(action) is int else None
        if delta is None:
            delta = ACTION_DELTAS[_check_action(action)]
        dr, dc = delta
        cells, rows, cols = self._cells, self._rows, self._cols
        row, col = self._player
        nr, nc = row + dr, col + dc
        before = on_target = self._boxes_on_target
        moved = False
        # Cells outside the grid count as wall (generated rooms are walled, so this never
        # differs from the reference, whose numpy indexing would wrap negative indices).
        if 0 <= nr < rows and 0 <= nc < cols:
            here, nxt = row * cols + col, nr * cols + nc
            target_code = cells[nxt]
            if target_code == BOX or target_code == BOX_ON_TARGET:
                br, bc = nr + dr, nc + dc
                if 0 <= br < rows and 0 <= bc < cols:
                    beyond = br * cols + bc
                    if cells[beyond] == FLOOR or cells[beyond] == TARGET:
                        fixed = self._fixed_cells
                        onto = fixed[beyond] == TARGET
                        cells[beyond] = BOX_ON_TARGET if onto else BOX
                        cells[nxt] = PLAYER
                        cells[here] = fixed[here]
                        moved = True
                        # the one box that moved left nxt and reached beyond: the count of
                        # BOX_ON_TARGET cells changes by exactly that (no recount of the grid)
                        on_target += onto - (target_code == BOX_ON_TARGET)
            elif target_code == FLOOR or target_code == TARGET:
                cells[nxt] = PLAYER
                cells[here] = self._fixed_cells[here]
                moved = True
        if moved:
            self._player = (nr, nc)

        # gym-sokoban's _calc_reward, with its order of float additions.
        reward = STEP_PENALTY
        if on_target > before:
            reward += BOX_ON_TARGET_REWARD
        elif on_target < before:
            reward += BOX_OFF_TARGET_PENALTY
        self._boxes_on_target = on_target
        solved = on_target == self._num_targets
        if solved:
            reward += SOLVED_REWARD
        return reward, moved, solved


# --------------------------------------------------------------------------------------------
# Solver


def solve(
    level_or_game: SokobanLevel | Sokoban,
    max_depth: int | None = None,
    max_states: int = 1_000_000,
) -> list[int] | None:
    """One shortest action list that solves the puzzle (breadth-first search).

    Uses the push dynamics of :class:`Sokoban`; actions are expanded in the order UP, DOWN,
    LEFT, RIGHT, so the answer is deterministic. Returns ``[]`` if already solved, ``None`` if no
    solution has at most ``max_depth`` actions or more than ``max_states`` states would be
    visited. A box pushed into a non-target corner can never move again, so such states are
    pruned when there are no more boxes than targets (every box is then needed on a target);
    this never removes a solution, so lengths stay optimal.
    """
    # Both a level and a game expose ``room_fixed`` / ``room_state``.
    fixed, state = level_or_game.room_fixed, level_or_game.room_state
    rows, cols = fixed.shape
    # Pad with a wall ring so neighbour indices never leave the grid (hand-made levels may
    # lack border walls); flat indices then need no bounds checks.
    width = cols + 2
    walls = bytearray([1]) * ((rows + 2) * width)
    targets: set[int] = set()
    boxes: list[int] = []
    player = -1
    for r in range(rows):
        for c in range(cols):
            i = (r + 1) * width + (c + 1)
            walls[i] = 1 if fixed[r, c] == WALL else 0
            if fixed[r, c] == TARGET:
                targets.add(i)
            code = state[r, c]
            if code in (BOX, BOX_ON_TARGET):
                boxes.append(i)
            elif code == PLAYER:
                player = i
    target_set = frozenset(targets)

    def is_solved(box_tuple: tuple[int, ...]) -> bool:
        return target_set.issubset(box_tuple)

    start = (player, tuple(sorted(boxes)))
    if is_solved(start[1]):
        return []
    if max_depth is not None and max_depth <= 0:
        return None

    deltas = [dr * width + dc for dr, dc in (ACTION_DELTAS[a] for a in ACTIONS)]
    # Dead squares: non-target corners. Only wall-ring cells sit on the padded border, and
    # they are walls, so every cell tested here has four in-range neighbours.
    dead = bytearray(len(walls))
    if len(boxes) <= len(targets):
        for i in range(len(walls)):
            if walls[i] or i in target_set:
                continue
            blocked_vertically = walls[i - width] or walls[i + width]
            blocked_horizontally = walls[i - 1] or walls[i + 1]
            dead[i] = 1 if (blocked_vertically and blocked_horizontally) else 0

    parents: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, tuple[int, ...]], int] | None] = {start: None}
    frontier = deque([start])
    depth = 0
    while frontier:
        depth += 1
        if max_depth is not None and depth > max_depth:
            return None
        next_frontier: deque = deque()
        for node in frontier:
            pos, box_tuple = node
            for action, d in zip(ACTIONS, deltas):
                nxt = pos + d
                if walls[nxt]:
                    continue
                if nxt in box_tuple:
                    beyond = nxt + d
                    if walls[beyond] or beyond in box_tuple or dead[beyond]:
                        continue
                    new_boxes = tuple(sorted(beyond if b == nxt else b for b in box_tuple))
                else:
                    new_boxes = box_tuple
                child = (nxt, new_boxes)
                if child in parents:
                    continue
                parents[child] = (node, action)
                if new_boxes is not box_tuple and is_solved(new_boxes):
                    return _plan(parents, child)
                if len(parents) > max_states:
                    return None
                next_frontier.append(child)
        frontier = next_frontier
    return None


def _plan(parents: dict, node: tuple) -> list[int]:
    actions: list[int] = []
    link = parents[node]
    while link is not None:
        node, action = link
        actions.append(action)
        link = parents[node]
    actions.reverse()
    return actions
