"""``bot plan FILE``: parse an issue body and print the plan it holds."""

from __future__ import annotations

import argparse
import json
from itertools import groupby

from bot.commands import FromComment
from bot.plan import Criterion
from bot.sources import load_plan, read_plan_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The plan file."""
    parser.add_argument("file", help="markdown file, or - for stdin")


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Print the items per tier with their matched optimizations, the criteria and the unmatched items."""
    plan = load_plan(*read_plan_file(args.file))
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False))
        return 0
    print(f"Plan: {plan.title}")
    for tier in sorted({i.tier for i in plan.items}):
        print(f"\nTier {tier}:")
        for item in (i for i in plan.items if i.tier == tier):
            if not item.auto_apply:
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
