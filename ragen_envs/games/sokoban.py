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
from itertools import compress

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

# Per room width: each floor mask as a bit set over flat offsets from its window's corner.
_MASK_BITS: dict[int, tuple[int, ...]] = {}

# Per (cells, columns): :func:`_pull_moves`'s table.
_PULL_MOVES: dict[tuple[int, int], list] = {}

# bytes.translate table: the ASCII digits b"0" / b"1" to the codes WALL / FLOOR.
_BIT_DIGITS = bytes.maketrans(b"01", bytes((WALL, FLOOR)))
# bytes.translate tables from cell codes to the digit b"1" (else b"0"): a box (3 or 4), a box
# coded 3, a wall.
_BOX_DIGITS = bytes(49 if code in (BOX, BOX_ON_TARGET) else 48 for code in range(256))
_PULLED_DIGITS = bytes(49 if code == BOX_ON_TARGET else 48 for code in range(256))
_WALL_DIGITS = bytes(49 if code == WALL else 48 for code in range(256))
# bytes.translate tables: 1 for a floor cell, else 0; boxes start on targets (2 -> 4); pulled
# boxes are boxes (3 -> 4).
_FLOOR_FLAGS = bytes(code == FLOOR for code in range(256))
_TARGET_TO_BOX = bytes(BOX if code == TARGET else code for code in range(256))
_PULLED_TO_BOX = bytes(BOX if code == BOX_ON_TARGET else code for code in range(256))

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


def _room_topology(py_rng: random.Random, rows: int, cols: int, num_steps: int, p_change: float) -> bytearray:
    """Step 1: the floor plan, flat and row-major, one byte a cell (0 wall, 1 floor). Draws from
    ``P`` only.

    The reference's calls are ``choice(_WALK_DIRECTIONS)``, ``randint(1, rows - 1)``,
    ``randint(1, cols - 1)``, then per step ``random()``, maybe ``choice(_WALK_DIRECTIONS)``, and
    ``choice(_FLOOR_MASKS)``. They are replaced by the draws they make, which is exact for
    ``random.Random`` on CPython 3.10 to 3.13 (``Lib/random.py``, the same in all four for n > 0):
    ``choice(seq)`` returns ``seq[self._randbelow(len(seq))]``; ``randint(a, b)`` is
    ``randrange(a, b + 1)``, whose unit-step path returns ``a + self._randbelow(b + 1 - a)``;
    and ``Random._randbelow`` is ``_randbelow_with_getrandbits``: ``k = n.bit_length()``, then
    ``getrandbits(k)`` until the value is below ``n``. For the 4 directions and the 5 masks
    ``k`` is 3, hence the ``getrandbits(3)`` loops below. ``test_game_sokoban`` pins the levels.
    """
    getrandbits = py_rng.getrandbits
    uniform = py_rng.random
    r = getrandbits(3)  # choice(_WALK_DIRECTIONS)
    while r >= 4:
        r = getrandbits(3)
    dr, dc = _WALK_DIRECTIONS[r]
    # randint includes both ends: the start may sit on the last row/column until the first clamp.
    row = 1 + py_rng._randbelow(rows - 1)  # randint(1, rows - 1)
    col = 1 + py_rng._randbelow(cols - 1)  # randint(1, cols - 1)
    last_row, last_col = rows - 2, cols - 2  # >= 1: rooms are at least 3x3
    # The floor is kept as an int whose bit i is cell i: stamping a mask is one shift and or.
    # The reference adds mask counts; only "count > 0" survives, so marking is enough. A mask's
    # window (rows row-1..row+1, columns col-1..col+1) lies inside the room, so no bit wraps.
    mask_bits = _MASK_BITS.get(cols)
    if mask_bits is None:
        mask_bits = _MASK_BITS[cols] = tuple(sum(1 << (mr * cols + mc) for mr, mc in mask) for mask in _FLOOR_MASKS)
    floor = 0
    for _ in range(num_steps):
        if uniform() < p_change:
            r = getrandbits(3)  # choice(_WALK_DIRECTIONS)
            while r >= 4:
                r = getrandbits(3)
            dr, dc = _WALK_DIRECTIONS[r]
        # max(min(x, last), 1), the reference's clamp (last >= 1)
        row += dr
        if row > last_row:
            row = last_row
        elif row < 1:
            row = 1
        col += dc
        if col > last_col:
            col = last_col
        elif col < 1:
            col = 1
        r = getrandbits(3)  # choice(_FLOOR_MASKS)
        while r >= 5:
            r = getrandbits(3)
        floor |= mask_bits[r] << ((row - 1) * cols + col - 1)
    size = rows * cols
    # bit i -> cell i: binary digits reversed (cell 0 first), b"0"/b"1" -> 0/1
    cells = bytearray(format(floor, f"0{size}b")[::-1].encode().translate(_BIT_DIGITS))
    # force the border to wall (WALL is 0)
    cells[:cols] = cells[size - cols :] = bytes(cols)
    cells[::cols] = cells[cols - 1 :: cols] = bytes(rows)
    return cells


