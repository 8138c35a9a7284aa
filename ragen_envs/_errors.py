"""The user-error exception every layer may raise: :class:`CLIError` is printed by ``ragen``
as one line with exit status 2. It lives at the bottom (``ragen_envs.cli`` re-exports it)
so that the trainer's demo and the run-directory helpers can raise and catch it without
importing the command line above them."""

from __future__ import annotations

__all__ = ["CLIError"]


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""
