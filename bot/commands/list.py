"""``bot list``: the registered optimizations."""

from __future__ import annotations

import argparse
import json

from bot.commands import FromComment
from bot.render import markdown_cell
from bot.terminal import print_table
from optimizations.registry import listings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Print id, default tier, expected win and summary of every registered optimization."""
    optimizations = listings()
    if comment is not None:
        rows = [
            f"| `{o.id}` | {o.tier} | {markdown_cell(o.expected)} | {markdown_cell(o.summary)} |"
            for o in optimizations
        ]
        table = ["| id | tier | expected win | summary |", "|---|---|---|---|", *rows]
        comment.tracker.reply(comment.issue, "\n".join(table))
        return 0
    if args.json:
        rows = [
            {"id": o.id, "tier": o.tier, "expected": o.expected, "summary": o.summary, "title": o.title}
            for o in optimizations
        ]
        print(json.dumps(rows, indent=2))
        return 0
    print_table(
        ("id", "tier", "expected win", "summary"),
        [(o.id, str(o.tier), o.expected, o.summary) for o in optimizations],
    )
    return 0
