"""The plan's success criteria against the measured numbers (throughput, loss, stability) and the plan
adherence ("all changes applied"); with the findings they make."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from benchmarks.results import Results
from benchmarks.stats import WIN
from bot import losses, measurements
from bot.formatting import NOT_MEASURED, effect_evidence
from bot.plan import APPLIED, LOSS, MANUAL, STABILITY, THROUGHPUT, Criterion, Plan
from bot.review.verdict import (
    BEHAVIOURAL,
    BEHAVIOURAL_CHANGED,
    BY_HAND,
    MAJOR,
    MET,
    MINOR,
    NOT_MET,
    UNMEASURED,
    Adherence,
    CriterionCheck,
    Finding,
)
from bot.status import ItemStatus


def check_criteria(
    plan: Plan | None, results: Results | None, adherence: Sequence[Adherence] = (), tier: int | None = None
) -> list[CriterionCheck]:
    """Each success criterion of the plan for ``tier`` (every one without) against the head of ``results``
    (the re-measured head if any) and, for "all changes applied", against the plan adherence."""
    checks = []
    for criterion in plan.criteria if plan else []:
        if tier is not None and criterion.tier not in (None, tier):
            continue
        target = _target(criterion)
        if criterion.kind == MANUAL:
            checks.append(CriterionCheck(criterion.text, criterion.kind, target, "—", BY_HAND))
        elif criterion.kind == APPLIED:
            observed, status = _applied(adherence)
            checks.append(CriterionCheck(criterion.text, criterion.kind, target, observed, status))
        elif results is None:
            checks.append(
                CriterionCheck(criterion.text, criterion.kind, target, "no benchmark results", UNMEASURED)
            )
        else:
            check = {THROUGHPUT: _throughput, LOSS: _loss, STABILITY: _stability}[criterion.kind]
            observed, status = check(criterion, results)
            checks.append(CriterionCheck(criterion.text, criterion.kind, target, observed, status))
    return checks


def _target(criterion: Criterion) -> str:
    match criterion.kind:
        case "throughput":
            return f"{criterion.workload or 'every workload'} throughput ≥ +{criterion.threshold:.0%} vs baseline"
        case "loss":
            return (
                f"loss within ±{criterion.threshold:.0%} of baseline at equal steps and equal tokens seen (a "
                "dynamics change: no higher where it is not expected to move)"
            )
        case "stability":
            return "no crashed, OOM or timed-out benchmark run"
        case "applied":
            return "every auto-apply item of the tier landed"
    return "not machine-checkable"


def _applied(adherence: Sequence[Adherence]) -> tuple[str, str]:
    # Kept on purpose: nothing left to apply, as for an item already done.
    done = {
        ItemStatus.LANDED.label,
        ItemStatus.RESUMED.label,
        ItemStatus.ALREADY.label,
        ItemStatus.KEPT.label,
    }
    items = [a for a in adherence if a.status not in (BEHAVIOURAL, BEHAVIOURAL_CHANGED)]
    if not items:
        return "no plan items to check", UNMEASURED
    missing = [f"{a.key}: {a.status}" for a in items if a.status not in done]
    already = sum(a.status == ItemStatus.ALREADY.label for a in items)
    also = f" ({already} already done before)" if already else ""
    if missing:
        return f"{len(items) - len(missing)} of {len(items)} landed{also} ({'; '.join(missing)})", NOT_MET
    return f"all {len(items)} landed{also}", MET


def _stability(criterion: Criterion, results: Results) -> tuple[str, str]:
    failed = results.failed_runs
    if not results.runs:
        return "no benchmark runs", UNMEASURED
    if failed:
        kinds = ", ".join(f"{n} {status}" for status, n in sorted(Counter(r.status for r in failed).items()))
        return f"{len(failed)} of {len(results.runs)} runs failed ({kinds})", NOT_MET
    return f"all {len(results.runs)} runs finished", MET


def _throughput(criterion: Criterion, results: Results) -> tuple[str, str]:
    assert criterion.threshold is not None  # a throughput criterion is parsed from its percentage
    names = measurements.matching_workloads(results, criterion.workload)
    if not names:
        return f"no workload named {criterion.workload!r} was benchmarked", UNMEASURED
    parts, statuses = [], []
    for workload in names:
        measured = measurements.measurement(results, workload, measurements.head(results))
        cumulative = measured.cumulative if measured else None
        metric = measurements.primary(results, workload)
        if cumulative is None or cumulative.ratio is None:
            parts.append(f"{workload} {metric}: {NOT_MEASURED}")
            statuses.append(UNMEASURED)
            continue
        gained = measurements.gain(cumulative.ratio, measurements.higher_is_better(results, workload))
        met = gained >= criterion.threshold - 1e-12 and cumulative.verdict == WIN
        statuses.append(MET if met else NOT_MET)
        parts.append(f"{workload} {metric} {effect_evidence(cumulative)}")
    status = UNMEASURED if UNMEASURED in statuses else NOT_MET if NOT_MET in statuses else MET
    return "; ".join(parts), status


def _loss(criterion: Criterion, results: Results) -> tuple[str, str]:
    assert criterion.threshold is not None  # a loss criterion is parsed from its percentage
    parts, statuses = [], []
    for workload in measurements.workloads(results):
        reading = losses.read(results, workload, measurements.head(results), criterion.threshold + 1e-12)
        if reading is None or reading.at_steps is None and reading.at_tokens is None:
            parts.append(f"{workload}: {NOT_MEASURED}")
            continue
        statuses.append(NOT_MET if reading.outside else MET)
        expected = (
            f" ({reading.expected}: expected, {'; '.join(reading.dynamics)})" if reading.expected else ""
        )
        parts.append(f"{workload} {reading.cell(criterion.threshold)}{expected}")
    status = UNMEASURED if not statuses else NOT_MET if NOT_MET in statuses else MET
    return "; ".join(parts), status


def criteria_findings(checks: list[CriterionCheck]) -> list[Finding]:
    """A concern per criterion not met or not measured; a minor finding per one to check by hand."""
    findings = []
    for check in checks:
        if check.status == NOT_MET:
            findings.append(
                Finding(
                    MAJOR,
                    "criterion",
                    f"Success criterion not met: {check.text}",
                    (f"target: {check.target}", f"observed: {check.observed}"),
                    "See the attribution table for which change fell short; re-measure at a realistic size or "
                    "move the target to a later tier in the plan",
                )
            )
        elif check.status == BY_HAND:
            findings.append(
                Finding(
                    MINOR,
                    "criterion",
                    f"Success criterion to check by hand: {check.text}",
                    (check.text,),
                    "The bot cannot measure this one; check it and say so on the issue",
                )
            )
        elif check.status == UNMEASURED:
            findings.append(
                Finding(
                    MAJOR,
                    "criterion",
                    f"Success criterion not measured: {check.text}",
                    (f"target: {check.target}", f"observed: {check.observed}"),
                    "Benchmark the workload the criterion names (`bot bench`), then review again",
                )
            )
    return findings
