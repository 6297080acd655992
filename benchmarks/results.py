"""The results of a bench run, kept as one JSON file, and the run itself (:func:`run_bench`).

A bench calibrates each workload's measured window on one run at the baseline (enough steps for the
workload's ``min_time_s``), runs the warm-up rounds and the first ``repeats`` rounds (ABBA order, see
:func:`benchmarks.runner.round_jobs`), then adds one round at a time while some effect's interval is not yet
precise (:func:`benchmarks.stats.precise_half_width`: within the minimum effect, or narrow enough for the
resolution asked), until it is, the workload's ``max_repeats`` is reached, or the next round would end after
the spec's time budget (at the mean wall time per run of the rounds so far, calibration left out). Rounds
alternate their order, so a bench that stops at an odd count has run one order once more than the other. Why
each workload stopped is kept in the file. An interrupted bench (Ctrl-C; the CLI turns SIGTERM into the same)
stops its runs and raises :class:`BenchInterrupted` with the results of every measured run that finished
before it.

The file (schema ``perfbot.results/v1``) holds the branch whose commits were measured, the commits (baseline
first, with the optimization and plan items their trailers name), the workloads as run, every run (status,
duration, log tail, metrics), the calibration and stopping of each workload, and the statistical summary from
:func:`benchmarks.stats.summarize`. Each run is kept in a file of its own, named after what it measured and
when (:meth:`Results.save_new`), so no bench overwrites another's record.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import git

from benchmarks.runner import (
    BenchJob,
    ProgressCallback,
    Runner,
    RunRecord,
    calibration_jobs,
    plan_jobs,
    round_jobs,
)
from benchmarks.spec import (
    DEFAULT_MIN_TIME_CPU_S,
    DEFAULT_MIN_TIME_GPU_S,
    DEFAULT_TIME_BUDGET_CPU_S,
    DEFAULT_TIME_BUDGET_GPU_S,
    BenchSpec,
    Workload,
)
from benchmarks.stats import DEFAULT_THRESHOLDS, Thresholds, disturbed, summarize

SCHEMA = "perfbot.results/v1"
PRECISE, BUDGET, MAX_REPEATS = "precise", "time budget", "max repeats"
UNMEASURABLE = "nothing to compare"  # no effect has runs on both sides: more rounds cannot help
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM: the runs that finished before it are kept


@dataclass(frozen=True)
class CommitInfo:
    """A measured commit: its sha, subject line, and the optimization and plan items its trailers name."""

    sha: str
    subject: str
    optimization: str | None = None
    plan_items: list[str] = field(default_factory=list)

    def label(self, first: bool) -> str:
        """What the commit is, in a table: ``baseline`` for the first revision measured, else its
        optimization, else its subject."""
        return "baseline" if first else self.optimization or self.subject


@dataclass
class Results:
    """A bench run's results file."""

    repo: str
    baseline: str
    commits: list[CommitInfo]
    workloads: dict[str, dict[str, Any]]
    runs: list[RunRecord]
    summary: dict[str, Any]
    started_at: str
    finished_at: str
    device: str
    size: str
    seed: int
    thresholds: dict[str, float]
    calibration: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopping: dict[str, dict[str, Any]] = field(default_factory=dict)
    # sha -> workload -> a `bot bench --profile` summary (benchmarks.profiling.Profile as a dict, or {"error"})
    profiles: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    branch: str = ""  # the branch (a tier's range) whose commits were measured; empty where none was named

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "schema": SCHEMA,
            "repo": self.repo,
            "branch": self.branch,
            "baseline": self.baseline,
            "commits": [asdict(commit) for commit in self.commits],
            "workloads": self.workloads,
            "runs": [run.to_dict() for run in self.runs],
            "summary": self.summary,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "device": self.device,
            "size": self.size,
            "seed": self.seed,
            "thresholds": self.thresholds,
            "calibration": self.calibration,
            "stopping": self.stopping,
            "profiles": self.profiles,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        """Inverse of :meth:`to_dict`; rejects another schema."""
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} results file (schema: {data.get('schema')!r})")
        return cls(
            repo=data["repo"],
            baseline=data["baseline"],
            commits=[CommitInfo(**commit) for commit in data["commits"]],
            workloads=data["workloads"],
            runs=[RunRecord.from_dict(run) for run in data["runs"]],
            summary=data["summary"],
            started_at=data["started_at"],
            finished_at=data["finished_at"],
            device=data["device"],
            size=data["size"],
            seed=data["seed"],
            thresholds=data["thresholds"],
            calibration=data.get("calibration", {}),
            stopping=data.get("stopping", {}),
            profiles=data.get("profiles", {}),
            branch=data.get("branch", ""),
        )

    def save(self, path: Path | str) -> Path:
        """Write the JSON file (parents created) and return its path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    def record_name(self) -> str:
        """What this run measured, as a file name: the branch, the baseline's short sha, a short hash of the
        measured commits in order and the workloads, and when the run started."""
        measured = "\n".join([*(commit.sha for commit in self.commits), "", *sorted(self.workloads)])
        digest = hashlib.sha256(measured.encode()).hexdigest()[:10]
        started = datetime.fromisoformat(self.started_at).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        return f"{self.branch.replace('/', '-') or 'no-branch'}-{self.baseline[:10]}-{digest}-{started}"

    def save_new(self, folder: Path | str, label: str = "") -> Path:
        """Write the JSON to a new file in ``folder`` (created) named by :meth:`record_name` and ``label``,
        and return its path; never overwrites: a name already taken gets ``-2``, ``-3``..."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        stem = self.record_name() + (f"-{label}" if label else "")
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        path, attempt = folder / f"{stem}.json", 1
        while True:
            try:
                with path.open("x", encoding="utf-8") as file:
                    file.write(text)
                return path
            except FileExistsError:
                attempt += 1
                path = folder / f"{stem}-{attempt}.json"

    @classmethod
    def load(cls, path: Path | str) -> Results:
        """Read a results file."""
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @property
    def failed_runs(self) -> list[RunRecord]:
        """Runs that crashed, ran out of memory or timed out."""
        return [run for run in self.runs if not run.ok]

    @property
    def interrupted(self) -> bool:
        """Whether the bench was interrupted (some workload stopped as ``interrupted``)."""
        return any(stop.get("reason") == INTERRUPTED for stop in self.stopping.values())


