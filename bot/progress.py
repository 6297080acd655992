"""The progress comment: what the run is doing, each optimization's status, and a state block to resume from."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from markdown_it import MarkdownIt

from bot.conventions import parse_branch
from bot.render import render
from bot.status import ItemStatus
from bot.trackers.base import PROGRESS, Comment, Tracker


@dataclass
class Row:
    """One optimization of the tier (or one plan item nothing can apply) and where it stands."""

    optimization: str
    keys: list[str]
    change: str
    status: ItemStatus = ItemStatus.PENDING
    commit: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        self.status = ItemStatus(self.status)

    @property
    def status_label(self) -> str:
        return self.status.label


@dataclass
class Progress:
    """Everything the progress comment shows; serialised into the comment so a later run can resume."""

    tier: int
    issue: int | str | None
    branch: str
    baseline: str
    headline: str = "Starting"
    head: str = ""
    rows: list[Row] = field(default_factory=list)
    behavioural: list[str] = field(default_factory=list)
    # Changes that need restructuring, proposed to a person and never committed: the plan's and the run's.
    proposals: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # files left out: they do not parse, and why
    bench: dict[str, Any] = field(default_factory=dict)

    @property
    def issue_label(self) -> str:
        return f"#{self.issue}" if isinstance(self.issue, int) else str(self.issue)

    @property
    def blocked(self) -> list[str]:
        return [
            f"{', '.join(r.keys)}: {r.change} ({r.note})" if r.note else f"{', '.join(r.keys)}: {r.change}"
            for r in self.rows
            if r.status is ItemStatus.NEEDS_HUMAN
        ]

    def row(self, optimization: str) -> Row:
        return next(r for r in self.rows if r.optimization == optimization)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)

    def render(self, commit_url: str | None = None, other_tiers: Sequence[Progress] = ()) -> str:
        """The comment body, starting with the progress marker: this tier in full, the issue's other tiers
        folded, and a state block holding every tier (so a later run of any tier can resume)."""
        tiers = sorted([self, *(p for p in other_tiers if p.tier != self.tier)], key=lambda p: p.tier)
        state_json = json.dumps({"tiers": [asdict(p) for p in tiers]}, indent=1, ensure_ascii=False)
        others = [p for p in tiers if p is not self]
        return render(
            "progress.md.j2",
            marker=PROGRESS,
            state=self,
            others=others,
            state_json=state_json,
            commit_url=commit_url,
        )

    @classmethod
    def all_from_comment(cls, body: str) -> list[Progress]:
        """Every tier's state in a progress comment written by :meth:`render` (empty if it has none)."""
        for token in MarkdownIt("commonmark").parse(body):
            if token.type == "fence" and token.info.strip() == "json":
                try:
                    data = json.loads(token.content)
                    states = data["tiers"] if "tiers" in data else [data]
                    return [
                        cls(**(state | {"rows": [Row(**r) for r in state.get("rows", [])]}))
                        for state in states
                    ]
                except (ValueError, TypeError, KeyError):
                    return []
        return []

    @classmethod
    def from_comment(cls, body: str, tier: int | None = None) -> Progress | None:
        """One tier's state in a progress comment (without ``tier``: the first); ``None`` if it has none."""
        states = cls.all_from_comment(body)
        return next((p for p in states if tier is None or p.tier == tier), None)


def find_progress(tracker: Tracker, issue: int | str) -> Comment | None:
    """The bot's progress comment on the issue (only the bot's own when the tracker knows its login)."""
    own = tracker.bot_login
    for comment in tracker.comments(issue):
        if comment.has_marker(PROGRESS) and (own is None or comment.author == own):
            return comment
    return None


def publish_progress(tracker: Tracker, issue: int | str, progress: Progress, commit_url: str | None) -> None:
    """Write ``progress`` into the issue's progress comment, keeping the other tiers' states in it."""
    existing = find_progress(tracker, issue)
    others = Progress.all_from_comment(existing.body) if existing else []
    tracker.upsert_comment(issue, PROGRESS, progress.render(commit_url, others))


@dataclass(frozen=True)
class BranchRun:
    """The run a work branch belongs to: its issue and tier, and the progress comment recording what apply
    decided per item (the one record ``bot status``, ``bot review`` and the comments read)."""

    issue: int | str
    tier: int
    comment: Comment | None
    progress: Progress | None


def find_run(tracker: Tracker, branch: str | None, tier: int | None = None) -> BranchRun | None:
    """The run of ``bot/<issue>-tier-<n>`` (None for another branch or a detached head): the progress of
    ``tier`` when given, else of the branch's own tier."""
    parsed = parse_branch(branch) if branch else None
    if parsed is None:
        return None
    issue, branch_tier = parsed
    tier = branch_tier if tier is None else tier
    comment = find_progress(tracker, issue)
    return BranchRun(issue, tier, comment, Progress.from_comment(comment.body, tier) if comment else None)
