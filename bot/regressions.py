"""Acting on a measured regression: ``--drop-regressions``.

A commit whose primary metric got significantly worse than at the commit before it (on some workload, with a
win on none) is reverted by a new commit that carries the evidence in its message; history is never
rewritten. The head is then benchmarked again against the baseline, so the comments speak for what ships.
A commit that wins on one workload and loses on another is a trade-off for a human, and is left in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import git

from benchmarks.results import Results
from benchmarks.stats import REGRESSION, WIN
from bot.conventions import TRAILER_ISSUE, TRAILER_REVERT_OF
from bot.formatting import clip, effect_evidence, number, short
from bot.history import reverted_commits
from bot.measurements import Comparison, measurement, primary, workloads
from bot.progress import Progress
from bot.status import ItemStatus
from bot.workspace import Workspace

Rebench = Callable[[list[str]], Results]
"""Benchmarks the given revisions (baseline first) and returns their results."""


@dataclass(frozen=True)
class Slowdown:
    """A significant regression of a commit's primary metric against the commit before it."""

    commit: str
    workload: str
    metric: str
    median: float | None
    previous_median: float | None
    comparison: Comparison

    @property
    def evidence(self) -> str:
        """``sft tokens_per_s 712 vs 1,376 at the commit before (−48.2% [−52.0%, −44.1%], p=0.0003)``."""
        return (
            f"{self.workload} {self.metric} {number(self.median)} vs "
            f"{number(self.previous_median)} at the commit before "
            f"({effect_evidence(self.comparison)})"
        )


def slowdowns(results: Results) -> dict[str, list[Slowdown]]:
    """Every commit (baseline excluded) with a significant marginal regression, by sha, in commit order."""
    found: dict[str, list[Slowdown]] = {}
    for index, info in enumerate(results.commits[1:], start=1):
        previous = results.commits[index - 1].sha
        for workload in workloads(results):
            measured = measurement(results, workload, info.sha)
            if measured and measured.marginal and measured.marginal.verdict == REGRESSION:
                before = measurement(results, workload, previous)
                found.setdefault(info.sha, []).append(
                    Slowdown(
                        info.sha,
                        workload,
                        primary(results, workload),
                        measured.median,
                        before.median if before else None,
                        measured.marginal,
                    )
                )
    return found


def wins(results: Results, sha: str) -> list[str]:
    """Workloads on which ``sha`` measured a significant win against the commit before it."""
    won = []
    for workload in workloads(results):
        measured = measurement(results, workload, sha)
        if measured and measured.marginal and measured.marginal.verdict == WIN:
            won.append(workload)
    return won


@dataclass(frozen=True)
class Revert:
    """A commit dropped for a regression: the revert commit and the evidence it carries."""

    commit: str
    revert: str
    subject: str
    evidence: tuple[str, ...]


@dataclass
class DropOutcome:
    """What ``--drop-regressions`` did: reverts made, commits left alone (and why), the re-measured head."""

    reverted: list[Revert] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    results: Results | None = None
    rebench_error: str = ""

    @property
    def reverted_by(self) -> dict[str, str]:
        """``{reverted sha: reverting sha}`` of the reverts made."""
        return {r.commit: r.revert for r in self.reverted}


def revert_message(subject: str, sha: str, evidence: Sequence[str], results: Results, issue: object) -> str:
    """``revert: <subject>`` with the measurements that condemned it and the ``Bot-Revert-Of`` trailer."""
    lines = [
        f"revert: {subject}",
        "",
        f"This reverts commit {sha}.",
        "",
        "It measured a significant slowdown against the commit before it:",
        *(f"- {line}" for line in evidence),
        "",
        f"Measured by perfbot on {results.device} (size {results.size}, seed {results.seed}, baseline "
        f"{short(results.baseline)}); the head is benchmarked again after this revert.",
        "",
        f"{TRAILER_REVERT_OF}: {sha}",
    ]
    if issue is not None:
        lines.append(f"{TRAILER_ISSUE}: {issue}")
    return "\n".join(lines) + "\n"


def drop_regressions(
    workspace: Workspace,
    results: Results,
    rebench: Rebench,
    progress: Progress | None = None,
    issue: object = None,
) -> DropOutcome:
    """Revert each commit that measured a significant slowdown (newest first), then re-benchmark the head.

    Progress rows of reverted commits become ``reverted``. A revert that conflicts is undone and the commit
    kept, marked for a human. ``rebench([baseline, head])`` measures what ships now: after new reverts, or on a
    re-run whose results stop short of a head that earlier reverts moved on.
    """
    outcome = DropOutcome()
    already = reverted_commits(workspace.repo, f"{results.baseline}..HEAD")
    subjects = {info.sha: info.subject for info in results.commits}
    for sha, found in reversed(list(slowdowns(results).items())):
        evidence = tuple(slowdown.evidence for slowdown in found)
        if sha in already:
            outcome.kept.append((sha, f"already reverted in {short(already[sha])}"))
            continue
        traded = wins(results, sha)
        if traded:
            outcome.kept.append((sha, f"a trade-off: also a significant win on {', '.join(traded)}"))
            continue
        message = revert_message(subjects[sha], sha, evidence, results, issue)
        try:
            revert = workspace.revert(sha, message)
        except git.GitCommandError as error:
            workspace.discard()
            reason = (error.stderr or str(error)).strip().splitlines()
            outcome.kept.append((sha, f"the revert conflicts with later commits ({clip(reason[-1], 120)})"))
            continue
        outcome.reverted.append(Revert(sha, revert, subjects[sha], evidence))
        if progress is not None:
            for row in progress.rows:
                if row.commit == sha:
                    row.status = ItemStatus.REVERTED
                    row.note = f"reverted in {short(revert)}: " + "; ".join(evidence)
    head_measured = workspace.head in {info.sha for info in results.commits}
    if outcome.reverted or (already and not head_measured):
        if progress is not None:
            progress.head = workspace.head
        try:
            outcome.results = rebench([results.baseline, workspace.head])
        except Exception as error:  # the reverts stand; the comments say the head was not re-measured
            outcome.rebench_error = f"{type(error).__name__}: {error}"
    return outcome
