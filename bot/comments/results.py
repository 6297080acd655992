"""The ``<!-- bot:results v1 -->`` comment: environment, one table and chart per workload, per-change
attribution, dropped regressions and failed runs, every number from a :class:`benchmarks.results.Results`."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from benchmarks.results import BUDGET, INTERRUPTED, MAX_REPEATS, PRECISE, UNMEASURABLE, CommitInfo, Results
from bot import formatting, losses, measurements
from bot.claims import ClaimCheck
from bot.comments.charts import MermaidChart, throughput_chart
from bot.comments.markdown import COMPACT, FOLDED, FULL, Table, cell, code_fence, fit
from bot.formatting import NOT_MEASURED
from bot.measurements import Measurement, measurement
from bot.plan import Plan
from bot.progress import Progress
from bot.redact import redact
from bot.regressions import DropOutcome
from bot.render import render
from bot.status import ItemStatus
from bot.trackers.base import RESULTS

LOG_TAIL_LINES = 20
_METRIC_NAMES = {"tokens_per_s": "tokens/s", "samples_per_s": "samples/s"}


def _commit_label(info: CommitInfo, commit_url: str | None) -> str:
    keys = ", ".join(info.plan_items)
    return formatting.commit_link(info.sha, commit_url) + (f" · {cell(keys)}" if keys else "")


def _environment(results: Results) -> list[tuple[str, str]]:
    values: dict[str, list[str]] = {}
    for run in results.runs:
        for key, value in ((run.metrics or {}).get("env") or {}).items():
            if value is not None and str(value) not in values.setdefault(key, []):
                values[key].append(str(value))

    def named(key: str) -> str:
        return " / ".join(values.get(key, [])) or "not recorded"

    libraries = ", ".join(
        f"{name} {' / '.join(values[name])}"
        for name in ("torch", "transformers", "trl", "peft", "accelerate")
        if values.get(name)
    )
    total = sum(run.duration_s for run in results.runs)
    failed = len(results.failed_runs)
    on_gpu = bool(values.get("gpu"))
    spent = (
        f"{formatting.duration(total)} ({len(results.runs)} runs"
        + (f", {failed} failed" if failed else "")
        + ")"
    )
    return [
        (
            "GPU",
            f"{named('gpu')} (driver {named('driver')}, CUDA {named('cuda')})"
            if on_gpu
            else "none: CPU runs",
        ),
        ("Host", named("host")),
        ("Libraries", (libraries or "not recorded") + f"; Python {named('python')}"),
        (
            "Baseline → head",
            f"`{formatting.short(results.baseline)}` → `{formatting.short(measurements.head(results))}`"
            f" ({len(results.commits) - 1} commits measured)",
        ),
        ("GPU time spent" if on_gpu else "Compute time spent (CPU)", f"{spent}; sum of run durations"),
        ("Size, seed", f"`{results.size}`, seed {results.seed}"),
        ("When", f"{results.started_at} → {results.finished_at}"),
    ]


def _runs_cell(results: Results, workload: str, sha: str, measured: Measurement | None) -> str:
    runs = measurements.runs_of(results, workload, sha)
    if not runs:
        return "no runs"
    ok = sum(run.ok for run in runs)
    parts = [f"{ok} ok"]
    if measured is not None:
        parts += [f"{count} {status}" for status, count in measured.failed.items()]
        if measured.missing_primary:
            parts.append(f"{measured.missing_primary} without the metric")
    return ", ".join(parts)


def _memory_cell(measured: Measurement | None, is_baseline: bool) -> str:
    peak = measured.memory if measured else None
    if peak is None or peak.peak_bytes is None:
        return NOT_MEASURED
    text = formatting.memory(peak.peak_bytes)
    if not is_baseline and peak.vs_baseline is not None:
        text += f" ({formatting.percent(peak.vs_baseline)}"
        text += " ⚠)" if peak.regression or peak.cumulative_regression else ")"
    return text


def _loss_cell(results: Results, workload: str, sha: str, is_baseline: bool, tolerance: float) -> str:
    measured = measurement(results, workload, sha)
    if is_baseline:
        return "reference" if measured is not None and measured.median is not None else NOT_MEASURED
    reading = losses.read(results, workload, sha, tolerance)
    if reading is None or reading.at_steps is None and reading.at_tokens is None:
        return NOT_MEASURED
    return cell(reading.cell(tolerance))


def _significant(measured: Measurement | None) -> bool:
    return measured is not None and measured.marginal is not None and measured.marginal.significant


def _notable(measured: Measurement | None) -> bool:
    """A row compact tables keep: a significant effect, a failure, or a flag."""
    if measured is None:
        return True
    return (
        any(e is not None and e.significant for e in (measured.marginal, measured.cumulative))
        or bool(measured.failed)
        or measured.memory.regression
        or measured.median is None
    )


def workload_table(
    results: Results,
    workload: str,
    *,
    tolerance: float,
    reverted: dict[str, str],
    commit_url: str | None,
    compact: bool,
) -> Table:
    """Baseline vs every commit for one workload."""
    metric = measurements.primary(results, workload)
    extra = [m for m in ("tokens_per_s", "samples_per_s") if m != metric]
    table = Table(
        ["Commit", "Change", f"{cell(metric)} median [CI]", "CV", "vs previous", "vs baseline"]
        + [_METRIC_NAMES[m] for m in extra]
        + ["peak memory", "loss vs baseline (equal steps · equal tokens)", "MFU", "runs"]
    )
    confidence = float(results.thresholds["confidence"])
    last = len(results.commits) - 1
    for index, info in enumerate(results.commits):
        measured = measurement(results, workload, info.sha)
        if compact and 0 < index < last and not _notable(measured):
            table.omitted += 1
            continue
        change = "baseline" if index == 0 else formatting.clip(info.subject, 60)  # the first one measured
        if info.sha in reverted:
            change += f" (reverted in {formatting.short(reverted[info.sha])})"
        reported = measured.metrics if measured else {}
        table.add(
            _commit_label(info, commit_url),
            cell(change),
            formatting.median_with_ci(measured, confidence),
            formatting.fraction(measured.cv if measured else None),
            "—" if index == 0 else formatting.effect(measured.marginal if measured else None),
            "—" if index == 0 else formatting.effect(measured.cumulative if measured else None),
            *(formatting.number(reported.get(m)) for m in extra),
            _memory_cell(measured, index == 0),
            _loss_cell(results, workload, info.sha, index == 0, tolerance),
            formatting.fraction(reported.get("mfu")),
            _runs_cell(results, workload, info.sha, measured),
        )
    return table


def measurement_setup(results: Results, workload: str) -> str:
    """How the workload was measured: steps and their calibration, rounds and why they stopped, runs left out."""
    spec = results.workloads.get(workload, {})
    calibrated = results.calibration.get(workload, {})
    stop = results.stopping.get(workload, {})
    text = f"{spec.get('steps', '?')} steps ({spec.get('warmup_steps', '?')} warm-up excluded"
    if calibrated.get("note"):
        text += f"; calibrated: {calibrated['note']}"
    if calibrated.get("window_s") is not None:
        text += f"; median measured window {formatting.duration(calibrated['window_s'])}"
    text += _run_time(results, workload)
    rounds = stop.get("rounds", spec.get("repeats", "?"))
    text += f"), {rounds} rounds per commit in ABBA order"
    resolve = results.thresholds.get("resolve")
    precise = (
        f"narrow enough to detect {resolve:.0%}"
        if resolve
        else f"within ±{results.thresholds['min_effect']:.0%}"
    )
    reason = stop.get("reason")
    if reason == PRECISE:
        text += f"; stopped with every interval {precise}"
    elif reason == BUDGET:
        text += f"; stopped when the time budget ({formatting.duration(stop['budget_s'])}) ran out"
    elif reason == MAX_REPEATS:
        text += f"; stopped at the most rounds allowed ({spec.get('max_repeats', rounds)})"
    elif reason == UNMEASURABLE:
        text += "; stopped: no two commits both measured, so no effect to narrow"
    elif reason == INTERRUPTED:
        text += "; interrupted (Ctrl-C or SIGTERM): only the runs that finished before it count"
    if reason in (BUDGET, MAX_REPEATS) and stop.get("imprecise"):
        text += f", {len(stop['imprecise'])} interval(s) not yet {precise}"
    measured = [measurement(results, workload, info.sha) for info in results.commits]
    disturbed = sum(m.disturbed for m in measured if m is not None)
    if disturbed:
        text += (
            f"; {disturbed} run(s) left out: other processes kept more than "
            f"{results.thresholds.get('max_host_load', 0):.0%} of the host's CPUs busy"
        )
    return text


def _run_time(results: Results, workload: str) -> str:
    """``; a run lasted 2.2 min: start-up 41.0 s, warm-up 24.3 s, waiting for turns 48.0 s`` (medians over the
    workload's successful runs that report a timeline, :mod:`benchmarks.timeline`), or nothing."""
    runs = [
        run
        for run in results.runs
        if run.workload == workload and run.ok and isinstance((run.metrics or {}).get("timeline"), dict)
    ]
    if not runs:
        return ""
    text = f"; a run lasted {formatting.duration(statistics.median(run.duration_s for run in runs))}"
    parts = []
    for key, label in (
        ("start_up_s", "start-up"),
        ("warm_up_s", "warm-up"),
        ("waiting_s", "waiting for turns"),
    ):
        values = [(run.metrics or {})["timeline"].get(key) for run in runs]
        values = [value for value in values if isinstance(value, int | float)]
        if values and statistics.median(values) > 0:
            parts.append(f"{label} {formatting.duration(statistics.median(values))}")
    return text + (f": {', '.join(parts)}" if parts else "")


def headline(results: Results, workload: str) -> str:
    """``baseline 1,352 → head 1,650 (+22.0% [+18.1%, +26.0%], p=0.002 (win) ▲)``."""
    base = measurement(results, workload, results.baseline)
    last = measurement(results, workload, measurements.head(results))
    text = (
        f"baseline {formatting.number(base.median if base else None)} → "
        f"head {formatting.number(last.median if last else None)}"
    )
    cumulative = last.cumulative if last else None
    if cumulative is not None:
        text += f" ({formatting.effect_evidence(cumulative)} {formatting.MARKS[cumulative.verdict]})"
    return text


@dataclass
class WorkloadView:
    """What the results comment shows for one workload."""

    name: str
    metric: str
    direction: str
    setup: str
    command: str
    headline: str
    table: Table
    chart: MermaidChart


def workload_views(
    results: Results,
    *,
    tolerance: float,
    reverted: dict[str, str],
    commit_url: str | None,
    compact: bool,
    intervals: bool = True,
) -> list[WorkloadView]:
    """One view per workload of ``results``; ``intervals`` draws the interval lines in the charts."""
    views = []
    for name in measurements.workloads(results):
        spec = results.workloads.get(name, {})
        views.append(
            WorkloadView(
                name=name,
                metric=measurements.primary(results, name),
                direction=measurements.direction(results, name),
                setup=measurement_setup(results, name),
                command=str(spec.get("command", "")),
                headline=headline(results, name),
                table=workload_table(
                    results,
                    name,
                    tolerance=tolerance,
                    reverted=reverted,
                    commit_url=commit_url,
                    compact=compact,
                ),
                chart=throughput_chart(results, name, intervals=intervals),
            )
        )
    return views


def measured_win(results: Results | None, sha: str, reverted: dict[str, str]) -> str:
    """Each workload's marginal effect of ``sha`` (a table cell), or not measured."""
    shas = [info.sha for info in results.commits] if results else []
    if results is None or not sha or sha not in shas:
        return NOT_MEASURED
    parts = []
    for workload in measurements.workloads(results):
        measured = measurement(results, workload, sha)
        parts.append(f"{workload} {formatting.effect(measured.marginal if measured else None, bold=False)}")
    previous = shas[shas.index(sha) - 1]
    after_revert = " (against a commit since reverted)" if previous in reverted else ""
    return cell("; ".join(parts) + after_revert)


def _flags(results: Results | None, sha: str, tolerance: float) -> list[str]:
    flags: list[str] = []
    if results is None:
        return flags
    for workload in measurements.workloads(results):
        measured = measurement(results, workload, sha)
        if measured is None:
            continue
        if measured.memory.regression:
            flags.append(
                f"{workload} peak memory {formatting.percent(measured.memory.vs_previous)} vs previous"
            )
        reading = losses.read(results, workload, sha, tolerance)
        if reading and reading.outside:
            flags.append(
                f"{workload} loss {reading.cell(tolerance)} vs baseline (tolerance ±{tolerance:.0%})"
            )
    return flags


def attribution(
    results: Results | None,
    plan: Plan | None,
    progress: Progress | None,
    reverted: dict[str, str],
    tolerance: float,
    commit_url: str | None,
    compact: bool = False,
    claims: dict[str, ClaimCheck] | None = None,
) -> Table:
    """One row per change: applied?, measured marginal effect per workload, the win its commit claims and how
    that claim stands, and a note. ``compact`` leaves out landed changes with no significant effect, no claim
    and nothing flagged."""
    claims = claims or {}
    table = Table(["Change", "Applied", "Measured win (vs previous commit)", "Claimed", "Note"])
    expected = {item.key: item.expected for item in plan.items} if plan else {}
    if progress is not None:
        entries = [
            (row.keys, row.change, ItemStatus(row.status), row.commit, row.note) for row in progress.rows
        ]
    else:
        entries = [
            (info.plan_items, info.optimization or info.subject, ItemStatus.LANDED, info.sha, "")
            for info in (results.commits[1:] if results else [])
        ]
    for keys, change, status, sha, note in entries:
        if sha in reverted or status is ItemStatus.REVERTED:
            applied = ItemStatus.REVERTED.label + (
                f" in {formatting.commit_link(reverted[sha], commit_url)}" if sha in reverted else ""
            )
        else:
            applied = status.label
            if sha and status.landed:
                applied += f" {formatting.commit_link(sha, commit_url)}"
        flags = _flags(results, sha, tolerance) if sha else []
        significant = results is not None and any(
            _significant(measurement(results, workload, sha)) for workload in measurements.workloads(results)
        )
        claim = claims.get(sha) if sha else None
        if compact and status.landed and not flags and not significant and claim is None:
            table.omitted += 1
            continue
        notes = [] if claim else [f"{k} expected {expected[k]}" for k in keys if expected.get(k)]
        notes += flags
        if note:
            notes.append(note)
        heading = f"**{', '.join(keys)}** {change}" if keys else change
        table.add(
            cell(formatting.clip(heading, 90)),
            applied,
            measured_win(results, sha, reverted),
            cell(f"{formatting.clip(claim.claim, 60)}: {claim.status}") if claim else "—",
            cell(formatting.clip("; ".join(notes), 240)) or "—",
        )
    return table


def failed_runs(results: Results) -> list[dict[str, str]]:
    """The failed runs with their (redacted) log tails."""
    shown = []
    for run in results.failed_runs:
        tail = "\n".join(redact(run.log_tail).splitlines()[-LOG_TAIL_LINES:]) or "(no output)"
        shown.append(
            {
                "commit": formatting.short(run.commit),
                "workload": run.workload,
                "repeat": str(run.repeat),
                "status": run.status,
                "duration": formatting.duration(run.duration_s),
                "tail": tail,
                "fence": code_fence(tail),
            }
        )
    return shown


def profile_line(entry: dict) -> str:
    """One line for a ``bot bench --profile`` entry: the bound, how busy the device was, launches and the top op."""
    if "error" in entry:
        return f"not profiled: {formatting.clip(entry['error'], 160)}"
    busy = entry.get("device_busy_fraction")
    busy_text = "no device" if busy is None else f"device busy {busy:.0%}"
    top = entry.get("top_ops") or []
    top_text = f"; top op {formatting.clip(top[0]['name'], 60)}" if top else ""
    return (
        f"{entry['bound']}-bound, {busy_text} of {_step_text(entry)}, "
        f"{entry['launches_per_step']:.0f} launches/step{top_text}"
    )


def _step_text(entry: dict) -> str:
    """The step a busy fraction is of: the measured (unprofiled) step where the bench had one."""
    if "measured_step_ms" not in entry:
        return f"a {entry['step_ms']:.1f} ms step"
    profiled = entry["device_busy_fraction_profiled"]
    return (
        f"the measured {entry['measured_step_ms']:.1f} ms step ({profiled:.0%} of the "
        f"{entry['step_ms']:.1f} ms step under the profiler)"
    )


def profiles_table(results: Results, commit_url: str | None) -> Table | None:
    """Where each commit's step time goes (``bot bench --profile``); None when nothing was profiled."""
    if not results.profiles:
        return None
    table = Table(["Commit", "Workload", "Bound", "Device busy", "Step", "Launches/step", "Top op"])
    for info in results.commits:
        for workload, entry in results.profiles.get(info.sha, {}).items():
            link = _commit_label(info, commit_url)
            if "error" in entry:
                table.add(
                    link,
                    f"`{workload}`",
                    "not profiled",
                    "",
                    "",
                    "",
                    cell(formatting.clip(entry["error"], 120)),
                )
                continue
            busy = entry.get("device_busy_fraction")
            top = entry.get("top_ops") or []
            table.add(
                link,
                f"`{workload}`",
                f"**{entry['bound']}**",
                "n/a (no device)" if busy is None else f"{busy:.0%}",
                f"{entry.get('measured_step_ms', entry['step_ms']):.1f} ms",
                f"{entry['launches_per_step']:.0f}",
                cell(formatting.clip(top[0]["name"], 60)) if top else "",
            )
    return table


def render_results(
    results: Results,
    *,
    plan: Plan | None = None,
    progress: Progress | None = None,
    drop: DropOutcome | None = None,
    reverted: dict[str, str] | None = None,
    commit_url: str | None = None,
    title: str = "",
    results_path: str | None = None,
    claims: list[ClaimCheck] | None = None,
) -> str:
    """The ``<!-- bot:results v1 -->`` comment; ``claims`` (from the verdict) set each commit's claimed win
    against its measurement."""
    reverted = dict(reverted or {}) | (drop.reverted_by if drop else {})
    tolerance = measurements.loss_tolerance(results, plan.loss_tolerance if plan else None)
    thresholds = results.thresholds
    legend = formatting.LEGEND.format(alpha=thresholds["alpha"], min_effect=thresholds["min_effect"])

    # From the most detail down: the markdown level, and whether the charts draw their interval lines (the
    # tables give every interval, so a long comment drops the lines before it folds or compacts its tables).
    ladder = [(FULL, True), (FOLDED, True), (FOLDED, False), (COMPACT, False)]

    def render_at(step: int) -> str:
        level, intervals = ladder[step]
        compact = level >= COMPACT
        remeasured, remeasured_head = [], ""
        if drop and drop.results is not None:
            remeasured = workload_views(
                drop.results, tolerance=tolerance, reverted={}, commit_url=commit_url, compact=False
            )
            remeasured_head = formatting.short(measurements.head(drop.results)) if remeasured else ""
        return render(
            "results.md.j2",
            marker=RESULTS,
            title=title,
            environment=_environment(results),
            workloads=workload_views(
                results,
                tolerance=tolerance,
                reverted=reverted,
                commit_url=commit_url,
                compact=compact,
                intervals=intervals,
            ),
            legend=legend,
            thresholds=thresholds,
            tolerance=tolerance,
            attribution=attribution(
                results,
                plan,
                progress,
                reverted,
                tolerance,
                commit_url,
                compact,
                {check.sha: check for check in claims or []},
            ),
            drop=drop,
            drop_reverted=[
                (
                    formatting.commit_link(r.commit, commit_url),
                    formatting.commit_link(r.revert, commit_url),
                    cell(formatting.clip(r.subject, 80)),
                    r.evidence,
                )
                for r in (drop.reverted if drop else [])
            ],
            drop_kept=[
                (formatting.commit_link(sha, commit_url), reason)
                for sha, reason in (drop.kept if drop else [])
            ],
            remeasured=remeasured,
            remeasured_head=remeasured_head,
            failed=failed_runs(results) if level == FULL else [],
            failed_count=len(results.failed_runs),
            fold_all=level >= FOLDED,
            results_path=results_path,
            profiles=profiles_table(results, commit_url),
        )

    return fit(render_at, len(ladder))
