"""The reviewer's verdict and what it is made of: findings and how serious each is, each commit's review,
where each plan item stands, each success criterion against its number; and the rule that turns the findings
into PASS, CONCERNS or FAIL."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bot.claims import Claim, ClaimCheck
from bot.lint import LintError
from bot.security import SecurityHit

PASS, CONCERNS, FAIL = "PASS", "CONCERNS", "FAIL"
BLOCKER, MAJOR, MINOR = "blocker", "major", "minor"
SEVERITY_ORDER = (BLOCKER, MAJOR, MINOR)

# Where a plan item stands when no progress row says so (rows read as their ItemStatus label).
BEHAVIOURAL = "⏸️ not applied (behavioural)"
BEHAVIOURAL_CHANGED = "⚠️ changed (behavioural, not approved)"
NOT_LANDED = "❔ not landed"

# How a success criterion stands against its number.
MET, NOT_MET, UNMEASURED, BY_HAND = "MET", "NOT MET", "NOT MEASURED", "CHECK BY HAND"


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