def _place_player_and_targets(np_rng: np.random.RandomState, room: bytearray, num_boxes: int) -> int:
    """Step 2: mark the player (5) and targets (2) in ``room`` in place; return the player cell.

    Draws from ``L`` only, indexing row-major lists of the cells still coded floor.
    """
    free = list(compress(range(len(room)), room.translate(_FLOOR_FLAGS)))
    if len(free) <= num_boxes + 1:
        raise SokobanGenerationError(
            f"not enough floor cells ({len(free)}) for one player and {num_boxes} boxes"
        )
    # Marking a cell takes it out of the floor list and keeps the others' order: deleting it
    # from ``free`` gives the list a fresh row-major scan would.
    player = free.pop(np_rng.randint(len(free)))
    room[player] = PLAYER
    for _ in range(num_boxes):
        room[free.pop(np_rng.randint(len(free)))] = TARGET
    return player


def _pull_moves(size: int, cols: int) -> list[tuple[tuple[int, int, int, int, int, int], ...]]:
    """Per player cell, the four moves of :func:`_reverse_play` in the order they are pushed
    (reverse action order), for keys of ``size`` cells: ``(next cell, blocked mask, key step,
    cell behind, its box bit, pulled-box step)``. Border cells (never the player) get none."""
    moves = _PULL_MOVES.get((size, cols))
    if moves is not None:
        return moves
    rows = size // cols
    low = size.bit_length()  # the player field's width
    deltas = [dr * cols + dc for dr, dc in (ACTION_DELTAS[a] for a in reversed(ACTIONS))]
    moves = []
    for pos in range(size):
        row, col = divmod(pos, cols)
        if not (0 < row < rows - 1 and 0 < col < cols - 1):
            moves.append(())
            continue
        entries = []
        for d in deltas:
            nxt, behind = pos + d, pos - d
            blocked = 1 << (low + nxt) | 1 << (low + 2 * size + nxt)  # a box or a wall on nxt
            # pulled box: leaves behind (B bit; its Q bit is cleared separately), lands on pos
            # coded 3 (B and Q bits); the player field moves by d
            pulled = d + (1 << (low + pos)) - (1 << (low + behind)) + (1 << (low + size + pos))
            entries.append((nxt, blocked, d, behind, 1 << (low + behind), pulled))
        moves.append(tuple(entries))
    _PULL_MOVES[(size, cols)] = moves
    return moves


