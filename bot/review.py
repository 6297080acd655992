"""The reviewer verdict: computed from the commits, ruff and the bench results, never typed by hand.

For a commit range it checks plan adherence (each plan item's status, with its commits), lints the Python
files each commit touched (:mod:`bot.lint`: only errors the commit introduced count), measures the diff of
each commit, sweeps the added lines for credentials and risky code (:mod:`bot.security`), checks the plan's
success criteria against the measured numbers, sets each commit's claimed win against its measured effect
(:mod:`bot.claims`), and lists measured regressions. Any new lint error or a credential → FAIL; a criterion
not met or not measured, a claimed win not measured, measured as a regression or contradicted by its interval,
a regression, a failed transform or benchmark, or risky code → CONCERNS; else PASS.

Without results given, :func:`review_range` uses the results file under ``.bot/results/`` that measured the
range (``bot bench`` writes it), preferring one that measured the head, then the newest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git

from benchmarks.results import Results
from benchmarks.stats import WIN
from bot import history, losses, measurements
from bot.claims import (
    BELOW,
    HELD,
    INCONCLUSIVE,
    NOT_BORNE_OUT,
    NOT_HERE,
    REGRESSED,
    UNCHECKABLE,
    Claim,
    ClaimCheck,
    check_claim,
    claim_of,
)
from bot.conventions import TRAILER_REVERT_OF
from bot.errors import BadInput
from bot.formatting import NOT_MEASURED, clip, effect_evidence, memory, percent, short
from bot.lint import PYTHON_SUFFIXES, LintError, Touched, new_lint
from bot.notes import read_note
from bot.plan import APPLIED, LOSS, MANUAL, STABILITY, THROUGHPUT, Criterion, Plan, PlanItem
from bot.progress import Progress
from bot.regressions import slowdowns
from bot.security import SecurityHit, scan_added_lines, scan_message, scan_python
from bot.status import ItemStatus, tally
from bot.workload_files import executed_files, runs_changes
from bot.workspace import Workspace

PASS, CONCERNS, FAIL = "PASS", "CONCERNS", "FAIL"
BLOCKER, MAJOR, MINOR = "blocker", "major", "minor"
SEVERITY_ORDER = (BLOCKER, MAJOR, MINOR)

# Where a plan item stands when no progress row says so (rows read as their ItemStatus label).
BEHAVIOURAL = "⏸️ not applied (behavioural)"
BEHAVIOURAL_CHANGED = "⚠️ changed (behavioural, not approved)"
NOT_LANDED = "❔ not landed"

MET, NOT_MET, UNMEASURED, BY_HAND = "MET", "NOT MET", "NOT MEASURED", "CHECK BY HAND"
LINT_EVIDENCE_LINES = 10


@dataclass(frozen=True)
class Finding:
    """One thing the reviewer says: how serious, what, the evidence, and what to do about it."""

    severity: str
    category: str
    title: str
    evidence: tuple[str, ...]
    fix: str
    commit: str = ""


@dataclass
class CommitReview:
    """What the review found in one commit."""

    sha: str
    subject: str
    optimization: str | None = None
    plan_items: tuple[str, ...] = ()
    revert_of: str | None = None
    claim: Claim | None = None
    files: list[str] = field(default_factory=list)
    added: int = 0
    deleted: int = 0
    lint: list[LintError] = field(default_factory=list)
    preexisting_lint: int = 0
    security: list[SecurityHit] = field(default_factory=list)


@dataclass(frozen=True)
class Adherence:
    """Where one plan item stands on the branch."""

    key: str
    change: str
    status: str
    commits: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class CriterionCheck:
    """A success criterion against the measured number."""

    text: str
    kind: str
    target: str
    observed: str
    status: str


@dataclass
class Verdict:
    """PASS / CONCERNS / FAIL with everything it was computed from."""

    outcome: str
    base: str
    head: str
    commits: list[CommitReview]
    adherence: list[Adherence]
    criteria: list[CriterionCheck]
    findings: list[Finding]
    measured_head: str = ""
    lint_error: str = ""
    claims: list[ClaimCheck] = field(default_factory=list)
    results_from: str = ""
    tier: int | None = None
    items: str = ""  # the plan items counted as `bot status` counts them

    @property
    def added(self) -> int:
        """Lines added over the range."""
        return sum(c.added for c in self.commits)

    @property
    def deleted(self) -> int:
        """Lines deleted over the range."""
        return sum(c.deleted for c in self.commits)

    @property
    def files(self) -> list[str]:
        """Every path a commit of the range touched, sorted."""
        return sorted({path for c in self.commits for path in c.files})

    @property
    def lint_new(self) -> int:
        """ruff errors the range introduced."""
        return sum(len(c.lint) for c in self.commits)

    @property
    def lint_preexisting(self) -> int:
        """ruff diagnostics the touched files had before."""
        return sum(c.preexisting_lint for c in self.commits)

    @property
    def security_hits(self) -> list[SecurityHit]:
        """What the security sweep found on the added lines."""
        return [hit for c in self.commits for hit in c.security]

    @property
    def exit_code(self) -> int:
        """0 for PASS, 1 otherwise (the CLI contract: the run finished but something failed)."""
        return 0 if self.outcome == PASS else 1

    def to_dict(self) -> dict[str, Any]:
        """The verdict as ``bot review --json`` prints it."""
        return asdict(self) | {
            "added": self.added,
            "deleted": self.deleted,
            "files": self.files,
            "lint_new": self.lint_new,
        }


def outcome(findings: list[Finding]) -> str:
    """FAIL on any blocker, CONCERNS on any major finding, else PASS."""
    severities = {f.severity for f in findings}
    return FAIL if BLOCKER in severities else CONCERNS if MAJOR in severities else PASS


# --- commits ----------------------------------------------------------------------------------------------


def review_commits(repo: git.Repo, base: str, head: str) -> tuple[list[CommitReview], str]:
    """Diff size, new lint errors and security hits of every commit in ``base..head``; and a lint error text
    when ruff could not run."""
    reviews, touched, added_by_file = [], [], {}
    for commit in repo.iter_commits(f"{base}..{head}", reverse=True):
        parent = history.parent_of(commit)
        info = history.commit_info(commit)
        review = CommitReview(
            sha=commit.hexsha,
            subject=info.subject,
            optimization=info.optimization,
            plan_items=tuple(info.plan_items),
            revert_of=history.trailer(commit, TRAILER_REVERT_OF),
            claim=claim_of(_message(commit)),
            security=scan_message(commit.message),
        )
        hunks = history.hunks(repo, parent, commit.hexsha)
        for change in history.changed_files(repo, parent, commit.hexsha):
            review.files.append(change.path)
            review.added += change.added
            review.deleted += change.deleted
            lines = hunks[change.path].added if change.path in hunks else {}
            added_by_file[(commit.hexsha, change.path)] = lines
            review.security.extend(scan_added_lines(change.path, lines))
            if change.path.endswith(PYTHON_SUFFIXES):
                touched.append(Touched(commit.hexsha, parent, change.path, change.old_path or change.path))
        reviews.append(review)
    specs = [f"{t.sha}:{t.path}" for t in touched] + [f"{t.parent}:{t.old_path}" for t in touched]
    blobs = history.read_blobs(repo, list(dict.fromkeys(specs)))
    touched = [  # deleted files are not linted; files the commit added have no old version
        Touched(t.sha, t.parent, t.path, t.old_path if f"{t.parent}:{t.old_path}" in blobs else None)
        for t in touched
        if f"{t.sha}:{t.path}" in blobs
    ]
    by_sha = {r.sha: r for r in reviews}
    for t in touched:
        source = blobs[f"{t.sha}:{t.path}"].decode("utf-8", "replace")
        by_sha[t.sha].security.extend(scan_python(t.path, source, added_by_file[(t.sha, t.path)]))
    try:
        linted = new_lint(repo, touched, {key: set(lines) for key, lines in added_by_file.items()})
    except RuntimeError as error:
        return reviews, str(error)
    for t, (new, before) in linted.items():
        by_sha[t.sha].lint.extend(new)
        by_sha[t.sha].preexisting_lint += before
    return reviews, ""


def _message(commit: git.Commit) -> str:
    message = commit.message
    return message if isinstance(message, str) else message.decode("utf-8", "replace")


def commit_findings(reviews: list[CommitReview], lint_error: str) -> list[Finding]:
    """Blockers for new lint errors and credentials; concerns for risky code."""
    findings = []
    if lint_error:
        findings.append(
            Finding(
                MAJOR,
                "lint",
                "ruff could not check the touched files",
                (lint_error,),
                "Make ruff able to check the touched files (the evidence says what stopped it; "
                "`ruff check` on them by hand shows the same), then run `bot review` again",
            )
        )
    for review in reviews:
        label = f"`{short(review.sha)}` ({clip(review.subject, 60)})"
        if review.lint:
            evidence = tuple(error.describe() for error in review.lint[:LINT_EVIDENCE_LINES])
            if len(review.lint) > LINT_EVIDENCE_LINES:
                evidence += (f"… and {len(review.lint) - LINT_EVIDENCE_LINES} more",)
            fixable = sum(error.fixable for error in review.lint)
            fix = "Fix the listed lines"
            fix += f"; {fixable} can be fixed automatically with `ruff check --fix`" if fixable else ""
            findings.append(
                Finding(
                    BLOCKER,
                    "lint",
                    f"{len(review.lint)} new ruff error(s) in {label}",
                    evidence,
                    fix + ", in a follow-up commit on the branch",
                    review.sha,
                )
            )
        credentials = [hit for hit in review.security if hit.blocking]
        if credentials:
            findings.append(
                Finding(
                    BLOCKER,
                    "security",
                    f"Credential committed in {label}",
                    tuple(f"{hit.path}:{hit.line} {hit.detail}" for hit in credentials),
                    "Revoke and rotate the credential now (history keeps it even after a revert), then read it "
                    "from the environment or a secret store instead of the source",
                    review.sha,
                )
            )
        risky = [hit for hit in review.security if not hit.blocking]
        if risky:
            kinds = sorted({hit.kind for hit in risky})
            findings.append(
                Finding(
                    MAJOR,
                    "security",
                    f"Risky code added in {label}: {', '.join(kinds)}",
                    tuple(f"{hit.path}:{hit.line} {hit.detail}" for hit in risky),
                    "Pass argument lists without a shell, avoid eval/exec, and fetch models and data ahead of "
                    "the run (pinned revision and checksum) rather than downloading during training",
                    review.sha,
                )
            )
    return findings


# --- plan adherence ---------------------------------------------------------------------------------------


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
    rows, findings, covered = [], [], set()
    for row in progress.rows if progress else []:
        status = ItemStatus.REVERTED if row.commit in reverted else row.status
        keys = ", ".join(row.keys)
        rows.append(Adherence(keys, row.change, status.label, (row.commit,) if row.commit else (), row.note))
        covered.update(row.keys)
        _adherence_finding(keys, row.change, status.label, row.note, findings)
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
    """A concern for an item that failed to apply; a minor finding for one left to a person. What apply
    refused (not applicable, with its reason) or found already done asks nothing."""
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


# --- criteria and measured regressions --------------------------------------------------------------------


def check_criteria(
    plan: Plan | None, results: Results | None, adherence: list[Adherence] = (), tier: int | None = None
) -> list[CriterionCheck]:
    """Each success criterion of the plan for ``tier`` (every one without) against the head of ``results``
    (the re-measured head if any) and, for "all changes applied", against the plan adherence."""
    checks = []
    for criterion in plan.criteria if plan else []:
        if tier is not None and criterion.tier not in (None, tier):
            continue
        target = _target(criterion)
        if criterion.kind == MANUAL:
            checks.append(CriterionCheck(criterion.text, criterion.kind, target, "—", BY_HAND))
        elif criterion.kind == APPLIED:
            observed, status = _applied(adherence)
            checks.append(CriterionCheck(criterion.text, criterion.kind, target, observed, status))
        elif results is None:
            checks.append(
                CriterionCheck(criterion.text, criterion.kind, target, "no benchmark results", UNMEASURED)
            )
        else:
            check = {THROUGHPUT: _throughput, LOSS: _loss, STABILITY: _stability}[criterion.kind]
            observed, status = check(criterion, results)
            checks.append(CriterionCheck(criterion.text, criterion.kind, target, observed, status))
    return checks


def _target(criterion: Criterion) -> str:
    match criterion.kind:
        case "throughput":
            return f"{criterion.workload or 'every workload'} throughput ≥ +{criterion.threshold:.0%} vs baseline"
        case "loss":
            return (
                f"loss within ±{criterion.threshold:.0%} of baseline at equal steps and equal tokens seen (a "
                "dynamics change: no higher where it is not expected to move)"
            )
        case "stability":
            return "no crashed, OOM or timed-out benchmark run"
        case "applied":
            return "every auto-apply item of the tier landed"
    return "not machine-checkable"


def _applied(adherence: list[Adherence]) -> tuple[str, str]:
    done = {ItemStatus.LANDED.label, ItemStatus.RESUMED.label, ItemStatus.ALREADY.label}
    items = [a for a in adherence if a.status not in (BEHAVIOURAL, BEHAVIOURAL_CHANGED)]
    if not items:
        return "no plan items to check", UNMEASURED
    missing = [f"{a.key}: {a.status}" for a in items if a.status not in done]
    already = sum(a.status == ItemStatus.ALREADY.label for a in items)
    also = f" ({already} already done before)" if already else ""
    if missing:
        return f"{len(items) - len(missing)} of {len(items)} landed{also} ({'; '.join(missing)})", NOT_MET
    return f"all {len(items)} landed{also}", MET


def _stability(criterion: Criterion, results: Results) -> tuple[str, str]:
    failed = results.failed_runs
    if not results.runs:
        return "no benchmark runs", UNMEASURED
    if failed:
        kinds = ", ".join(f"{n} {status}" for status, n in sorted(Counter(r.status for r in failed).items()))
        return f"{len(failed)} of {len(results.runs)} runs failed ({kinds})", NOT_MET
    return f"all {len(results.runs)} runs finished", MET


def _throughput(criterion: Criterion, results: Results) -> tuple[str, str]:
    names = measurements.matching_workloads(results, criterion.workload)
    if not names:
        return f"no workload named {criterion.workload!r} was benchmarked", UNMEASURED
    parts, statuses = [], []
    for workload in names:
        measured = measurements.measurement(results, workload, measurements.head(results))
        cumulative = measured.cumulative if measured else None
        metric = measurements.primary(results, workload)
        if cumulative is None or cumulative.ratio is None:
            parts.append(f"{workload} {metric}: {NOT_MEASURED}")
            statuses.append(UNMEASURED)
            continue
        gained = measurements.gain(cumulative.ratio, measurements.higher_is_better(results, workload))
        met = gained >= criterion.threshold - 1e-12 and cumulative.verdict == WIN
        statuses.append(MET if met else NOT_MET)
        parts.append(f"{workload} {metric} {effect_evidence(cumulative)}")
    status = UNMEASURED if UNMEASURED in statuses else NOT_MET if NOT_MET in statuses else MET
    return "; ".join(parts), status


def _loss(criterion: Criterion, results: Results) -> tuple[str, str]:
    parts, statuses = [], []
    for workload in measurements.workloads(results):
        reading = losses.read(results, workload, measurements.head(results), criterion.threshold + 1e-12)
        if reading is None or reading.at_steps is None and reading.at_tokens is None:
            parts.append(f"{workload}: {NOT_MEASURED}")
            continue
        statuses.append(NOT_MET if reading.outside else MET)
        expected = (
            f" ({reading.expected}: expected, {'; '.join(reading.dynamics)})" if reading.expected else ""
        )
        parts.append(f"{workload} {reading.cell(criterion.threshold)}{expected}")
    status = UNMEASURED if not statuses else NOT_MET if NOT_MET in statuses else MET
    return "; ".join(parts), status


def criteria_findings(checks: list[CriterionCheck]) -> list[Finding]:
    """A concern per criterion not met or not measured; a minor finding per one to check by hand."""
    findings = []
    for check in checks:
        if check.status == NOT_MET:
            findings.append(
                Finding(
                    MAJOR,
                    "criterion",
                    f"Success criterion not met: {check.text}",
                    (f"target: {check.target}", f"observed: {check.observed}"),
                    "See the attribution table for which change fell short; re-measure at a realistic size or "
                    "move the target to a later tier in the plan",
                )
            )
        elif check.status == BY_HAND:
            findings.append(
                Finding(
                    MINOR,
                    "criterion",
                    f"Success criterion to check by hand: {check.text}",
                    (check.text,),
                    "The bot cannot measure this one; check it and say so on the issue",
                )
            )
        elif check.status == UNMEASURED:
            findings.append(
                Finding(
                    MAJOR,
                    "criterion",
                    f"Success criterion not measured: {check.text}",
                    (f"target: {check.target}", f"observed: {check.observed}"),
                    "Benchmark the workload the criterion names (`bot bench`), then review again",
                )
            )
    return findings


def claim_findings(checks: list[ClaimCheck], reverted: dict[str, str]) -> list[Finding]:
    """A concern per claimed win not measured, measured as a regression, or contradicted by its interval; a
    minor finding per claim measured below its number or too noisy to judge, and once the commit is reverted."""
    findings = []
    for check in checks:
        if check.status in (HELD, UNCHECKABLE):
            continue
        minor = (BELOW, INCONCLUSIVE, NOT_HERE)
        severity = MINOR if check.status in minor or check.sha in reverted else MAJOR
        title, fix = _CLAIM_ADVICE.get(check.status, _CLAIM_ADVICE[None])
        findings.append(
            Finding(
                severity,
                "claim",
                f"{title} at `{short(check.sha)}` ({clip(check.subject, 60)})"
                + (f", reverted in `{short(reverted[check.sha])}`" if check.sha in reverted else ""),
                (f"claimed: {check.claim}", f"measured: {check.observed}"),
                fix,
                check.sha,
            )
        )
    return findings


_CLAIM_ADVICE = {
    BELOW: (
        "Measured win smaller than claimed",
        "State the measured number, not the expected one, where the change is described",
    ),
    INCONCLUSIVE: (
        "Claimed win neither shown nor ruled out",
        "Benchmark longer (`--max-repeats`, `--time-budget`) until the interval is narrower than the claim",
    ),
    NOT_BORNE_OUT: (
        "Claimed win not borne out",
        "Drop the claim, or measure where the change should matter (a realistic size, a GPU)",
    ),
    REGRESSED: (
        "Claimed win measured as a regression",
        "Revert it (`--drop-regressions`) or guard the change off where it slows the run down",
    ),
    NOT_HERE: (
        "Claimed win not measured here",
        "Benchmark a workload that runs the changed code and measures what the claim names (a `[tool.bot]` "
        "workload; GPU utilisation with `bot profile` on the GPU)",
    ),
    None: ("Claimed win not measured", "Benchmark the commit (`bot bench`), then review again"),
}


def measured_findings(
    results: Results, tolerance: float, reverted: dict[str, str], remeasured: bool = False
) -> list[Finding]:
    """Slowdowns, memory growth, loss outside ``tolerance`` and failed runs, per commit; minor once reverted.
    Loss is read under the numerics contracts (:mod:`bot.losses`): a loss a ``dynamics`` commit is expected to
    move is a minor finding that says why, not a regression."""
    findings = []
    subjects = {info.sha: info.subject for info in results.commits}
    where = " (re-measured head)" if remeasured else ""

    def add(sha: str, title: str, evidence: list[str], fix: str) -> None:
        title = f"{title} at `{short(sha)}` ({clip(subjects[sha], 60)}){where}"
        severity = MAJOR
        if sha in reverted:
            severity, title = MINOR, f"{title}, reverted in `{short(reverted[sha])}`"
        findings.append(Finding(severity, "regression", title, tuple(evidence), fix, sha))

    slow = slowdowns(results)
    for index, info in enumerate(results.commits):
        sha, before = info.sha, results.commits[index - 1].sha
        if sha in slow:
            add(
                sha,
                "Significant slowdown",
                [s.evidence for s in slow[sha]],
                "Revert it (`--drop-regressions` does so as a new revert commit) or guard the change off where "
                "it slows the run down",
            )
        grew, lost, expected, failed = [], [], [], []
        for workload in measurements.workloads(results):
            measured = measurements.measurement(results, workload, sha)
            if measured is None:
                continue
            earlier = measurements.measurement(results, workload, before)
            if measured.memory.regression:
                grew.append(
                    f"{workload} peak memory {memory(measured.memory.peak_bytes)} vs "
                    f"{memory(earlier.memory.peak_bytes if earlier else None)} at the commit before "
                    f"({percent(measured.memory.vs_previous)}; "
                    f"threshold +{results.thresholds['memory_threshold']:.0%})"
                )
            reading = losses.read(results, workload, sha, tolerance)
            previous = losses.read(results, workload, before, tolerance) if index > 1 else None
            if reading and reading.outside and not (previous and previous.outside):
                lost.extend(reading.evidence(tolerance))
            elif reading and reading.moved_as_expected and not (previous and previous.moved_as_expected):
                expected.extend(reading.evidence(tolerance))
            for status, count in measured.failed.items():
                failed.append(f"{workload}: {count} run(s) {status}")
        if grew:
            add(
                sha,
                "Peak memory up beyond the threshold",
                grew,
                "If the change trades memory for speed on purpose, say so in its commit and docs; else gate it",
            )
        if lost:
            add(
                sha,
                "Loss outside the tolerance",
                lost,
                "Compare the loss curves at equal steps and at equal tokens seen in the results JSON; fix or "
                "revert before merging",
            )
        if expected:
            findings.append(
                Finding(
                    MINOR,
                    "loss",
                    f"Loss moved where its numerics contract says it would at `{short(sha)}` "
                    f"({clip(subjects[sha], 60)}){where}",
                    tuple(expected),
                    "Expected from a change of training dynamics, not a regression: keep it if the run should take "
                    "fewer optimizer steps per token, else make the change opt-in (its own tier or config switch)",
                    sha,
                )
            )
        if failed:
            add(
                sha,
                "Benchmark runs failed",
                failed,
                "Read the log tails in the results comment, fix the crash (OOM: smaller batch or gradient "
                "checkpointing) and run `bot bench` again",
            )
    return findings


# --- the verdict ------------------------------------------------------------------------------------------


def review(
    repo: git.Repo,
    base: str,
    head: str,
    *,
    plan: Plan | None = None,
    progress: Progress | None = None,
    results: Results | None = None,
    final_results: Results | None = None,
    tier: int | None = None,
) -> Verdict:
    """The verdict on ``base..head``; ``final_results`` is the head re-measured after dropped regressions."""
    base, head = repo.commit(base).hexsha, repo.commit(head).hexsha
    reviews, lint_error = review_commits(repo, base, head)
    findings = commit_findings(reviews, lint_error)
    reverted = history.reverted_commits(repo, f"{base}..{head}")
    tier = tier if tier is not None else (progress.tier if progress else None)
    adherence: list[Adherence] = []
    if plan is not None:
        adherence, found = plan_adherence(repo, base, head, plan, progress, reviews, reverted, tier)
        findings += found
    measured = final_results or results
    checks = check_criteria(plan, measured, adherence, tier)
    findings += criteria_findings(checks)
    claims = review_claims(repo, reviews, results)
    findings += claim_findings(claims, reverted)
    tolerance = plan.loss_tolerance if plan else None
    if results is not None:
        findings += measured_findings(results, measurements.loss_tolerance(results, tolerance), reverted)
        measured_shas = {info.sha for info in results.commits}
        unmeasured = [r for r in reviews if r.optimization and r.sha not in measured_shas]
        if unmeasured:
            findings.append(
                Finding(
                    MINOR,
                    "regression",
                    "Commits in the range were not benchmarked",
                    tuple(f"`{short(r.sha)}` {r.subject}" for r in unmeasured),
                    "Run `bot bench` on the range to measure them",
                )
            )
    if measured is not None and measurements.head(measured) != head:
        findings.append(
            Finding(
                MINOR,
                "criterion",
                f"The numbers speak for `{short(measurements.head(measured))}`, "
                f"not the reviewed head `{short(head)}`",
                (f"the last benchmarked commit is {measurements.head(measured)}",),
                "Benchmark the head (`bot bench BASE HEAD`) so the criteria are judged on what ships",
            )
        )
    if final_results is not None:
        findings += measured_findings(
            final_results, measurements.loss_tolerance(final_results, tolerance), {}, remeasured=True
        )
    findings.sort(key=lambda f: SEVERITY_ORDER.index(f.severity))
    return Verdict(
        outcome=outcome(findings),
        base=base,
        head=head,
        commits=reviews,
        adherence=adherence,
        criteria=checks,
        findings=findings,
        measured_head=measurements.head(measured) if measured else "",
        lint_error=lint_error,
        claims=claims,
        tier=tier,
        items=items_tally(adherence),
    )


def items_tally(adherence: list[Adherence]) -> str:
    """The plan items' statuses counted as ``bot status`` counts them (empty without plan items)."""
    by_label = {status.label: status for status in ItemStatus}
    rows = [a for a in adherence if a.status not in (BEHAVIOURAL, BEHAVIOURAL_CHANGED)]
    if not rows:
        return ""
    unlanded = sum(a.status == NOT_LANDED for a in rows)
    text = tally(by_label[a.status] for a in rows if a.status in by_label)
    return text + (f", {unlanded} not landed" if unlanded else "")