def build_results(
    repo: git.Repo,
    spec: BenchSpec,
    commits: Sequence[CommitInfo],
    runs: Sequence[RunRecord],
    *,
    started_at: str,
    finished_at: str,
    device: str | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    calibration: dict[str, dict[str, Any]] | None = None,
    stopping: dict[str, dict[str, Any]] | None = None,
    branch: str = "",
) -> Results:
    """Assemble the results of finished runs and compute their summary; ``commits`` is baseline first and
    ``branch`` the branch they are on.

    ``device`` is the GPU the runs reported in their environment block, else ``device``, else the host name.
    """
    shas = [commit.sha for commit in commits]
    return Results(
        repo=str(repo.working_tree_dir),
        baseline=shas[0],
        commits=list(commits),
        workloads={
            name: {
                "primary": workload.primary,
                "higher_is_better": workload.higher_is_better,
                "steps": workload.steps,
                "warmup_steps": workload.warmup_steps,
                "repeats": workload.repeats,
                "max_repeats": workload.max_repeats,
                "command": workload.render(spec.size, spec.seed),
            }
            for name, workload in spec.workloads.items()
        },
        runs=list(runs),
        summary=summarize(shas, spec.workloads, runs, thresholds),
        started_at=started_at,
        finished_at=finished_at,
        device=device_from_runs(runs) or device or socket.gethostname(),
        size=spec.size,
        seed=spec.seed,
        thresholds=asdict(thresholds),
        calibration=dict(calibration or {}),
        stopping=dict(stopping or {}),
        branch=branch,
    )


def calibrate(workload: Workload, record: RunRecord | None) -> tuple[Workload, dict[str, Any]]:
    """The workload with enough steps that its measured ones last ``min_time_s`` (10 s on a GPU, 3 s on CPU
    when it sets none) at the step time ``record`` measured, and what was found. Never fewer steps than asked."""
    found: dict[str, Any] = {"steps_asked": workload.steps, "steps": workload.steps, "min_time_s": None}
    metrics = record.metrics if record is not None and record.ok else None
    if metrics is None:
        found["note"] = f"calibration run {record.status if record else 'missing'}; steps as configured"
        return workload, found
    on_gpu = metrics.get("timing") == "cuda_events"
    wanted = workload.min_time_s
    if wanted is None:
        wanted = DEFAULT_MIN_TIME_GPU_S if on_gpu else DEFAULT_MIN_TIME_CPU_S
    step_s = (metrics.get("step_time_s") or {}).get("median")
    found.update(min_time_s=wanted, step_time_s=step_s, device="GPU" if on_gpu else "CPU")
    if not wanted:
        found["note"] = "no minimum measured time asked; steps as configured"
        return workload, found
    if not isinstance(step_s, int | float) or step_s <= 0:
        found["note"] = "the calibration run reported no step time; steps as configured"
        return workload, found
    steps = max(workload.steps, workload.warmup_steps + math.ceil(wanted / step_s))
    found.update(
        steps=steps, note=f"{step_s * 1000:.3g} ms per step: {steps} steps for ≥ {wanted:g} s measured"
    )
    return replace(workload, steps=steps), found


