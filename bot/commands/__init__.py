"""The ``bot`` commands, one module each, the way asv lays out its ``commands/``.

Every command module has ``add_arguments(parser)`` and ``run(args, comment=None) -> int``; ``run`` is where
the parsed options stop: it hands typed values to the pipeline as keywords. A command that arrived as a
``/bot`` comment gets a :class:`FromComment` (the comment's tracker and issue; the repository is the
checkout the bot runs in), so comments and the command line run the same code.

Command modules are imported only when their command is parsed or run, so ``bot --help`` and ``bot list``
start without loading the heavier parts (libcst, PyGithub, the benchmark harness).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Collection
from dataclasses import dataclass
from types import ModuleType

from bot.errors import BadInput
from bot.trackers.base import Tracker

# name → (module under bot.commands, one-line help). The order is the order of `bot --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("list", "registered optimizations: id, tier, expected win, summary"),
    "plan": ("plan", "parse an issue body (a file, or - for stdin) and print the plan"),
    "scan": ("scan", "where each optimization applies in a repository"),
    "apply": ("apply", "branch, one commit per optimization, optional benchmarks"),
    "bench": ("bench", "benchmark commits (default: baseline and every bot commit)"),
    "review": ("review", "the reviewer verdict for a commit range"),
    "calibrate": ("calibrate", "self-check: false-win and miss rates of planted no-op and slowdown commits"),
    "profile": ("profile", "what bounds a workload's training steps at one commit (torch.profiler)"),
    "status": ("status", "where the current run stands (its progress comment)"),
    "help": ("help", "show the commands"),
    "handle-event": ("handle_event", "GitHub Actions entry: act on an issue_comment event"),
    "serve": ("serve", "webhook server for /bot comments (secret: $PERFBOT_WEBHOOK_SECRET)"),
    "init": ("init", "add the workflow file and [tool.bot] settings to a repository"),
}
DESCRIPTION = "Turns a tiered performance plan into reviewed, measured commits on a training repository."
EPILOG = "Exit codes: 0 done, 1 the run finished but something failed, 2 bad input, 130 interrupted."


class CommandLineError(BadInput):
    """An unknown command or option."""


class Parser(argparse.ArgumentParser):
    """An argparse parser that raises instead of exiting, so comments and the CLI share its errors."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:
        raise CommandLineError(f"{message}\n{self.format_usage().strip()}")


@dataclass(frozen=True)
class FromComment:
    """A command that arrived as a ``/bot`` comment: answer on this tracker and issue, in the checkout (.)."""

    tracker: Tracker
    issue: int


def command_module(name: str) -> ModuleType:
    """The module that implements command ``name``."""
    return importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")


def build_parser(filled: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser for every ``bot`` command. Only the commands in ``filled`` (default: all) get their options
    (the others are still listed by ``--help``): parsing one command line loads one command module."""
    parser = Parser(prog="bot", description=DESCRIPTION, epilog=EPILOG)
    _add_json_option(parser, default=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (_, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary)
        _add_json_option(
            sub, default=argparse.SUPPRESS
        )  # so `bot --json plan F` and `bot plan F --json` agree
        if filled is None or name in filled:
            command_module(name).add_arguments(sub)
    return parser


def _add_json_option(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("--json", action="store_true", default=default, help="machine-readable output")


def selected_command(argv: list[str]) -> str | None:
    """The command word of a command line (the first argument that is not an option), if it names one."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Run the parsed command; ``comment`` when it came from a ``/bot`` comment."""
    return command_module(args.command).run(args, comment)
