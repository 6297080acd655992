"""``bot help``: the list of commands."""

from __future__ import annotations

import argparse

from bot.commands.table import FromComment, command_parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Print the top-level help."""
    command_parser().print_help()
    return 0
