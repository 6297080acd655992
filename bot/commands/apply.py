"""``bot apply --tier N``: the main job."""

from __future__ import annotations

import argparse
import sys

from bot.apply import TierRun
from bot.commands.options import add_bench_arguments, bench_options, tier_number
from bot.commands.table import FromComment
from bot.conventions import issue_key
from bot.sources import plan_file_of, plan_from_issue, tracker_for
from bot.terminal import print_progress, progress_bar
from bot.trackers.base import PROGRESS
from bot.trackers.local import LocalTracker
from bot.workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The tier, where the plan comes from, the repository, benchmarking, pushing."""
    parser.add_argument("--tier", type=tier_number, required=True, help="which tier of the plan to apply")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--plan", metavar="FILE", help="plan markdown file (default: PLAN.md in the repository)"
    )
    source.add_argument("--issue", metavar="N", help="read the plan from this issue")
    parser.add_argument("--repo", default=".", help="target repository (default: .)")
    add_bench_arguments(parser)
    parser.add_argument("--bench", action="store_true", help="benchmark the baseline and every commit")
    parser.add_argument(
        "--no-push",
        dest="push",
        action="store_false",
        help="with a GitHub tracker, do not push the work branch",
    )
    parser.add_argument(
        "--pr", action="store_true", help="open or refresh a pull request from the work branch"
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Apply the tier; print the branch, one line per optimization and the outcome."""
    root = Workspace("." if comment else args.repo).root
    tracker = comment.tracker if comment else tracker_for(root)
    bench = bench_options(args) if args.bench else None
    local_issue = None
    if comment is not None:
        issue: int | str = comment.issue
        plan = plan_from_issue(tracker, issue)
    elif args.issue is not None:
        issue = issue_key(args.issue)
        plan = plan_from_issue(tracker, issue)
    else:
        plan, text, issue = plan_file_of(root, args.plan)
        local_issue = (plan.title or issue, text)
    job = TierRun.prepare(root, plan, args.tier, bench)
    for unparsed in job.skipped:
        print(f"bot: {unparsed.describe()}", file=sys.stderr)
    if local_issue is not None and isinstance(tracker, LocalTracker):
        tracker.create_issue(issue, *local_issue)
    with progress_bar(f"applying tier {args.tier}") as on_step:
        result = job.run(tracker, issue, push=args.push, open_pr=args.pr, on_step=on_step)
    progress = result.progress
    if result.pull_request:
        print(f"pull request: {result.pull_request}")
    if args.json:
        print(progress.to_json())
        return result.exit_code
    print_progress(progress)
    if isinstance(tracker, LocalTracker):
        print(f"progress comment: {tracker.marker_file(issue, PROGRESS)}")
    return result.exit_code
