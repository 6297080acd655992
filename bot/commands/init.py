"""``bot init [PATH]``: add the workflow file and ``[tool.bot]`` settings to a target repository."""

from __future__ import annotations

import argparse
import sys

from bot.commands.table import FromComment
from bot.init import PUBLIC_REPOSITORY_WARNING, init_repository


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The repository and ``--force``."""
    parser.add_argument("path", nargs="?", default=".", help="the training repository to set up (default: .)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing workflow file")
    parser.add_argument(
        "--install",
        metavar="REQUIREMENT",
        help="what the workflow installs perfbot from, pinned: 'perfbot @ git+https://…@<commit sha>' "
        "(default: the source this perfbot was installed from, when that is pinned)",
    )
    parser.add_argument(
        "--workloads-only",
        action="store_true",
        help="write only the [tool.bot] workloads, to run perfbot on this machine (no workflow, lock or --install)",
    )
    parser.add_argument(
        "--size",
        default="tiny",
        help="the size drafted workloads build a model the runner cannot download at: tiny (CPU, default) or "
        "gpu (the model's published shape)",
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Write the files, saying which were written and which kept."""
    result = init_repository(
        args.path, install=args.install, force=args.force, size=args.size, workflow=not args.workloads_only
    )
    if not args.workloads_only:
        print(PUBLIC_REPOSITORY_WARNING, file=sys.stderr)
    for draft in result.drafts:
        print(f"workload {draft.name}, drafted from {draft.drafted_from}: {draft.command_line}")
        for line in draft.overrides:
            print(f"  override: {line}")
        for line in draft.blockers:
            print(f"  blocker: {line}")
    for path in result.written:
        print(f"wrote {path}")
    for path in result.kept:
        print(f"kept {path} (already there; --force to overwrite)")
    return 0
