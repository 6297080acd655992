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
    DROPPED = (
        "dropped"  # its change was made, then dropped uncommitted: an import it added would break a launch
    )
    NEEDS_HUMAN = "needs_human"
    KEPT = "kept"  # the program chose otherwise on purpose: not overridden
    PROPOSED = "proposed"  # the change needs restructuring: proposed to a person, never committed
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
    ItemStatus.DROPPED: "🚫 dropped (would break a launch)",
    ItemStatus.NEEDS_HUMAN: "🙋 needs a human",
    ItemStatus.KEPT: "✋ kept (chosen on purpose)",
    ItemStatus.PROPOSED: "💡 proposal for a person",
    ItemStatus.REVERTED: "↩️ reverted (regression)",
    ItemStatus.INTERRUPTED: "⏹ interrupted",
}


_COUNTED = (
    (ItemStatus.LANDED, "landed"),
    (ItemStatus.FAILED, "failed"),
    (ItemStatus.DROPPED, "dropped"),
    (ItemStatus.ALREADY, "already done"),
    (ItemStatus.NOT_APPLICABLE, "not applicable"),
    (ItemStatus.NEEDS_HUMAN, "need a human"),
    (ItemStatus.KEPT, "kept on purpose"),
    (ItemStatus.PROPOSED, "proposed to a person"),
    (ItemStatus.REVERTED, "reverted"),
    (ItemStatus.PENDING, "pending"),
    (ItemStatus.APPLYING, "applying"),
    (ItemStatus.INTERRUPTED, "interrupted"),
)
# On the branch before the run started: a commit of an earlier run, or code that did it already.
_ON_THE_BRANCH = (ItemStatus.RESUMED, ItemStatus.ALREADY)
# Finished with nothing for the run to commit: no site, a person's to make, chosen on purpose, or a proposal.
_NOTHING_TO_COMMIT = (ItemStatus.NOT_APPLICABLE, ItemStatus.NEEDS_HUMAN, ItemStatus.KEPT, ItemStatus.PROPOSED)


def tally(statuses: Iterable[ItemStatus]) -> str:
    """How a run's rows stand, counted as the progress headline, ``bot status`` and ``bot review`` say it:
    ``4 landed, 1 not applicable, 1 need a human``, naming only the statuses some row has."""
    statuses = list(statuses)
    count = {status: statuses.count(status) for status in ItemStatus}
    count[ItemStatus.LANDED] += count.pop(ItemStatus.RESUMED)  # landed, by this run or an earlier one
    return ", ".join(f"{count[status]} {name}" for status, name in _COUNTED if count[status])


def finished_headline(statuses: Iterable[ItemStatus], benchmarked: bool) -> str:
    """The headline of an apply that ran to its end: ``Done: <tally>``; where it committed nothing and no
    item failed (a rerun), it says so plainly: ``Nothing to do: all 4 items are already on the branch``."""
    statuses = list(statuses)
    if any(s not in (*_ON_THE_BRANCH, *_NOTHING_TO_COMMIT) for s in statuses):
        return f"Done: {tally(statuses)}"
    prefix = "Benchmarked; nothing new to commit" if benchmarked else "Nothing to do"
    on_branch = sum(s in _ON_THE_BRANCH for s in statuses)
    if on_branch == len(statuses):
        items = "the one item is" if on_branch == 1 else f"all {on_branch} items are"
        return f"{prefix}: {items} already on the branch"
    rest = tally(s for s in statuses if s not in _ON_THE_BRANCH)
    return f"{prefix}: " + (f"{on_branch} already on the branch, {rest}" if on_branch else rest)
