"""What the benchmark results say of each commit: its claimed win against its measurement (:mod:`bot.claims`),
judged on the workloads whose runs loaded the files it changed; slowdowns, memory growth, loss outside the
tolerance and failed runs."""

from __future__ import annotations

from pathlib import Path

import git

from benchmarks.results import Results
from bot import losses, measurements
from bot.claims import (
    BELOW,
    HELD,
    INCONCLUSIVE,
    NOT_BORNE_OUT,
    NOT_HERE,
    REGRESSED,
    UNCHECKABLE,
    ClaimCheck,
    check_claim,
)
from bot.formatting import clip, memory, percent, short
from bot.regressions import slowdowns
from bot.review.verdict import MAJOR, MINOR, CommitReview, Finding
from bot.workload_files import executed_files, loaded_files, runs_changes


def review_claims(repo: git.Repo, reviews: list[CommitReview], results: Results | None) -> list[ClaimCheck]:
    """Each commit's claim against ``results``, judged only on the workloads whose run loads a file the
    commit changed: as the workload's runs at the commit and at the one measured before it recorded it, else
    as far as its command reaches in the working tree (:mod:`bot.workload_files`)."""
    commands = {
        name: str(workload.get("command", ""))
        for name, workload in (results.workloads if results else {}).items()
    }
    measured = [info.sha for info in results.commits] if results else []
    executed: dict[str, set[str] | None] = {}
    checks = []
    for review in reviews:
        if review.claim is None:
            continue
        running = None
        if results is not None and review.sha in measured:
            index = measured.index(review.sha)
            around = measured[max(index - 1, 0) : index + 1]
            loaded = {name: loaded_files(results, name, around) for name in commands}
            for name, command in commands.items():
                if loaded[name] is None and name not in executed and repo.working_tree_dir:
                    executed[name] = executed_files(Path(repo.working_tree_dir), command) if command else None
            running = runs_changes(commands, review.files, executed, loaded)
        checks.append(check_claim(results, review.sha, review.subject, review.claim, running))
    return checks


def claim_findings(checks: list[ClaimCheck], reverted: dict[str, str]) -> list[Finding]:
    """A concern per claimed win not measured, measured as a regression, or contradicted by its interval; a
    minor finding per claim measured below its number or too noisy to judge, and once the commit is reverted."""
    findings = []
    for check in checks:
        if check.status in (HELD, UNCHECKABLE):
            continue
        minor = (BELOW, INCONCLUSIVE, NOT_HERE)
        severity = MINOR if check.status in minor or check.sha in reverted else MAJOR
        title, fix = _CLAIM_ADVICE.get(check.status, _CLAIM_ADVICE[None])
        findings.append(
            Finding(
                severity,
                "claim",
                f"{title} at `{short(check.sha)}` ({clip(check.subject, 60)})"
                + (f", reverted in `{short(reverted[check.sha])}`" if check.sha in reverted else ""),
                (f"claimed: {check.claim}", f"measured: {check.observed}"),
                fix,
                check.sha,
            )
        )
    return findings


_CLAIM_ADVICE = {
    BELOW: (
        "Measured win smaller than claimed",
        "State the measured number, not the expected one, where the change is described",
    ),
    INCONCLUSIVE: (
        "Claimed win neither shown nor ruled out",
        "Benchmark longer (`--max-repeats`, `--time-budget`) until the interval is narrower than the claim",
    ),
    NOT_BORNE_OUT: (
        "Claimed win not borne out",
        "Drop the claim, or measure where the change should matter (a realistic size, a GPU)",
    ),
    REGRESSED: (
        "Claimed win measured as a regression",
        "Revert it (`--drop-regressions`) or guard the change off where it slows the run down",
    ),
    NOT_HERE: (
        "Claimed win not measured here",
        "Benchmark a workload that runs the changed code and measures what the claim names (a `[tool.bot]` "
        "workload; GPU utilisation with `bot profile` on the GPU)",
    ),
    None: ("Claimed win not measured", "Benchmark the commit (`bot bench`), then review again"),
}


def measured_findings(
    results: Results, tolerance: float, reverted: dict[str, str], remeasured: bool = False
) -> list[Finding]:
    """Slowdowns, memory growth, loss outside ``tolerance`` and failed runs, per commit; minor once reverted.
    Loss is read under the numerics contracts (:mod:`bot.losses`): a loss a ``dynamics`` commit is expected to
    move is a minor finding that says why, not a regression."""
    findings = []
    subjects = {info.sha: info.subject for info in results.commits}
    where = " (re-measured head)" if remeasured else ""

    def add(sha: str, title: str, evidence: list[str], fix: str) -> None:
        title = f"{title} at `{short(sha)}` ({clip(subjects[sha], 60)}){where}"
        severity = MAJOR
        if sha in reverted:
            severity, title = MINOR, f"{title}, reverted in `{short(reverted[sha])}`"
        findings.append(Finding(severity, "regression", title, tuple(evidence), fix, sha))

    slow = slowdowns(results)
    for index, info in enumerate(results.commits):
        sha, before = info.sha, results.commits[index - 1].sha
        if sha in slow:
            add(
                sha,
                "Significant slowdown",
                [s.evidence for s in slow[sha]],
                "Revert it (`--drop-regressions` does so as a new revert commit) or guard the change off where "
                "it slows the run down",
            )
        grew, lost, expected, failed = [], [], [], []
        for workload in measurements.workloads(results):
            measured = measurements.measurement(results, workload, sha)
            if measured is None:
                continue
            earlier = measurements.measurement(results, workload, before)
            if measured.memory.regression:
                grew.append(
                    f"{workload} peak memory {memory(measured.memory.peak_bytes)} vs "
                    f"{memory(earlier.memory.peak_bytes if earlier else None)} at the commit before "
                    f"({percent(measured.memory.vs_previous)}; "
                    f"threshold +{results.thresholds['memory_threshold']:.0%})"
                )
            reading = losses.read(results, workload, sha, tolerance)
            previous = losses.read(results, workload, before, tolerance) if index > 1 else None
            if reading and reading.outside and not (previous and previous.outside):
                lost.extend(reading.evidence(tolerance))
            elif reading and reading.moved_as_expected and not (previous and previous.moved_as_expected):
                expected.extend(reading.evidence(tolerance))
            for status, count in measured.failed.items():
                failed.append(f"{workload}: {count} run(s) {status}")
        if grew:
            add(
                sha,
                "Peak memory up beyond the threshold",
                grew,
                "If the change trades memory for speed on purpose, say so in its commit and docs; else gate it",
            )
        if lost:
            add(
                sha,
                "Loss outside the tolerance",
                lost,
                "Compare the loss curves at equal steps and at equal tokens seen in the results JSON; fix or "
                "revert before merging",
            )
        if expected:
            findings.append(
                Finding(
                    MINOR,
                    "loss",
                    f"Loss moved where its numerics contract says it would at `{short(sha)}` "
                    f"({clip(subjects[sha], 60)}){where}",
                    tuple(expected),
                    "Expected from a change of training dynamics, not a regression: keep it if the run should take "
                    "fewer optimizer steps per token, else make the change opt-in (its own tier or config switch)",
                    sha,
                )
            )
        if failed:
            add(
                sha,
                "Benchmark runs failed",
                failed,
                "Read the log tails in the results comment, fix the crash (OOM: smaller batch or gradient "
                "checkpointing) and run `bot bench` again",
            )
    return findings
