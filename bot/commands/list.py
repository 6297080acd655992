"""``bot list``: the registered optimizations."""

from __future__ import annotations

import argparse
import json

from bot.commands.table import FromComment
from bot.render import markdown_cell
from bot.terminal import print_table
from optimizations.registry import listings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--wide``."""
    parser.add_argument(
        "--wide",
        action="store_true",
        help="one line per optimization, whatever the terminal's width (default: long cells wrap to fit it)",
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Print id, default tier, numerics contract (and why, where not exact), expected win and summary of every
    registered optimization."""
    optimizations = listings()
    if comment is not None:
        cells = [
            (o.id, o.tier, o.numerics.shown(o.numerics_reason), o.expected, o.summary) for o in optimizations
        ]
        rows = [
            f"| `{name}` | {tier} | {markdown_cell(numerics)} | {markdown_cell(expected)} | {markdown_cell(summary)} |"
            for name, tier, numerics, expected, summary in cells
        ]
        table = ["| id | tier | numerics | expected win | summary |", "|---|---|---|---|---|", *rows]
        comment.tracker.reply(comment.issue, "\n".join(table))
        return 0
    if args.json:
        entries = [
            {
                "id": o.id,
                "tier": o.tier,
                "numerics": o.numerics.value,
                "numerics_reason": o.numerics_reason,
                "expected": o.expected,
                "summary": o.summary,
                "title": o.title,
            }
            for o in optimizations
        ]
        print(json.dumps(entries, indent=2))
        return 0
    print_table(
        ("id", "tier", "numerics", "expected win", "summary"),
        [
            (o.id, str(o.tier), o.numerics.shown(o.numerics_reason), o.expected, o.summary)
            for o in optimizations
        ],
        wide=args.wide,
    )
    return 0
