"""The ``<!-- bot:note v1 -->`` comment: the honest bottom line of a run: criteria met, what shipped with its
measured effect, what did not change, and the follow-ups."""

from __future__ import annotations

from benchmarks.profiling import NEXT_STEPS
from benchmarks.results import Results
from benchmarks.stats import WIN
from bot import measurements
from bot.claims import ClaimCheck
from bot.comments.markdown import FOLDED, Table, cell, fit, heading
from bot.comments.results import headline, measured_win, profile_line
from bot.formatting import NOT_MEASURED, clip, commit_link
from bot.measurements import measurement
from bot.plan import Plan
from bot.progress import Progress
from bot.regressions import DropOutcome
from bot.render import render
from bot.review.verdict import MAJOR, MET, Verdict
from bot.status import ItemStatus
from bot.trackers.base import NOTE


def render_note(
    verdict: Verdict,
    *,
    plan: Plan | None = None,
    progress: Progress | None = None,
    results: Results | None = None,
    drop: DropOutcome | None = None,
    reverted: dict[str, str] | None = None,
    commit_url: str | None = None,
    title: str = "",
) -> str:
    """The ``<!-- bot:note v1 -->`` comment."""
    final = drop.results if drop and drop.results is not None else results
    claims = {check.sha: check for check in verdict.claims}
    reverted = dict(reverted or {}) | (drop.reverted_by if drop else {})
    criteria = Table(["Criterion", "Observed", "Target", "Status"])
    for check in verdict.criteria:
        criteria.add(cell(check.text), cell(check.observed), cell(check.target), f"**{check.status}**")
    shipped, unchanged, follow_ups = [], [], []
    rows = progress.rows if progress else []
    for row in rows:
        keys = ", ".join(row.keys)
        label = f"**{keys}** {row.change}" if keys else row.change
        status = ItemStatus(row.status)
        if row.commit and (row.commit in reverted or status is ItemStatus.REVERTED):
            by = reverted.get(row.commit)
            unchanged.append(
                f"{label}: reverted"
                + (f" in {commit_link(by, commit_url)}" if by else "")
                + f" after a measured slowdown ({measured_win(results, row.commit, {})})"
            )
        elif status.landed:
            effect = _shipped_effect(results, row.commit, reverted) + _claim(claims, row.commit)
            shipped.append(f"{label} ({commit_link(row.commit, commit_url)}): {effect}")
        elif status is ItemStatus.ALREADY:
            unchanged.append(f"{label}: already done ({clip(row.note, 240)})")
        elif status is ItemStatus.KEPT:
            unchanged.append(f"{label}: kept as the program chose it ({clip(row.note, 240)})")
        elif status is ItemStatus.PROPOSED:
            unchanged.append(f"{label}: proposed to a person, not committed")
            follow_ups.append(f"Proposal for a person: {label} ({clip(row.note, 240)})")
        elif status is ItemStatus.NOT_APPLICABLE:
            unchanged.append(f"{label}: not applicable ({clip(row.note or 'no site found', 240)})")
        elif status is ItemStatus.FAILED:
            unchanged.append(f"{label}: the transform failed ({clip(row.note, 240)})")
            follow_ups.append(f"Fix or apply by hand: {label} ({clip(row.note, 240)})")
        elif status is ItemStatus.DROPPED:
            unchanged.append(f"{label}: dropped before committing ({clip(row.note, 240)})")
            follow_ups.append(f"Apply by hand where every launch imports it: {label} ({clip(row.note, 240)})")
        elif status is ItemStatus.NEEDS_HUMAN:
            follow_ups.append(f"Needs a human: {label}" + (f" ({clip(row.note, 240)})" if row.note else ""))
    if not rows:
        for info in results.commits[1:] if results else []:
            if info.sha not in reverted:
                shipped.append(
                    f"{cell(info.subject)} ({commit_link(info.sha, commit_url)}): "
                    f"{_shipped_effect(results, info.sha, reverted)}{_claim(claims, info.sha)}"
                )
    for item in plan.behavioural if plan else []:
        unchanged.append(
            f"**{item.key}** {item.change}: behavioural, left unchanged"
            + (f" ({item.why_not})" if item.why_not else "")
        )
        follow_ups.append(
            f"Decide on behavioural item **{item.key}**: {item.change}"
            + (f" — {item.why_not}" if item.why_not else "")
        )
    for item in plan.proposals if plan else []:
        follow_ups.append(
            f"Proposal for a person **{item.key}**: {item.change} ({item.location})"
            + (f" — expected {item.expected}" if item.expected else "")
        )
    for standing in verdict.adherence:
        if standing.status == ItemStatus.NEEDS_HUMAN.label and not any(standing.key in r.keys for r in rows):
            follow_ups.append(f"Needs a human: **{standing.key}** {standing.change}")
    for sha, reason in drop.kept if drop else []:
        follow_ups.append(f"Slowdown kept at {commit_link(sha, commit_url)}: {reason}")
    for check in verdict.criteria:
        if check.status != MET:
            follow_ups.append(f"Criterion {check.status.lower()}: {check.text} (observed: {check.observed})")
    follow_ups += _next_steps(final, commit_url)
    for item in plan.items if plan else []:
        if item.follow_on:
            opts = ", ".join(f"`{o}`" for o in item.optimizations) or "no registered optimization yet"
            follow_ups.append(f"Tier {item.tier} follow-on {item.key}: {item.change} ({opts})")
    regressions = [f.title for f in verdict.findings if f.category == "regression" and f.severity == MAJOR]
    met = sum(check.status == MET for check in verdict.criteria)
    summary = f"**{verdict.outcome}**"
    if verdict.criteria:
        summary += f" — {met} of {len(verdict.criteria)} success criteria met"
    summary += f"; {len(shipped)} change(s) shipped"
    if reverted:
        summary += f", {len(reverted)} reverted for a measured slowdown"
    if final is not None and drop and drop.results is not None:
        summary += "; numbers for the head are from its re-measurement after the reverts"
    return fit(
        lambda level: render(
            "note.md.j2",
            marker=NOTE,
            title=title or heading(plan, progress),
            summary=summary,
            criteria=criteria,
            shipped=shipped,
            regressions=regressions,
            unchanged=unchanged,
            follow_ups=list(dict.fromkeys(follow_ups)),
            head_lines=[f"`{w}` {headline(final, w)}" for w in measurements.workloads(final)]
            if final
            else [],
            rebench_error=drop.rebench_error if drop else "",
            fold_all=level >= FOLDED,
        ),
        2,
    )


