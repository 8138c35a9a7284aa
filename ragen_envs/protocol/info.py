"""The ``info`` keys every environment returns (``docs/protocol.md`` §6).

Each entry: key -> (type, meaning). Tests check that every env returns exactly these keys
(plus its documented extra keys) so the documentation cannot drift from the code.
"""

from __future__ import annotations

__all__ = ["INFO_KEYS", "RESET_INFO_KEYS"]

RESET_INFO_KEYS: dict[str, tuple[type, str]] = {
    "seed": (int, "the layout seed of this episode"),
    "noise_seed": (int, "the seed of the environment-noise stream, or -1 when it is the layout seed's stream"),
    "system_prompt": (str, "the system message to send before the first observation"),
    "turn": (int, "0 at reset"),
    "turns_left": (int, "turns left in the episode"),
    "actions_left": (int, "actions left in the episode"),
    "success": (bool, "False at reset"),
}

INFO_KEYS: dict[str, tuple[type, str]] = {
    "turn": (int, "the number of turns played, this one included (1-based)"),
    "turns_left": (int, "turns left in the episode"),
    "actions_left": (int, "actions left in the episode"),
    "success": (bool, "the game is in its success state (solved, reached the goal, chose the high arm)"),
    "game_reward": (float, "the sum of the executed actions' game rewards (what 'Reward:' shows)"),
    "format_penalty": (float, "-0.1 (configurable) when the reply was malformed or named an unknown action, else 0.0"),
    "matched": (bool, "the think/answer pattern was found in the reply"),
    "format_ok": (bool, "the reply parsed and every kept piece was an action"),
    "n_parsed": (int, "answer pieces kept (at most max_actions_per_turn)"),
    "n_valid": (int, "kept pieces that are action names"),
    "n_executed": (int, "actions run (stops at game end or when the action budget is spent)"),
    "n_effective": (int, "executed actions that changed the game state"),
    "action_is_valid": (bool, "at least one action ran this turn (the reference's definition)"),
    "action_is_effective": (bool, "the last executed action changed the game state (the reference's definition)"),
    "actions": (list, "names of the executed actions, in order"),
    "invalid_actions": (list, "kept answer pieces that are not action names"),
    "think": (str, "the parsed think text ('' when absent)"),
    "answer": (str, "the parsed answer text ('' when absent)"),
    "reasoning": (dict, "think/answer/state agreement: stated_actions, actions_agree, claims, claims_true, score in [0, 1] (protocol/reasoning.py)"),
}
