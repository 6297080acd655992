"""``bot handle-event [EVENT.json]``: the GitHub Actions entry for ``issue_comment`` events."""

from __future__ import annotations

import argparse
import os

from bot.commands.table import FromComment
from bot.errors import BadInput
from bot.service.dispatch import handle_event, run_request


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The event file."""
    parser.add_argument("event", nargs="?", help="event JSON (default: $GITHUB_EVENT_PATH)")


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Act on the event: check the commenter, run the command, react."""
    path = args.event or os.environ.get("GITHUB_EVENT_PATH")
    if not path:
        raise BadInput("no event file: pass one or set $GITHUB_EVENT_PATH (GitHub Actions sets it)")
    return handle_event(path, run_request)
