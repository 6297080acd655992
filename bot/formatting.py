"""How the bot writes numbers, effects, shas and free text, in comments, git notes and summaries alike.

A value that was not measured is written as :data:`NOT_MEASURED`, everywhere.
"""

from __future__ import annotations

from benchmarks.stats import INSUFFICIENT, NO_CHANGE, REGRESSION, WIN
from bot.measurements import Comparison, Measurement

NOT_MEASURED = "not measured"
MARKS = {WIN: "▲", REGRESSION: "▼", NO_CHANGE: "≈", INSUFFICIENT: "?"}
LEGEND = (
    "▲ significant win, ▼ significant regression (p < {alpha:g} and a change of at least {min_effect:.0%}), "
    "≈ no significant change, ? too few successful runs to test"
)


def percent(ratio: float | None) -> str:
    """A ratio as a signed change: ``1.223`` → ``+22.3%``; None → not measured."""
    return NOT_MEASURED if ratio is None else f"{(ratio - 1.0) * 100:+.1f}%"


def delta(change: float | None, digits: int = 2) -> str:
    """A relative change as a signed percentage: ``0.0123`` → ``+1.23%``; None → not measured."""
    return NOT_MEASURED if change is None else f"{change:+.{digits}%}"


def fraction(value: float | None, digits: int = 1) -> str:
    """A share as a percentage: ``0.412`` → ``41.2%``; None → not measured."""
    return NOT_MEASURED if value is None else f"{value * 100:.{digits}f}%"


def number(value: float | None) -> str:
    """A metric value with sensible precision: ``13,521``, ``512.3``, ``0.5463``; None → not measured."""
    if value is None:
        return NOT_MEASURED
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.4g}"


def memory(value: float | None) -> str:
    """Bytes as GB (10^9); None → not measured (CPU runs report no peak memory)."""
    return NOT_MEASURED if value is None else f"{value / 1e9:.2f} GB"


def duration(seconds: float) -> str:
    """``5400`` → ``1.50 h``, ``95`` → ``1.6 min``, ``12`` → ``12.0 s``."""
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def effect(comparison: Comparison | None, bold: bool = True) -> str:
    """An effect with its significance mark: ``**+22.0%** ▲``, ``+0.4% ≈``."""
    if comparison is None or comparison.ratio is None:
        return NOT_MEASURED
    text = percent(comparison.ratio)
    if bold and comparison.significant:
        text = f"**{text}**"
    return f"{text} {MARKS[comparison.verdict]}"


def effect_evidence(comparison: Comparison | None) -> str:
    """An effect with its interval, p-value and verdict: ``-48.2% [-52.0%, -44.1%], p=0.0003 (regression)``.
    Without an interval (too few runs) only the change and the verdict."""
    if comparison is None or comparison.ratio is None:
        return NOT_MEASURED
    text = percent(comparison.ratio)
    if comparison.ci is None:
        return f"{text} ({comparison.verdict})"
    low, high = comparison.ci
    return f"{text} [{percent(low)}, {percent(high)}], p={comparison.p_value:.2g} ({comparison.verdict})"


def median_with_ci(measured: Measurement | None, confidence: float) -> str:
    """``1,352 [1,340 – 1,366]``; the interval's real coverage is named when few repeats cannot reach
    ``confidence``."""
    if measured is None or measured.median is None:
        return NOT_MEASURED
    text = number(measured.median)
    if measured.ci:
        low, high = measured.ci
        text += f" [{number(low)} – {number(high)}]"
        level = measured.ci_level
        if level is not None and level < confidence - 1e-9:
            text += f" ({level:.0%} CI)"
    return text


def short(sha: str | None) -> str:
    """The 7-character short sha."""
    return (sha or "")[:7]


def commit_link(sha: str, commit_url: str | None) -> str:
    """A short sha in backticks, linked when the tracker gives a commit URL prefix."""
    return f"[`{short(sha)}`]({commit_url}{sha})" if commit_url else f"`{short(sha)}`"


def clip(text: str, limit: int) -> str:
    """``text`` with its whitespace folded, cut to ``limit`` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
