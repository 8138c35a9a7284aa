"""The registration table: every ``ragen/*`` id, its entry point, defaults and description."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

__all__ = ["ENV_SPECS", "EnvSpec", "register_all", "EVAL_SEEDS", "vector_entry_point_name"]

# The reference's validation seeds (base 123, 256 groups of one): the paper's 256 puzzles.
EVAL_SEEDS: tuple[int, ...] = tuple(range(123, 123 + 256))


@dataclass(frozen=True)
class EnvSpec:
    id: str
    entry_point: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)


ENV_SPECS: tuple[EnvSpec, ...] = (
    EnvSpec(
        "ragen/Bandit-v0",
        "ragen_envs.envs.bandit:BanditEnv",
        "two-armed bandit, one turn: Phoenix (low, 0.15) vs Dragon (high, Bernoulli 0.25)",
        {"low_name": "Phoenix", "high_name": "Dragon"},
    ),
    EnvSpec(
        "ragen/BanditRev-v0",
        "ragen_envs.envs.bandit:BanditEnv",
        "bandit generalisation arms: Trader (low, 0.15) vs Librarian (high, Bernoulli 0.25)",
        {"low_name": "Trader", "high_name": "Librarian"},
    ),
    EnvSpec(
        "ragen/Sokoban-v0",
        "ragen_envs.envs.sokoban:SokobanEnv",
        "Sokoban 6x6, 1 box, reverse-play depth 300; 5 turns, 10 actions",
        {"dim_room": (6, 6), "num_boxes": 1, "search_depth": 300},
    ),
    EnvSpec(
        "ragen/LargeSokoban-v0",
        "ragen_envs.envs.sokoban:SokobanEnv",
        "Sokoban 8x8, 2 boxes, reverse-play depth 10; 5 turns, 10 actions",
        {"dim_room": (8, 8), "num_boxes": 2, "search_depth": 10},
    ),
    EnvSpec(
        "ragen/LargeSokoban-v1",
        "ragen_envs.envs.sokoban:SokobanEnv",
        "LargeSokoban-v0's levels with the newest reference's instruction text (RAGEN-2's LargerSokoban)",
        {"dim_room": (8, 8), "num_boxes": 2, "search_depth": 10, "instruction_style": "ragen2"},
    ),
    EnvSpec(
        "ragen/CoordSokoban-v0",
        "ragen_envs.envs.sokoban:SokobanEnv",
        "Sokoban-v0 with the reference's coordinate lines (targets, boxes, player) above the grid",
        {"dim_room": (6, 6), "num_boxes": 1, "search_depth": 300, "observation_format": "grid_coord",
         "max_tokens": 120},
    ),
    EnvSpec(
        "ragen/SokobanNewVocab-v0",
        "ragen_envs.envs.sokoban:SokobanEnv",
        "Sokoban 6x6, 1 box, depth 30, drawn with new symbols W . G C B A @",
        {"dim_room": (6, 6), "num_boxes": 1, "search_depth": 30, "symbols": "newvocab"},
    ),
    EnvSpec(
        "ragen/SokobanPOMDP-v0",
        "ragen_envs.envs.sokoban_pomdp:SokobanPOMDPEnv",
        "Sokoban-v0's levels seen through a 3x3 window around the player (+ its position); 5 turns, 10 actions",
        {"dim_room": (6, 6), "num_boxes": 1, "search_depth": 300, "window": 1},
    ),
    EnvSpec(
        "ragen/FrozenLake-v0",
        "ragen_envs.envs.frozenlake:FrozenLakeEnv",
        "FrozenLake 4x4, p=0.8 frozen, random start/goal, slip 1/3 each; 5 turns, 10 actions",
        {"size": 4, "p": 0.8, "slippery": True},
    ),
    EnvSpec(
        "ragen/FrozenLake-v1",
        "ragen_envs.envs.frozenlake:FrozenLakeEnv",
        "FrozenLake as in the newest reference: 4x4, p=0.9 frozen, slip 0.8 ahead / 0.1 each side; 5 turns, 10 actions",
        {"size": 4, "p": 0.9, "slippery": True, "success_rate": 0.8},
    ),
    EnvSpec(
        "ragen/CoordFrozenLake-v0",
        "ragen_envs.envs.frozenlake:FrozenLakeEnv",
        "FrozenLake-v1 with the reference's coordinate lines (start, goal, player, holes) above the grid",
        {"size": 4, "p": 0.9, "slippery": True, "success_rate": 0.8, "observation_format": "grid_coord",
         "max_tokens": 120},
    ),
    EnvSpec(
        "ragen/LightsOut-v0",
        "ragen_envs.envs.lightsout:LightsOutEnv",
        "Lights Out 3x3, 4 scramble presses (always solvable); 8 turns, 8 actions, 1 per turn",
        {"size": 3, "scramble_depth": 4},
    ),
    EnvSpec(
        "ragen/RubiksCube-v0",
        "ragen_envs.envs.rubikscube:RubiksCubeEnv",
        "2x2 Rubik's Cube, 1 scramble turn, Singmaster turns; 25 turns, 20 actions, 4 per turn",
        {"scramble_depth": 1, "max_turns": 25, "max_actions": 20, "max_actions_per_turn": 4, "max_tokens": 96},
    ),
    EnvSpec(
        "ragen/2048-v0",
        "ragen_envs.envs.game2048:Game2048Env",
        "2048 on a 4x4 board, log reward, invalid move -0.1; 800 turns, 700 actions, 1 per turn",
        {"size": 4, "max_actions": 700, "max_actions_per_turn": 1, "max_tokens": 8192},
    ),
    EnvSpec(
        "ragen/Sudoku-v0",
        "ragen_envs.envs.sudoku:SudokuEnv",
        "9x9 Sudoku, easy (32 empty cells), the reference's puzzles; 5 turns, 20 actions, 2 per turn",
        {"size": 9, "difficulty": "easy", "max_turns": 5, "max_actions": 20, "max_actions_per_turn": 2,
         "max_tokens": 150},
    ),
    EnvSpec(
        "ragen/SudokuMedium-v0",
        "ragen_envs.envs.sudoku:SudokuEnv",
        "9x9 Sudoku, medium (40 empty cells), the reference's puzzles; 5 turns, 30 actions, 2 per turn",
        {"size": 9, "difficulty": "medium", "max_turns": 5, "max_actions": 30, "max_actions_per_turn": 2,
         "max_tokens": 150},
    ),
    EnvSpec(
        "ragen/Countdown-v0",
        "ragen_envs.envs.countdown:CountdownEnv",
        "Countdown: 3-4 numbers (1..99), a target (1..99) reachable with + and -; one answer, reward 0 / 0.1 / 1",
        {"score": 1.0, "format_score": 0.1},
    ),
    EnvSpec(
        "ragen/WebShop-v0",
        "ragen_envs.envs.webshop:WebShopEnv",
        "WebShop (bundled mini engine, synthetic 1,000-product catalog): search, pick, buy; 9 turns, 9 actions",
        {"backend": "mini", "split": "test"},
    ),
)


def vector_entry_point_name(env_id: str) -> str:
    """``"ragen/Sokoban-v0"`` -> ``"make_vec_Sokoban_v0"``: the attribute of this module that
    is the id's vector entry point."""
    namespace, _, name = env_id.partition("/")
    if namespace != "ragen" or not name:
        raise ValueError(f"not a ragen/* id: {env_id!r}")
    return "make_vec_" + name.replace("-", "_")


