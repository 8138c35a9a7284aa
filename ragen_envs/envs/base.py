"""The shared machinery of every registered environment: a game joined to the protocol.

A subclass supplies the game (how to build it from a layout seed, run one named action and
draw its state as text) and its vocabulary; :class:`TextGameEnv` owns seeding, the prompt
text, parsing, budgets, the format penalty and ``info``. One ``step`` is one model turn.
"""

from __future__ import annotations

import re
import string
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from ..protocol import (
    FORMAT_PENALTY,
    PROMPT_STYLES,
    SYSTEM_PROMPT,
    ActionOutcome,
    EpisodeBudget,
    TurnResult,
    instruction_prefix,
    safe_text,
    parse_answer,
    play_turn,
    reward_message,
    turn_block,
)
from ..protocol.reasoning import reasoning_report
from .checks import check_bool, check_int, check_number
from .space import CharsetText, UnicodeText

__all__ = ["CHARSET", "SEED_LIMIT", "TextGameEnv", "check_seed"]

# Every character an observation can hold, in a fixed order (a str, never a set: Gymnasium
# <= 1.3 ordered set charsets by hash, which differs between processes).
CHARSET = string.printable + "√"
# The observation space (UnicodeText: any Unicode scalar values) holds at most this many
# characters (WebShop: more, see WebShopEnv); names that reach the prompt are kept short
# (MAX_NAME_LENGTH) so every observation fits.
MAX_TEXT_LENGTH = 1 << 16
MAX_NAME_LENGTH = 64
# Seeds of every id: integers in [0, 2**32) (Sokoban's reference generator, a legacy
# RandomState, takes no more; one rule for all ids, docs/protocol.md §7).
SEED_LIMIT = 2**32
_MAX_SEED = SEED_LIMIT - 1


def _check_int(name: str, value: Any, minimum: int = 1) -> int:
    return check_int(name, value, minimum)