def run_bench(
    repo: git.Repo,
    spec: BenchSpec,
    commits: Sequence[CommitInfo],
    runner: Runner,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    progress: ProgressCallback | None = None,
    clock: Callable[[], float] = time.monotonic,
    branch: str = "",
) -> Results:
    """Benchmark ``commits`` (baseline first, on ``branch``) with ``runner`` and return the results (not yet
    saved): calibrate, warm up, measure the first rounds, then add rounds as the module docstring says."""
    shas = [commit.sha for commit in commits]
    started_at, started = _now(), clock()
    batches = _Batches(runner, progress)
    spec, calibration = _calibrated(spec, shas[0], batches, thresholds)
    budget = spec.time_budget_s or _default_budget(calibration, runner)
    rounds = {name: workload.repeats for name, workload in spec.workloads.items()}
    stopping: dict[str, dict[str, Any]] = {}

    def results(runs: list[RunRecord]) -> Results:
        summary, spent = summarize(shas, spec.workloads, runs, thresholds), round(clock() - started, 1)
        for name, stop in stopping.items():
            stop.update(
                rounds=summary[name]["rounds"],
                imprecise=summary[name]["imprecise"],
                spent_s=spent,
                budget_s=budget,
            )
            calibration[name]["window_s"] = _median_window(runs, name)
        return build_results(
            repo,
            spec,
            commits,
            runs,
            started_at=started_at,
            finished_at=_now(),
            device=runner.device,
            thresholds=thresholds,
            calibration=calibration,
            stopping=stopping,
            branch=branch,
        )

    try:
        rounds_started, jobs_before_rounds = clock(), batches.done
        runs = [run for run in batches.run(plan_jobs(spec, shas)) if run.repeat >= 0]
        while True:
            summary = summarize(shas, spec.workloads, runs, thresholds)
            pending = []
            for name, workload in spec.workloads.items():
                if name in stopping:
                    continue
                if not summary[name]["imprecise"]:
                    stopping[name] = {"reason": PRECISE if _any_effect(summary[name]) else UNMEASURABLE}
                elif rounds[name] + 1 > workload.max_repeats:
                    stopping[name] = {"reason": MAX_REPEATS}
                else:
                    pending.append(name)
            # per job of the rounds so far, calibration left out; waits for a quiet host and start-up included
            per_job = (clock() - rounds_started) / max(batches.done - jobs_before_rounds, 1)
            if pending and clock() - started + len(shas) * len(pending) * per_job > budget:
                stopping.update({name: {"reason": BUDGET} for name in pending})
                pending = []
            if not pending:
                return results(runs)
            runs += batches.run(
                [job for name in pending for job in round_jobs(spec, shas, rounds[name], [name])]
            )
            for name in pending:
                rounds[name] += 1
    except KeyboardInterrupt:
        finished = [run for run in batches.finished if run.repeat >= 0]
        stopping.update({name: {"reason": INTERRUPTED} for name in spec.workloads if name not in stopping})
        raise BenchInterrupted(results(finished) if finished else None) from None


class BenchInterrupted(KeyboardInterrupt):
    """A bench stopped by Ctrl-C or SIGTERM, with the results of the measured runs that finished before it
    (``results``; None when none had), each unfinished workload stopped as ``interrupted``."""

    def __init__(self, results: Results | None):
        super().__init__()
        self.results = results


