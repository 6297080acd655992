"""Where each plan item stands on the branch: the progress record's rows as apply decided them, the commits'
trailers for items no row covers, and the behavioural items checked unchanged; with the findings they make."""

from __future__ import annotations

import git

from bot import history
from bot.formatting import short
from bot.plan import Plan, PlanItem
from bot.progress import Progress
from bot.review.verdict import (
    BEHAVIOURAL,
    BEHAVIOURAL_CHANGED,
    MAJOR,
    MINOR,
    NOT_LANDED,
    Adherence,
    CommitReview,
    Finding,
)
from bot.status import ItemStatus, tally


def _items_in_scope(plan: Plan, tier: int | None, reviews: list[CommitReview]) -> list[PlanItem]:
    """The plan items of the tier under review (follow-ons of that tier included) and the behavioural ones;
    without a tier, those of the tiers the commits name."""
    keyed = {key for review in reviews for key in review.plan_items}
    tiers = {tier} if tier is not None else {i.tier for i in plan.items if i.key in keyed}
    return [i for i in plan.items if not i.auto_apply or (i.tier in tiers if tiers else not i.follow_on)]


def plan_adherence(
    repo: git.Repo,
    base: str,
    head: str,
    plan: Plan,
    progress: Progress | None,
    reviews: list[CommitReview],
    reverted: dict[str, str],
    tier: int | None = None,
) -> tuple[list[Adherence], list[Finding]]:
    """Where the tier's items stand: with a progress record, its rows as apply decided them (what
    ``bot status`` shows, row for row); items no row covers, or every item without a record, from the commits'
    trailers; and the behavioural items, checked unchanged."""
    tier = tier if tier is not None else (progress.tier if progress else None)
    commits_by_key: dict[str, list[str]] = {}
    for review in reviews:
        for key in review.plan_items:
            commits_by_key.setdefault(key, []).append(review.sha)
    rows: list[Adherence] = []
    findings: list[Finding] = []
    covered: set[str] = set()
    for row in progress.rows if progress else []:
        state = ItemStatus.REVERTED if row.commit in reverted else row.status
        keys = ", ".join(row.keys)
        rows.append(Adherence(keys, row.change, state.label, (row.commit,) if row.commit else (), row.note))
        covered.update(row.keys)
        _adherence_finding(keys, row.change, state.label, row.note, findings)
    for item in _items_in_scope(plan, tier, reviews):
        if not item.auto_apply:
            rows.append(_behavioural(repo, base, head, item, findings))
            continue
        if item.key in covered:
            continue
        commits = tuple(commits_by_key.get(item.key, ()))
        if item.needs_human:
            status, note = ItemStatus.NEEDS_HUMAN.label, "no registered optimization matches this item"
        elif commits:
            landed = ItemStatus.REVERTED if all(sha in reverted for sha in commits) else ItemStatus.LANDED
            status, note = landed.label, ""
        else:
            status, note = NOT_LANDED, "no commit in the range names this item"
        rows.append(Adherence(item.key, item.change, status, commits, note))
        _adherence_finding(item.key, item.change, status, note, findings)
    return rows, findings


def _adherence_finding(keys: str, change: str, status: str, note: str, findings: list[Finding]) -> None:
    """A concern for an item that failed to apply; a minor finding for one left to a person (a proposal
    included). What apply refused (not applicable, with its reason), found already done or kept as chosen on
    purpose asks nothing."""
    if status == ItemStatus.FAILED.label:
        findings.append(
            Finding(
                MAJOR,
                "adherence",
                f"Plan item {keys} failed to apply",
                (note or status,),
                "Fix the transform (or make the change by hand); `bot apply` resumes and skips what landed",
            )
        )
    elif status == ItemStatus.DROPPED.label:
        findings.append(
            Finding(
                MAJOR,
                "adherence",
                f"Plan item {keys} was dropped: its change would break a launch",
                (note or status,),
                "Fix where the optimization places its imports (or make the change by hand); `bot apply` resumes",
            )
        )
    elif status == ItemStatus.INTERRUPTED.label:
        findings.append(
            Finding(
                MAJOR,
                "adherence",
                f"Plan item {keys} was interrupted",
                (note or status,),
                "Run the same `bot apply` again: it resumes and skips what landed",
            )
        )
    elif status == ItemStatus.PROPOSED.label:
        findings.append(
            Finding(
                MINOR,
                "adherence",
                f"Plan item {keys}: {status}",
                (note or change,),
                "It needs restructuring, so it was not committed: make it by hand if its effect is worth it",
            )
        )
    elif status in (ItemStatus.NEEDS_HUMAN.label, NOT_LANDED):
        findings.append(
            Finding(
                MINOR,
                "adherence",
                f"Plan item {keys}: {status}",
                (change,),
                "Make the change by hand, or name an optimization for it with `opt:<id>` in the plan",
            )
        )


def _behavioural(repo: git.Repo, base: str, head: str, item: PlanItem, findings: list[Finding]) -> Adherence:
    """A behavioural item must be left alone: is its line (or, without a line, its file) unchanged?"""
    hint = item.target_hint
    if hint is None:
        return Adherence(item.key, item.change, BEHAVIOURAL, (), item.why_not)
    path, line = hint
    changed = history.hunks(repo, base, head, path).get(path)
    if changed is None or not any(line in replaced for replaced in changed.replaced):
        return Adherence(item.key, item.change, BEHAVIOURAL, (), f"confirmed unchanged: {path}:{line}")
    touching = tuple(c.hexsha for c in repo.iter_commits(f"{base}..{head}", paths=path, reverse=True))
    findings.append(
        Finding(
            MAJOR,
            "adherence",
            f"Behavioural item {item.key} was changed without approval",
            (
                f"{path}:{line} differs between {short(base)} and {short(head)}",
                f"commits touching {path}: " + ", ".join(short(sha) for sha in touching),
            ),
            "Revert that line: behavioural changes need the user's approval in the issue first",
        )
    )
    return Adherence(item.key, item.change, BEHAVIOURAL_CHANGED, touching, item.why_not)


def items_tally(adherence: list[Adherence]) -> str:
    """The plan items' statuses counted as ``bot status`` counts them (empty without plan items)."""
    by_label = {status.label: status for status in ItemStatus}
    rows = [a for a in adherence if a.status not in (BEHAVIOURAL, BEHAVIOURAL_CHANGED)]
    if not rows:
        return ""
    unlanded = sum(a.status == NOT_LANDED for a in rows)
    counted = tally(by_label[a.status] for a in rows if a.status in by_label)
    return ", ".join(part for part in (counted, f"{unlanded} not landed" if unlanded else "") if part)
