"""``bot plan FILE``: parse an issue body and print the plan it holds."""

from __future__ import annotations

import argparse
import json
import sys
from itertools import groupby
from pathlib import Path

from bot.commands.table import FromComment
from bot.errors import BadInput
from bot.hints import choose_by_sites, match_by_location
from bot.plan import Criterion
from bot.scope import Scope
from bot.sources import load_plan, read_plan_file
from optimizations.program.repository import SourceCache
from optimizations.registry import registry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The plan file."""
    parser.add_argument("file", help="markdown file, or - for stdin")
    parser.add_argument(
        "--repo", help="also match items by the code their File:Line hints point at in this repository"
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Print the items per tier with their matched optimizations, the criteria and the unmatched items."""
    plan = load_plan(*read_plan_file(args.file))
    if args.repo:
        root = Path(args.repo)
        if not root.is_dir():
            raise BadInput(f"{args.repo} is not a directory; pass the root of the training repository")
        known, sources = list(registry().values()), SourceCache()
        scope = Scope.of(root, sources)
        for unparsed in scope.skipped:
            print(f"bot: {unparsed.describe()}", file=sys.stderr)
        exclude = scope.exclude
        plan = match_by_location(plan, root, known, exclude, sources)
        plan = choose_by_sites(plan, root, known, exclude, sources)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False))
        return 0
    print(f"Plan: {plan.title}")
    for tier in sorted({i.tier for i in plan.items}):
        print(f"\nTier {tier}:")
        for item in (i for i in plan.items if i.tier == tier):
            if item.proposal:
                flag = "proposal for a person, never applied"
            elif not item.auto_apply:
                flag = "behavioural, never applied"
            elif item.optimizations:
                flag = "auto-apply"
            else:
                flag = "needs a human"
            opts = ", ".join(item.optimizations) or "NEEDS A HUMAN (no registered optimization)"
            where = f" @ {item.location}" if item.location else ""
            follow = " [follow-on]" if item.follow_on else ""
            print(f"  {item.key:<5} {opts}  [{flag}]{follow}{where}")
            print(f"        {item.change}" + (f"  — expected {item.expected}" if item.expected else ""))
            if item.reasons:
                why = "; ".join(f"{o} — {r}" for o, r in zip(item.optimizations, item.reasons, strict=True))
                print(f"        why: {why}")
    if plan.criteria:
        print("\nSuccess criteria:")
        for sentence, checks in groupby(plan.criteria, key=lambda c: c.text):
            print(f"  {sentence}")
            print(f"      → {'; '.join(describe_criterion(c) for c in checks)}")
    if plan.unmatched:
        print("\nNeeds a human: " + ", ".join(i.key for i in plan.unmatched))
    return 0


def describe_criterion(criterion: Criterion) -> str:
    """What the bot checks for a criterion, in a few words."""
    match criterion.kind:
        case "throughput":
            return f"{criterion.workload or 'all'} throughput ≥ +{criterion.threshold:.0%}"
        case "loss":
            return f"loss within ±{criterion.threshold:.0%}"
        case "stability":
            return "no crashed or OOM benchmark run"
        case "applied":
            return "every item of the tier landed"
    return "not machine-checkable"
