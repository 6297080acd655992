"""The Ray runner: the bench matrix spread over a Ray cluster, one Ray task per job.

``RayRunner(repo, address).run(jobs)`` submits every (commit, workload, repeat) job, in the order
:func:`benchmarks.runner.plan_jobs` interleaves them, as a Ray task that asks for the workload's ``gpus`` (one CPU
on a cluster without GPUs). Each task gets the commits from a ``git bundle`` made once on the driver and put in
Ray's object store (or fetches them from ``remote_url``), and runs the job with :class:`benchmarks.runner.
LocalRunner` in a fresh temporary checkout on its node: the same launch command, timeout, log tail and status
rules as a local run, so the records are the same. The ``benchmarks`` package travels with the Ray job
(``runtime_env`` ``py_modules``, set when the runner starts or joins Ray; a caller that has already called
``ray.init`` must make ``benchmarks`` importable on the workers itself); the workers need the training program's
dependencies and ``git``.

A task that raises or whose worker dies (a lost node, an OOM-killed worker) is retried once by Ray; if it fails
again the job is recorded as ``crashed`` with the error as its log tail, never dropped. Records come back in job
order whatever order the tasks finish in.

Ray is an optional extra (``pip install 'perfbot[ray]'``), imported only when a Ray runner runs.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import git

from benchmarks.runner import (
    LOG_TAIL_LINES,
    PERFBOT_ROOT,
    BenchJob,
    LaunchCommand,
    LocalRunner,
    ProgressCallback,
    RunRecord,
    launch_command,
)
from benchmarks.status import RunStatus

BUNDLE_REF_PREFIX = "refs/perfbot-bench/"
# Ray retries a failed task this many times before its job is recorded as crashed.
TASK_RETRIES = 1


class RayUnavailable(RuntimeError):
    """``ray`` is not installed."""


def import_ray() -> Any:
    """The ``ray`` module, or :class:`RayUnavailable` saying how to install it."""
    try:
        import ray
    except ImportError as error:
        raise RayUnavailable(
            "the Ray runner needs Ray: pip install 'perfbot[ray]' (or 'ray[default]>=2.40')"
        ) from error
    return ray


def make_bundle(repo: git.Repo, commits: Sequence[str], path: Path) -> Path:
    """Write a ``git bundle`` holding ``commits`` (and their history) to ``path``, leaving ``repo`` untouched.

    A bundle needs refs; they are made in a scratch bare repository that borrows ``repo``'s objects
    (``objects/info/alternates``), so the commits need not be on any branch.
    """
    objects = Path(repo.git.rev_parse("--path-format=absolute", "--git-common-dir")) / "objects"
    with tempfile.TemporaryDirectory(prefix="perfbot-bundle-") as scratch:
        borrowed = git.Repo.init(scratch, bare=True)
        (Path(scratch) / "objects" / "info" / "alternates").write_text(f"{objects}\n", encoding="utf-8")
        shas = list(dict.fromkeys(repo.commit(sha).hexsha for sha in commits))
        for sha in shas:
            borrowed.git.update_ref(BUNDLE_REF_PREFIX + sha, sha)
        borrowed.git.bundle("create", str(path), *(BUNDLE_REF_PREFIX + sha for sha in shas))
    return path


def fetch_commits(bundle: bytes | None, remote_url: str | None, into: Path) -> git.Repo:
    """A bare repository at ``into`` holding the bench commits, from bundle bytes or a remote URL."""
    repo = git.Repo.init(into, bare=True)
    if bundle is not None:
        bundle_path = into.parent / "commits.bundle"
        bundle_path.write_bytes(bundle)
        repo.git.fetch("--quiet", str(bundle_path), f"{BUNDLE_REF_PREFIX}*:{BUNDLE_REF_PREFIX}*")
    else:
        repo.git.fetch("--quiet", "--tags", str(remote_url), "+refs/heads/*:refs/heads/*")
    return repo


def run_job_on_worker(
    job: BenchJob,
    bundle: bytes | None,
    remote_url: str | None,
    launch: LaunchCommand,
    log_tail_lines: int,
) -> dict[str, Any]:
    """The body of one Ray task: check the job's commit out here and run it as a local run would."""
    with tempfile.TemporaryDirectory(prefix="perfbot-ray-job-") as scratch:
        root = Path(scratch)
        repo = fetch_commits(bundle, remote_url, root / "repo.git")
        if remote_url is not None:
            with contextlib.suppress(git.GitCommandError):  # a commit on no branch: ask for it by id
                repo.git.fetch("--quiet", remote_url, job.commit)
        runner = LocalRunner(repo, root / "work", launch=launch, log_tail_lines=log_tail_lines)
        return runner.run([job])[0].to_dict()


