"""Files of a run directory stay inside it: symlinks that lead out are found before a
command writes, and appended files are opened without following a link.

A run directory may itself be reached through a symlink (``--out`` naming a link to a
bigger disk is the user's choice); what is refused is a link *inside* it whose target lies
outside: ``DIR/episodes.jsonl -> ~/.bashrc`` would otherwise be appended to.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["links_leading_out", "check_no_links_out", "open_nofollow", "LinkOutError"]


class LinkOutError(OSError):
    """A symlink inside a run directory leads outside it (one-line message)."""


def links_leading_out(root: str | Path, limit: int = 100_000) -> list[tuple[Path, str]]:
    """``(link, target)`` for every symlink under ``root`` whose target resolves outside
    ``root`` (or cannot be resolved: a loop, a dangling link to elsewhere). Links are never
    followed while walking; at most ``limit`` entries are looked at."""
    root = Path(root)
    if not root.is_dir():
        return []
    real = os.path.realpath(root)
    out: list[tuple[Path, str]] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            seen += 1
            if seen > limit:
                return out
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                continue
            target = os.path.realpath(path)
            if os.path.commonpath([real, target]) != real:
                out.append((Path(path), target))
    return out


def check_no_links_out(root: str | Path) -> None:
    """:class:`LinkOutError` naming the first symlink under ``root`` that leads outside it."""
    found = links_leading_out(root)
    if found:
        link, target = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise LinkOutError(f"{link} is a symbolic link to {target}, outside the run directory {root}{more}; "
                           f"remove it: a run writes only inside its directory")


def open_nofollow(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symlink as the last component (:class:`LinkOutError`)."""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), mode)
    except OSError as exc:
        if os.path.islink(path):
            raise LinkOutError(f"{path} is a symbolic link (to {os.path.realpath(path)}); "
                               f"a run directory's files must be its own: remove it") from None
        raise exc
