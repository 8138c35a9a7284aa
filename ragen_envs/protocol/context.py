"""Context windows: which part of an episode's history the model reads each turn.

The newest reference (RAGEN-2, ``ragen/llm_agent/ctx_manager.py``) names three modes in
``agent_proxy.context_window_mode``, with ``max_context_window`` k (``-1``: no limit):

- ``full``: the whole conversation, ``[system, user(obs_1), assistant(reply_1), user(obs_2), ...]``;
- ``limited_multi_turn``: the same layout over the last k turns only (the current one
  included): the window starts at turn ``window_start(t, k)``, its first user message is that
  turn's state block (the ``Reward:`` line of the turn before it is dropped with that turn);
- ``single_turn``: one user message per turn: a text summary of the k - 1 turns before (state,
  action, reward each) and the current state block, headed ``(Turn n):`` (``Current Turn
  (Turn n):`` when a summary precedes it).

The reference keeps the game instruction in the system message; in this protocol it opens the
first observation (``docs/protocol.md`` §2), so every window's first user message starts with
it: with ``k >= turns``, ``limited_multi_turn`` is ``full`` exactly. Observations are the
environments' own texts; :func:`split_observation` cuts one into what precedes the turn's
state block (the instruction, or the ``Reward:`` message) and the block
(:func:`~.prompt.turn_block`'s text).
"""

from __future__ import annotations

import re
from typing import Sequence

from .prompt import SYSTEM_PROMPT

__all__ = [
    "CONTEXT_WINDOW_MODES",
    "check_context_window",
    "require_windowable",
    "context_messages",
    "single_turn_content",
    "split_observation",
    "window_start",
]

CONTEXT_WINDOW_MODES = ("full", "limited_multi_turn", "single_turn")

_BLOCK = re.compile(r"\nTurn (\d+):\nState:\n(.*)\nYou have (-?\d+) actions left\.", re.DOTALL)
_REWARD = re.compile(r"Reward:\n([^\n]*)\n")


def check_context_window(mode: str, max_context_window: int) -> None:
    """Raise ValueError (one line) unless ``mode`` is one of :data:`CONTEXT_WINDOW_MODES`
    and ``max_context_window`` is -1 (no limit) or an integer >= 1; a limit needs a mode
    that uses it (``full`` reads the whole history)."""
    if mode not in CONTEXT_WINDOW_MODES:
        raise ValueError(f"context_window_mode must be one of {', '.join(CONTEXT_WINDOW_MODES)}, got {mode!r}")
    k = max_context_window
    if isinstance(k, bool) or not isinstance(k, int) or not (k == -1 or k >= 1):
        raise ValueError(f"max_context_window must be -1 (no limit) or an integer >= 1, got {k!r}")
    if mode == "full" and k != -1:
        raise ValueError(f"max_context_window={k} needs context_window_mode limited_multi_turn or single_turn "
                         f"(full reads the whole history)")


def window_start(turn: int, max_context_window: int) -> int:
    """The first turn (0-based) of the window of turn ``turn`` (0-based, the current one):

        s = max(0, t - k + 1)   (k = max_context_window; s = 0 when k = -1)

    so the window holds the current turn and the k - 1 before it.

    >>> [window_start(t, 2) for t in range(4)], window_start(3, -1), window_start(3, 1)
    ([0, 0, 1, 2], 0, 3)
    """
    if max_context_window < 0:
        return 0
    return max(0, turn - max_context_window + 1)


def require_windowable(observation: object, context_window_mode: str, env_id: str) -> None:
    """ValueError (one line) when ``context_window_mode`` is windowed and ``env_id``'s first
    ``observation`` is not text in the protocol's turn layout (:func:`split_observation` finds
    no turn-1 block): a window could not be cut from it. ``full`` accepts anything."""
    if context_window_mode == "full":
        return
    try:
        if not isinstance(observation, str):
            raise ValueError("not text")
        split_observation(observation, 1)
    except ValueError:
        raise ValueError(f"context_window_mode={context_window_mode} needs observations in the protocol's turn "
                         f"layout ('Turn k:' / 'State:' blocks); {env_id}'s are not") from None


def split_observation(observation: str, turn: int) -> tuple[str, str]:
    """``(head, block)`` of turn ``turn``'s observation (1-based, the number its block shows):
    ``block`` starts at its ``"\\nTurn {turn}:\\nState:\\n"`` header and runs to the end; ``head``
    is what precedes it (the instruction in the first observation, ``"Reward:\\n{r}\\n"`` after).

    Raises ValueError when the observation has no such block (an environment whose texts
    do not follow the protocol's turn layout cannot be windowed).
    """
    header = f"\nTurn {turn}:\nState:\n"
    at = observation.find(header)
    if at < 0 or not _BLOCK.match(observation, at):
        raise ValueError(f"the observation of turn {turn} has no protocol state block ({header!r} ... "
                         f"'You have N actions left.'): {observation[:80]!r}")
    return observation[:at], observation[at:]


