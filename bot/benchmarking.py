"""``bot bench`` and ``bot apply --bench``: run the bench matrix over the baseline and the bot's commits,
save the results JSON and git notes, and keep the progress comment current while it runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.results import Results, run_bench, write_notes
from benchmarks.runner import LocalRunner, Runner, RunRecord
from benchmarks.spec import BenchSpec, BenchSpecError, load_spec
from benchmarks.stats import DEFAULT_THRESHOLDS, Thresholds
from bot.errors import BadInput
from bot.plan import Plan
from bot.progress import Progress
from bot.tracker import PROGRESS, Tracker
from bot.workspace import Workspace


def bench_spec(root: Path, args: argparse.Namespace) -> BenchSpec:
    """The target's ``[tool.bot]`` bench spec with the command line's overrides; bad settings are bad input."""
    try:
        spec = load_spec(root)
        return spec.override(
            workloads=args.workload,
            size=args.size,
            steps=args.steps,
            repeats=args.repeats,
            warmup_rounds=args.warmup_rounds,
        )
    except BenchSpecError as exc:
        raise BadInput(f"{exc}; fix [tool.bot] in the target's pyproject.toml") from exc
    except (KeyError, ValueError) as exc:
        raise BadInput(f"bad benchmark option: {exc}") from exc


def results_path(root: Path, branch: str, name: str = "") -> Path:
    """Where a branch's results JSON is kept: ``.bot/results/<branch>[-name].json`` (ignored by git)."""
    stem = branch.replace("/", "-") + (f"-{name}" if name else "")
    return root / ".bot" / "results" / f"{stem}.json"


def make_runner(args: argparse.Namespace, workspace: Workspace) -> Runner:
    """The runner ``--runner`` names: ``local`` (this machine's GPUs) or ``ray`` (the cluster at ``--address``;
    without it ``$RAY_ADDRESS``, else a Ray started for the run)."""
    runner, address = getattr(args, "runner", "local"), getattr(args, "address", None)
    if runner != "ray":
        if address is not None:
            raise BadInput("--address names a Ray cluster; use it with --runner ray")
        return LocalRunner(workspace.repo, workspace.root / ".bot" / "bench")
    from benchmarks.ray_runner import RayRunner, RayUnavailable, import_ray

    try:
        import_ray()
    except RayUnavailable as exc:
        raise BadInput(str(exc)) from exc
    return RayRunner(workspace.repo, address)


def benchmark(
    workspace: Workspace,
    spec: BenchSpec,
    revisions: list[str],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    on_run=None,
    name: str = "",
    runner: Runner | None = None,
) -> tuple[Results, Path]:
    """Run the matrix (locally unless ``runner`` is given), save the JSON, write a git note on each commit."""
    runner = runner or LocalRunner(workspace.repo, workspace.root / ".bot" / "bench")
    results = run_bench(workspace.repo, spec, revisions, runner, thresholds=thresholds, progress=on_run)
    path = results.save(results_path(workspace.root, workspace.branch, name))
    write_notes(workspace.repo, results)
    return results, path


def revisions_to_measure(workspace: Workspace, baseline: str) -> list[str]:
    """The baseline, every bot commit after it, and the head when it is neither (a revert, say)."""
    revisions = [baseline, *(c.sha for c in workspace.bot_commits(baseline))]
    return revisions if workspace.head in revisions else [*revisions, workspace.head]


def bench_and_report(
    args: argparse.Namespace,
    workspace: Workspace,
    progress: Progress,
    plan: Plan,
    tracker: Tracker,
    issue: int | str,
    commit_url: str | None = None,
) -> Results:
    """The ``--bench`` half of ``bot apply``: benchmark baseline + bot commits, then publish the reports."""
    from bot.report import publish_reports

    spec = bench_spec(workspace.root, args)
    runner = make_runner(args, workspace)
    thresholds = Thresholds(loss_tolerance=plan.loss_tolerance or DEFAULT_THRESHOLDS.loss_tolerance)

    def on_run(done: int, total: int, record: RunRecord) -> None:
        progress.headline = (
            f"Benchmarking: {done}/{total} runs ({record.workload} @ {record.commit[:7]}: {record.status})"
        )
        progress.bench = {"done": done, "total": total}
        tracker.upsert_comment(issue, PROGRESS, progress.render(commit_url))

    def rebench(revisions: list[str]) -> Results:
        progress.headline = "Re-measuring the head after dropping regressions"
        return benchmark(workspace, spec, revisions, thresholds, on_run, name="after-drop", runner=runner)[0]

    results, path = benchmark(
        workspace, spec, revisions_to_measure(workspace, progress.baseline), thresholds, on_run, runner=runner
    )
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
        drop=args.drop_regressions,
        rebench=rebench,
        results_path=str(path),
    )
    return results


def cmd_bench(args: argparse.Namespace, tracker: Tracker | None = None) -> int:
    """``bot bench [REV...]``: the given revisions, or the baseline and every bot commit of the branch.

    From a ``/bot bench`` comment (``tracker`` given) the results, verdict and note comments are updated too.
    """
    workspace = Workspace(args.repo)
    workspace.check_ready()
    spec = bench_spec(workspace.root, args)
    if args.revs:
        revisions = [workspace.repo.commit(r).hexsha for r in args.revs]
    else:
        revisions = revisions_to_measure(workspace, workspace.baseline())
    results, path = benchmark(workspace, spec, revisions, runner=make_runner(args, workspace))
    issue = getattr(args, "issue", None)
    if tracker is not None and issue is not None:
        from bot.report import publish_reports

        issue = int(issue) if str(issue).isdigit() else issue
        publish_reports(
            tracker,
            issue,
            None,
            None,
            results,
            workspace,
            commit_url=getattr(tracker, "commit_url", None),
            results_path=str(path),
        )
    print(f"results: {path} ({len(results.runs)} runs, {len(results.failed_runs)} failed)")
    for workload, summary in results.summary.items():
        print(f"\n{workload}:")
        for commit in results.commits:
            entry = summary["commits"].get(commit.sha, {})
            median = entry.get("median")
            cumulative = (entry.get("cumulative") or {}).get("ratio")
            shown = f"{median:,.1f}" if median is not None else "not measured"
            change = f"{cumulative - 1:+.1%} vs baseline" if cumulative else ""
            print(f"  {commit.sha[:7]} {commit.optimization or 'baseline':<20} {shown:>14}  {change}")
    return 1 if results.failed_runs else 0
