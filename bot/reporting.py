"""What the orchestrator does once the benchmarks are done: optionally drop measured regressions (revert
commits, then the head re-measured), compute the verdict on ``baseline..HEAD``, and post the results,
reviewer-verdict and note comments (and the progress comment when rows changed)."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.results import Results
from bot.comments.markdown import heading
from bot.comments.note import render_note
from bot.comments.results import render_results
from bot.comments.verdict import render_verdict
from bot.formatting import short
from bot.history import reverted_commits
from bot.plan import Plan
from bot.progress import Progress, publish_progress
from bot.regressions import DropOutcome, Rebench, drop_regressions
from bot.review import review
from bot.review.verdict import Verdict
from bot.status import ItemStatus
from bot.trackers.base import NOTE, RESULTS, VERDICT, Tracker
from bot.workspace import Workspace


@dataclass
class Reports:
    """What :func:`publish_reports` posted and decided."""

    verdict: Verdict
    results_body: str
    verdict_body: str
    note_body: str
    drop: DropOutcome | None

    @property
    def exit_code(self) -> int:
        """The verdict's exit code."""
        return self.verdict.exit_code


def publish_reports(
    tracker: Tracker,
    issue: int | str,
    plan: Plan | None,
    progress: Progress | None,
    results: Results,
    workspace: Workspace,
    *,
    commit_url: str | None = None,
    drop: bool = False,
    rebench: Rebench | None = None,
    results_path: str | None = None,
) -> Reports:
    """After the benchmarks: optionally drop regressions, review ``baseline..HEAD``, and upsert the results,
    reviewer-verdict and note comments (and the progress comment when rows changed). Safe to run again: each
    comment is edited in place through its marker, and a commit reverted earlier is not reverted twice."""
    base = progress.baseline if progress else results.baseline
    outcome = None
    if drop:
        if rebench is None:
            raise ValueError("drop_regressions needs a rebench callable to measure the head again")
        outcome = drop_regressions(workspace, results, rebench, progress, issue)
    reverted = reverted_commits(workspace.repo, f"{base}..HEAD")
    changed = bool(outcome and outcome.reverted)
    for row in progress.rows if progress else []:
        if row.commit in reverted and row.status != ItemStatus.REVERTED:
            row.status, changed = ItemStatus.REVERTED, True
            row.note = f"reverted in {short(reverted[row.commit])}" + (f"; {row.note}" if row.note else "")
    verdict = review(
        workspace.repo,
        base,
        workspace.head,
        plan=plan,
        progress=progress,
        results=results,
        final_results=outcome.results if outcome else None,
        tier=progress.tier if progress else None,
    )
    title = heading(plan, progress)
    results_body = render_results(
        results,
        plan=plan,
        progress=progress,
        drop=outcome,
        reverted=reverted,
        commit_url=commit_url,
        title=title,
        results_path=results_path,
        claims=verdict.claims,
    )
    verdict_body = render_verdict(verdict, plan=plan, progress=progress, commit_url=commit_url, title=title)
    note_body = render_note(
        verdict,
        plan=plan,
        progress=progress,
        results=results,
        drop=outcome,
        reverted=reverted,
        commit_url=commit_url,
        title=title,
    )
    tracker.upsert_comment(issue, RESULTS, results_body)
    tracker.upsert_comment(issue, VERDICT, verdict_body)
    tracker.upsert_comment(issue, NOTE, note_body)
    if progress is not None and changed:
        progress.head = workspace.head
        publish_progress(tracker, issue, progress, commit_url)
    return Reports(verdict, results_body, verdict_body, note_body, outcome)
