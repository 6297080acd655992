"""``bot review [RANGE]``: the reviewer verdict for a commit range."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from benchmarks.results import Results
from bot.commands.options import tier_number
from bot.commands.table import FromComment
from bot.comments.verdict import render_verdict
from bot.conventions import issue_key
from bot.errors import BadInput
from bot.interrupts import clear_interrupted, record_interrupted, shielded
from bot.plan import Plan
from bot.progress import Progress, find_progress, find_run
from bot.review import review_range
from bot.sources import DEFAULT_PLAN, plan_file_of, plan_from_issue, tracker_for
from bot.trackers.base import VERDICT, Tracker
from bot.workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The range, the plan, the results and ``--post``."""
    parser.add_argument(
        "range",
        nargs="?",
        metavar="RANGE",
        help="BASE..HEAD, BASE.. or one REV (default: baseline..HEAD of the current bot branch)",
    )
    parser.add_argument("--repo", default=".", help="target repository (default: .)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--plan", metavar="FILE", help="plan markdown (default: PLAN.md in the repository, if any)"
    )
    source.add_argument("--issue", metavar="N", help="read the plan and the progress comment from this issue")
    parser.add_argument(
        "--results",
        metavar="JSON",
        help="results file of `bot bench` (default: the newest under .bot/results that measured the range's "
        "baseline, bot commits and head on its branch)",
    )
    parser.add_argument(
        "--tier", type=tier_number, help="which tier's items to check (default: those the commits name)"
    )
    parser.add_argument(
        "--post", action="store_true", help="write (or update) the verdict comment on the issue"
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Print the verdict (markdown, or JSON with --json); exit 0 on PASS, 1 otherwise.

    The plan items' states come from the run's progress record, found from the checked-out work branch as
    ``bot status`` finds it (or from ``--issue``); ``--tier N`` reviews that tier's record and, without a
    RANGE, its branch. Interrupted, it posts nothing and keeps the step it stopped at for ``bot status``."""
    workspace = Workspace("." if comment else args.repo)
    branch = "detached" if workspace.repo.head.is_detached else workspace.branch
    step = "reading the plan and the progress record"

    def at(name: str) -> None:
        nonlocal step
        step = name

    try:
        code = _review(args, comment, workspace, at)
    except KeyboardInterrupt:
        with shielded():
            record_interrupted(workspace.root, branch, "review", step)
        raise
    clear_interrupted(workspace.root, branch, "review")
    return code


def _review(
    args: argparse.Namespace, comment: FromComment | None, workspace: Workspace, at: Callable[[str], None]
) -> int:
    """The review itself; ``at`` is told each step as it starts."""
    root = workspace.root
    tracker = comment.tracker if comment else tracker_for(root)
    current = None if workspace.repo.head.is_detached else workspace.branch
    branch_run = find_run(tracker, current, args.tier)
    plan, progress, issue = None, None, None
    post = args.post or comment is not None
    if comment is not None or args.issue is not None:
        issue = comment.issue if comment else issue_key(args.issue)
        plan = plan_from_issue(tracker, issue)
    elif args.plan:
        plan, _, issue = plan_file_of(root, args.plan)
    elif branch_run is not None:
        issue = branch_run.issue
        plan = _plan_of(tracker, root, issue)
    elif (root / DEFAULT_PLAN).is_file():
        plan, _, issue = plan_file_of(root, None)
    if branch_run is not None and branch_run.issue == issue:
        progress = branch_run.progress
    elif issue is not None:
        found = find_progress(tracker, issue)
        progress = Progress.from_comment(found.body, args.tier) if found else None
    rev_range, branch = args.range, None
    if rev_range is None and progress is not None and progress.branch != current:
        if progress.branch in workspace.repo.heads:
            rev_range, branch = f"{progress.baseline}..{progress.branch}", progress.branch
    results = None
    if args.results:
        try:
            results = Results.load(args.results)
        except (OSError, ValueError, KeyError) as error:
            raise BadInput(
                f"{args.results}: not a readable results file ({error}); pass the JSON `bot bench` wrote"
            ) from error
    tier = args.tier if args.tier is not None else (progress.tier if progress else None)
    at(f"reviewing {rev_range or 'the branch'}")
    verdict = review_range(
        root, rev_range, plan=plan, results=results, progress=progress, tier=tier, branch=branch
    )
    verdict.results_from = verdict.results_from or (args.results or "")
    body = render_verdict(verdict, plan=plan, progress=progress)
    if post:
        if issue is None:
            raise BadInput("--post needs --issue N or a plan file to know where the comment goes")
        with shielded():  # posted whole or not at all: a Ctrl-C now waits for the post
            tracker.upsert_comment(issue, VERDICT, body)
    print(json.dumps(verdict.to_dict(), indent=2, default=str) if args.json else body, end="")
    return verdict.exit_code


def _plan_of(tracker: Tracker, root: Path, issue: int | str) -> Plan | None:
    """The plan of the branch's issue: its body on the tracker, else the repository's PLAN.md, else none."""
    try:
        return plan_from_issue(tracker, issue)
    except BadInput:
        return plan_file_of(root, None)[0] if (root / DEFAULT_PLAN).is_file() else None
