"""``bot bench [REV...]``: benchmark commits (default: the baseline and every bot commit of the branch)."""

from __future__ import annotations

import argparse

from bot.benchmarking import bench_revisions
from bot.commands.options import add_bench_arguments, bench_options
from bot.commands.table import FromComment
from bot.comments.results import measurement_setup, profile_line
from bot.errors import BadInput
from bot.formatting import clip, effect_evidence, fraction, number
from bot.measurements import measurement
from bot.run_failures import baseline_failures
from bot.terminal import progress_bar
from bot.workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Revisions, the repository and the benchmark options."""
    parser.add_argument(
        "revs",
        nargs="*",
        metavar="REV",
        help="commits to measure: shas, branches or tags (default: the work branch's baseline and every bot "
        "commit on it)",
    )
    parser.add_argument("--repo", default=".", help="target repository (default: .)")
    parser.add_argument(
        "--profile",
        type=int,
        nargs="?",
        const=5,
        metavar="STEPS",
        help="then profile every commit's workloads for STEPS steady-state steps (default 5): bound, device "
        "busy fraction and top ops go to the results and comments",
    )
    add_bench_arguments(parser)


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Measure, save, and print each commit's median, run-to-run CV and effect; from a comment, update the
    report comments."""
    if args.profile is not None and args.profile < 1:
        raise BadInput(f"--profile records at least 1 step (got {args.profile})")
    workspace = Workspace("." if comment else args.repo)
    with progress_bar("benchmarking", lines_when_piped=True) as on_step:
        results, path = bench_revisions(
            workspace,
            bench_options(args),
            args.revs,
            tracker=comment.tracker if comment else None,
            issue=comment.issue if comment else None,
            profile_steps=args.profile,
            on_step=on_step,
        )
    print(f"results: {path} ({len(results.runs)} runs, {len(results.failed_runs)} failed)")
    for workload in results.summary:
        print(f"\n{workload}: {measurement_setup(results, workload)}")
        for index, commit in enumerate(results.commits):
            measured = measurement(results, workload, commit.sha)
            shown = number(measured.median if measured else None)
            cv = f"CV {fraction(measured.cv)}" if measured and measured.cv is not None else ""
            change = ""
            if index and measured is not None:
                change = f"{effect_evidence(measured.marginal)} vs previous"
                if index > 1:
                    change += f"; {effect_evidence(measured.cumulative)} vs baseline"
            label = clip(commit.label(index == 0), 30)
            print(f"  {commit.sha[:7]} {label:<30} {shown:>14}  {cv:<10} {change}".rstrip())
            profiled = results.profiles.get(commit.sha, {}).get(workload)
            if profiled is not None:
                print(f"  {'':7} {profile_line(profiled)}")
    for line in baseline_failures(results):
        print(f"\n{line}")
    return 1 if results.failed_runs else 0
