"""The ``bot`` commands, one module each, the way asv lays out its ``commands/``.

Every command module has ``add_arguments(parser)`` and ``run(args, comment=None) -> int``; ``run`` is where
the parsed options stop: it hands typed values to the pipeline as keywords. A command that arrived as a
``/bot`` comment gets a :class:`~bot.commands.table.FromComment` (the comment's tracker and issue; the
repository is the checkout the bot runs in), so comments and the command line run the same code.

The table of commands lives in :mod:`bot.commands.table`; this package loads their modules. Command modules
are imported only when their command is parsed or run, so ``bot --help`` and ``bot list`` start without loading
the heavier parts (libcst, PyGithub, the benchmark harness).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Collection
from types import ModuleType

from bot.commands.table import COMMANDS, FromComment, command_parser


def command_module(name: str) -> ModuleType:
    """The module that implements command ``name``."""
    return importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")


def build_parser(filled: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser for every ``bot`` command. Only the commands in ``filled`` (default: all) get their options
    (the others are still listed by ``--help``): parsing one command line loads one command module."""

    def add_arguments(name: str, parser: argparse.ArgumentParser) -> None:
        if filled is None or name in filled:
            command_module(name).add_arguments(parser)

    return command_parser(add_arguments)


def selected_command(argv: list[str]) -> str | None:
    """The command word of a command line (the first argument that is not an option), if it names one."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Run the parsed command; ``comment`` when it came from a ``/bot`` comment."""
    return command_module(args.command).run(args, comment)