def review_claims(repo: git.Repo, reviews: list[CommitReview], results: Results | None) -> list[ClaimCheck]:
    """Each commit's claim against ``results``, judged only on the workloads whose run executes a file the
    commit changed (:mod:`bot.workload_files`, read in the working tree)."""
    commands = {
        name: str(workload.get("command", ""))
        for name, workload in (results.workloads if results else {}).items()
    }
    executed: dict[str, set[str] | None] = {}
    checks = []
    for review in reviews:
        if review.claim is None:
            continue
        running = None
        if commands and repo.working_tree_dir:
            for name, command in commands.items():
                if name not in executed:
                    executed[name] = executed_files(Path(repo.working_tree_dir), command) if command else None
            running = runs_changes(commands, review.files, executed)
        checks.append(check_claim(results, review.sha, review.subject, review.claim, running))
    return checks


def resolve_range(repo: git.Repo, rev_range: str | None) -> tuple[str, str]:
    """``BASE..HEAD``, ``BASE..`` or ``..HEAD``, one ``REV`` (that commit alone), or the current bot branch's
    baseline..HEAD when None."""
    try:
        if not rev_range:
            workspace = Workspace(repo.working_tree_dir)
            if workspace.baseline() == workspace.head:
                raise BadInput(f"HEAD of {workspace.root} carries no bot commits; pass a RANGE (BASE..HEAD)")
            return workspace.baseline(), workspace.head
        if "..." in rev_range:
            raise BadInput(f"{rev_range}: a symmetric difference is not a review range; write BASE..HEAD")
        if ".." in rev_range:
            left, right = rev_range.split("..", 1)
            return repo.commit(left or "HEAD").hexsha, repo.commit(right or "HEAD").hexsha
        commit = repo.commit(rev_range)
        return history.parent_of(commit), commit.hexsha
    except (git.BadName, ValueError) as error:
        raise BadInput(f"{rev_range}: not a commit range in {repo.working_tree_dir} ({error})") from error


