"""The results of a bench run: one JSON file, and a ``git notes`` entry on each measured commit.

The file (schema ``perfbot.results/v1``) holds the commits (baseline first, with the optimization and plan
items their trailers name), the workloads as run, every run (status, duration, log tail, metrics) and the
statistical summary from :func:`benchmarks.stats.summarize`. The note on a commit (ref ``refs/notes/perfbot``)
has one line per workload: the primary metric's median, and its marginal and cumulative change.
"""

from __future__ import annotations

import json
import os
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
from benchmarks.stats import DEFAULT_THRESHOLDS, INSUFFICIENT, Thresholds, summarize

SCHEMA = "perfbot.results/v1"
NOTES_REF = "perfbot"
OPTIMIZATION_TRAILER = "Bot-Optimization"
PLAN_ITEM_TRAILER = "Bot-Plan-Item"
# The identity notes are written under when the repository has none configured (a bare CI runner).
NOTES_AUTHOR = ("perfbot", "perfbot@users.noreply.github.com")


@dataclass(frozen=True)
class CommitInfo:
    """A measured commit: its sha, subject line, and the optimization and plan items its trailers name."""

    sha: str
    subject: str
    optimization: str | None = None
    plan_items: list[str] = field(default_factory=list)

    @classmethod
    def from_commit(cls, commit: git.Commit) -> CommitInfo:
        """Read the subject and the ``Bot-Optimization:`` / ``Bot-Plan-Item:`` trailers (parsed by git)."""
        trailers: dict[str, list[str]] = {}
        block = commit.repo.git.log("-1", "--format=%(trailers:only,unfold)", commit.hexsha)
        for line in block.splitlines():
            key, _, value = line.partition(":")
            if value.strip():
                trailers.setdefault(key.strip().lower(), []).append(value.strip())
        optimizations = trailers.get(OPTIMIZATION_TRAILER.lower(), [])
        items = [
            item.strip() for value in trailers.get(PLAN_ITEM_TRAILER.lower(), []) for item in value.split(",")
        ]
        return cls(
            sha=commit.hexsha,
            subject=commit.summary if isinstance(commit.summary, str) else commit.summary.decode(),
            optimization=optimizations[0] if optimizations else None,
            plan_items=[item for item in items if item],
        )


def describe_commits(repo: git.Repo, revisions: Sequence[str]) -> list[CommitInfo]:
    """Resolve revisions (shas, branch names, ``HEAD~2``) to :class:`CommitInfo`, in the given order."""
    return [CommitInfo.from_commit(repo.commit(revision)) for revision in revisions]


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
    revisions: Sequence[str],
    runner: Runner,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    progress: ProgressCallback | None = None,
) -> Results:
    """Benchmark ``revisions`` (baseline first) with ``runner`` and return the results (not yet saved)."""
    commits = describe_commits(repo, revisions)
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


# --- git notes --------------------------------------------------------------------------------------------


def note_text(results: Results, sha: str) -> str:
    """The note for one commit: one line per workload with its primary median and its effects."""
    lines = []
    for name, workload in results.summary.items():
        entry = workload["commits"][sha]
        if entry["median"] is None:
            failures = ", ".join(f"{count} {status}" for status, count in entry["failed"].items())
            lines.append(f"{name}: no successful runs ({failures or 'no runs'})")
            continue
        parts = [
            f"{name}: {workload['primary']} {_number(entry['median'])} "
            f"[{_number(entry['ci'][0])}, {_number(entry['ci'][1])}] n={entry['n']}"
        ]
        if sha == results.baseline:
            parts.append("baseline")
        else:
            parts.append(f"vs previous {_effect(entry['marginal'])}")
            parts.append(f"vs baseline {_effect(entry['cumulative'])}")
            memory = entry["memory"]
            if memory["vs_baseline"] is not None:
                flag = " REGRESSION" if memory["regression"] or memory["cumulative_regression"] else ""
                parts.append(f"peak memory {_percent(memory['vs_baseline'])} vs baseline{flag}")
            if entry["loss"] is not None:
                parity = "ok" if entry["loss"]["within_tolerance"] else "OUTSIDE TOLERANCE"
                parts.append(f"loss {_percent(1 + entry['loss']['delta'])} vs baseline {parity}")
        if entry["failed"]:
            parts.append(
                "failed: " + ", ".join(f"{count} {status}" for status, count in entry["failed"].items())
            )
        lines.append(" | ".join(parts))
    return "\n".join(lines)


def write_notes(repo: git.Repo, results: Results, ref: str = NOTES_REF) -> None:
    """Attach (or replace) the note of every measured commit under ``refs/notes/<ref>``."""
    env = {}
    reader = repo.config_reader()
    if not reader.get_value("user", "email", default="") or not reader.get_value("user", "name", default=""):
        name, email = NOTES_AUTHOR
        env = {
            "GIT_AUTHOR_NAME": os.environ.get("GIT_AUTHOR_NAME", name),
            "GIT_AUTHOR_EMAIL": os.environ.get("GIT_AUTHOR_EMAIL", email),
            "GIT_COMMITTER_NAME": os.environ.get("GIT_COMMITTER_NAME", name),
            "GIT_COMMITTER_EMAIL": os.environ.get("GIT_COMMITTER_EMAIL", email),
        }
    with repo.git.custom_environment(**env):
        for commit in results.commits:
            repo.git.notes("--ref", ref, "add", "-f", "-m", note_text(results, commit.sha), commit.sha)


def read_note(repo: git.Repo, sha: str, ref: str = NOTES_REF) -> str | None:
    """The note on ``sha`` under ``refs/notes/<ref>``, or None."""
    try:
        return repo.git.notes("--ref", ref, "show", sha)
    except git.GitCommandError:
        return None


def _effect(comparison: dict[str, Any]) -> str:
    if comparison["ratio"] is None:
        return "n/a (no successful runs)"
    text = _percent(comparison["ratio"])
    if comparison["verdict"] == INSUFFICIENT:
        return f"{text} ({INSUFFICIENT})"
    low, high = comparison["ci"]
    return f"{text} [{_percent(low)}, {_percent(high)}] p={comparison['p_value']:.3g} {comparison['verdict']}"


def _percent(ratio: float) -> str:
    """A ratio as a signed change; beyond ×10 either way (a CI from two runs) only the bound is shown."""
    if ratio > 10:
        return ">+900%"
    if ratio < 0.1:
        return "<-90%"
    return f"{(ratio - 1) * 100:+.1f}%"


def _number(value: float) -> str:
    return f"{value:.4g}"