class RayRunner:
    """Runs bench jobs as Ray tasks on the cluster at ``address`` (``None``: a Ray started for this run).

    ``remote_url``: fetch commits from this git remote instead of shipping a bundle (they must be pushed).
    ``env_vars``: environment variables set for every task (the workers' own environment otherwise).
    ``init_options``: extra ``ray.init`` keyword arguments when this runner starts or joins Ray.
    """

    def __init__(
        self,
        repo: git.Repo | Path | str,
        address: str | None = None,
        *,
        remote_url: str | None = None,
        env_vars: dict[str, str] | None = None,
        launch: LaunchCommand = launch_command,
        log_tail_lines: int = LOG_TAIL_LINES,
        init_options: dict[str, Any] | None = None,
    ):
        self.repo = repo if isinstance(repo, git.Repo) else git.Repo(repo, search_parent_directories=True)
        self.address = address
        self.remote_url = remote_url
        self.env_vars = dict(env_vars or {})
        self.launch = launch
        self.log_tail_lines = log_tail_lines
        self.init_options = dict(init_options or {})
        self._cluster: str | None = None

    @property
    def device(self) -> str:
        """The cluster's size as seen by the last run (``Ray cluster at ADDRESS`` before any)."""
        return self._cluster or f"Ray cluster at {self.address or 'a local Ray'}"

    def run(self, jobs: Sequence[BenchJob], progress: ProgressCallback | None = None) -> list[RunRecord]:
        """One record per job, in job order (see :class:`benchmarks.runner.Runner`)."""
        reading = sorted({job.workload.name for job in jobs if job.workload.inputs})
        if reading:
            raise ValueError(
                f"workload(s) {', '.join(reading)} read git-ignored inputs, which the Ray runner cannot ship (it "
                "sends commits only): run them with the local runner, or commit a sample of the data"
            )
        ray = import_ray()
        started_here = not ray.is_initialized()
        if started_here:
            runtime_env = {"py_modules": [str(PERFBOT_ROOT / "benchmarks")]}
            ray.init(address=self.address, runtime_env=runtime_env, **self.init_options)
        try:
            return self._run(ray, jobs, progress)
        finally:
            if started_here:
                ray.shutdown()

    def _run(self, ray: Any, jobs: Sequence[BenchJob], progress: ProgressCallback | None) -> list[RunRecord]:
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        self._cluster = (
            f"Ray cluster at {self.address or 'a local Ray'}: {gpus} GPU(s), "
            f"{int(resources.get('CPU', 0))} CPU(s), {len(ray.nodes())} node(s)"
        )
        too_wide = [job.key for job in jobs if gpus and job.workload.gpus > gpus]
        if too_wide:
            raise ValueError(f"the Ray cluster has {gpus} GPU(s), but jobs need more: {', '.join(too_wide)}")
        bundle_ref = None
        if self.remote_url is None:
            with tempfile.TemporaryDirectory(prefix="perfbot-bundle-") as scratch:
                path = make_bundle(self.repo, [job.commit for job in jobs], Path(scratch) / "commits.bundle")
                bundle_ref = ray.put(path.read_bytes())
        task = ray.remote(run_job_on_worker)
        runtime_env = {"env_vars": self.env_vars} if self.env_vars else None
        submitted: dict[Any, tuple[int, float]] = {}
        for index, job in enumerate(jobs):
            ref = task.options(
                num_cpus=1,
                num_gpus=job.workload.gpus if gpus else 0,
                max_retries=TASK_RETRIES,
                retry_exceptions=True,
                runtime_env=runtime_env,
                name=f"perfbot-bench-{job.key}",
            ).remote(job, bundle_ref, self.remote_url, self.launch, self.log_tail_lines)
            submitted[ref] = (index, time.monotonic())
        records: list[RunRecord | None] = [None] * len(jobs)
        pending = list(submitted)
        try:
            while pending:
                finished, pending = ray.wait(pending, num_returns=1)
                ref = finished[0]
                index, started = submitted[ref]
                try:
                    record = RunRecord.from_dict(ray.get(ref))
                except ray.exceptions.RayError as error:
                    record = self._failed(jobs[index], error, time.monotonic() - started)
                records[index] = record
                if progress is not None:
                    progress(len(jobs) - len(pending), len(jobs), record)
        finally:
            for ref in pending:  # interrupted: stop what has not finished
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
        return [record for record in records if record is not None]

    def _failed(self, job: BenchJob, error: Exception, duration: float) -> RunRecord:
        """The record of a job whose task failed on every try."""
        text = f"{type(error).__name__}: {error}"
        tail = "\n".join(text.splitlines()[-self.log_tail_lines :])
        return RunRecord(
            commit=job.commit,
            workload=job.workload.name,
            repeat=job.repeat,
            status=RunStatus.CRASHED,
            duration_s=round(duration, 3),
            log_tail=f"{tail}\n[perfbot] the Ray task failed {TASK_RETRIES + 1} times; recorded as crashed",
            metrics=None,
        )
