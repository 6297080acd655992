"""Runners: execute a bench matrix (commit × workload × repeat) and return one record per job.

A :class:`Runner` takes a list of :class:`BenchJob` and returns a :class:`RunRecord` for each, in the same
order. :class:`LocalRunner` runs them here as subprocesses, each commit checked out in its own detached
``git worktree``; an ssh or Ray runner implements the same ``run`` method elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import git

from benchmarks import host, offline_models
from benchmarks.spec import BenchSpec, Workload
from benchmarks.status import RunStatus
from benchmarks.timeline import launch_environment
from benchmarks.turns import TurnPlan, TurnTaker, client_environment, window_steps_for

OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")
LOG_TAIL_LINES = 40
# Seconds a timed-out job gets between SIGTERM and SIGKILL.
TERMINATE_GRACE_S = 10.0
# Longest wait for other processes to quiet down before a job starts.
QUIET_WAIT_S = 30.0
# The directory holding the `benchmarks` package, put on PYTHONPATH of every job.
PERFBOT_ROOT = Path(__file__).resolve().parent.parent
# The bot's credentials, and what git would use them with: never handed to the benchmarked repository's code.
# The file and helper forms (``PERFBOT_TOKEN_FILE``, ``..._COMMAND``) point at them: left out too.
BOT_CREDENTIALS = frozenset(
    f"{name}{form}"
    for name in (
        "PERFBOT_TOKEN",
        "PERFBOT_GIT_TOKEN",
        "PERFBOT_WEBHOOK_SECRET",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "ACTIONS_RUNTIME_TOKEN",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    )
    for form in ("", "_FILE", "_COMMAND")
)


@dataclass(frozen=True)
class BenchJob:
    """One run: a workload at a commit, the ``repeat``-th time, with the spec's size and seed."""

    commit: str
    workload: Workload
    repeat: int
    size: str
    seed: int
    calibration: bool = False

    @property
    def command(self) -> str:
        """The workload's command at this commit with its placeholders filled in."""
        return self.workload.render(self.size, self.seed, self.commit)

    @property
    def key(self) -> str:
        """A short unique name for files of this job."""
        run = "calibration" if self.calibration else f"r{self.repeat}"
        return f"{self.commit[:12]}-{self.workload.name}-{run}"

    @property
    def warmup(self) -> bool:
        """A job whose run is not measured: a warm-up round (negative repeat index) or a calibration run."""
        return self.repeat < 0


