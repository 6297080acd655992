"""The results of a bench run, kept as one JSON file.

The file (schema ``perfbot.results/v1``) holds the commits (baseline first, with the optimization and plan
items their trailers name), the workloads as run, every run (status, duration, log tail, metrics) and the
statistical summary from :func:`benchmarks.stats.summarize`.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import git

from benchmarks.runner import ProgressCallback, Runner, RunRecord, plan_jobs
from benchmarks.spec import BenchSpec
from benchmarks.stats import DEFAULT_THRESHOLDS, Thresholds, summarize

SCHEMA = "perfbot.results/v1"


@dataclass(frozen=True)
class CommitInfo:
    """A measured commit: its sha, subject line, and the optimization and plan items its trailers name."""

    sha: str
    subject: str
    optimization: str | None = None
    plan_items: list[str] = field(default_factory=list)


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

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "schema": SCHEMA,
            "repo": self.repo,
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
        )

    def save(self, path: Path | str) -> Path:
        """Write the JSON file (parents created) and return its path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path | str) -> Results:
        """Read a results file."""
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @property
    def failed_runs(self) -> list[RunRecord]:
        """Runs that crashed, ran out of memory or timed out."""
        return [run for run in self.runs if not run.ok]


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
) -> Results:
    """Assemble the results of finished runs and compute their summary; ``commits`` is baseline first.

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
    )


def run_bench(
    repo: git.Repo,
    spec: BenchSpec,
    commits: Sequence[CommitInfo],
    runner: Runner,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    progress: ProgressCallback | None = None,
) -> Results:
    """Benchmark ``commits`` (baseline first) with ``runner`` and return the results (not yet saved)."""
    jobs = plan_jobs(spec, [commit.sha for commit in commits])
    started_at = _now()
    runs = [run for run in runner.run(jobs, progress) if run.repeat >= 0]  # warm-up rounds are not measured
    return build_results(
        repo,
        spec,
        commits,
        runs,
        started_at=started_at,
        finished_at=_now(),
        device=runner.device,
        thresholds=thresholds,
    )


def device_from_runs(runs: Sequence[RunRecord]) -> str | None:
    """The device the successful runs measured on, from their environment block (``GPU on host``)."""
    seen = Counter()
    for run in runs:
        env = (run.metrics or {}).get("env") or {}
        if run.ok and env.get("gpu"):
            seen[f"{env['gpu']} on {env.get('host') or 'unknown host'}"] += 1
    return ", ".join(name for name, _ in seen.most_common()) or None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
