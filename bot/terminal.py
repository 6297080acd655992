"""Terminal output: tables that fit the terminal (whole lines when piped), and progress while a command runs.

Rich draws the progress bars; it is imported only where one is drawn, so ``bot list`` starts without it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: `bot list` prints a table without loading the run's progress comment or git
    from bot.progress import Progress as RunProgress
    from optimizations.registry import OnStep

GAP = "  "  # between two columns
NARROW = 24  # a column at most this wide (an id, a number) keeps its width while wider ones wrap...
NARROW_WRAPPED = 10  # ...as long as they get at least this many characters each


def output_width() -> int | None:
    """The width a table must fit: ``$COLUMNS``, else the terminal's; None when stdout is a pipe or a file and
    ``$COLUMNS`` is not set, which gets whole lines (one per row, for grep and other tools)."""
    if os.environ.get("COLUMNS", "").strip().isdigit() or sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def column_widths(natural: Sequence[int], width: int) -> list[int]:
    """Widths of columns that fit ``width`` with a gap between each two: their ``natural`` widths where those
    fit. Else the narrow columns (``NARROW`` characters or less: names, numbers) keep theirs and the wide ones
    share the rest alike, or, where that leaves them under ``NARROW_WRAPPED`` each, all share it alike."""
    room = width - len(GAP) * (len(natural) - 1)
    if sum(natural) <= room:
        return list(natural)
    kept = [most if most <= NARROW else None for most in natural]  # the narrow columns' widths
    if sum(most or 0 for most in kept) + kept.count(None) * NARROW_WRAPPED > room:
        kept = [None] * len(natural)
    return _shared(natural, [most or 1 for most in kept], room)


def _shared(wants: Sequence[int], floors: Sequence[int], room: int) -> list[int]:
    """Columns from ``floors`` toward ``wants`` within ``room``, the narrowest raised first (max-min fair)."""

    def at(level: int) -> list[int]:
        return [min(want, max(floor, level)) for want, floor in zip(wants, floors, strict=True)]

    level = max(wants)
    while level > 1 and sum(at(level)) > room:
        level -= 1
    widths = at(level)
    # what the level leaves over: a character each to the first columns still short
    for index, want in enumerate(wants):
        if sum(widths) < room and widths[index] < want:
            widths[index] += 1
    return widths


def _cell_lines(text: str, width: int) -> list[str]:
    """A cell's lines, each one longer than ``width`` wrapped at it."""
    return [
        part
        for line in text.splitlines() or [""]
        for part in (
            textwrap.wrap(line, width, break_on_hyphens=False) or [""] if len(line) > width else [line]
        )
    ]


def table_lines(header: Sequence[str], rows: Iterable[Sequence[str]], width: int | None) -> list[str]:
    """Rows under a header, columns aligned, no borders: one line per row when ``width`` is None or they fit;
    else each cell wrapped inside its column so that no line is wider than ``width``, with a blank line
    between rows."""
    table = [list(header), *(list(row) for row in rows)]
    natural = [
        max(len(line) for cell in column for line in cell.splitlines() or [""])
        for column in zip(*table, strict=True)
    ]
    widths = natural if width is None else column_widths(natural, width)
    cells = [[_cell_lines(cell, size) for cell, size in zip(row, widths, strict=True)] for row in table]
    separated = any(len(cell) > 1 for row in cells for cell in row)
    lines = []
    for number, row in enumerate(cells):
        if separated and number > 1:
            lines.append("")
        for depth in range(max(len(cell) for cell in row)):
            parts = [cell[depth] if depth < len(cell) else "" for cell in row]
            lines.append(
                GAP.join(part.ljust(size) for part, size in zip(parts, widths, strict=True)).rstrip()
            )
    return lines


def print_table(header: Sequence[str], rows: Iterable[Sequence[str]], *, wide: bool = False) -> None:
    """Print rows under a header, fitted to the terminal's width (:func:`output_width`); ``wide``: every row
    on one line whatever the width."""
    print("\n".join(table_lines(header, rows, None if wide else output_width())))


def print_progress(progress: RunProgress) -> None:
    """A run's tier, branch, one line per optimization, the changes proposed to a person, and its headline
    (never the JSON state)."""
    head = f", head {progress.head[:10]}" if progress.head else ""
    print(f"tier {progress.tier} · branch {progress.branch} (baseline {progress.baseline[:10]}{head})")
    print_table(
        ("item", "optimization", "status", "commit", "note"),
        [
            (", ".join(r.keys), r.optimization or "(none)", r.status.label, r.commit[:10], r.note)
            for r in progress.rows
        ],
    )
    for proposal in progress.proposals:
        print(f"proposal for a person (not committed): {proposal}")
    print(progress.headline)


@contextlib.contextmanager
def progress_bar(description: str, *, lines_when_piped: bool = False) -> Iterator[OnStep | None]:
    """An ``on_step(done, total, label)`` callback drawing a transient bar on a terminal's stderr. When stderr
    is not a terminal: None (no output, so pipes and logs stay clean), or with ``lines_when_piped`` one plain
    line per step, ``<description> <done>/<total>: <label>``, flushed as it comes, so a log shows a long run
    moving."""
    if not sys.stderr.isatty():
        yield _print_step(description) if lines_when_piped else None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Column

    columns = (
        TextColumn("{task.description}"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        # the step's label gets what the line has left, cut short: the bar and the counts keep their width
        TextColumn("{task.fields[label]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True, expand=True) as bar:
        task = bar.add_task(description, total=None, label="")

        def on_step(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, label=label)

        yield on_step


def _print_step(description: str) -> OnStep:
    def on_step(done: int, total: int, label: str) -> None:
        print(f"{description} {done}/{total}: {label}", file=sys.stderr, flush=True)

    return on_step
