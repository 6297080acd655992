"""``bot report [RANGE]``: a bench record as one self-contained HTML page (inline SVG charts, no URL)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.results import Results
from bot import measurements
from bot.commands.table import FromComment
from bot.conventions import state_dir
from bot.errors import BadInput
from bot.report_page import report_page
from bot.review import resolve_range
from bot.workspace import Workspace

PAGE = "report.html"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The range or the results file, the repository and where the page goes."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "range",
        nargs="?",
        metavar="RANGE",
        help="BASE..HEAD, BASE.. or one REV whose record to draw (default: baseline..HEAD of the current bot "
        "branch)",
    )
    source.add_argument(
        "--results", metavar="JSON", help="draw this results file of `bot bench` instead of finding one"
    )
    parser.add_argument("--repo", default=".", help="target repository (default: .)")
    parser.add_argument(
        "--out", metavar="FILE", help=f"where to write the page (default: .bot/{PAGE} in the repository)"
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Write the page and say where (a JSON object with --json). The repository is read only to find the
    record and to place the page by default: ``--results`` with ``--out`` needs none."""
    if args.results:
        source = Path(args.results)
        try:
            results = Results.load(source)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise BadInput(
                f"{source}: not a readable results file ({error}); pass the JSON `bot bench` wrote"
            ) from error
    else:
        workspace = Workspace(args.repo)
        base, head = resolve_range(workspace, args.range)
        shas = [base, *(c.hexsha for c in workspace.repo.iter_commits(f"{base}..{head}", reverse=True))]
        found = measurements.find_results(workspace.root, shas)
        if found is None:
            raise BadInput(
                f"no results file under {state_dir(workspace.root) / 'results'} measured "
                f"{base[:7]}..{head[:7]}; run `bot bench` first, or pass --results JSON"
            )
        results, source = found
    out = Path(args.out) if args.out else state_dir(Workspace(args.repo).root) / PAGE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report_page(results, source=str(source)), encoding="utf-8")
    if args.json:
        print(
            json.dumps(
                {
                    "report": str(out),
                    "results": str(source),
                    "commits": [info.sha for info in results.commits],
                    "workloads": measurements.workloads(results),
                },
                indent=2,
            )
        )
    else:
        print(f"report: {out} ({len(results.commits)} commits, drawn from {source})")
    return 0
