"""The main job: apply one tier of a plan to a repository, one commit per optimization, reporting as it goes."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bot.errors import BadInput
from bot.plan import Plan
from bot.progress import Progress, Row
from bot.tidy import tidy
from bot.tracker import PROGRESS, Tracker
from bot.workspace import (
    TRAILER_ISSUE,
    TRAILER_ITEM,
    TRAILER_OPTIMIZATION,
    Workspace,
    branch_name,
    commit_message,
)
from optimizations.registry import Optimization, RepoContext, TransformError, parse_module, registry


@dataclass
class ApplyResult:
    """What a run did: the progress state, and the exit code the CLI returns."""

    progress: Progress
    exit_code: int
    commits: list[str] = field(default_factory=list)


def bot_settings(root: Path) -> dict:
    """The target's ``[tool.bot]`` table (empty when there is none)."""
    path = root / "pyproject.toml"
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("bot", {})
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path} is not valid TOML ({exc}); fix it, then re-run") from exc


def preflight(root: Path, exclude: tuple[str, ...]) -> None:
    """Refuse to start when a file in scope does not parse: nothing is changed, and the message names it."""
    ctx = RepoContext(root, exclude)
    for path in ctx.python_files():
        try:
            parse_module(ctx.read(path), path)
        except TransformError as exc:
            raise BadInput(str(exc)) from exc


def plan_rows(plan: Plan, tier: int, known: dict[str, Optimization]) -> list[Row]:
    """One row per optimization of the tier, in plan order, plus one per item nothing can apply."""
    rows: dict[str, Row] = {}
    for item in plan.tier(tier):
        if not item.optimizations:
            rows[f"item:{item.key}"] = Row(
                "", [item.key], item.change, "needs_human", note="no registered optimization"
            )
        for opt_id in item.optimizations:
            if opt_id not in known:
                rows[f"item:{item.key}:{opt_id}"] = Row(
                    opt_id, [item.key], item.change, "needs_human", note=f"opt:{opt_id} is not registered"
                )
            elif opt_id in rows:
                rows[opt_id].keys.append(item.key)
            else:
                rows[opt_id] = Row(opt_id, [item.key], known[opt_id].title)
    return list(rows.values())


def focus_files(plan: Plan, row: Row) -> tuple[str, ...]:
    """The files the row's plan items point at; empty (the whole repository) when any item names none."""
    items = {i.key: i for i in plan.items}
    hints = [items[k].target_hint for k in row.keys if k in items]
    if not hints or any(h is None for h in hints):
        return ()
    return tuple(dict.fromkeys(path for path, _ in hints))


def _expected(plan: Plan, row: Row, optimization: Optimization) -> str:
    items = {i.key: i for i in plan.items}
    stated = [items[k].expected for k in row.keys if k in items and items[k].expected]
    return stated[0] if len(row.keys) == 1 and stated else optimization.expected


def _commit_body(plan: Plan, row: Row, sites) -> str:
    items = {i.key: i for i in plan.items}
    lines = [f"Plan item {k}: {items[k].change}" for k in row.keys if k in items]
    changed = [s for s in sites if s.applicable]
    refused = [s for s in sites if not s.applicable]
    if changed:
        lines += ["", "Changed:"] + [f"- {s.path}:{s.line} {s.message}" for s in changed]
    if refused:
        lines += ["", "Left alone:"] + [f"- {s.path}:{s.line} {s.reason}" for s in refused]
    return "\n".join(lines)


def run_apply(
    root: Path,
    plan: Plan,
    tier: int,
    tracker: Tracker,
    issue: int | str,
    *,
    commit_url: str | None = None,
    after_commits: Callable[[Workspace, Progress], None] | None = None,
) -> ApplyResult:
    """Apply the tier's optimizations on the work branch and keep the progress comment current.

    ``after_commits`` runs once the commits are made (benchmarks, review); it may update ``progress``.
    """
    workspace = Workspace(root)
    workspace.check_ready()
    settings = bot_settings(workspace.root)
    exclude = tuple(settings.get("exclude", ()))
    preflight(workspace.root, exclude)
    known = registry()
    rows = plan_rows(plan, tier, known)
    if not rows:
        raise BadInput(
            f"the plan has no tier-{tier} items; tiers in it: {sorted({i.tier for i in plan.items})}"
        )

    baseline = workspace.start(branch_name(issue, tier))
    progress = Progress(tier=tier, issue=issue, branch=workspace.branch, baseline=baseline, rows=rows)
    progress.behavioural = [
        f"{i.key}: {i.change} ({i.location}) — {i.why_not}".strip() for i in plan.behavioural
    ]

    def publish(headline: str) -> None:
        progress.headline = headline
        progress.head = workspace.head
        tracker.upsert_comment(issue, PROGRESS, progress.render(commit_url))

    done = {c.optimization: c.sha for c in workspace.bot_commits(baseline)}
    todo = [r for r in rows if r.optimization in known and r.status == "pending"]
    commits = []
    for number, row in enumerate(todo, start=1):
        if row.optimization in done:
            row.status, row.commit = "resumed", done[row.optimization]
            continue
        row.status = "applying"
        publish(f"Applying {number}/{len(todo)}: {row.optimization}")
        optimization = known[row.optimization]
        focus = focus_files(plan, row)
        try:
            change = optimization.apply(workspace.root, exclude, focus)
            if change is not None:
                tidy(workspace.root, {path: workspace.committed_text(path) for path in change.files})
        except Exception as exc:  # a transform bug must not stop the run or leave edits behind
            workspace.discard()
            row.status, row.note = "failed", f"{type(exc).__name__}: {exc}"
            continue
        except BaseException:  # Ctrl-C mid-edit: stop, with the tree as the last commit left it
            workspace.discard()
            raise
        if change is None:
            refused = [s for s in optimization.find(workspace.root, exclude, focus) if not s.applicable]
            row.status = "not_applicable"
            row.note = (
                "; ".join(f"{s.path}:{s.line} {s.reason}" for s in refused) or "no site in this repository"
            )
            continue
        message = commit_message(
            optimization.scope,
            optimization.title,
            _expected(plan, row, optimization),
            _commit_body(plan, row, change.sites),
            {
                TRAILER_OPTIMIZATION: row.optimization,
                TRAILER_ITEM: ", ".join(row.keys),
                TRAILER_ISSUE: str(issue),
            },
        )
        try:
            row.commit = workspace.commit(change.files, message)
        except BaseException:  # a commit cut short leaves nothing staged
            workspace.discard()
            raise
        row.status = "landed"
        row.note = "; ".join(f"{s.path}:{s.line}" for s in change.applied)
        if change.refused:
            row.note += (
                " (left alone: " + "; ".join(f"{s.path}:{s.line} {s.reason}" for s in change.refused) + ")"
            )
        commits.append(row.commit)

    publish("Commits done" + (", benchmarking" if after_commits else ""))
    if after_commits is not None:
        after_commits(workspace, progress)
    failed = [r for r in rows if r.status == "failed"]
    landed = [r for r in rows if r.status in ("landed", "resumed")]
    summary = (
        f"{len(landed)} landed, {len(failed)} failed, {sum(r.status == 'not_applicable' for r in rows)} not "
    )
    summary += f"applicable, {sum(r.status == 'needs_human' for r in rows)} need a human"
    publish(f"Done: {summary}")
    bench_failed = progress.bench.get("failed_runs", 0)
    return ApplyResult(progress, 1 if failed or bench_failed else 0, commits)
