"""The markdown every comment shares: tables of one width, safe cells, code-fence tracking, blank-line
tidying, and fitting a comment under GitHub's size limit.

A comment is rendered at decreasing detail levels (:data:`FULL`, :data:`FOLDED`, :data:`COMPACT`) until it
fits; as a last resort it is truncated at a line boundary with a pointer to the results JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bot.plan import Plan
from bot.progress import Progress
from bot.redact import redact
from bot.render import markdown_cell
from bot.trackers.base import COMMENT_LIMIT

FOLD_ROWS = 12
# Headroom under GitHub's limit, which is counted here in UTF-8 bytes (never fewer than characters).
SIZE_BUDGET = COMMENT_LIMIT - 512
# Detail levels tried in turn until the comment fits: full, folded without log tails, compact tables.
FULL, FOLDED, COMPACT = 0, 1, 2


@dataclass
class Table:
    """A markdown table: one header, rows of exactly its width (cells already escaped)."""

    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    omitted: int = 0

    def add(self, *cells: str) -> None:
        """Append a row; a row of another width is a bug and raises."""
        if len(cells) != len(self.header):
            raise ValueError(f"row of {len(cells)} cells for a header of {len(self.header)}: {cells}")
        self.rows.append(list(cells))

    @property
    def fold(self) -> bool:
        """Long enough to fold into ``<details>``."""
        return len(self.rows) > FOLD_ROWS


def cell(text: object) -> str:
    """Free text made safe for a table cell."""
    return markdown_cell(text)


def heading(plan: Plan | None, progress: Progress | None) -> str:
    """What a comment's heading names: the tier and issue of the run, else the plan's title."""
    if progress is not None:
        return f"tier {progress.tier}" + (f" · {progress.issue_label}" if progress.issue else "")
    return plan.title if plan else ""


def _fence_after(line: str, fence: str) -> str:
    """The code fence open after ``line`` (empty when none), given the one open before it."""
    stripped = line.strip()
    if fence:
        return "" if stripped.startswith(fence) and stripped.strip(fence[0]) == "" else fence
    if stripped.startswith(("```", "~~~")):
        return stripped[: len(stripped) - len(stripped.lstrip(stripped[0]))]
    return ""


def code_fence(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text``, so the text cannot close it."""
    longest = max((len(run) for run in text.split("\n") if set(run) == {"`"}), default=0)
    ticks = max(
        3, longest + 1, max((len(part) for part in text.split() if set(part) == {"`"}), default=0) + 1
    )
    return "`" * ticks


def tidy(text: str) -> str:
    """Runs of blank lines outside code fences folded into one (templates leave some behind)."""
    lines, fence, blank = [], "", False
    for line in text.splitlines():
        inside = bool(fence)
        fence = _fence_after(line, fence)
        if not inside and not fence and not line.strip():
            if not blank:
                lines.append("")
            blank = True
            continue
        blank = False
        lines.append(line)
    return "\n".join(lines).strip("\n") + "\n"


def fit(render_at: Callable[[int], str], levels: int) -> str:
    """The first rendering (most detailed first) that fits GitHub's comment limit, else the last truncated.
    Anything shaped like a token or registered as a secret is masked on the way out."""
    body = ""
    for level in range(levels):
        body = tidy(redact(render_at(level)))
        if _size(body) <= SIZE_BUDGET:
            return body
    return truncate(body)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def truncate(body: str, budget: int = SIZE_BUDGET) -> str:
    """Cut at a line boundary under ``budget``, closing an open code fence and ``<details>`` blocks."""
    closing_room = 400
    kept, used, fence, details = [], 0, "", 0
    for line in body.splitlines():
        if used + _size(line) + 1 > budget - closing_room:
            break
        kept.append(line)
        used += _size(line) + 1
        if not fence:
            details += line.count("<details") - line.count("</details>")
        fence = _fence_after(line, fence)
    tail = [fence] if fence else []
    tail += ["", *(["</details>"] * max(details, 0)), ""]
    tail.append("*Truncated to fit GitHub's comment limit; the results JSON holds every number.*")
    return "\n".join(kept + tail) + "\n"
