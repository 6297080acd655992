"""The scorer's tables: one per repository (each expectation and what perfbot did there, then what it should
not have done), a summary with totals in plain text for the terminal, and the same summary in Markdown."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.corpus.score import Score

SHOWN = 5  # items listed per problem kind; the rest are counted
COLUMNS = (
    "repository",
    "found",
    "%",
    "commits",
    "extra",
    "import-fail",
    "new F lint",
    "overridden",
    "never_edit",
    "false reasons",
    "unsourced",
    "problems",
)


def _percent(found: int, expected: int) -> str:
    return f"{100 * found / expected:.0f}%" if expected else "–"


def aligned(rows: Sequence[Sequence[str]]) -> str:
    """`rows` (the first is the header) as columns padded to their widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines) + "\n"


def _listed(title: str, items: Sequence[object]) -> list[str]:
    if not items:
        return []
    more = f" (+{len(items) - SHOWN} more)" if len(items) > SHOWN else ""
    return [f"  {title}: {len(items)}{more}"] + [f"    - {item}" for item in items[:SHOWN]]


def repository_table(score: Score) -> str:
    """One repository: a header line, each expectation and how it was judged, then the problems listed."""
    if not score.available:
        return f"{score.name} ({score.source}): not available: {score.why}\n"
    head = (
        f"{score.name} ({score.source}): found {score.found}/{len(score.judged)} "
        f"({_percent(score.found, len(score.judged))}), {score.commits} commit(s)"
    )
    rows = [("", "verdict", "optimization", "files", "perfbot")]
    for j in score.judged:
        files = ", ".join(j.files)
        rows.append(("✓" if j.found else "✗", j.verdict, j.optimization, files[:40], j.how[:90]))
    body = aligned(rows) if score.judged else "  (no expectation)\n"
    lines = [head, *("  " + line for line in body.splitlines())]
    lines += _listed(
        "extra commits", [f"{e.commit} {e.optimization}: {', '.join(e.files)}" for e in score.extra]
    )
    lines += _listed("launch-import failures", [*score.compile_errors, *map(str, score.import_failures)])
    lines += _listed("new ruff F violations", score.new_lint)
    lines += _listed("deliberate choices overridden", score.overridden)
    lines += _listed("never_edit files edited", score.never_edited)
    lines += _listed("false reasons", score.false_reasons)
    lines += _listed(f"unsourced reasons (of {score.refused} refused)", score.unsourced)
    lines += _listed("problems", score.problems)
    lines += _listed("left out of the snapshot, absent from the mirror", score.left_out)
    return "\n".join(lines) + "\n"


def _row(score: Score) -> list[str]:
    if not score.available:
        return [score.name, "not available", *([""] * (len(COLUMNS) - 2))]
    return [
        score.name,
        f"{score.found}/{len(score.judged)}",
        _percent(score.found, len(score.judged)),
        str(score.commits),
        str(len(score.extra)),
        str(score.failing_commits),
        str(len(score.new_lint)),
        str(len(score.overridden)),
        str(len(score.never_edited)),
        str(len(score.false_reasons)),
        f"{len(score.unsourced)}/{score.refused}",
        str(len(score.problems)),
    ]


def totals(scores: Sequence[Score]) -> dict[str, int]:
    """The counts summed over the available repositories."""
    ran = [s for s in scores if s.available]
    return {
        "repositories": len(ran),
        "not_available": len(scores) - len(ran),
        "expected": sum(len(s.judged) for s in ran),
        "found": sum(s.found for s in ran),
        "commits": sum(s.commits for s in ran),
        "extra": sum(len(s.extra) for s in ran),
        "failing_commits": sum(s.failing_commits for s in ran),
        "new_lint": sum(len(s.new_lint) for s in ran),
        "overridden": sum(len(s.overridden) for s in ran),
        "never_edited": sum(len(s.never_edited) for s in ran),
        "false_reasons": sum(len(s.false_reasons) for s in ran),
        "unsourced": sum(len(s.unsourced) for s in ran),
        "refused": sum(s.refused for s in ran),
        "problems": sum(len(s.problems) for s in ran),
    }


def _total_row(scores: Sequence[Score]) -> list[str]:
    t = totals(scores)
    return [
        f"total ({t['repositories']} run)",
        f"{t['found']}/{t['expected']}",
        _percent(t["found"], t["expected"]),
        str(t["commits"]),
        str(t["extra"]),
        str(t["failing_commits"]),
        str(t["new_lint"]),
        str(t["overridden"]),
        str(t["never_edited"]),
        str(t["false_reasons"]),
        f"{t['unsourced']}/{t['refused']}",
        str(t["problems"]),
    ]


def summary(scores: Sequence[Score]) -> str:
    """Every repository's counts and the totals, in plain columns."""
    return aligned([list(COLUMNS), *map(_row, scores), _total_row(scores)])


def markdown_summary(scores: Sequence[Score]) -> str:
    """The summary as a Markdown table (the totals in bold)."""
    rows = [*map(_row, scores), [f"**{cell}**" if cell else "" for cell in _total_row(scores)]]
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
