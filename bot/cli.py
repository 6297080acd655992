"""The ``bot`` command line. Exit codes: 0 done, 1 the run finished but something failed, 2 bad input.

The same parser reads ``/bot ...`` trigger comments (``bot.trigger``), so every command a comment can run is
defined once, here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bot.errors import BadInput, BotError
from bot.plan import Plan, PlanError, parse_plan
from bot.regressions import add_drop_regressions_argument
from bot.review import add_review_arguments
from optimizations.registry import registry


class CommandLineError(BadInput):
    """An unknown command or option."""


class _Parser(argparse.ArgumentParser):
    """An argparse parser that raises instead of exiting, so comments and the CLI share its errors."""

    def error(self, message: str) -> None:
        raise CommandLineError(f"{message}\n{self.format_usage().strip()}")


def build_parser() -> argparse.ArgumentParser:
    """The parser for every ``bot`` command."""
    parser = _Parser(prog="bot", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    commands.add_parser("list", help="registered optimizations: id, tier, expected win, summary")

    plan = commands.add_parser("plan", help="parse an issue body (a file, or - for stdin) and print the plan")
    plan.add_argument("file", help="markdown file, or - for stdin")

    scan = commands.add_parser("scan", help="where each optimization applies in a repository")
    scan.add_argument("path", nargs="?", default=".", help="repository (default: .)")
    scan.add_argument("--plan", action="store_true", help="render a plan issue from the sites found")

    apply = commands.add_parser("apply", help="branch, one commit per optimization, optional benchmarks")
    apply.add_argument("--tier", type=int, required=True, help="which tier of the plan to apply")
    source = apply.add_mutually_exclusive_group()
    source.add_argument(
        "--plan", metavar="FILE", help="plan markdown file (default: PLAN.md in the repository)"
    )
    source.add_argument("--issue", metavar="N", help="read the plan from this issue")
    apply.add_argument("--repo", default=".", help="target repository (default: .)")
    _bench_options(apply)
    add_drop_regressions_argument(apply)
    apply.add_argument("--bench", action="store_true", help="benchmark the baseline and every commit")
    apply.add_argument(
        "--no-push",
        dest="push",
        action="store_false",
        help="with a GitHub tracker, do not push the work branch",
    )
    apply.add_argument(
        "--pr", action="store_true", help="open or refresh a pull request from the work branch"
    )

    bench = commands.add_parser("bench", help="benchmark commits (default: baseline and every bot commit)")
    bench.add_argument("revs", nargs="*", metavar="REV")
    bench.add_argument("--repo", default=".", help="target repository (default: .)")
    _bench_options(bench)
    add_drop_regressions_argument(bench)

    review = commands.add_parser("review", help="the reviewer verdict for a commit range")
    add_review_arguments(review)

    status = commands.add_parser("status", help="where the current run stands (its progress comment)")
    status.add_argument("--repo", default=".", help="target repository, on a bot/* branch (default: .)")
    commands.add_parser("help", help="show the commands")

    event = commands.add_parser("handle-event", help="GitHub Actions entry: act on an issue_comment event")
    event.add_argument("event", nargs="?", help="event JSON (default: $GITHUB_EVENT_PATH)")

    serve = commands.add_parser(
        "serve", help="webhook server for /bot comments (secret: $PERFBOT_WEBHOOK_SECRET)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)

    init = commands.add_parser("init", help="add the workflow file and [tool.bot] settings to a repository")
    init.add_argument("path", nargs="?", default=".")
    init.add_argument("--force", action="store_true", help="overwrite an existing workflow file")
    return parser


def _bench_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runner",
        choices=("local", "ray"),
        default="local",
        help="where benchmarks run: this machine's GPUs, or one Ray task per run on a Ray cluster",
    )
    parser.add_argument(
        "--address",
        help="with --runner ray: the cluster (host:port or ray://host:port; default $RAY_ADDRESS)",
    )
    parser.add_argument(
        "--workload", action="append", metavar="NAME", help="only these workloads (repeatable)"
    )
    parser.add_argument("--size", help="workload size from [tool.bot] (e.g. tiny, gpu)")
    parser.add_argument("--steps", type=int, help="override steps per run")
    parser.add_argument("--repeats", type=int, help="override repeats per commit")
    parser.add_argument(
        "--warmup-rounds", type=int, help="whole rounds run first and discarded (GPU machines)"
    )


# -- commands --------------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    rows = [
        {"id": o.id, "tier": o.tier, "expected": o.expected, "summary": o.summary, "title": o.title}
        for o in registry().values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["id"]) for r in rows)
    print(f"{'id':<{width}}  tier  {'expected win':<22}  summary")
    for r in rows:
        print(f"{r['id']:<{width}}  {r['tier']:>4}  {r['expected']:<22}  {r['summary']}")
    return 0


def read_plan_file(file: str) -> tuple[str, str]:
    """The text of a plan file (``-``: stdin) and a name for it."""
    if file == "-":
        return sys.stdin.read(), "stdin"
    path = Path(file)
    if not path.is_file():
        raise BadInput(f"no plan file {file}; pass the path of an issue body saved as markdown")
    return path.read_text(encoding="utf-8"), path.name


def load_plan(text: str, source: str) -> Plan:
    try:
        return parse_plan(text, registry().values(), source)
    except PlanError as exc:
        raise BadInput(str(exc)) from exc


def cmd_plan(args: argparse.Namespace) -> int:
    plan = load_plan(*read_plan_file(args.file))
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False))
        return 0
    print(f"Plan: {plan.title}")
    for tier in sorted({i.tier for i in plan.items}):
        print(f"\nTier {tier}:")
        for item in (i for i in plan.items if i.tier == tier):
            flag = "behavioural, never applied" if not item.auto_apply else "auto-apply"
            opts = ", ".join(item.optimizations) or "NEEDS A HUMAN (no registered optimization)"
            where = f" @ {item.location}" if item.location else ""
            follow = " [follow-on]" if item.follow_on else ""
            print(f"  {item.key:<5} {opts}  [{flag}]{follow}{where}")
            print(f"        {item.change}" + (f"  — expected {item.expected}" if item.expected else ""))
    if plan.criteria:
        print("\nSuccess criteria:")
        for c in plan.criteria:
            target = (
                f"{c.workload or 'all'} throughput ≥ +{c.threshold:.0%}" if c.kind == "throughput" else ""
            )
            print(f"  {target or f'loss within ±{c.threshold:.0%}'}   ({c.text})")
    if plan.unmatched:
        print("\nNeeds a human: " + ", ".join(i.key for i in plan.unmatched))
    return 0


def tracker_for(root: Path):
    """GitHub when a token and repository are configured, else the local tracker under ``.bot/``."""
    token = os.environ.get("PERFBOT_TOKEN") or os.environ.get("GITHUB_TOKEN")
    repository = os.environ.get("GITHUB_REPOSITORY")
    if token and repository:
        from bot.github_tracker import GitHubTracker

        return GitHubTracker(
            repository, token, base_url=os.environ.get("GITHUB_API_URL", "https://api.github.com")
        )
    from bot.local_tracker import LocalTracker

    return LocalTracker(root)


def cmd_apply(args: argparse.Namespace, tracker=None) -> int:
    """``bot apply``: from the command line (tracker chosen here) or from a trigger comment (tracker given)."""
    from bot.apply import run_apply
    from bot.local_tracker import LocalTracker
    from bot.workspace import Workspace

    workspace = Workspace(args.repo)
    tracker = tracker or tracker_for(workspace.root)
    if args.issue is not None:
        issue: int | str = int(args.issue) if str(args.issue).isdigit() else args.issue
        plan = load_plan(tracker.issue(issue).body, f"issue {issue}")
    else:
        text, name = read_plan_file(args.plan or str(workspace.root / "PLAN.md"))
        plan = load_plan(text, name)
        issue = Path(name).stem.lower()
        if isinstance(tracker, LocalTracker):
            tracker.create_issue(issue, plan.title or name, text)
    commit_url = getattr(tracker, "commit_url", None)
    pushing = hasattr(tracker, "push_url") and args.push
    if args.bench:
        from bot.benchmarking import bench_spec

        bench_spec(workspace.root, args)  # a bad [tool.bot] is refused before anything is committed

    def after_commits(workspace: Workspace, progress) -> None:
        if pushing:
            from bot.publish import push_branch

            push_branch(workspace, tracker.push_url(), tracker.default_branch)
        if args.bench:
            from bot.benchmarking import bench_and_report

            bench_and_report(args, workspace, progress, plan, tracker, issue, commit_url)

    result = run_apply(
        workspace.root, plan, args.tier, tracker, issue, commit_url=commit_url, after_commits=after_commits
    )
    progress = result.progress
    if pushing and args.pr:
        title = (
            f"perf: tier {args.tier} of #{issue}"
            if isinstance(issue, int)
            else f"perf: tier {args.tier} ({issue})"
        )
        url = tracker.open_or_update_pull_request(
            progress.branch, title, f"Refs #{issue}\n\n" + progress.render(commit_url)
        )
        print(f"pull request: {url}")
    if args.json:
        print(progress.to_json())
        return result.exit_code
    print(f"branch {progress.branch} (baseline {progress.baseline[:10]})")
    for row in progress.rows:
        commit = row.commit[:10] if row.commit else "-"
        print(
            f"  {', '.join(row.keys):<6} {row.optimization or '(none)':<20} {row.status_label:<26} {commit}  {row.note}"
        )
    print(progress.headline)
    if isinstance(tracker, LocalTracker):
        print(f"progress comment: {tracker.root / 'issues' / str(issue) / 'progress.md'}")
    return result.exit_code


def cmd_bench(args: argparse.Namespace) -> int:
    from bot.benchmarking import cmd_bench as bench

    return bench(args)


def cmd_review(args: argparse.Namespace) -> int:
    from bot.review import cmd_review as review

    return review(args)


def cmd_scan(args: argparse.Namespace) -> int:
    from bot.scan import render_plan, scan

    root = Path(args.path)
    findings = scan(root)
    if args.plan:
        print(render_plan(root, findings), end="")
        return 0
    if args.json:
        data = {f.optimization.id: [s.__dict__ for s in f.sites] for f in findings}
        print(json.dumps(data, indent=2))
        return 0
    for finding in findings:
        opt = finding.optimization
        print(f"{opt.id} (tier {opt.tier}, {opt.expected}): {len(finding.applicable)} site(s) to change")
        for site in finding.sites:
            print(f"  {site.describe()}")
    return 0


def cmd_handle_event(args: argparse.Namespace) -> int:
    from bot.comment_runner import run_comment_command
    from bot.trigger import handle_event

    path = args.event or os.environ.get("GITHUB_EVENT_PATH")
    if not path:
        raise BadInput("no event file: pass one or set $GITHUB_EVENT_PATH (GitHub Actions sets it)")
    return handle_event(path, run_comment_command)


def cmd_serve(args: argparse.Namespace) -> int:
    from bot.comment_runner import run_comment_command
    from bot.webhook import serve

    secret = os.environ.get("PERFBOT_WEBHOOK_SECRET")
    if not secret:
        raise BadInput("set PERFBOT_WEBHOOK_SECRET to the webhook's secret; unsigned deliveries are refused")
    serve(args.host, args.port, secret, run_comment_command)
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from bot.init import init_repository

    result = init_repository(args.path, force=args.force)
    for path in result.written:
        print(f"wrote {path}")
    for path in result.kept:
        print(f"kept {path} (already there; --force to overwrite)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import re

    from bot.tracker import PROGRESS
    from bot.workspace import Workspace

    workspace = Workspace(args.repo)
    match = re.fullmatch(
        r"bot/(.+)-tier-\d+", workspace.branch if not workspace.repo.head.is_detached else ""
    )
    if match is None:
        raise BadInput(
            "not on a bot/<issue>-tier-<n> branch; check out the work branch of the run to ask about"
        )
    issue: int | str = int(match.group(1)) if match.group(1).isdigit() else match.group(1)
    mine = [c for c in tracker_for(workspace.root).comments(issue) if c.has_marker(PROGRESS)]
    if not mine:
        print(f"no progress comment for {issue} yet")
        return 0
    print(mine[-1].body)
    return 0


def cmd_help(args: argparse.Namespace) -> int:
    build_parser().print_help()
    return 0


INTERRUPTED = 130  # the shell's code for a run stopped by SIGINT

COMMANDS = {
    "list": cmd_list,
    "plan": cmd_plan,
    "scan": cmd_scan,
    "apply": cmd_apply,
    "bench": cmd_bench,
    "review": cmd_review,
    "status": cmd_status,
    "handle-event": cmd_handle_event,
    "serve": cmd_serve,
    "init": cmd_init,
    "help": cmd_help,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bot`` console script."""
    from bot.redact import install_log_redaction

    install_log_redaction()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return COMMANDS[args.command](args)
    except BotError as exc:
        print(f"bot: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("bot: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