def _reverse_play(
    structure: bytearray, state: bytes, player: int, cols: int, search_depth: int
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

    A grid is held as an int instead of its bytes: ``player | (B | Q << n | W << 2n) << w``
    (``n`` cells, ``w = n.bit_length()``; bit ``i`` of ``B`` is set when a box stands on cell ``i``, of ``Q`` when that
    box is coded 3, of ``W`` when cell ``i`` is a wall, the same in every key). Given the
    structure this is a one-to-one image of the grid (the player, the boxes and their 3/4 codes
    are all a grid holds beyond the structure), so the explored set holds the same states and
    answers every lookup as the set of grid bytes would. A move without a pull only changes the
    player field (``key + d``), and "wall or box on the next cell" is one ``&``. The player
    sits in the low bits so that int hashes, hence set slots, differ between its positions.
    """
    size = len(structure)
    cells = bytes(structure)
    targets = []
    t = cells.find(TARGET)
    while t >= 0:
        targets.append(t)
        t = cells.find(TARGET, t + 1)
    target_rc = [divmod(t, cols) for t in targets]
    low = size.bit_length()  # the player field's width
    target_bits = sum(1 << t for t in targets) << low
    moves = _pull_moves(size, cols)
    q_shift = size

    # bit i of int(s[::-1], 2) is s[i]
    grid = bytes(state)
    box_bits = int(grid.translate(_BOX_DIGITS)[::-1], 2)
    pulled_bits = int(grid.translate(_PULLED_DIGITS)[::-1], 2)
    wall_bits = int(cells.translate(_WALL_DIGITS)[::-1], 2)
    root = player | (box_bits | pulled_bits << size | wall_bits << 2 * size) << low
    root_boxes = tuple(targets)  # box k starts on target k (targets in row-major order)
    # The root is always popped first and explored (ttl search_depth - 1 >= 1, nothing explored
    # yet) with score 0, which beats the reference's initial -1: start from that outcome.
    best_score = 0
    best_key, best_pos, best_boxes, best_disp = root, player, root_boxes, 0
    explored: set[int] = set()
    num_explored = 0  # len(explored): each add below is of a key just found absent
    # Entry: (key, player cell, boxes, swaps, index of the last pulled box or -1,
    #         displacement of boxes, ttl after this state's decrement).
    # A state is pushed only with ttl >= 1 (the root: search_depth - 1 >= 1; children:
    # left - 1 >= 1), so the reference's "ttl <= 0: return" never fires on a popped state.
    stack = [(root, player, root_boxes, 0, -1, 0, search_depth - 1)]
    push = stack.append
    pop = stack.pop
    popped = 0
    while stack:
        key, pos, boxes, swaps, last_pull, disp, left = pop()
        popped += 1
        if not popped & 255:
            check_budget()
        if num_explored >= MAX_EXPLORED_STATES:
            break  # the explored set only grows: every later call would return at once
        if key in explored:
            continue
        # The score is swaps * displacement when every target is empty (no box on one, the
        # player not on one), else 0; 0 never beats best_score (>= 0).
        if swaps * disp > best_score and not key & target_bits and structure[pos] != TARGET:
            best_score = swaps * disp
            best_key, best_pos, best_boxes, best_disp = key, pos, boxes, disp
        explored.add(key)
        num_explored += 1
        if left <= 1:
            continue  # children would return immediately
        left -= 1
        for nxt, blocked, step, behind, behind_bit, pulled in moves[pos]:
            if key & blocked:
                continue  # wall or box: the child equals this (explored) state, a no-op call
            if key & behind_bit:
                # pull: the box moves behind -> pos and is coded 3 there (whatever it was)
                child = key + pulled - (key & behind_bit << q_shift)
                if child not in explored:
                    k = boxes.index(behind)
                    tr, tc = target_rc[k]
                    pr, pc = divmod(pos, cols)
                    br, bc = divmod(behind, cols)
                    push((child, nxt, boxes[:k] + (pos,) + boxes[k + 1 :], swaps + (k != last_pull), k,
                          disp + abs(tr - pr) + abs(tc - pc) - abs(tr - br) - abs(tc - bc), left))
            else:
                child = key + step  # step: the move's delta d
                if child not in explored:
                    push((child, nxt, boxes, swaps, last_pull, disp, left))

    grid = bytearray(cells)
    for box in best_boxes:
        grid[box] = BOX_ON_TARGET if best_key >> (low + size + box) & 1 else BOX
    grid[best_pos] = PLAYER
    return bytes(grid), best_boxes, best_disp


def _random_player_walk(
    py_rng: random.Random, structure: bytearray, state: bytearray, cols: int, displacement: int
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
        structure = bytearray(room)
        structure[player] = FLOOR
        state = room.translate(_TARGET_TO_BOX)  # boxes start on targets
        best, _, displacement = _reverse_play(structure, state, player, cols, search_depth)
        if displacement > 0:
            break
    else:
        raise SokobanGenerationError(f"seed {seed}: no box could be moved in {tries} tries")

    final = bytearray(best.translate(_PULLED_TO_BOX))
    _random_player_walk(py_rng, structure, final, cols, displacement)
    return SokobanLevel(
        room_fixed=np.frombuffer(structure, dtype=np.int8).reshape(rows, cols),
        room_state=np.frombuffer(final, dtype=np.int8).reshape(rows, cols),
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
