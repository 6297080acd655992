"""``bot status``: the progress comment of the work branch checked out in a repository, and its last bench and
review when they were interrupted."""

from __future__ import annotations

import argparse

from bot.commands.table import FromComment
from bot.errors import BadInput
from bot.interrupts import interrupted_step
from bot.measurements import saved_results
from bot.progress import find_run
from bot.sources import tracker_for
from bot.terminal import print_progress
from bot.trackers.base import PROGRESS
from bot.trackers.local import LocalTracker
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
    else:
        print_progress(found.progress)
        assert found.comment is not None  # the progress was read from it
        if isinstance(tracker, LocalTracker):
            where = str(tracker.marker_file(found.issue, PROGRESS))
        else:
            where = found.comment.url
        print(f"progress comment: {where}")
    if interrupted := interrupted_bench(workspace):
        print(interrupted)
    if step := interrupted_step(workspace.root, workspace.branch, "review"):
        print(f"review interrupted while {step}: no verdict was posted; run bot review again")
    return 0


def interrupted_bench(workspace: Workspace) -> str | None:
    """A line on the branch's last ``bot bench`` when it was interrupted (its finished runs are the branch's
    newest results), else None."""
    saved = saved_results(workspace.root, workspace.branch)
    if not saved or not saved[-1][0].interrupted:
        return None
    results, kept = saved[-1]
    runs = len(results.runs)
    return f"bench interrupted: the {runs} measured runs that finished are in {kept}; run bot bench again"
