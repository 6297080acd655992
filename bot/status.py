"""Where one optimization of a run (a row of the progress comment) stands: one enum, one label each."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class ItemStatus(StrEnum):
    """The status of a progress row; the value is what the progress state block stores."""

    PENDING = "pending"
    APPLYING = "applying"
    LANDED = "landed"
    RESUMED = "resumed"
    ALREADY = "already"
    NOT_APPLICABLE = "not_applicable"
    FAILED = "failed"
    NEEDS_HUMAN = "needs_human"
    REVERTED = "reverted"
    INTERRUPTED = "interrupted"

    @property
    def label(self) -> str:
        """How the status reads in comments and on the terminal."""
        return _LABELS[self]

    @property
    def landed(self) -> bool:
        """A commit for it is on the branch (made by this run or an earlier one)."""
        return self in (ItemStatus.LANDED, ItemStatus.RESUMED)

    @property
    def finished(self) -> bool:
        """The run is done with it (whatever the outcome)."""
        return self not in (ItemStatus.PENDING, ItemStatus.APPLYING, ItemStatus.INTERRUPTED)


_LABELS = {
    ItemStatus.PENDING: "⏳ pending",
    ItemStatus.APPLYING: "🔄 applying",
    ItemStatus.LANDED: "✅ landed",
    ItemStatus.RESUMED: "✅ landed (earlier run)",
    ItemStatus.ALREADY: "✔ already",
    ItemStatus.NOT_APPLICABLE: "➖ not applicable",
    ItemStatus.FAILED: "❌ failed",
    ItemStatus.NEEDS_HUMAN: "🙋 needs a human",
    ItemStatus.REVERTED: "↩️ reverted (regression)",
    ItemStatus.INTERRUPTED: "⏹ interrupted",
}


def tally(statuses: Iterable[ItemStatus]) -> str:
    """How a run's rows stand, counted as the progress headline, ``bot status`` and ``bot review`` say it:
    ``4 landed, 0 failed, 0 already done, 1 not applicable, 1 need a human`` (reverted and unfinished rows
    named only when there are some)."""
    statuses = list(statuses)
    count = {status: statuses.count(status) for status in ItemStatus}
    text = (
        f"{count[ItemStatus.LANDED] + count[ItemStatus.RESUMED]} landed, {count[ItemStatus.FAILED]} failed, "
        f"{count[ItemStatus.ALREADY]} already done, {count[ItemStatus.NOT_APPLICABLE]} not applicable, "
        f"{count[ItemStatus.NEEDS_HUMAN]} need a human"
    )
    extra = [
        (ItemStatus.REVERTED, "reverted"),
        (ItemStatus.PENDING, "pending"),
        (ItemStatus.APPLYING, "applying"),
        (ItemStatus.INTERRUPTED, "interrupted"),
    ]
    return text + "".join(f", {count[status]} {name}" for status, name in extra if count[status])
