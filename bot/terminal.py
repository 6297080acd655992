"""Terminal output: aligned tables (rich), plain text when piped."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bot.progress import Progress as RunProgress
from optimizations.registry import OnStep

PIPED_WIDTH = 10_000  # a pipe gets whole lines: no wrapping at an assumed terminal width


def print_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """Print rows under a header, columns aligned, without colour or borders; a terminal wraps long cells,
    a pipe gets one line per row."""
    console = Console(highlight=False)
    piped = not console.is_terminal
    if piped:
        console = Console(highlight=False, width=PIPED_WIDTH, color_system=None)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in header:
        table.add_column(name, no_wrap=piped)
    for row in rows:
        table.add_row(*row)
    with console.capture() as captured:
        console.print(table)
    print("\n".join(line.rstrip() for line in captured.get().splitlines()))


def print_progress(progress: RunProgress) -> None:
    """A run's tier, branch, one line per optimization, and its headline (never the JSON state)."""
    head = f", head {progress.head[:10]}" if progress.head else ""
    print(f"tier {progress.tier} · branch {progress.branch} (baseline {progress.baseline[:10]}{head})")
    print_table(
        ("item", "optimization", "status", "commit", "note"),
        [
            (", ".join(r.keys), r.optimization or "(none)", r.status.label, r.commit[:10], r.note)
            for r in progress.rows
        ],
    )
    print(progress.headline)


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[OnStep | None]:
    """An ``on_step(done, total, label)`` callback drawing a transient bar on a terminal's stderr; None (no
    bar, no output) when stderr is not a terminal, so pipes and logs stay clean."""
    if not sys.stderr.isatty():
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(
        *columns, TextColumn("{task.fields[label]}"), console=Console(stderr=True), transient=True
    ) as bar:
        task = bar.add_task(description, total=None, label="")

        def on_step(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, label=label)

        yield on_step