def register_all() -> None:
    """Register every id with Gymnasium (idempotent).

    The ids are registered with ``disable_env_checker=True``: Gymnasium's
    ``PassiveEnvChecker`` marks its first ``reset`` as checked before calling it, so a first
    ``reset`` that raises (``seed=-1``) leaves it without the data its first ``step`` check
    unpacks, and every later ``step`` raises ``TypeError``. The test suite runs Gymnasium's
    full ``check_env`` on every id instead; ``gym.make(id, disable_env_checker=False)`` still
    adds the wrapper.

    Each id's ``vector_entry_point`` is :func:`ragen_envs.make_vec` (groups:
    ``gym.make_vec(id, n, vectorization_mode="vector_entry_point", group_size=G)``).
    """
    for spec in ENV_SPECS:
        if spec.id not in gym.registry:
            gym.register(id=spec.id, entry_point=spec.entry_point, kwargs=dict(spec.kwargs),
                         vector_entry_point=f"ragen_envs.vector:{vector_entry_point_name(spec.id)}",
                         disable_env_checker=True)
    # Both versions of an id are kept on purpose (-v0: the paper's code, -v1: the newest
    # reference): Gymnasium's "out of date, consider upgrading" notice for the -v0 ids would
    # tell users otherwise (and print on every `ragen` command that builds one)
    import warnings

    warnings.filterwarnings("ignore", message=r"(?s).*The environment ragen/\S+ is out of date",
                            category=DeprecationWarning)