@dataclass
class RunRecord:
    """The outcome of one job: status, wall time, the tail of its log and the metrics it wrote (if any)."""

    commit: str
    workload: str
    repeat: int
    status: RunStatus
    duration_s: float
    log_tail: str
    metrics: dict[str, Any] | None

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)  # a results file holds the plain value

    @property
    def ok(self) -> bool:
        """True when the run finished and measured."""
        return self.status == RunStatus.OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as stored in the results file."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """Inverse of :meth:`to_dict`."""
        return cls(**{key: data[key] for key in cls.__dataclass_fields__})


ProgressCallback = Callable[[int, int, RunRecord], None]
"""Called after each job with (jobs done, jobs in all, the finished job's record)."""

LaunchCommand = Callable[[BenchJob, Path], list[str]]
"""Builds the argv that runs ``job`` and writes its metrics JSON to the given path."""


def launch_command(job: BenchJob, metrics_path: Path) -> list[str]:
    """The default: run the workload under ``python -m benchmarks.launch``, which measures it in-process."""
    return [
        sys.executable,
        "-m",
        "benchmarks.launch",
        "--out",
        str(metrics_path),
        "--warmup-steps",
        str(job.workload.warmup_steps),
        *(["--stop-after-steps", str(job.workload.steps)] if job.workload.stop_after_steps else []),
        *(["--chdir", job.workload.directory] if job.workload.directory else []),
        "--",
        *shlex.split(job.command),
    ]


def round_jobs(
    spec: BenchSpec, commits: Sequence[str], repeat: int, workloads: Sequence[str] | None = None
) -> list[BenchJob]:
    """Round ``repeat``: each workload (default: all) once at every commit, in ABBA order: the commits forward
    in even rounds and reversed in odd ones, so over two rounds every commit has run first and last alike."""
    order = list(commits) if repeat % 2 == 0 else list(reversed(commits))
    names = spec.workloads if workloads is None else workloads
    return [
        BenchJob(commit=sha, workload=spec.workloads[name], repeat=repeat, size=spec.size, seed=spec.seed)
        for name in names
        for sha in order
    ]


def plan_jobs(spec: BenchSpec, commits: Sequence[str]) -> list[BenchJob]:
    """The first batch of a bench: the warm-up rounds, then each workload's ``repeats`` rounds (ABBA order).

    Round ``r`` runs each workload that has at least ``r + 1`` repeats once at every commit, so slow drift of
    the machine (heat, clocks, other tenants) hits every commit alike and pairs of runs of one round can be
    compared. The spec's warm-up rounds come first, with negative repeat indices, and are not measured.
    """
    if not commits:
        raise ValueError("no commits to benchmark")
    rounds = max(workload.repeats for workload in spec.workloads.values())
    warmup = [
        BenchJob(commit=sha, workload=workload, repeat=-1 - k, size=spec.size, seed=spec.seed)
        for k in range(spec.warmup_rounds)
        for workload in spec.workloads.values()
        for sha in commits
    ]
    return warmup + [
        job
        for repeat in range(rounds)
        for job in round_jobs(
            spec, commits, repeat, [name for name, w in spec.workloads.items() if repeat < w.repeats]
        )
    ]


def calibration_jobs(spec: BenchSpec, baseline: str) -> list[BenchJob]:
    """One unmeasured run of each workload at the baseline, whose step time sets the measured window."""
    return [
        BenchJob(
            commit=baseline, workload=workload, repeat=-1, size=spec.size, seed=spec.seed, calibration=True
        )
        for workload in spec.workloads.values()
    ]


class Runner(Protocol):
    """Runs bench jobs somewhere and reports each one's outcome."""

    @property
    def device(self) -> str:
        """Where the jobs run, in words (used when the runs did not report their GPU)."""

    def run(self, jobs: Sequence[BenchJob], progress: ProgressCallback | None = None) -> list[RunRecord]:
        """One record per job, in job order; a failing job is recorded, never raised."""


def visible_gpus() -> list[str]:
    """The GPU ids jobs may be pinned to: torch's device count mapped through ``CUDA_VISIBLE_DEVICES``."""
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if listed and listed[0].startswith("-"):  # "-1" hides every GPU
        return []
    try:
        import torch
    except ImportError:
        return listed
    count = torch.cuda.device_count()
    return listed[:count] if listed else [str(i) for i in range(count)]


@contextlib.contextmanager
def worktrees(
    repo: git.Repo, commits: Sequence[str], root: Path, inputs: Iterable[str] = ()
) -> Iterator[dict[str, Path]]:
    """Check out each commit in its own detached worktree under ``root``, with a link to each of the working
    tree's ``inputs`` that the commit does not hold itself (data git ignores); remove them all on exit."""
    sources = _input_sources(repo, inputs)
    created: dict[str, Path] = {}
    try:
        for index, sha in enumerate(dict.fromkeys(commits)):
            path = root / f"{index:02d}-{sha[:12]}"
            repo.git.worktree("add", "--detach", str(path), sha)
            created[sha] = path
            for name, source in sources.items():
                link = path / name
                if not link.exists():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(source, target_is_directory=source.is_dir())
        yield created
    finally:
        for path in created.values():
            try:
                repo.git.worktree("remove", "--force", str(path))
            except git.GitCommandError:
                shutil.rmtree(path, ignore_errors=True)
        repo.git.worktree("prune")


def _input_sources(repo: git.Repo, inputs: Iterable[str]) -> dict[str, Path]:
    """Each input's path in the working tree; one that is not there is bad input, named with its fix."""
    root = Path(repo.working_tree_dir or ".")
    sources = {name: root / name for name in dict.fromkeys(inputs)}
    missing = [name for name, source in sources.items() if not source.exists()]
    if missing:
        raise ValueError(
            f"workload input(s) {', '.join(missing)} not found in {root}: put the data there (the bench links it "
            "into every commit's checkout) or drop it from the workload's inputs in [tool.bot]"
        )
    return sources


class LocalRunner:
    """Runs jobs as subprocesses on this machine: one job per visible GPU at a time, or one at a time on CPU;
    with ``interleave`` windows (2 or more), a round's runs of a one-GPU workload start together on one device
    and take turns measuring that many windows each (:mod:`benchmarks.turns`), warming up in turns or, with
    ``warm_up_together``, all at once (their peak memory must then fit the device together).

    ``work_dir`` receives a fresh ``bench-*`` folder per :meth:`run` with the worktrees (removed afterwards)
    and each job's ``metrics.json`` and ``log.txt`` (kept). ``launch`` builds each job's argv; it defaults to
    :func:`launch_command`. With ``quiet_below`` set, a job run on its own waits (up to ``quiet_wait_s``)
    until other processes keep at most that share of the host's CPUs busy, so fewer runs are lost to the
    statistics' disturbed-run rule (``bot bench`` sets it; None starts at once).
    """

    def __init__(
        self,
        repo: git.Repo | Path | str,
        work_dir: Path | str | None = None,
        *,
        gpus: Sequence[str] | None = None,
        launch: LaunchCommand = launch_command,
        log_tail_lines: int = LOG_TAIL_LINES,
        quiet_below: float | None = None,
        quiet_wait_s: float = QUIET_WAIT_S,
        interleave: int = 0,
        warm_up_together: bool = False,
    ):
        self.repo = repo if isinstance(repo, git.Repo) else git.Repo(repo, search_parent_directories=True)
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.gettempdir())
        self.gpus = list(visible_gpus() if gpus is None else gpus)
        self.launch = launch
        self.log_tail_lines = log_tail_lines
        self.quiet_below, self.quiet_wait_s = quiet_below, quiet_wait_s
        self.interleave = interleave
        self.warm_up_together = warm_up_together
        self._processes: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._stopping = False

    @property
    def device(self) -> str:
        """``GPUs 0,1 on host`` or ``CPU on host``."""
        host = socket.gethostname()
        return f"GPUs {','.join(self.gpus)} on {host}" if self.gpus else f"CPU on {host}"

    def run(self, jobs: Sequence[BenchJob], progress: ProgressCallback | None = None) -> list[RunRecord]:
        """Run every job (see :class:`Runner`); worktrees are removed even when something raises."""
        too_wide = [job.key for job in jobs if self.gpus and job.workload.gpus > len(self.gpus)]
        if too_wide:
            raise ValueError(f"{len(self.gpus)} GPU(s) visible, but jobs need more: {', '.join(too_wide)}")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        bench_dir = Path(tempfile.mkdtemp(prefix="bench-", dir=self.work_dir))
        inputs = [name for job in jobs for name in job.workload.inputs]
        with worktrees(self.repo, [job.commit for job in jobs], bench_dir / "worktrees", inputs) as checkouts:
            return self._schedule(jobs, checkouts, bench_dir / "runs", progress)

    def _schedule(
        self,
        jobs: Sequence[BenchJob],
        checkouts: dict[str, Path],
        runs_dir: Path,
        progress: ProgressCallback | None,
    ) -> list[RunRecord]:
        """Start units of jobs in order whenever enough GPUs are free; report each job as its unit finishes."""
        records: list[RunRecord | None] = [None] * len(jobs)
        finished: queue.Queue[tuple[list[int], list[RunRecord], list[str]]] = queue.Queue()
        free = list(self.gpus)
        threads: list[threading.Thread] = []
        units = self._units(jobs)
        next_unit, running, done = 0, 0, 0
        try:
            while done < len(jobs):
                while next_unit < len(units) and self._fits(jobs[units[next_unit][0]], free, running):
                    unit = units[next_unit]
                    taken = free[: jobs[unit[0]].workload.gpus] if self.gpus else []
                    del free[: len(taken)]

                    def work(unit: list[int] = unit, gpus: list[str] = taken) -> None:
                        unit_records = self._run_unit([jobs[i] for i in unit], checkouts, runs_dir, gpus)
                        finished.put((unit, unit_records, gpus))

                    thread = threading.Thread(target=work, daemon=True)
                    thread.start()
                    threads.append(thread)
                    next_unit += 1
                    running += 1
                indices, unit_records, released = finished.get()
                free.extend(released)
                running -= 1
                for index, record in zip(indices, unit_records, strict=True):
                    records[index] = record
                    done += 1
                    if progress is not None:
                        progress(done, len(jobs), record)
        finally:
            if done < len(jobs):  # interrupted (a progress callback raised, Ctrl-C): stop what still runs
                with self._lock:
                    self._stopping = True
                    for process in self._processes.values():
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(process.pid, signal.SIGKILL)
            for thread in threads:
                thread.join()
            self._stopping = False
        return [record for record in records if record is not None]

    def _units(self, jobs: Sequence[BenchJob]) -> list[list[int]]:
        """The jobs started together, as indices: with ``interleave``, the consecutive jobs of one round of a
        one-GPU workload at different commits (the order :func:`round_jobs` gives); every other job alone."""
        units: list[list[int]] = []
        for index, job in enumerate(jobs):
            unit = units[-1] if units else []
            first = jobs[unit[0]] if unit else None
            if (
                self.interleave > 1
                and first is not None
                and not (job.calibration or first.calibration)
                and job.workload.gpus <= 1
                and (job.repeat, job.workload.name) == (first.repeat, first.workload.name)
                and job.commit not in {jobs[i].commit for i in unit}
            ):
                unit.append(index)
            else:
                units.append([index])
        return units

    def _run_unit(
        self, unit: list[BenchJob], checkouts: dict[str, Path], runs_dir: Path, gpus: list[str]
    ) -> list[RunRecord]:
        """Run one job, or a round's jobs together taking turns on the same device (one that runs out of memory
        there runs again alone); never raises."""
        if len(unit) == 1:
            job = unit[0]
            return [self._run_job(job, checkouts[job.commit], runs_dir / job.key, gpus)]
        waited = self._wait_until_quiet()
        records: list[RunRecord | None] = [None] * len(unit)
        folder = tempfile.mkdtemp(prefix="perfbot-turns-")
        try:
            with TurnTaker(os.path.join(folder, "socket"), [job.key for job in unit]) as taker:

                def run(index: int, job: BenchJob) -> None:
                    warmup = job.workload.warmup_steps
                    size = window_steps_for(job.workload.steps - warmup, self.interleave)
                    plan = TurnPlan(warmup, self.interleave, size, self.warm_up_together)
                    job = replace(job, workload=replace(job.workload, steps=warmup + plan.measured_steps))
                    try:
                        records[index] = self._run_job(
                            job,
                            checkouts[job.commit],
                            runs_dir / job.key,
                            gpus,
                            turns=client_environment(taker.path, job.key, plan),
                            timeout_s=job.workload.timeout_s * len(unit),
                            waited=waited,
                        )
                    finally:
                        taker.ended(job.key)

                threads = [
                    threading.Thread(target=run, args=(index, job), daemon=True)
                    for index, job in enumerate(unit)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
        # the round could not take turns (its socket, say): its runs are recorded as crashed
        except Exception:
            error = traceback.format_exc()
            records = [
                record
                or RunRecord(job.commit, job.workload.name, job.repeat, RunStatus.CRASHED, 0.0, error, None)
                for record, job in zip(records, unit, strict=True)
            ]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return [
            self._alone_after_oom(job, record, checkouts, runs_dir, gpus)
            if record is not None and record.status == RunStatus.OOM
            else record
            for job, record in zip(unit, records, strict=True)
            if record is not None
        ]

    def _alone_after_oom(
        self, job: BenchJob, shared: RunRecord, checkouts: dict[str, Path], runs_dir: Path, gpus: list[str]
    ) -> RunRecord:
        """A run that ran out of memory beside its round's other runs, run again alone: the memory it lacked
        may have been theirs. Its record is the lone run's, saying so."""
        alone = self._run_job(job, checkouts[job.commit], runs_dir / f"{job.key}-alone", gpus)
        alone.log_tail = (
            f"{alone.log_tail}\n[perfbot] ran out of GPU memory while its round's other runs held theirs "
            f"(log: {runs_dir / job.key / 'log.txt'}); this record is its run alone"
        ).strip("\n")
        return alone

    def _wait_until_quiet(self) -> float:
        """Wait for a quieter host before a run on its own (see the class); the seconds waited."""
        if self.quiet_below is not None and len(self.gpus) <= 1:
            return host.wait_until_quiet(self.quiet_below, self.quiet_wait_s)
        return 0.0

    def _fits(self, job: BenchJob, free: list[str], running: int) -> bool:
        if not self.gpus:
            return running == 0
        return len(free) >= job.workload.gpus

    def _run_job(
        self,
        job: BenchJob,
        cwd: Path,
        job_dir: Path,
        gpus: list[str],
        *,
        turns: dict[str, str] | None = None,
        timeout_s: float | None = None,
        waited: float | None = None,
    ) -> RunRecord:
        """Run one job to completion or timeout (``timeout_s``, default the workload's); ``turns`` is the
        environment of a turn-taking run, whose unit waited ``waited`` seconds for a quiet host already.
        Never raises."""
        job_dir.mkdir(parents=True, exist_ok=True)
        metrics_path, log_path = job_dir / "metrics.json", job_dir / "log.txt"
        if waited is None:
            waited = self._wait_until_quiet()
        timeout_s = job.workload.timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        timed_out = False
        returncode: int | None = None
        try:
            env = _job_environment(job, gpus) | (turns or {}) | launch_environment()
            argv = self.launch(job, metrics_path)
            with open(log_path, "wb") as log, self._lock:
                if self._stopping:
                    raise RuntimeError("bench interrupted before this job started")
                process = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self._processes[job.key] = process
            try:
                returncode = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                with self._lock:
                    self._processes.pop(job.key, None)
                # a finished run may leave workers behind holding GPU memory; none outlives its job
                _kill_group(process, grace_s=TERMINATE_GRACE_S if timed_out else 0.0)
        except Exception:  # the job could not even start: record why, let the others run
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(traceback.format_exc())
        duration = time.monotonic() - started
        metrics = _read_metrics(metrics_path)
        tail = _tail(log_path, self.log_tail_lines)
        if timed_out:
            tail += f"\n[perfbot] timed out after {timeout_s:g} s; process group killed"
        if waited >= 1.0:
            tail += f"\n[perfbot] waited {waited:.0f} s for other processes to quiet down before starting"
        status = _status(returncode, timed_out, metrics, tail)
        if status != RunStatus.OK and metrics is None and returncode == 0:
            tail += f"\n[perfbot] exited 0 but wrote no metrics to {metrics_path}"
        return RunRecord(
            commit=job.commit,
            workload=job.workload.name,
            repeat=job.repeat,
            status=status,
            duration_s=round(duration, 3),
            log_tail=tail.strip("\n"),
            metrics=metrics,
        )


def _job_environment(job: BenchJob, gpus: list[str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in BOT_CREDENTIALS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PERFBOT_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONHASHSEED"] = str(job.seed)
    if job.workload.models:  # built from their configs by the launcher, on every rank
        env[offline_models.ENVIRONMENT] = json.dumps(job.workload.models)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    elif "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(cpu_run_threads())
    return env


def cpu_run_threads() -> int:
    """Threads a CPU run computes with: every core this process may use but one, left to the runner and the
    OS, whose wake-ups would otherwise preempt the measured process (the example's ``loop`` on 2 cores: run-to-run
    CV 17% with 2 threads, 4.8% with 1). ``OMP_NUM_THREADS`` set by the user wins."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


def _status(returncode: int | None, timed_out: bool, metrics: dict[str, Any] | None, tail: str) -> RunStatus:
    """Timeout wins; ok needs exit 0 and ``"status": "ok"`` in the metrics; a failure is an OOM when the run
    reported one or its log shows one, else a crash."""
    if timed_out:
        return RunStatus.TIMEOUT
    reported = metrics.get("status") if metrics else None
    if returncode == 0 and reported == RunStatus.OK:
        return RunStatus.OK
    if reported == RunStatus.OOM or any(marker in tail for marker in OOM_MARKERS):
        return RunStatus.OOM
    return RunStatus.CRASHED


def _read_metrics(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log (reading at most its last 256 KiB)."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - 256 * 1024))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _kill_group(process: subprocess.Popen, grace_s: float = TERMINATE_GRACE_S) -> None:
    """SIGTERM the job's process group (its session, started by us), give it ``grace_s``, then SIGKILL
    whatever is left of the group, stray workers included."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
