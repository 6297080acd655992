"""``bot scan [PATH] [--plan | --explain]``: where each optimization applies in a repository, or how each of its
training entry points is really run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bot.commands.table import FromComment
from bot.errors import BadInput
from bot.explain import explain_data, explain_text
from bot.scan import render_plan, scan
from bot.scope import Scope
from bot.terminal import progress_bar
from optimizations.program.collector import collector_paused
from optimizations.program.repository import RepoContext, SourceCache
from optimizations.program.runs.resolve import effective_runs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The repository and ``--plan``."""
    parser.add_argument("path", nargs="?", default=".", help="repository (default: .)")
    parser.add_argument("--plan", action="store_true", help="render a plan issue from the sites found")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="show each training entry point's effective run configuration, each value with its source",
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Print each optimization's sites (or a plan issue drafted from them)."""
    root = Path(args.path)
    if not root.is_dir():
        raise BadInput(f"{args.path} is not a directory; pass the root of the training repository")
    sources = SourceCache()
    if args.explain:
        with collector_paused():
            entries = effective_runs(RepoContext(root, Scope.of(root, sources).exclude, sources=sources))
        print(json.dumps(explain_data(entries), indent=2) if args.json else explain_text(entries), end="")
        return 0
    with collector_paused():  # a scan is analysis from start to end
        with progress_bar("scanning") as on_step:
            scope = Scope.of(root, sources)
            findings = scan(root, on_step, sources, scope)
        plan = render_plan(root, findings, sources, scope) if args.plan else None
    for unparsed in scope.skipped:
        print(f"bot: {unparsed.describe()}", file=sys.stderr)
    if plan is not None:
        print(plan, end="")
        return 0
    if args.json:
        data = {f.optimization.id: [s.__dict__ for s in f.sites] for f in findings}
        print(json.dumps(data, indent=2))
        return 0
    for finding in findings:
        opt = finding.optimization
        others = (
            ("already at", finding.already),
            ("kept at", finding.kept),
            ("proposed at", finding.proposals),
        )
        counted = "".join(f", {label} {len(sites)}" for label, sites in others if sites)
        print(
            f"{opt.id} (tier {opt.tier}, {opt.expected}): {len(finding.applied)} site(s) to change{counted}"
        )
        for site in finding.sites:
            print(f"  {site.describe()}")
    if scope.skipped:
        names = ", ".join(u.path for u in scope.skipped)
        print(f"\n{len(scope.skipped)} file(s) skipped, not readable as Python: {names}")
    return 0
