"""``bot report``'s page: one self-contained HTML file (inline CSS and SVG, no script, no URL) drawn from a
bench record: per workload, the primary metric's median per commit with its interval, the loss curves of the
baseline and every commit at equal optimizer steps, and where a step's time goes by phase (data wait, forward,
backward, optimizer: the meter's medians, :mod:`benchmarks.steps`); and each change's numerics contract, from
the optimization its ``Bot-Optimization:`` trailer names. Only recorded numbers are drawn; what the record
lacks is said in words beside the chart it would be in."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from markupsafe import Markup

from benchmarks.results import Results
from benchmarks.stats import STEPS, loss_positions
from benchmarks.steps import PHASES
from bot import formatting, measurements
from bot.comments.charts import commit_label
from bot.measurements import measurement
from bot.render import render
from bot.svg import Bar, Series, Stack, bar_chart, line_chart, stacked_bars
from optimizations.registry import listings

PHASE_NAMES = {
    "data_wait": "data wait",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
}


@dataclass(frozen=True)
class Figure:
    """One chart (None when the record has nothing to draw) and, a line each, what the record lacks for it and
    what to keep in mind reading it."""

    svg: Markup | None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WorkloadSection:
    """What the page shows of one workload."""

    name: str
    metric: str
    direction: str
    command: str
    throughput: Figure
    losses: Figure
    phases: Figure


@dataclass(frozen=True)
class Change:
    """One measured commit and the numerics contract of the optimization it applies."""

    label: str
    sha: str
    subject: str
    optimization: str
    numerics: str
    reason: str


def _labels(results: Results) -> dict[str, str]:
    return {info.sha: commit_label(info, index == 0) for index, info in enumerate(results.commits)}


def throughput_figure(results: Results, workload: str) -> Figure:
    """The primary metric's median per measured commit, baseline first, with its interval (and its coverage
    where too few runs reach the confidence asked)."""
    metric = measurements.primary(results, workload)
    confidence = float(results.thresholds["confidence"])
    bars, notes = [], []
    for info, label in zip(results.commits, _labels(results).values(), strict=True):
        measured = measurement(results, workload, info.sha)
        if measured is None or measured.median is None:
            notes.append(f"{label}: no successful run measured {metric}")
            continue
        low, high = measured.ci if measured.ci else (None, None)
        bars.append(Bar(label, measured.median, low, high))
        level = measured.ci_level
        if measured.ci and level is not None and level < confidence - 1e-9:
            notes.append(
                f"{label}: the interval of {measured.n} run(s) covers {level:.0%}, short of {confidence:.0%}"
            )
    return Figure(bar_chart(bars, y_label=metric) if bars else None, notes)


def loss_curve(results: Results, workload: str, sha: str) -> list[tuple[float, float]]:
    """The loss of ``workload`` at ``sha`` by optimizer steps taken: at each step, the median over the commit's
    successful runs that logged a loss there (:func:`benchmarks.stats.loss_positions`)."""
    at_step: dict[float, list[float]] = {}
    for run in measurements.runs_of(results, workload, sha):
        if run.ok:
            for step, loss in loss_positions((run.metrics or {}).get("loss") or [], STEPS):
                at_step.setdefault(step, []).append(loss)
    return [(step, statistics.median(values)) for step, values in sorted(at_step.items())]


def loss_figure(results: Results, workload: str) -> Figure:
    """The loss curves of the baseline and every commit, at equal optimizer steps."""
    series, notes = [], []
    for info, label in zip(results.commits, _labels(results).values(), strict=True):
        curve = loss_curve(results, workload, info.sha)
        if curve:
            series.append(Series(label, curve))
        else:
            notes.append(f"{label}: no run logged a loss")
    if not series:
        return Figure(None, notes)
    return Figure(line_chart(series, x_label="optimizer steps taken", y_label="loss"), notes)


def phase_figure(results: Results, workload: str) -> Figure:
    """Each commit's median time per phase of a measured step, in ms."""
    stacks, notes = [], []
    for info, label in zip(results.commits, _labels(results).values(), strict=True):
        measured = measurement(results, workload, info.sha)
        phases = (measured.metrics.get("phases") or {}) if measured else {}
        times = [(phases.get(phase) or {}).get("median_ms") for phase in PHASES]
        if all(time is None for time in times):
            notes.append(f"{label}: no step phases recorded")
            continue
        stacks.append(Stack(label, times))
        left_out = [PHASE_NAMES[phase] for phase, time in zip(PHASES, times, strict=True) if time is None]
        if left_out:
            notes.append(f"{label}: {', '.join(left_out)} not recorded")
    if not stacks:
        return Figure(None, notes)
    return Figure(stacked_bars(stacks, parts=list(PHASE_NAMES.values()), unit="ms"), notes)


def changes(results: Results) -> list[Change]:
    """Each measured commit after the baseline with the numerics contract of the optimization its trailer
    names, as this perfbot's registry declares it."""
    known = {listing.id: listing for listing in listings()}
    found = []
    labels = _labels(results)
    for info in results.commits[1:]:
        listing = known.get(info.optimization or "")
        if listing is not None:
            numerics, reason = listing.numerics.value, listing.numerics_reason or listing.numerics.meaning
        elif info.optimization:
            numerics, reason = "unknown", f"{info.optimization} is not registered in this perfbot"
        else:
            numerics, reason = "unknown", "no Bot-Optimization trailer"
        found.append(
            Change(labels[info.sha], info.sha, info.subject, info.optimization or "—", numerics, reason)
        )
    return found


def workload_sections(results: Results) -> list[WorkloadSection]:
    """One section per workload of the record."""
    return [
        WorkloadSection(
            name=name,
            metric=measurements.primary(results, name),
            direction=measurements.direction(results, name),
            command=str(results.workloads.get(name, {}).get("command", "")),
            throughput=throughput_figure(results, name),
            losses=loss_figure(results, name),
            phases=phase_figure(results, name),
        )
        for name in measurements.workloads(results)
    ]


def report_page(results: Results, *, source: str) -> str:
    """The page for ``results``, read from ``source`` (named on the page)."""
    return render(
        "report.html.j2",
        results=results,
        source=source,
        baseline=formatting.short(results.baseline),
        head=formatting.short(measurements.head(results)),
        measured=len(results.commits),
        workloads=workload_sections(results),
        changes=changes(results),
        confidence=float(results.thresholds["confidence"]),
    )
