"""The ``<!-- bot:reviewer-verdict v1 -->`` comment: the computed verdict, its findings, and its plan
adherence, success criteria and per-commit tables."""

from __future__ import annotations

from bot.claims import BELOW, HELD, NOT_BORNE_OUT, REGRESSED
from bot.comments.markdown import FOLDED, FULL, Table, cell, fit, heading
from bot.formatting import NOT_MEASURED, clip, commit_link
from bot.plan import Plan
from bot.progress import Progress
from bot.render import render
from bot.review.verdict import MET, NOT_MET, Verdict
from bot.trackers.base import VERDICT

_CRITERION_MARKS = {MET: "✅", NOT_MET: "❌"}
_CLAIM_MARKS = {HELD: "✅", BELOW: "◐", REGRESSED: "❌", NOT_BORNE_OUT: "❌"}


def claims_table(verdict: Verdict, commit_url: str | None) -> Table:
    """Each commit's claimed win against its measured effect (vs the commit measured before it)."""
    table = Table(["Commit", "Subject", "Claimed", "Measured (vs previous commit)", "Status"])
    for check in verdict.claims:
        table.add(
            commit_link(check.sha, commit_url),
            cell(clip(check.subject, 70)),
            cell(clip(check.claim, 60)),
            cell(clip(check.observed, 200)),
            f"{_CLAIM_MARKS.get(check.status, '❔')} {check.status}",
        )
    return table


def verdict_tables(verdict: Verdict, commit_url: str | None) -> tuple[Table, Table, Table]:
    """Plan adherence, success criteria and per-commit tables of a verdict."""
    adherence = Table(["Item", "Change", "Status", "Commits", "Notes"])
    for row in verdict.adherence:
        adherence.add(
            cell(row.key),
            cell(clip(row.change, 90)),
            cell(row.status),
            ", ".join(commit_link(sha, commit_url) for sha in row.commits) or "—",
            cell(clip(row.note, 160)) or "—",
        )
    criteria = Table(["Criterion", "Target", "Observed", "Status"])
    for check in verdict.criteria:
        mark = _CRITERION_MARKS.get(check.status, "❔")
        criteria.add(cell(check.text), cell(check.target), cell(check.observed), f"{mark} {check.status}")
    commits = Table(["Commit", "Subject", "+/−", "Files", "New lint errors", "Security"])
    for reviewed in verdict.commits:
        hits = reviewed.security
        security = "clean" if not hits else ", ".join(sorted({hit.kind for hit in hits}))
        commits.add(
            commit_link(reviewed.sha, commit_url),
            cell(clip(reviewed.subject, 70)),
            f"+{reviewed.added} / −{reviewed.deleted}",
            str(len(reviewed.files)),
            str(len(reviewed.lint)) if not verdict.lint_error else NOT_MEASURED,
            cell(security),
        )
    return adherence, criteria, commits


def render_verdict(
    verdict: Verdict,
    *,
    plan: Plan | None = None,
    progress: Progress | None = None,
    commit_url: str | None = None,
    title: str = "",
) -> str:
    """The ``<!-- bot:reviewer-verdict v1 -->`` comment."""
    adherence, criteria, commits = verdict_tables(verdict, commit_url)
    title = title or heading(plan, progress)
    range_text = f"{commit_link(verdict.base, commit_url)}..{commit_link(verdict.head, commit_url)}"

    def render_at(level: int) -> str:
        return render(
            "verdict.md.j2",
            marker=VERDICT,
            title=title,
            verdict=verdict,
            range_text=range_text,
            adherence=adherence,
            criteria=criteria,
            claims=claims_table(verdict, commit_url),
            commits=commits,
            findings=verdict.findings,
            fold_all=level >= FOLDED,
            evidence_lines=None if level == FULL else 3,
        )

    return fit(render_at, 2)
