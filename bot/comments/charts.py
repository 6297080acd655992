"""The results comment's chart: a Mermaid ``xychart-beta`` (GitHub renders it in comments) of each commit's
measured median of a workload's primary metric, baseline first, as bars, and the median's interval as two lines
through the interval's low and high ends (left out where the comment needs the room: the table gives every
interval). Only measured numbers: a commit without a median is left out and counted."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from benchmarks.results import CommitInfo, Results
from bot import formatting, measurements
from bot.measurements import measurement

# Bars in blue, both ends of the interval in near-black, so the two lines read as one band.
PALETTE = "#4e79a7, #222222, #222222"


@dataclass(frozen=True)
class MermaidChart:
    """A chart's Mermaid source (empty when no commit has a median), how many commits it leaves out, and
    whether it draws the intervals."""

    source: str
    left_out: int
    intervals: bool = True


def _text(value: str) -> str:
    """A label as Mermaid's quoted strings take it: no double quotes, no line breaks."""
    return " ".join(value.replace('"', "'").split())


def commit_label(info: CommitInfo, first: bool) -> str:
    """A commit's name on a chart's axis: ``base`` for the baseline, else its plan items and short sha."""
    return "base" if first else f"{'+'.join(info.plan_items)} {formatting.short(info.sha)}".strip()


def _value(value: float, digits: int = 6) -> str:
    """A number as the chart's grammar takes it: ``digits`` significant digits, never an exponent."""
    return format(Decimal(f"{value:.{digits}g}").normalize(), "f")


def throughput_chart(results: Results, workload: str, *, intervals: bool = True) -> MermaidChart:
    """The chart of ``workload``'s primary metric per measured commit: median bars, and with ``intervals`` the
    interval's ends as two lines."""
    labels: list[str] = []
    medians: list[float] = []
    lows: list[float] = []
    highs: list[float] = []
    levels: list[float] = []
    left_out = 0
    for index, info in enumerate(results.commits):
        measured = measurement(results, workload, info.sha)
        if measured is None or measured.median is None or measured.ci is None:
            left_out += 1
            continue
        labels.append(_text(commit_label(info, index == 0)))
        medians.append(measured.median)
        lows.append(measured.ci[0])
        highs.append(measured.ci[1])
        levels.append(measured.ci_level if measured.ci_level is not None else 0.0)
    if not medians:
        return MermaidChart("", left_out, intervals)
    metric = _text(measurements.primary(results, workload))
    quoted = ", ".join(f'"{label}"' for label in labels)
    if intervals:
        coverage = sorted({round(level, 2) for level in levels})
        interval = f"{'≥ ' if len(coverage) > 1 else ''}{coverage[0]:.0%} interval"
        head = [
            "---",
            "config:",
            "  themeVariables:",
            "    xyChart:",
            f'      plotColorPalette: "{PALETTE}"',
            "---",
        ]
        title, top = f"median (bars) and {interval} (lines)", max(highs)
    else:
        head, title, top = [], "median per commit", max(medians)
    lines = [
        *head,
        "xychart-beta",
        f'    title "{_text(workload)}: {metric}, {title}"',
        f"    x-axis [{quoted}]",
        f'    y-axis "{metric}" 0 --> {_value(top * 1.1, 3)}',
        f"    bar [{', '.join(_value(v) for v in medians)}]",
    ]
    if intervals:
        lines += [
            f"    line [{', '.join(_value(v) for v in lows)}]",
            f"    line [{', '.join(_value(v) for v in highs)}]",
        ]
    return MermaidChart("\n".join(lines), left_out, intervals)
