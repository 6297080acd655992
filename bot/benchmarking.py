"""The benchmark step of a run: measure the baseline and the bot's commits, save the results JSON and git
notes, keep the progress comment current while it runs, then publish the reports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import git

from benchmarks.results import BenchInterrupted, Results, run_bench
from benchmarks.runner import LocalRunner, Runner, RunRecord
from benchmarks.spec import DEFAULT_SIZE, WORKLOADS_KEY, BenchOptionError, BenchSpec, BenchSpecError
from benchmarks.stats import DEFAULT_THRESHOLDS, Thresholds
from bot.conventions import state_dir, tool_settings
from bot.errors import BadInput, require
from bot.formatting import number
from bot.history import describe_commits
from bot.measurements import results_folder
from bot.notes import write_notes
from bot.plan import Plan
from bot.profiling import busy_against_measured_steps, profile_commits
from bot.progress import Progress, publish_progress
from bot.reporting import publish_reports
from bot.trackers.base import Tracker
from bot.workload_drafts import draft_workloads, launched_at
from bot.workspace import Workspace


@dataclass(frozen=True)
class BenchOptions:
    """How to benchmark: overrides of the ``[tool.bot]`` workloads, the runner, and what to do about
    regressions."""

    workloads: tuple[str, ...] | None = None
    size: str | None = None
    steps: int | None = None
    repeats: int | None = None
    warmup_rounds: int | None = None
    max_repeats: int | None = None
    min_time_s: float | None = None
    time_budget_s: float | None = None
    max_host_load: float | None = None
    resolve: float | None = None
    runner: str = "local"
    address: str | None = None
    drop_regressions: bool = False
    interleave: int = 0
    warm_up_together: bool = False


def bench_spec(root: Path, options: BenchOptions) -> BenchSpec:
    """The target's ``[tool.bot]`` bench spec with the options' overrides; bad settings are bad input, naming
    the file or the option at fault."""
    try:
        spec = BenchSpec.from_table(tool_settings(root), Path(root) / "pyproject.toml")
        return spec.override(
            workloads=list(options.workloads) if options.workloads else None,
            size=options.size,
            steps=options.steps,
            repeats=options.repeats,
            warmup_rounds=options.warmup_rounds,
            max_repeats=options.max_repeats,
            min_time_s=options.min_time_s,
            time_budget_s=options.time_budget_s,
        )
    except BenchSpecError as exc:
        if exc.key in ("tool.bot", WORKLOADS_KEY):
            raise BadInput(f"{exc}{_drafts_hint(root)}") from exc
        raise BadInput(f"{exc}; fix [tool.bot] in the target's pyproject.toml") from exc
    except BenchOptionError as exc:  # the file is fine: the option is what to change
        raise BadInput(str(exc)) from exc
    except (KeyError, ValueError) as exc:
        raise BadInput(f"bad benchmark option: {exc}") from exc


def _drafts_hint(root: Path) -> str:
    """What ``bot init`` would draft for a repository with no workloads, as the end of an error message."""
    drafts = draft_workloads(root, DEFAULT_SIZE)
    if not drafts:
        return "; no launch command of a training program was found to draft one from"
    found = "\n".join(f"  {draft.name}: {draft.command_line}  ({draft.drafted_from})" for draft in drafts)
    return f"\n`bot init` drafts these from the repository's launch commands (with every override listed):\n{found}"


def bench_thresholds(options: BenchOptions, loss_tolerance: float | None = None) -> Thresholds:
    """The statistics' thresholds with the options' host-load limit and resolution, and the plan's loss
    tolerance."""
    return replace(
        DEFAULT_THRESHOLDS,
        loss_tolerance=loss_tolerance or DEFAULT_THRESHOLDS.loss_tolerance,
        max_host_load=options.max_host_load or DEFAULT_THRESHOLDS.max_host_load,
        resolve=options.resolve,
    )


def require_measuring(options: BenchOptions) -> None:
    """Bad input naming the extra to install when this machine cannot measure: the local runner runs each
    workload under ``benchmarks.launch``, which imports torch (a Ray cluster's workers bring their own)."""
    if options.runner != "ray":
        require("torch", "benchmarking on this machine")


def make_runner(options: BenchOptions, workspace: Workspace) -> Runner:
    """The runner the options name: ``local`` (this machine's GPUs; it waits for a host quieter than the
    host-load limit before each run, unless the limit is 1) or ``ray`` (the cluster at ``address``; without it
    ``$RAY_ADDRESS``, else a Ray started for the run)."""
    require_measuring(options)
    if options.runner != "ray":
        if options.address is not None:
            raise BadInput("--address names a Ray cluster; use it with --runner ray")
        limit = bench_thresholds(options).max_host_load
        return LocalRunner(
            workspace.repo,
            state_dir(workspace.root) / "bench",
            quiet_below=limit if limit < 1 else None,
            interleave=options.interleave,
            warm_up_together=options.warm_up_together,
        )
    if options.interleave > 1:
        raise BadInput(
            "--interleave runs a round's runs together on this machine; use it with --runner local"
        )
    from benchmarks.ray_runner import RayRunner, RayUnavailable, import_ray  # Ray is an optional extra

    try:
        import_ray()
    except RayUnavailable as exc:
        raise BadInput(str(exc)) from exc
    return RayRunner(workspace.repo, options.address)


OnRun = Callable[[int, int, RunRecord], None]
# The throughput a progress line shows, the first a run measured of these (metrics key, unit).
THROUGHPUTS = (("tokens_per_s", "tokens/s"), ("samples_per_s", "samples/s"))


def benchmark(
    workspace: Workspace,
    spec: BenchSpec,
    revisions: list[str],
    runner: Runner,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    on_run: OnRun | None = None,
    name: str = "",
) -> tuple[Results, Path]:
    """Run the matrix, save the JSON as a new file of its own under ``.bot/results/`` (named after the
    branch, what it measured and when; ``name`` is added to it), write a git note on each commit.
    Interrupted, it saves the runs that finished to a new file ending in ``interrupted`` (notes and earlier
    results stay as they were), says where in the interruption's message, and lets it go on."""
    commits = describe_commits(workspace.repo, revisions)
    spec = launched_at(workspace.repo, spec, revisions)
    folder, branch = results_folder(workspace.root), workspace.branch
    try:
        results = run_bench(
            workspace.repo, spec, commits, runner, thresholds=thresholds, progress=on_run, branch=branch
        )
    except BenchInterrupted as interrupted:
        if interrupted.results is not None:
            kept = interrupted.results.save_new(folder, f"{name}-interrupted" if name else "interrupted")
            interrupted.args = (
                f"the {len(interrupted.results.runs)} measured runs that finished are in {kept}",
            )
        raise
    path = results.save_new(folder, name)
    write_notes(workspace.repo, results)
    return results, path


def revisions_to_measure(workspace: Workspace, baseline: str) -> list[str]:
    """The baseline, every bot commit after it, and the head when it is neither (a revert, say)."""
    revisions = [baseline, *(c.sha for c in workspace.bot_commits(baseline))]
    return revisions if workspace.head in revisions else [*revisions, workspace.head]


def bench_and_report(
    options: BenchOptions,
    workspace: Workspace,
    progress: Progress,
    plan: Plan,
    tracker: Tracker,
    issue: int | str,
    commit_url: str | None = None,
) -> Results:
    """The benchmark half of ``bot apply --bench``: measure baseline + bot commits, then publish the reports."""
    spec = bench_spec(workspace.root, options)
    runner = make_runner(options, workspace)
    thresholds = bench_thresholds(options, plan.loss_tolerance)

    def on_run(done: int, total: int, record: RunRecord) -> None:
        progress.headline = (
            f"Benchmarking: {done}/{total} runs ({record.workload} @ {record.commit[:7]}: {record.status})"
        )
        progress.bench = {"done": done, "total": total}
        publish_progress(tracker, issue, progress, commit_url)

    def rebench(revisions: list[str]) -> Results:
        progress.headline = "Re-measuring the head after dropping regressions"
        return benchmark(workspace, spec, revisions, runner, thresholds, on_run, name="after-drop")[0]

    revisions = revisions_to_measure(workspace, progress.baseline)
    results, path = benchmark(workspace, spec, revisions, runner, thresholds, on_run)
    progress.bench = {
        "results": str(path),
        "runs": len(results.runs),
        "failed_runs": len(results.failed_runs),
    }
    publish_reports(
        tracker,
        issue,
        plan,
        progress,
        results,
        workspace,
        commit_url=commit_url,
        drop=options.drop_regressions,
        rebench=rebench,
        results_path=str(path),
    )
    return results


def run_outcome(record: RunRecord) -> str:
    """A finished run in a line: short commit, workload, repeat (``unmeasured`` for a warm-up or calibration
    run), status, the throughput it measured (tokens/s, else samples/s) and its wall time."""
    repeat = f"repeat {record.repeat}" if record.repeat >= 0 else "unmeasured"
    parts = [f"{record.commit[:7]} {record.workload} {repeat}: {record.status}"]
    metrics = record.metrics or {}
    for key, unit in THROUGHPUTS:
        if metrics.get(key) is not None:
            parts.append(f"{number(metrics[key])} {unit}")
            break
    parts.append(f"{record.duration_s:.1f} s")
    return ", ".join(parts)


def bench_revisions(
    workspace: Workspace,
    options: BenchOptions,
    revisions: list[str],
    *,
    tracker: Tracker | None = None,
    issue: int | str | None = None,
    profile_steps: int | None = None,
    on_step: Callable[[int, int, str], None] | None = None,
) -> tuple[Results, Path]:
    """``bot bench``: measure ``revisions`` (default: the baseline and every bot commit of the branch); with
    ``profile_steps``, then profile every commit's workloads for that many steps (kept in the results); with
    a tracker and issue, update the results, verdict and note comments too. ``on_step(done, total, label)``
    follows the runs (each labelled by :func:`run_outcome`), then the profiles."""
    workspace.check_ready()
    spec = bench_spec(workspace.root, options)
    if revisions:
        try:
            revisions = [workspace.repo.commit(r).hexsha for r in revisions]
        except (git.BadName, ValueError) as error:
            raise BadInput(f"{error}: not a commit in {workspace.root}; pass shas or branch names") from error
    else:
        revisions = revisions_to_measure(workspace, workspace.baseline())
    on_run = None
    if on_step is not None:

        def on_run(done: int, total: int, record: RunRecord) -> None:
            on_step(done, total, run_outcome(record))

    results, path = benchmark(
        workspace, spec, revisions, make_runner(options, workspace), bench_thresholds(options), on_run
    )
    if profile_steps:
        shas = [c.sha for c in results.commits]
        results.profiles = profile_commits(workspace, spec, shas, profile_steps, on_step)
        busy_against_measured_steps(results.profiles, results.runs)
        results.save(path)
    if tracker is not None and issue is not None:
        publish_reports(
            tracker,
            issue,
            None,
            None,
            results,
            workspace,
            commit_url=tracker.commit_url,
            results_path=str(path),
        )
    return results, path
