"""Acting on a measured regression: ``--drop-regressions``.

A commit whose primary metric got significantly worse than at the commit before it (on some workload, with a
win on none) is reverted by a new commit that carries the evidence in its message; history is never
rewritten. The head is then benchmarked again against the baseline, so the comments speak for what ships.
A commit that wins on one workload and loses on another is a trade-off for a human, and is left in place.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import git

from benchmarks.results import Results
from benchmarks.stats import REGRESSION, WIN
from bot import measures
from bot.progress import Progress
from bot.workspace import TRAILER_ISSUE, Workspace

TRAILER_REVERT_OF = "Bot-Revert-Of"
_REVERTS = re.compile(rf"(?:^{TRAILER_REVERT_OF}:\s*|This reverts commit )([0-9a-f]{{7,40}})", re.MULTILINE)

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
    comparison: dict

    @property
    def evidence(self) -> str:
        """``sft tokens_per_s 712 vs 1,376 at the commit before (−48.2% [−52.0%, −44.1%], p=0.0003)``."""
        return (
            f"{self.workload} {self.metric} {measures.number(self.median)} vs "
            f"{measures.number(self.previous_median)} at the commit before "
            f"({measures.effect_evidence(self.comparison)})"
        )


def slowdowns(results: Results) -> dict[str, list[Slowdown]]:
    """Every commit (baseline excluded) with a significant marginal regression, by sha, in commit order."""
    found: dict[str, list[Slowdown]] = {}
    for index, info in enumerate(results.commits[1:], start=1):
        previous = results.commits[index - 1].sha
        for workload in results.summary:
            item = measures.entry(results, workload, info.sha)
            marginal = item and item.get("marginal")
            if marginal and marginal.get("verdict") == REGRESSION:
                before = measures.entry(results, workload, previous) or {}
                found.setdefault(info.sha, []).append(
                    Slowdown(
                        info.sha,
                        workload,
                        measures.primary(results, workload),
                        item.get("median"),
                        before.get("median"),
                        marginal,
                    )
                )
    return found


def wins(results: Results, sha: str) -> list[str]:
    """Workloads on which ``sha`` measured a significant win against the commit before it."""
    return [
        workload
        for workload in results.summary
        if ((measures.entry(results, workload, sha) or {}).get("marginal") or {}).get("verdict") == WIN
    ]


def reverted_commits(repo: git.Repo, rev_range: str) -> dict[str, str]:
    """``{reverted sha: reverting sha}`` for the revert commits in ``rev_range`` (full shas)."""
    found = {}
    for commit in repo.iter_commits(rev_range):
        for match in _REVERTS.finditer(commit.message):
            try:
                found[repo.commit(match.group(1)).hexsha] = commit.hexsha
            except (ValueError, git.BadName):
                continue
    return found


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
        f"{measures.short(results.baseline)}); the head is benchmarked again after this revert.",
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
            outcome.kept.append((sha, f"already reverted in {measures.short(already[sha])}"))
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
            outcome.kept.append(
                (sha, f"the revert conflicts with later commits ({measures.clip(reason[-1], 120)})")
            )
            continue
        outcome.reverted.append(Revert(sha, revert, subjects[sha], evidence))
        if progress is not None:
            for row in progress.rows:
                if row.commit == sha:
                    row.status = "reverted"
                    row.note = f"reverted in {measures.short(revert)}: " + "; ".join(evidence)
    head_measured = workspace.head in {info.sha for info in results.commits}
    if outcome.reverted or (already and not head_measured):
        if progress is not None:
            progress.head = workspace.head
        try:
            outcome.results = rebench([results.baseline, workspace.head])
        except Exception as error:  # the reverts stand; the comments say the head was not re-measured
            outcome.rebench_error = f"{type(error).__name__}: {error}"
    return outcome


def add_drop_regressions_argument(parser: argparse.ArgumentParser) -> None:
    """``--drop-regressions`` for ``bot apply --bench`` and ``bot bench``."""
    parser.add_argument(
        "--drop-regressions",
        action="store_true",
        help="revert each commit that measured a significant slowdown (a new revert commit with the evidence; "
        "history is never rewritten), then benchmark the head again",
    )
