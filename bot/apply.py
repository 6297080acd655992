"""The main job: apply one tier of a plan to a repository, one commit per optimization, reporting as it goes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import git

from bot.benchmarking import BenchOptions, bench_and_report, bench_spec, require_measuring
from bot.conventions import TRAILER_ISSUE, TRAILER_ITEM, TRAILER_OPTIMIZATION, TRAILER_TIER, branch_name
from bot.errors import BadInput
from bot.hints import choose_by_sites, match_by_location
from bot.import_gate import import_problems
from bot.interrupts import shielded
from bot.plan import Plan
from bot.progress import Progress, Row, publish_progress
from bot.publish import push_branch
from bot.redact import redact
from bot.scope import Scope, Unparsed
from bot.status import ItemStatus, finished_headline
from bot.tidy import tidy
from bot.trackers.base import Tracker
from bot.workspace import Workspace, commit_message
from optimizations.program.repository import Change, RepoContext, Site, SourceCache, same_file
from optimizations.program.shapes import ProgramShape, program_shapes
from optimizations.registry import OnStep, Optimization, registry


@dataclass
class ApplyResult:
    """What a run did: the progress state, the commits it made, the pull request, and the exit code."""

    progress: Progress
    exit_code: int
    commits: list[str] = field(default_factory=list)
    pull_request: str | None = None


def plan_rows(plan: Plan, tier: int, known: dict[str, Optimization]) -> list[Row]:
    """One row per optimization of the tier, in plan order, plus one per item nothing can apply."""
    rows: dict[str, Row] = {}
    for item in plan.tier(tier):
        if not item.optimizations:
            rows[f"item:{item.key}"] = Row(
                "", [item.key], item.change, ItemStatus.NEEDS_HUMAN, note="no registered optimization"
            )
        for opt_id in item.optimizations:
            if opt_id not in known:
                rows[f"item:{item.key}:{opt_id}"] = Row(
                    opt_id,
                    [item.key],
                    item.change,
                    ItemStatus.NEEDS_HUMAN,
                    note=f"opt:{opt_id} is not registered",
                )
            elif opt_id in rows:
                rows[opt_id].keys.append(item.key)
            else:
                rows[opt_id] = Row(opt_id, [item.key], known[opt_id].title)
    return list(rows.values())


def describe_refusals(sites: list[Site]) -> str:
    """The refused sites with their reasons, each piece of advice stated once: reasons read
    ``<evidence>: <advice>``, and sites that share the advice are listed before it together."""
    by_advice: dict[str, list[str]] = {}
    for site in sites:
        evidence, _, advice = site.reason.rpartition(": ")
        where = f"{site.path}:{site.line}" + (f" {evidence}" if evidence else "")
        by_advice.setdefault(advice, []).append(where)
    return "; ".join(f"{', '.join(places)}: {advice}" for advice, places in by_advice.items())


def describe_kept(sites: list[Site]) -> str:
    """The kept sites, each as ``kept: chosen on purpose (path:line): <what it chose>``."""
    return "; ".join(f"{site.kept_note}: {site.message}" for site in sites)


def describe_proposal(site: Site, expected: str) -> str:
    """A proposed site as the progress comment lists it: where, what, the expected effect, why not committed."""
    return f"{site.where}: {site.message} ({site.optimization}) — expected {expected}; not committed: {site.reason}"


def focus_files(plan: Plan, row: Row) -> tuple[str, ...]:
    """Every file the row's plan items point at (a row may name several, an item "same set" in another file
    adds its own); empty (the whole repository) when any item names none. A preference, not a filter: see
    :meth:`TierRun._dry_run`."""
    items = {i.key: i for i in plan.items}
    hints = [items[k].target_hints for k in row.keys if k in items]
    if not hints or not all(hints):
        return ()
    return tuple(dict.fromkeys(path for item_hints in hints for path, _ in item_hints))


def numerics_line(optimization: Optimization) -> str:
    """The commit body's statement of the optimization's numerics contract, and why where it has one:
    ``Numerics: dynamics (changes what training does) — several examples per packed row: ...``."""
    numerics, reason = optimization.numerics, optimization.numerics_reason
    return f"Numerics: {numerics.value} ({numerics.meaning})" + (f" — {reason}" if reason else "")


def _commit_body(
    plan: Plan, row: Row, optimization: Optimization, sites: list[Site], missed: str = ""
) -> str:
    items = {i.key: i for i in plan.items}
    lines = [f"Plan item {k}: {items[k].change}" for k in row.keys if k in items]
    lines += ["", numerics_line(optimization)]
    if missed:
        lines += ["", missed.rstrip(" ;")]
    changed = [s for s in sites if s.applicable]
    refused = [s for s in sites if s.refused]
    if changed:
        lines += ["", "Changed:"] + [f"- {s.path}:{s.line} {s.message}" for s in changed]
    if refused:
        lines += ["", "Left alone:"] + [f"- {s.path}:{s.line} {s.reason}" for s in refused]
    if kept := [s for s in sites if s.kept]:
        lines += ["", "Kept as chosen:"] + [f"- {s.kept_note}: {s.message}; {s.reason}" for s in kept]
    if proposals := [s for s in sites if s.proposal]:
        lines += ["", "Proposed to a person, not in this commit:"] + [
            f"- {s.where} {s.message}" for s in proposals
        ]
    return "\n".join(lines)


@dataclass
class TierRun:
    """One tier of a plan, checked and ready to apply to a repository (nothing has been written yet)."""

    workspace: Workspace
    plan: Plan
    tier: int
    rows: list[Row]
    exclude: tuple[str, ...]
    bench: BenchOptions | None = None
    sources: SourceCache = field(default_factory=SourceCache)
    # What drives training in the repository: an expected win measured on another shape says so.
    shapes: frozenset[ProgramShape] = frozenset()
    # Files left out because they do not parse (``exclude`` holds them too).
    skipped: tuple[Unparsed, ...] = ()

    @classmethod
    def prepare(cls, root: Path, plan: Plan, tier: int, bench: BenchOptions | None = None) -> TierRun:
        """Check everything a run needs before it changes anything: a clean tree on a branch, which files
        parse (the others are skipped), items in the tier, and (with ``bench``) valid benchmark settings. Bad input raises."""
        workspace = Workspace(root)
        workspace.check_ready()
        sources = SourceCache()
        scope = Scope.of(workspace.root, sources)
        exclude = scope.exclude
        for item in plan.tier(tier):
            hint = item.target_hint
            if hint and not (workspace.root / hint[0]).resolve().is_relative_to(workspace.root.resolve()):
                raise BadInput(
                    f"plan item {item.key} points at {hint[0]}, outside the repository {workspace.root}; "
                    "give paths relative to the repository root"
                )
        plan = match_by_location(plan, workspace.root, list(registry().values()), exclude, sources)
        plan = choose_by_sites(plan, workspace.root, list(registry().values()), exclude, sources)
        rows = plan_rows(plan, tier, registry())
        if not rows:
            tiers = sorted({i.tier for i in plan.items if i.auto_apply})
            have = (
                f"tiers with items to apply: {', '.join(map(str, tiers))}"
                if tiers
                else "its items are all behavioural changes or refused sites, which are never applied"
            )
            raise BadInput(f"the plan has no tier-{tier} items to apply; {have}")
        if bench is not None:
            bench_spec(workspace.root, bench)
            require_measuring(bench)
        shapes = program_shapes(RepoContext(workspace.root, exclude, sources=sources))
        return cls(workspace, plan, tier, rows, exclude, bench, sources, shapes, scope.skipped)

    def run(
        self,
        tracker: Tracker,
        issue: int | str,
        *,
        push: bool = False,
        open_pr: bool = False,
        on_step: OnStep | None = None,
    ) -> ApplyResult:
        """Apply the tier's optimizations on the work branch, one commit each, keeping the progress comment
        current; then push, benchmark and open a pull request as asked."""
        workspace, plan, known = self.workspace, self.plan, registry()
        commit_url = tracker.commit_url
        baseline = workspace.start(branch_name(issue, self.tier))
        progress = Progress(
            tier=self.tier, issue=issue, branch=workspace.branch, baseline=baseline, rows=self.rows
        )
        progress.behavioural = [
            f"{i.key}: {i.change} ({i.location}) — {i.why_not}".strip() for i in plan.behavioural
        ]
        progress.proposals = [
            f"{i.key}: {i.location}: {i.change} — expected {i.expected}; not committed: {i.why_not}"
            for i in plan.proposals
        ]
        progress.skipped = [unparsed.reason for unparsed in self.skipped]

        def publish(headline: str) -> None:
            progress.headline = headline
            progress.head = workspace.head
            publish_progress(tracker, issue, progress, commit_url)

        commits: list[str] = []
        pushed = False
        pull_request = None
        stage = "before the first commit"
        try:
            done = {c.optimization: c.sha for c in workspace.bot_commits(baseline)}
            todo = [r for r in self.rows if r.optimization in known and r.status is ItemStatus.PENDING]
            for number, row in enumerate(todo, start=1):
                if row.optimization in done:
                    row.status, row.commit = ItemStatus.RESUMED, done[row.optimization]
                    continue
                row.status = ItemStatus.APPLYING
                stage = f"at {number}/{len(todo)} ({row.optimization})"
                publish(f"Applying {number}/{len(todo)}: {row.optimization}")
                sha = self._apply_row(row, known[row.optimization], issue, progress)
                if sha:
                    commits.append(sha)
                if on_step is not None:
                    on_step(number, len(todo), row.optimization)

            stage = "after the commits"
            publish("Commits done" + (", benchmarking" if self.bench else ""))
            if push:
                url, default_branch = tracker.push_url(), tracker.default_branch
                if url is not None and default_branch is not None:
                    push_branch(workspace, url, default_branch, tracker.git_environment(), since=baseline)
                    pushed = True
            if self.bench is not None:
                stage = "while benchmarking"
                bench_and_report(self.bench, workspace, progress, plan, tracker, issue, commit_url)
                stage = "after the benchmark"
            publish(finished_headline((r.status for r in self.rows), benchmarked=self.bench is not None))
            if pushed and open_pr:
                stage = "while opening the pull request"
                title = (
                    f"perf: tier {self.tier} of #{issue}"
                    if isinstance(issue, int)
                    else f"perf: tier {self.tier} ({issue})"
                )
                pull_request = tracker.open_or_update_pull_request(
                    progress.branch, title, f"Refs #{issue}\n\n" + progress.render(commit_url)
                )
        except KeyboardInterrupt as stopped:  # Ctrl-C or SIGTERM: the record says where, never "applying"
            with shielded(), contextlib.suppress(Exception):  # best effort: the caller sees the interrupt
                self._record_interrupt(progress, stage, str(stopped), publish)
            raise
        except Exception as stopped:  # the comment says why the run stopped
            for row in self.rows:
                if row.status is ItemStatus.APPLYING:
                    row.status = ItemStatus.FAILED
                    row.note = row.note or f"{type(stopped).__name__}: {stopped}"
            with contextlib.suppress(Exception):  # best effort: the error itself is what the caller sees
                publish(f"Stopped {stage}: {type(stopped).__name__}: {stopped}")
            raise
        failed = any(r.status in (ItemStatus.FAILED, ItemStatus.DROPPED) for r in self.rows)
        failed = failed or progress.bench.get("failed_runs", 0)
        return ApplyResult(progress, 1 if failed else 0, commits, pull_request)

    def _record_interrupt(
        self, progress: Progress, stage: str, why: str, publish: Callable[[str], None]
    ) -> None:
        """Leave what an interrupt cut short consistent: the tree as the branch's last commit, each row as the
        branch has it (a commit made just before the signal counts as landed; the row under way as
        interrupted), and the record saying where it stopped, so the same command resumes. A tree git could
        not reset is said so in the record."""
        try:
            self.workspace.recover()
        except git.GitCommandError as error:
            why += f"{'; ' if why else ''}the tree may hold edits ({' '.join(error.stderr.split())}): git stash -u"
        landed = {c.optimization: c.sha for c in self.workspace.bot_commits(progress.baseline)}
        for row in self.rows:
            if row.optimization in landed and not row.status.landed:
                row.status, row.commit = ItemStatus.LANDED, landed[row.optimization]
            elif row.status is ItemStatus.APPLYING:
                row.status = ItemStatus.INTERRUPTED
        kept = f"; {why}" if why else ""
        publish(f"Interrupted {stage}{kept}; run the same command again to resume")

    def _dry_run(self, optimization: Optimization, focus: tuple[str, ...]) -> tuple[Change, str]:
        """The optimization's change where the plan points (``focus``), and a note: empty when the hinted files
        hold a site of it, else the change over the whole repository with a note that the hint did not match
        (a hint one file off, or at a recipe the scan reaches through its script, still finds the site)."""
        root = self.workspace.root
        change = optimization.dry_run(root, self.exclude, focus, sources=self.sources)
        if not focus or change.sites:
            return change, ""
        change = optimization.dry_run(root, self.exclude, sources=self.sources)
        touched = {s.path for s in change.sites} | set(change.files)
        if any(same_file(path, hint) for path in touched for hint in focus):
            return change, ""
        where = ", ".join(focus)
        paths = sorted({s.path for s in change.sites})
        found = (
            f"bot scan finds it in {', '.join(paths)}" if paths else "bot scan finds no site of it anywhere"
        )
        return change, f"the plan points at {where}, which holds no site of {optimization.id}; {found}; "

    def _apply_row(
        self, row: Row, optimization: Optimization, issue: int | str, progress: Progress
    ) -> str | None:
        """Apply one optimization and commit it; the row says what happened, and ``progress`` lists the changes
        it proposes to a person (never committed). The sha, or None."""
        workspace = self.workspace
        untidied = None
        broken: list[str] = []
        try:
            change, missed = self._dry_run(optimization, focus_files(self.plan, row))
            if change.files:
                change.write(workspace.root)
                untidied = tidy(
                    workspace.root, {path: workspace.committed_text(path) for path in change.files}
                )
                broken = import_problems(
                    workspace.root, change.files, workspace.committed_text, self.exclude, self.sources
                )
        except Exception as exc:  # a transform bug must not stop the run or leave edits behind
            workspace.discard()
            row.status, row.note = ItemStatus.FAILED, f"{type(exc).__name__}: {exc}"
            return None
        if broken:  # a file that would not compile or import some way it runs: nothing of it is committed
            workspace.discard()
            row.status = ItemStatus.DROPPED
            row.note = missed + "dropped, not committed: " + "; ".join(broken)
            return None
        expected = optimization.expected_for(self.shapes)
        listed = set(progress.proposals)
        progress.proposals += [
            p for s in change.proposals if (p := describe_proposal(s, expected)) not in listed
        ]
        parts = [
            f"{label}: {text}"
            for label, text in (
                ("left alone", describe_refusals(change.refused)),
                ("proposed to a person", "; ".join(f"{s.where} {s.message}" for s in change.proposals)),
                ("kept", describe_kept(change.kept)),
            )
            if text
        ]
        aside = "".join(f" ({part})" for part in parts)
        if not change.files and change.already:
            row.status = ItemStatus.ALREADY
            row.note = missed + "; ".join(f"{s.path}:{s.line} {s.message}" for s in change.already) + aside
            return None
        if not change.files and (change.proposals or change.kept):
            row.status = ItemStatus.PROPOSED if change.proposals else ItemStatus.KEPT
            row.note = missed + "; ".join(parts)
            return None
        if not change.files:
            row.status = ItemStatus.NOT_APPLICABLE
            row.note = missed + (describe_refusals(change.refused) or "no site in this repository")
            return None
        # Plan text goes into the message: a credential in it is masked here, so no commit ever holds it.
        message = redact(
            commit_message(
                optimization.scope,
                optimization.subject(change.applied),
                # One source for every commit of an optimization, however the plan groups its items: the
                # registry's win (measured, or saying where it was not), which review then judges.
                optimization.expected_for(self.shapes),
                _commit_body(self.plan, row, optimization, change.sites, missed),
                {
                    TRAILER_OPTIMIZATION: row.optimization,
                    TRAILER_ITEM: ", ".join(row.keys),
                    TRAILER_ISSUE: str(issue),
                    TRAILER_TIER: str(self.tier),
                },
            )
        )
        row.commit = workspace.commit(change.files, message)  # cut short: run's interrupt handling recovers
        row.status = ItemStatus.LANDED
        row.note = missed + "; ".join(f"{s.path}:{s.line}" for s in change.applied) + aside
        if untidied:
            row.note += f" (not tidied: {untidied})"
        return row.commit
