"""Typed views of what a bench run measured: one :class:`Measurement` per workload and commit, read from the
statistical summary of a :class:`benchmarks.results.Results` (the shapes :func:`benchmarks.stats.summarize`
writes). A number the run did not measure is ``None``; nothing here invents one."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.results import Results
from benchmarks.runner import RunRecord
from benchmarks.stats import REGRESSION, WIN, LossParity
from bot.conventions import state_dir


@dataclass(frozen=True)
class Comparison:
    """The primary metric of a commit against another commit's: ratio candidate / reference, its interval,
    p-value and verdict (``win``, ``regression``, ``no change`` or ``insufficient data``)."""

    against: str
    ratio: float | None
    ci: tuple[float, float] | None
    p_value: float | None
    verdict: str

    @property
    def significant(self) -> bool:
        """A significant win or regression."""
        return self.verdict in (WIN, REGRESSION)

    @classmethod
    def from_summary(cls, data: Mapping[str, Any] | None) -> Comparison | None:
        """From a ``marginal`` / ``cumulative`` entry of the summary; None for the baseline's."""
        if not data:
            return None
        ci = data.get("ci")
        return cls(
            against=str(data.get("against", "")),
            ratio=data.get("ratio"),
            ci=(ci[0], ci[1]) if ci else None,
            p_value=data.get("p_value"),
            verdict=str(data["verdict"]),
        )


@dataclass(frozen=True)
class MemoryChange:
    """Median peak memory of a commit and its ratio to the commit before and to the baseline."""

    peak_bytes: float | None = None
    vs_previous: float | None = None
    vs_baseline: float | None = None
    regression: bool = False
    cumulative_regression: bool = False

    @classmethod
    def from_summary(cls, data: Mapping[str, Any] | None) -> MemoryChange:
        """From a ``memory`` entry of the summary (all None when peak memory was not measured)."""
        data = data or {}
        return cls(
            peak_bytes=data.get("peak_bytes"),
            vs_previous=data.get("vs_previous"),
            vs_baseline=data.get("vs_baseline"),
            regression=bool(data.get("regression")),
            cumulative_regression=bool(data.get("cumulative_regression")),
        )


@dataclass(frozen=True)
class Measurement:
    """One workload at one commit: the primary metric's median and interval over the successful runs, its
    effects against the commit before (``marginal``) and the baseline (``cumulative``), peak memory, loss
    parity with the baseline at equal tokens seen (``loss``) and at equal optimizer steps (``loss_at_steps``),
    the tokens an optimizer step saw (median over the runs), failed runs by status, the medians of the other reported metrics, the run-to-run
    CV and how many runs were left out as disturbed by other processes."""

    workload: str
    sha: str
    n: int
    median: float | None
    ci: tuple[float, float] | None
    ci_level: float | None
    marginal: Comparison | None
    cumulative: Comparison | None
    memory: MemoryChange
    loss: LossParity | None
    failed: Mapping[str, int] = field(default_factory=dict)
    missing_primary: int = 0
    metrics: Mapping[str, Any] = field(default_factory=dict)
    cv: float | None = None
    disturbed: int = 0
    loss_at_steps: LossParity | None = None
    tokens_per_step: float | None = None

    @classmethod
    def from_summary(cls, workload: str, sha: str, data: Mapping[str, Any]) -> Measurement:
        """From one commit's entry of a workload's summary."""
        ci, loss, at_steps = data.get("ci"), data.get("loss"), data.get("loss_at_steps")
        return cls(
            workload=workload,
            sha=sha,
            n=int(data.get("n") or 0),
            median=data.get("median"),
            ci=(ci[0], ci[1]) if ci else None,
            ci_level=data.get("ci_level"),
            marginal=Comparison.from_summary(data.get("marginal")),
            cumulative=Comparison.from_summary(data.get("cumulative")),
            memory=MemoryChange.from_summary(data.get("memory")),
            loss=LossParity.from_dict(loss) if loss else None,
            failed=dict(data.get("failed") or {}),
            missing_primary=int(data.get("missing_primary") or 0),
            metrics=dict(data.get("metrics") or {}),
            cv=data.get("cv"),
            disturbed=int(data.get("disturbed") or 0),
            loss_at_steps=LossParity.from_dict(at_steps) if at_steps else None,
            tokens_per_step=data.get("tokens_per_step"),
        )


