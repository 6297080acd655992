"""The command table and what every command module shares: the names and their help, the parser they fill in,
and :class:`FromComment`.

Nothing here loads a command module (``bot.commands`` does), so command modules and the comment service can
import it without circling back through the commands that import them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

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
    "report": ("report", "a bench record as one self-contained HTML page of charts"),
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

# Gives one command's subparser its options: (command name, subparser).
AddArguments = Callable[[str, argparse.ArgumentParser], None]


class CommandLineError(BadInput):
    """An unknown command or option."""


class Parser(argparse.ArgumentParser):
    """An argparse parser that raises instead of exiting, so comments and the CLI share its errors."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(f"{message}\n{self.format_usage().strip()}")


@dataclass(frozen=True)
class FromComment:
    """A command that arrived as a ``/bot`` comment: answer on this tracker and issue, in the checkout (.)."""

    tracker: Tracker
    issue: int


def command_parser(add_arguments: AddArguments | None = None) -> argparse.ArgumentParser:
    """The parser for every ``bot`` command, each listed by ``--help``; ``add_arguments`` gives the commands
    it fills in their options (without it none has any, which is all ``bot --help`` needs)."""
    parser = Parser(prog="bot", description=DESCRIPTION, epilog=EPILOG)
    _add_json_option(parser, default=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (_, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary)
        _add_json_option(
            sub, default=argparse.SUPPRESS
        )  # so `bot --json plan F` and `bot plan F --json` agree
        if add_arguments is not None:
            add_arguments(name, sub)
    return parser


def _add_json_option(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("--json", action="store_true", default=default, help="machine-readable output")
