"""The ``ragen`` command. Each subcommand lives in ``ragen_envs/commands/<name>.py`` and
exports ``register(subparsers)``; heavy imports happen inside the command, not here."""

from __future__ import annotations

import argparse
import importlib
import sys

from ._errors import CLIError

__all__ = ["main", "CLIError", "COMMAND_MODULES"]

# Module names under ragen_envs.commands, in the order `ragen --help` lists them.
COMMAND_MODULES = ("list_envs", "play", "render", "eval", "serve", "webshop_server", "openenv_server", "train", "sft", "export")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ragen", description="RAGEN text environments: list, play, render, evaluate, train.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"ragen-envs {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"ragen_envs.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except CLIError as exc:
        print(f"ragen {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    # `python -m ragen_envs.cli` runs this file as __main__; the commands import
    # ragen_envs.cli, so use that module's main (and its CLIError) to keep one class.
    from ragen_envs.cli import main as _main

    sys.exit(_main())
