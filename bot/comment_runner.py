"""Running a command that arrived as a ``/bot`` comment, in the checkout the bot runs in (``.``).

The trigger (``bot.trigger``) has already checked who asked and holds the issue's lock; this turns the parsed
command into the same work the command line does, with the comment's tracker and the issue as the plan.
"""

from __future__ import annotations

from bot.cli import cmd_apply
from bot.render import markdown_cell
from bot.trigger import CommandRequest
from optimizations.registry import registry


def run_comment_command(request: CommandRequest) -> int:
    """Run ``apply`` / ``bench`` / ``review`` / ``list`` for a trigger comment; return the exit code."""
    args = request.args
    if args.command == "list":
        rows = [
            f"| `{o.id}` | {o.tier} | {markdown_cell(o.expected)} | {markdown_cell(o.summary)} |"
            for o in registry().values()
        ]
        request.tracker.reply(
            request.issue, "\n".join(["| id | tier | expected win | summary |", "|---|---|---|---|", *rows])
        )
        return 0
    args.repo = "."
    if args.command == "apply":
        args.issue, args.plan = str(request.issue), None
        return cmd_apply(args, tracker=request.tracker)
    if args.command == "bench":
        from bot.benchmarking import cmd_bench

        args.issue = str(request.issue)
        return cmd_bench(args, tracker=request.tracker)
    if args.command == "review":
        from bot.review import cmd_review

        args.issue, args.post = str(request.issue), True
        return cmd_review(args, tracker=request.tracker)
    raise ValueError(f"no runner for /bot {args.command}")