def _next_steps(results: Results | None, commit_url: str | None) -> list[str]:
    """What to try next, from the head's profile of each workload (``bot bench --profile``)."""
    if results is None or not results.commits:
        return []
    head = results.commits[-1].sha
    steps = []
    for workload, entry in results.profiles.get(head, {}).items():
        if "bound" in entry:
            steps.append(
                f"Next for `{workload}` at {commit_link(head, commit_url)} ({profile_line(entry)}): "
                f"{NEXT_STEPS[entry['bound']]}"
            )
    return steps


def _claim(claims: dict[str, ClaimCheck], sha: str | None) -> str:
    """``; claimed +10% tokens/s: NOT BORNE OUT`` when the commit claims a win."""
    check = claims.get(sha or "")
    return f"; claimed {clip(check.claim, 60)}: {check.status}" if check else ""


def _shipped_effect(results: Results | None, sha: str, reverted: dict[str, str]) -> str:
    """``measured win (…)`` when a workload won significantly, else no significant win, or not measured."""
    if results is None or sha not in {info.sha for info in results.commits}:
        return NOT_MEASURED
    marginals = [
        m.marginal if m else None
        for m in (measurement(results, w, sha) for w in measurements.workloads(results))
    ]
    measured = measured_win(results, sha, reverted)
    if any(m is not None and m.verdict == WIN for m in marginals):
        return f"measured win ({measured})"
    if all(m is None or m.ratio is None for m in marginals):
        return NOT_MEASURED
    return f"no significant win measured ({measured})"
