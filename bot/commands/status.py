"""``bot status``: the progress comment of the work branch checked out in a repository."""

from __future__ import annotations

import argparse

from bot.commands import FromComment
from bot.errors import BadInput
from bot.local_tracker import LocalTracker
from bot.progress import find_run
from bot.sources import tracker_for
from bot.terminal import print_progress
from bot.tracker import PROGRESS
from bot.workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The repository."""
    parser.add_argument("--repo", default=".", help="target repository, on a bot/* branch (default: .)")


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Print the progress comment of the checked-out ``bot/<issue>-tier-<n>`` branch."""
    workspace = Workspace(args.repo)
    tracker = tracker_for(workspace.root)
    found = find_run(tracker, None if workspace.repo.head.is_detached else workspace.branch)
    if found is None:
        raise BadInput(
            "not on a bot/<issue>-tier-<n> branch; check out the work branch of the run to ask about"
        )
    if found.progress is None:
        print(f"no progress for tier {found.tier} of {found.issue} yet")
        return 0
    print_progress(found.progress)
    local = isinstance(tracker, LocalTracker)
    where = tracker.marker_file(found.issue, PROGRESS) if local else found.comment.url
    print(f"progress comment: {where}")
    return 0