def measurement(results: Results, workload: str, sha: str) -> Measurement | None:
    """``workload`` at ``sha``, or None when that commit was not benchmarked."""
    data = results.summary.get(workload, {}).get("commits", {}).get(sha)
    return None if data is None else Measurement.from_summary(workload, sha, data)


def workloads(results: Results) -> list[str]:
    """The workloads of the run, in the order they were summarized."""
    return list(results.summary)


def head(results: Results) -> str:
    """The last measured commit (the branch head the results speak for)."""
    return results.commits[-1].sha


def higher_is_better(results: Results, workload: str) -> bool:
    """Whether a larger primary metric is better for ``workload``."""
    return bool(results.summary[workload]["higher_is_better"])


def direction(results: Results, workload: str) -> str:
    """Which way ``workload``'s primary metric improves, in words."""
    return "higher is better" if higher_is_better(results, workload) else "lower is better"


def primary(results: Results, workload: str) -> str:
    """The metric a win or a regression of ``workload`` is judged on."""
    return str(results.summary[workload]["primary"])


def gain(ratio: float, better_when_higher: bool) -> float:
    """The improvement a ratio candidate/reference stands for: +0.25 is 25% better, whichever the direction."""
    return ratio - 1.0 if better_when_higher else 1.0 / ratio - 1.0


def matching_workloads(results: Results, name: str | None) -> list[str]:
    """Workloads a plan names (``sft`` matches ``sft`` and ``sft_lora``); every workload for no name."""
    if name is None:
        return workloads(results)
    wanted = name.lower()
    exact = [w for w in results.summary if w.lower() == wanted]
    return exact or [w for w in results.summary if wanted in re.split(r"[^a-z0-9]+", w.lower())]


def loss_tolerance(results: Results, plan_tolerance: float | None) -> float:
    """The plan's loss tolerance when it states one, else the one the statistics used."""
    return plan_tolerance if plan_tolerance is not None else float(results.thresholds["loss_tolerance"])


def runs_of(results: Results, workload: str, sha: str) -> list[RunRecord]:
    """Every run (successful or not) of ``workload`` at ``sha``."""
    return [r for r in results.runs if r.workload == workload and r.commit == sha]


def results_folder(root: Path) -> Path:
    """Where ``bot bench`` keeps one results file per run: ``<root>/.bot/results/`` (ignored by git)."""
    return state_dir(root) / "results"


def saved_results(root: Path, branch: str | None = None) -> list[tuple[Results, Path]]:
    """Every readable results file under ``<root>/.bot/results/`` (of ``branch`` when given), oldest first: by
    when its bench started, then when it was written."""
    found = []
    for path in results_folder(root).glob("*.json"):
        try:
            results = Results.load(path)
            written = path.stat().st_mtime_ns
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if branch is None or results.branch == branch:
            found.append((results.started_at, written, path.name, results, path))
    return [(results, path) for *_, results, path in sorted(found, key=lambda entry: entry[:3])]


def find_results(root: Path, shas: Sequence[str], branch: str | None = None) -> tuple[Results, Path] | None:
    """The results file under ``<root>/.bot/results/`` of the range that ``shas`` measure: the baseline
    first, then the commits to measure, the head last. Only a file with that baseline which measured every
    one of them (and, with ``branch``, a bench of that branch) speaks for the range; of those, one that
    measured exactly them, then a bench that was not interrupted, then the newest. None when none did: the
    range is not measured (a file of another range or tier never stands in for it, and a later bench of
    another range never displaces the file that measured exactly this one)."""
    wanted = set(shas)
    best, best_key = None, None
    for order, (results, path) in enumerate(saved_results(root, branch)):
        measured = {info.sha for info in results.commits}
        if results.baseline != shas[0] or not wanted <= measured:
            continue
        key = (measured == wanted, not results.interrupted, order)
        if best_key is None or key > best_key:
            best, best_key = (results, path), key
    return best