def review_range(
    repo_path: str | Path,
    rev_range: str | None = None,
    plan: Plan | None = None,
    results: Results | None = None,
    progress: Progress | None = None,
    tier: int | None = None,
) -> Verdict:
    """``bot review``: the verdict on a commit range of the repository at ``repo_path``."""
    workspace = Workspace(repo_path)
    repo = workspace.repo
    base, head = resolve_range(repo, rev_range)
    if base == history.EMPTY_TREE:
        raise BadInput(f"{rev_range} is a root commit; review a range that starts after it")
    found = None
    if results is None:
        shas = [base, *(c.hexsha for c in repo.iter_commits(f"{base}..{head}", reverse=True))]
        found = measurements.find_results(workspace.root, shas)
        results = found[0] if found else None
    verdict = review(repo, base, head, plan=plan, progress=progress, results=results, tier=tier)
    if found:
        verdict.results_from = str(found[1])
    elif results is None and (note := read_note(repo, head)):
        verdict.findings.append(
            Finding(
                MINOR,
                "criterion",
                f"`{short(head)}` has a perfbot note, but no results file under .bot/results measured the range",
                tuple(note.splitlines()),
                "Run `bot bench` in this checkout (or pass `--results`) so the review can check the numbers",
            )
        )
    return verdict
