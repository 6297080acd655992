"""Reading measured numbers out of a bench results file, and writing them as text for comments.

Everything here takes a :class:`benchmarks.results.Results` and never invents a number: a value the run did
not measure comes back as ``None`` and is written as :data:`NOT_MEASURED`.
"""

from __future__ import annotations

import re
from typing import Any

from benchmarks.results import Results
from benchmarks.stats import INSUFFICIENT, NO_CHANGE, REGRESSION, WIN

NOT_MEASURED = "not measured"
MARKS = {WIN: "▲", REGRESSION: "▼", NO_CHANGE: "≈", INSUFFICIENT: "?"}
LEGEND = (
    "▲ significant win, ▼ significant regression (p < {alpha:g} and a change of at least {min_effect:.0%}), "
    "≈ no significant change, ? too few successful runs to test"
)


def head(results: Results) -> str:
    """The last measured commit (the branch head the results speak for)."""
    return results.commits[-1].sha


def entry(results: Results, workload: str, sha: str) -> dict[str, Any] | None:
    """The summary of one workload at one commit, or None when that commit was not benchmarked."""
    return results.summary.get(workload, {}).get("commits", {}).get(sha)


def higher_is_better(results: Results, workload: str) -> bool:
    """Whether a larger primary metric is better for ``workload``."""
    return bool(results.summary[workload]["higher_is_better"])


def primary(results: Results, workload: str) -> str:
    """The metric a win or a regression of ``workload`` is judged on."""
    return str(results.summary[workload]["primary"])


def gain(ratio: float, better_when_higher: bool) -> float:
    """The improvement a ratio candidate/reference stands for: +0.25 is 25% better, whichever the direction."""
    return ratio - 1.0 if better_when_higher else 1.0 / ratio - 1.0


def matching_workloads(results: Results, name: str | None) -> list[str]:
    """Workloads a plan names (``sft`` matches ``sft`` and ``sft_lora``); every workload for no name."""
    if name is None:
        return list(results.summary)
    wanted = name.lower()
    exact = [w for w in results.summary if w.lower() == wanted]
    return exact or [w for w in results.summary if wanted in re.split(r"[^a-z0-9]+", w.lower())]


def loss_tolerance(results: Results, plan_tolerance: float | None) -> float:
    """The plan's loss tolerance when it states one, else the one the statistics used."""
    return plan_tolerance if plan_tolerance is not None else float(results.thresholds["loss_tolerance"])


def runs_of(results: Results, workload: str, sha: str) -> list:
    """Every run (successful or not) of ``workload`` at ``sha``."""
    return [r for r in results.runs if r.workload == workload and r.commit == sha]


# --- text -------------------------------------------------------------------------------------------------


def percent(ratio: float | None) -> str:
    """``1.223`` → ``+22.3%``; None → not measured."""
    return NOT_MEASURED if ratio is None else f"{(ratio - 1.0) * 100:+.1f}%"


def fraction(value: float | None, digits: int = 1) -> str:
    """``0.412`` → ``41.2%``; None → not measured."""
    return NOT_MEASURED if value is None else f"{value * 100:.{digits}f}%"


def number(value: float | None) -> str:
    """A metric value with sensible precision: ``13,521``, ``512.3``, ``0.5463``."""
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


def effect(comparison: dict[str, Any] | None, bold: bool = True) -> str:
    """A marginal or cumulative effect with its significance mark: ``**+22.0%** ▲``, ``+0.4% ≈``."""
    if comparison is None or comparison.get("ratio") is None:
        return NOT_MEASURED
    text = percent(comparison["ratio"])
    verdict = comparison["verdict"]
    if bold and verdict in (WIN, REGRESSION):
        text = f"**{text}**"
    return f"{text} {MARKS[verdict]}"


def effect_evidence(comparison: dict[str, Any] | None) -> str:
    """An effect with its interval and p-value, for findings: ``−48.2% [−52.0%, −44.1%], p=0.0003``."""
    if comparison is None or comparison.get("ratio") is None:
        return NOT_MEASURED
    text = percent(comparison["ratio"])
    if comparison.get("ci") is None:
        return f"{text} ({comparison['verdict']})"
    low, high = comparison["ci"]
    return (
        f"{text} [{percent(low)}, {percent(high)}], p={comparison['p_value']:.2g} ({comparison['verdict']})"
    )


def median_with_ci(item: dict[str, Any], confidence: float) -> str:
    """``1,352 [1,340 – 1,366]``; the interval's real coverage is named when few repeats cannot reach 95%."""
    if item.get("median") is None:
        return NOT_MEASURED
    text = number(item["median"])
    if item.get("ci"):
        low, high = item["ci"]
        text += f" [{number(low)} – {number(high)}]"
        level = item.get("ci_level")
        if level is not None and level < confidence - 1e-9:
            text += f" ({level:.0%} CI)"
    return text


def short(sha: str | None) -> str:
    """The 7-character short sha."""
    return (sha or "")[:7]


def commit_link(sha: str, commit_url: str | None) -> str:
    """A short sha, linked when the tracker gives a commit URL prefix."""
    return f"[`{short(sha)}`]({commit_url}{sha})" if commit_url else f"`{short(sha)}`"


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
