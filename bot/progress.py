"""The progress comment: what the run is doing, each optimization's status, and a state block to resume from."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from markdown_it import MarkdownIt

from bot.render import render
from bot.tracker import PROGRESS

STATUS_LABELS = {
    "pending": "⏳ pending",
    "applying": "🔄 applying",
    "landed": "✅ landed",
    "resumed": "✅ landed (earlier run)",
    "not_applicable": "➖ not applicable",
    "failed": "❌ failed",
    "needs_human": "🙋 needs a human",
    "reverted": "↩️ reverted (regression)",
}


@dataclass
class Row:
    """One optimization of the tier (or one plan item nothing can apply) and where it stands."""

    optimization: str
    keys: list[str]
    change: str
    status: str = "pending"
    commit: str = ""
    note: str = ""

    @property
    def status_label(self) -> str:
        return STATUS_LABELS[self.status]


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
    bench: dict = field(default_factory=dict)

    @property
    def issue_label(self) -> str:
        return f"#{self.issue}" if isinstance(self.issue, int) else str(self.issue)

    @property
    def blocked(self) -> list[str]:
        return [
            f"{', '.join(r.keys)}: {r.change} ({r.note})" if r.note else f"{', '.join(r.keys)}: {r.change}"
            for r in self.rows
            if r.status == "needs_human"
        ]

    def row(self, optimization: str) -> Row:
        return next(r for r in self.rows if r.optimization == optimization)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)

    def render(self, commit_url: str | None = None) -> str:
        """The comment body, starting with the progress marker."""
        return render(
            "progress.md.j2", marker=PROGRESS, state=self, state_json=self.to_json(), commit_url=commit_url
        )

    @classmethod
    def from_comment(cls, body: str) -> Progress | None:
        """The state block of a progress comment written by :meth:`render`; ``None`` if there is none."""
        for token in MarkdownIt("commonmark").parse(body):
            if token.type == "fence" and token.info.strip() == "json":
                try:
                    data = json.loads(token.content)
                    data["rows"] = [Row(**r) for r in data.get("rows", [])]
                    return cls(**data)
                except (ValueError, TypeError):
                    return None
        return None
