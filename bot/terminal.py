"""Terminal output: aligned tables (rich), plain text when piped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table

from bot.progress import Progress

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


def print_progress(progress: Progress) -> None:
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