def check_seed(name: str, value: Any) -> int:
    """``value`` as an int when it is an integer in ``[0, 2**32)``; else ValueError."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{name} must be an integer in [0, 2**32), got {value!r}")
    return int(value)


class CoordinateStateMixin:
    """The state text of a grid env with RAGEN-2's ``observation_format`` (grid | coord |
    grid_coord): the grid, its coordinate lines, or ``"Coordinates: \n" + lines + "\n" +
    "Grid Map: \n" + grid``. The env gives ``_grid_text()`` and ``_coordinate_lines()`` and
    lists this class before :class:`TextGameEnv`. The coordinate lines are prose: only the
    grid goes through a vocabulary remapping, and the reasoning checks read the grid alone."""

    observation_format: str

    def _coordinate_lines(self) -> str:
        raise NotImplementedError

    def _grid_text(self) -> str:
        raise NotImplementedError

    def _formatted(self, grid) -> str:
        """The coord / grid_coord text, ``grid()`` drawing the grid part (not called for coord)."""
        coords = self._coordinate_lines()
        if self.observation_format == "coord":
            return coords
        return "Coordinates: \n" + coords + "\n" + "Grid Map: \n" + grid()

    def _state_text(self) -> str:
        if self.observation_format == "grid":
            return self._grid_text()
        return self._formatted(self._grid_text)

    def state_text(self) -> str:
        if self.observation_format == "grid":
            return super().state_text()
        return self._formatted(self._shown_grid)

    def _shown_grid(self) -> str:
        grid = self._grid_text()
        return grid if self._symbol_table is None else grid.translate(self._symbol_table)

    def _reasoning_state(self) -> str:
        return "" if self.observation_format == "coord" else self._shown_grid()


class TextGameEnv(gym.Env[str, str]):
    """Base class: text observations, text actions, the RAGEN turn protocol.

    Subclasses set :attr:`instruction` and implement :meth:`_action_names`, :meth:`_legend`,
    :meth:`_new_game`, :meth:`_run_action`, :meth:`_state_text` and :meth:`expert_actions`;
    :meth:`_frame` (the ``rgb_array`` / ``human`` picture) calls the game's renderer.
    """

    metadata = {"render_modes": ["ansi", "rgb_array", "human"], "render_fps": 4}
    _window = None  # render_mode="human": a renderers.window.Window, opened by the first render
    instruction: str = ""

    def __init__(
        self,
        *,
        max_turns: int = 5,
        max_actions: int = 10,
        max_actions_per_turn: int = 5,
        think: bool = True,
        prompt_style: str = "reference",
        format_penalty: float = FORMAT_PENALTY,
        max_tokens: int = 100,
        turn_limit_terminates: bool = False,
        render_mode: str | None = None,
        seed: int | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style must be one of {PROMPT_STYLES}, got {prompt_style!r}")
        format_penalty = check_number("format_penalty", format_penalty)
        # seed=: the first reset() without a seed is reset(seed=seed) (what GEM's make_vec and
        # SkyRL-style factories pass); later unseeded resets continue that stream.
        self._first_seed = None if seed is None else check_seed("seed", seed)
        self.render_mode = render_mode
        self.think = check_bool("think", think)
        self.prompt_style = prompt_style
        self.format_penalty = float(format_penalty)
        self.max_tokens = _check_int("max_tokens", max_tokens)
        self.turn_limit_terminates = check_bool("turn_limit_terminates", turn_limit_terminates)
        self.budget = EpisodeBudget(
            max_turns=_check_int("max_turns", max_turns),
            max_actions=_check_int("max_actions", max_actions),
            max_actions_per_turn=_check_int("max_actions_per_turn", max_actions_per_turn),
        )
        self.system_prompt = SYSTEM_PROMPT
        self.observation_space = UnicodeText(MAX_TEXT_LENGTH)
        self.action_space = CharsetText(4096, min_length=0, charset=CHARSET)
        self.layout_seed: int | None = None
        self.noise_seed: int | None = None
        self._noise_rng: np.random.Generator | None = None
        self._success = False
        self._done = True
        self.last_turn: TurnResult | None = None
        # Optional vocabulary remapping (see set_vocabulary): canonical -> shown.
        self._symbol_table: dict[int, str] | None = None
        self._action_rename: dict[str, str] = {}
        self._action_canonical: dict[str, str] = {}

    # ------------------------------------------------------------------ subclass hooks
    def _action_names(self) -> Sequence[str] | None:
        """The canonical action words in id order (None: free-text actions)."""
        raise NotImplementedError

    def _legend(self) -> Mapping[str, str] | None:
        """``{symbol: meaning}`` in the canonical symbols, or None."""
        return None

    def _new_game(self, layout_seed: int, noise_rng: np.random.Generator) -> None:
        """Build the episode's game from ``layout_seed``; ``noise_rng`` is its noise stream."""
        raise NotImplementedError

    def _run_action(self, name: str) -> ActionOutcome:
        """Run one action given by its canonical name."""
        raise NotImplementedError

    def _state_text(self) -> str:
        """The game state as the model sees it (also the ``ansi`` render)."""
        raise NotImplementedError

    def expert_actions(self) -> list[str]:
        """The expert's action names for the current turn (used by the expert agent)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ public helpers
    def action_names(self) -> Sequence[str] | None:
        """The action words the model must use, in id order (None: free-text actions)."""
        names = self._action_names()
        if names is None or not self._action_rename:
            return names
        return tuple(self._action_rename.get(n, n) for n in names)

    def legend(self) -> Mapping[str, str] | None:
        """``{symbol: meaning}`` as shown in the prompt."""
        legend = self._legend()
        if legend is None or self._symbol_table is None:
            return legend
        return {sym.translate(self._symbol_table): meaning for sym, meaning in legend.items()}

    def prompt_action_names(self) -> Sequence[str] | None:
        """Action names listed in the instruction prefix (the parser's names by default)."""
        return self.action_names()

    def instruction_text(self) -> str:
        """The instruction prefix that opens the first user message."""
        instruction = self.instruction
        for canonical, shown in self._action_rename.items():
            # case-insensitive: the instruction's prose says "go left" as well as "<answer>Left"
            instruction = re.sub(rf"\b{re.escape(canonical)}\b", shown, instruction, flags=re.IGNORECASE)
        return instruction_prefix(instruction, self.legend(), self.prompt_action_names(), self.budget.max_actions)

    def state_text(self) -> str:
        """The current game state as the model sees it (the ``ansi`` render)."""
        text = self._state_text()
        return text if self._symbol_table is None else text.translate(self._symbol_table)

    def _reasoning_state(self) -> str:
        """The state as the reasoning checks read it (``info["reasoning"]``): a grid of legend
        symbols. The whole state text by default; an env whose state adds prose (coordinate
        lines) gives its grid alone, or "" when it shows none."""
        return self.state_text()

    def set_vocabulary(self, symbols: Mapping[str, str] | None = None, actions: Mapping[str, str] | None = None) -> None:
        """Draw grid symbols and name actions differently (takes effect at the next reset).

        ``symbols`` maps legend symbols to new single characters, ``actions`` maps action
        names to new names; unmapped ones stay. The legend, the grid, the action list, the
        instruction's example actions and the parser all follow. None clears a mapping.
        """
        legend = self._legend()
        if symbols is not None:
            if not legend:
                raise ValueError(f"{type(self).__name__} draws no grid symbols to remap")
            unknown = set(symbols) - set(legend)
            if unknown:
                raise ValueError(f"symbols not in this env's legend: {sorted(unknown)}; legend: {list(legend)}")
            new = {sym: symbols.get(sym, sym) for sym in legend}
            bad = [c for c in new.values() if not isinstance(c, str) or len(c) != 1 or c.isspace() or c not in CHARSET]
            if bad:
                raise ValueError(f"new symbols must be single printable non-space characters, got {bad!r}")
            if len(set(new.values())) != len(new):
                raise ValueError(f"new symbols must be distinct, got {new}")
            self._symbol_table = str.maketrans(new)
        else:
            self._symbol_table = None
        names = self._action_names()
        if actions is not None:
            if names is None:
                raise ValueError(f"{type(self).__name__} has free-text actions: nothing to rename")
            unknown = set(actions) - set(names)
            if unknown:
                raise ValueError(f"unknown actions {sorted(unknown)}; actions: {list(names)}")
            shown = [actions.get(n, n) for n in names]
            if any(not isinstance(n, str) or not n.strip() or n != n.strip() or "||" in n or "<" in n
                   or not self.observation_space.contains(n) or len(n) > MAX_NAME_LENGTH for n in shown):
                raise ValueError(f"action names must be non-empty, unpadded, without '||' or '<', at most "
                                 f"{MAX_NAME_LENGTH} characters, no lone surrogates: {shown!r}")
            if len({n.lower() for n in shown}) != len(shown):
                raise ValueError(f"action names must differ ignoring case: {shown!r}")
            self._action_rename = {n: actions[n] for n in names if n in actions}
        else:
            self._action_rename = {}
        self._action_canonical = {v: k for k, v in self._action_rename.items()}

    def _expert_reply_actions(self) -> list[str]:
        """:meth:`expert_actions` in the shown vocabulary."""
        return [self._action_rename.get(a, a) for a in self.expert_actions()]

    @property
    def success(self) -> bool:
        return self._success

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode.

        ``seed`` fixes the layout (and, unless ``options["noise_seed"]`` is given, the noise
        stream). Without a seed the layout seed is drawn from the env's own generator, so a
        seeded env reproduces its whole sequence of episodes; the first reset without a seed
        of an env built with ``seed=s`` is ``reset(seed=s)``.
        """
        if seed is None:
            seed = self._first_seed  # cleared once an episode starts
        if seed is not None:
            seed = check_seed("seed", seed)
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"noise_seed"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; the only option is 'noise_seed'")
        self.layout_seed = seed if seed is not None else int(self.np_random.integers(0, _MAX_SEED))
        noise_seed = options.get("noise_seed")
        if noise_seed is None:
            self.noise_seed = None
            self._noise_rng = self.np_random
        else:
            self.noise_seed = check_seed("noise_seed", noise_seed)
            self._noise_rng = seeding.np_random(self.noise_seed)[0]
        self._new_game(self.layout_seed, self._noise_rng)
        self._first_seed = None
        self.budget.reset()
        self._success = False
        self._done = False
        self.last_turn = None
        obs = self.instruction_text() + self._next_turn_text()
        info = {
            "seed": self.layout_seed,
            "noise_seed": -1 if self.noise_seed is None else self.noise_seed,
            "system_prompt": self.system_prompt,
            "turn": 0,
            "turns_left": self.budget.turns_left,
            "actions_left": self.budget.actions_left,
            "success": False,
        }
        if self.render_mode == "human":
            self.render()
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one turn: ``action`` is the model's whole reply (any string is accepted, in
        time linear in its length; anything else raises TypeError). Surrogate code points in
        the reply become U+FFFD first, so ``info`` always encodes as UTF-8 JSON."""
        if not isinstance(action, str):
            raise TypeError(f"action must be the reply as a str, got {type(action).__name__}")
        if self._done:
            raise RuntimeError("the episode has ended (or never started): call reset() before step()")
        if not action.isascii():  # safe_text's own first test, without its call (hot path)
            action = safe_text(action)
        names = self.action_names()
        parsed = parse_answer(action, names, self.think, self.budget.max_actions_per_turn)
        reasoning = reasoning_report(parsed.think, parsed.actions, names, self._reasoning_state, self.legend)
        run = self._run_action
        if self._action_canonical:
            run = lambda name: self._run_action(self._action_canonical.get(name, name))  # noqa: E731
        budget = self.budget
        result = play_turn(parsed, budget, run, self._success, self.format_penalty)
        self.last_turn = result
        success = self._success = result.success
        turns_left = budget.max_turns - budget.turns_used  # the budget's properties, inlined (hot path)
        actions_left = budget.max_actions - budget.actions_used
        terminated = True if result.game_over or (self.turn_limit_terminates and turns_left <= 0) else False
        truncated = not terminated and (turns_left <= 0 or actions_left <= 0)  # budget.exhausted
        self._done = done = terminated or truncated
        game_reward = result.game_reward
        obs = reward_message(game_reward)
        if not done:
            obs += self._next_turn_text()
        executed = result.executed
        game_reward = float(game_reward)
        # Conditional expressions instead of bool(...) calls: the same values, fewer calls.
        info = {
            "turn": budget.turns_used,
            "turns_left": turns_left,
            "actions_left": actions_left,
            "success": True if success else False,
            "game_reward": game_reward,
            "format_penalty": result.format_penalty,
            "matched": parsed.matched,
            "format_ok": parsed.format_ok,
            "n_parsed": len(parsed.pieces),
            "n_valid": len(parsed.actions),
            "n_executed": len(executed),
            "n_effective": result.n_effective,
            "action_is_valid": True if executed else False,
            "action_is_effective": True if result.last_effective else False,
            "actions": list(executed),
            "invalid_actions": list(parsed.invalid),
            "think": parsed.think,
            "answer": parsed.answer,
            "reasoning": reasoning,
        }
        self._extra_info(info)
        if self.render_mode == "human":
            self.render()
        # result.reward (float(game_reward) + format_penalty), without the property's call
        return obs, float(game_reward + result.format_penalty), terminated, truncated, info

    def _extra_info(self, info: dict[str, Any]) -> None:
        """Add an env's own keys to a step's ``info`` (after the protocol keys)."""

    def render(self) -> str | np.ndarray | None:
        """``ansi``: the state text; ``rgb_array``: an ``(H, W, 3)`` uint8 picture; ``human``:
        shows the picture in a window at ``render_fps`` (also after every reset and step)."""
        if self.render_mode is None:
            return None
        if self.layout_seed is None:
            raise gym.error.ResetNeeded("call reset() before render(): there is no game to draw yet")
        if self.render_mode == "ansi":
            return self.state_text()
        if self.render_mode == "rgb_array":
            return self._frame()
        if self._window is None:
            from renderers.window import Window  # pygame loads only when a picture is asked for

            title = self.spec.id if self.spec is not None else type(self).__name__
            self._window = Window(title, self.metadata["render_fps"])
        self._window.show(self._frame())
        return None

    def _frame(self) -> np.ndarray:
        """The current state drawn as an ``(H, W, 3)`` uint8 image (``renderers`` draws it)."""
        raise NotImplementedError(f"{type(self).__name__} has no picture: only render_mode='ansi' works")

    def close(self) -> None:
        if self._window is not None:
            self._window.close()
            self._window = None
        super().close()

    def _next_turn_text(self) -> str:
        budget = self.budget
        return turn_block(
            budget.turns_used + 1,
            self.state_text(),
            budget.max_actions - budget.actions_used,  # budget.actions_left, inlined (hot path)
            self.think,
            self.max_tokens,
            self.prompt_style,
        )
