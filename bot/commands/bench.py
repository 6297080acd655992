"""``bot bench [REV...]``: benchmark commits (default: the baseline and every bot commit of the branch)."""

from __future__ import annotations

import argparse

from bot.benchmarking import bench_revisions
from bot.commands import FromComment
from bot.commands.options import add_bench_arguments, bench_options
from bot.formatting import NOT_MEASURED, number, percent
from bot.workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Revisions, the repository and the benchmark options."""
    parser.add_argument("revs", nargs="*", metavar="REV")
    parser.add_argument("--repo", default=".", help="target repository (default: .)")
    add_bench_arguments(parser)


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Measure, save, and print the median of each commit; from a comment, update the report comments."""
    workspace = Workspace("." if comment else args.repo)
    results, path = bench_revisions(
        workspace,
        bench_options(args),
        args.revs,
        tracker=comment.tracker if comment else None,
        issue=comment.issue if comment else None,
    )
    print(f"results: {path} ({len(results.runs)} runs, {len(results.failed_runs)} failed)")
    for workload, summary in results.summary.items():
        print(f"\n{workload}:")
        for commit in results.commits:
            entry = summary["commits"].get(commit.sha, {})
            median = entry.get("median")
            cumulative = (entry.get("cumulative") or {}).get("ratio")
            shown = number(median) if median is not None else NOT_MEASURED
            change = f"{percent(cumulative)} vs baseline" if cumulative else ""
            print(f"  {commit.sha[:7]} {commit.optimization or 'baseline':<20} {shown:>14}  {change}")
    return 1 if results.failed_runs else 0