class _Batches:
    """Runs batches of jobs on one runner, reporting progress over all of them."""

    def __init__(self, runner: Runner, progress: ProgressCallback | None):
        self.runner, self.progress, self.done = runner, progress, 0
        self.finished: list[RunRecord] = []  # every run as it finishes, also of a batch that never returns

    def run(self, jobs: list[BenchJob]) -> list[RunRecord]:
        before = self.done

        def report(done: int, total: int, record: RunRecord) -> None:
            self.finished.append(record)
            if self.progress is not None:
                self.progress(before + done, before + total, record)

        records = self.runner.run(jobs, report)
        self.done += len(jobs)
        return records


def _calibrated(
    spec: BenchSpec, baseline: str, batches: _Batches, thresholds: Thresholds
) -> tuple[BenchSpec, dict[str, dict]]:
    """The spec with calibrated steps, and the calibration of each workload. A first run per workload at the
    baseline (none when it asks for no minimum time) gives the step time; when its measured steps lasted under
    half the minimum time and their times had not settled (a short first run is mostly warm-up), or other
    processes disturbed it, another run with the steps found measures it again, three runs at most."""
    workloads = dict(spec.workloads)
    calibration = {
        name: {"steps_asked": w.steps, "steps": w.steps, "min_time_s": 0} for name, w in workloads.items()
    }
    asked = {name: w for name, w in workloads.items() if w.min_time_s != 0}
    for attempt in (1, 2, 3):
        if not asked:
            break
        jobs = calibration_jobs(replace(spec, workloads={n: workloads[n] for n in asked}), baseline)
        records = {record.workload: record for record in batches.run(jobs)}
        again = {}
        for name, original in asked.items():
            workloads[name], calibration[name] = calibrate(original, records.get(name))
            calibration[name]["runs"] = attempt
            calibration[name]["disturbed"] = name in records and disturbed(records[name], thresholds)
            window = ((records.get(name) and records[name].metrics) or {}).get("wall_s")
            wanted = calibration[name]["min_time_s"]
            short = (
                workloads[name].steps > original.steps
                and isinstance(window, int | float)
                and window < wanted / 2
            )
            settled = settled_steps(records.get(name))
            calibration[name]["settled"] = settled
            if (short and not settled) or calibration[name]["disturbed"]:
                again[name] = original
        asked = again
    return replace(spec, workloads=workloads), calibration


def settled_steps(record: RunRecord | None, tolerance: float = 0.1) -> bool:
    """Whether a calibration run's step times had settled: it measured at least four steps and the median of
    the later half is within ``tolerance`` of the median of all (a compilation or graph capture among the
    first measured steps leaves the median alone; a run still speeding up does not)."""
    metrics = record.metrics if record is not None and record.ok else None
    times = ((metrics or {}).get("per_step") or {}).get("ms") or []
    if len(times) < 4 or not all(isinstance(t, int | float) and t > 0 for t in times):
        return False
    whole, later = statistics.median(times), statistics.median(times[len(times) // 2 :])
    return abs(later - whole) <= tolerance * whole


def _default_budget(calibration: dict[str, dict[str, Any]], runner: Runner) -> float:
    """30 min when the calibration ran on a GPU (or, without one, the runner has GPUs), else 10 min."""
    devices = {found.get("device") for found in calibration.values()} - {None}
    on_gpu = "GPU" in devices if devices else runner.device.startswith("GPU")
    return DEFAULT_TIME_BUDGET_GPU_S if on_gpu else DEFAULT_TIME_BUDGET_CPU_S


def _any_effect(workload_summary: dict[str, Any]) -> bool:
    """Whether some commit of the workload has an effect with an interval."""
    return any(
        (entry.get(key) or {}).get("ci") is not None
        for entry in workload_summary["commits"].values()
        for key in ("marginal", "cumulative")
    )


def _median_window(runs: Sequence[RunRecord], workload: str) -> float | None:
    """The median measured time (``wall_s``) of the workload's successful runs."""
    windows = [
        wall
        for run in runs
        if run.workload == workload
        and run.ok
        and isinstance(wall := (run.metrics or {}).get("wall_s"), int | float)
    ]
    return statistics.median(windows) if windows else None


def device_from_runs(runs: Sequence[RunRecord]) -> str | None:
    """The device the successful runs measured on, from their environment block (``GPU on host``)."""
    seen: Counter[str] = Counter()
    for run in runs:
        env = (run.metrics or {}).get("env") or {}
        if run.ok and env.get("gpu"):
            seen[f"{env['gpu']} on {env.get('host') or 'unknown host'}"] += 1
    return ", ".join(name for name, _ in seen.most_common()) or None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