def _block_state(block: str) -> str:
    return _BLOCK.match(block).group(2)


def _reward_text(head: str) -> str:
    m = _REWARD.match(head)
    if m is None:
        raise ValueError(f"expected a 'Reward:' message before the next state block, got {head[:40]!r}")
    return m.group(1)


def single_turn_content(observations: Sequence[str], actions: Sequence[str], turn: int, start: int) -> str:
    """The reference's single-turn user content (its ``SimpleMemory``) for turn ``turn``
    (0-based) with the history from turn ``start``, the instruction not included.

    ``observations[j]`` is turn j's observation (j <= turn; turn j's reward is read from the
    ``Reward:`` head of ``observations[j + 1]``); ``actions[j]`` turn j's reply as the history
    shows it. With history (``start < turn``)::

        Summary: {turn} step(s) completed so far. Showing the last {turn - start} turn(s) with
        state/action/reward details. Recent turns:\\n---\\n
        Turn {n} State:\\n{state}\\nTurn {n} Action: {action}\\nTurn {n} Reward: {r}\\n---\\n   (each)
        \\nCurrent Turn (Turn {turn + 1}):\\n{block without its "\\nTurn k:\\n" header}

    (the summary's first two lines are one line); without: ``(Turn {turn + 1}):\\n{block body}``.
    """
    content = ""
    if start < turn:
        content += (f"Summary: {turn} step(s) completed so far. Showing the last {turn - start} turn(s) "
                    f"with state/action/reward details. Recent turns:\n---\n")
        for j in range(start, turn):
            n = j + 1
            state = _block_state(split_observation(observations[j], n)[1])
            reward = _reward_text(split_observation(observations[j + 1], n + 1)[0])
            content += f"Turn {n} State:\n{state}\nTurn {n} Action: {actions[j]}\nTurn {n} Reward: {reward}\n---\n"
    block = split_observation(observations[turn], turn + 1)[1]
    body = block[len(f"\nTurn {turn + 1}:\n"):]
    prefix = "\nCurrent Turn " if content else ""
    return f"{content}{prefix}(Turn {turn + 1}):\n{body}"


def context_messages(
    observations: Sequence[str],
    responses: Sequence[str],
    turn: int,
    mode: str = "full",
    max_context_window: int = -1,
    system_prompt: str = SYSTEM_PROMPT,
) -> list[dict[str, str]]:
    """The chat messages the model answers at turn ``turn`` (0-based) under a context mode.

    ``observations[j]`` is turn j's observation as the environment wrote it (j <= turn),
    ``responses[j]`` turn j's reply as the history shows it (j < turn). With s =
    :func:`window_start`:

    - ``full``, or s = 0 in ``limited_multi_turn``: ``[system, user(obs_0), assistant(resp_0),
      ..., user(obs_turn)]`` (:func:`~.episode.chat_messages`);
    - ``limited_multi_turn``, s > 0: ``[system, user(instruction + block_s), assistant(resp_s),
      user(obs_{s+1}), ..., user(obs_turn)]``;
    - ``single_turn``: ``[system, user(instruction + single_turn_content(..., turn, s))]``.

    The instruction is the head of ``observations[0]`` (:func:`split_observation`).
    """
    check_context_window(mode, max_context_window)
    if not 0 <= turn < len(observations) or len(responses) < turn:
        raise ValueError(f"turn {turn} needs observations 0..{turn} and responses 0..{turn - 1}, "
                         f"got {len(observations)} observations and {len(responses)} responses")
    messages = [{"role": "system", "content": system_prompt}]
    start = window_start(turn, max_context_window)
    if mode == "single_turn":
        instruction = split_observation(observations[0], 1)[0]
        content = single_turn_content(observations, responses, turn, start)
        return messages + [{"role": "user", "content": instruction + content}]
    first = observations[start]
    if start > 0:
        first = split_observation(observations[0], 1)[0] + split_observation(observations[start], start + 1)[1]
    messages.append({"role": "user", "content": first})
    for j in range(start, turn):
        messages.append({"role": "assistant", "content": responses[j]})
        messages.append({"role": "user", "content": observations[j + 1]})
    return messages
