"""``bot calibrate``: the planted-effects self-check of the benchmarks.

In a scratch clone of the repository's HEAD it commits a no-op and a planted slowdown (a
``.perfbot-plant.json`` that makes the launch wrapper wait that fraction of every step, see
:mod:`benchmarks.launch`), both claiming a win in their subjects as an optimization would, then benchmarks
baseline, no-op and slowdown with the ordinary ``bot bench`` machinery, settings and time budget, ``--trials``
times; the first trial's calibration of each workload's steps (and time budget) holds for the later trials of
the call. Each trial is judged against the baseline: a no-op measured as a significant win is a false win (as a
regression, a false alarm); a planted slowdown not measured as a regression is a miss. It prints the rates,
the time each trial took, and the smallest effect the intervals reached would detect 95% of the time. The
scratch clone is removed; each trial's results JSON and the summary stay in the output folder (a new one under
``.bot/calibrate/``, or ``--out``, where trials of earlier calls count too: a long figure can be built over
several calls). An interrupted trial (Ctrl-C, SIGTERM) keeps its finished runs in ``interrupted-NN.json`` beside
them, outside the rates.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import git

from benchmarks.launch import PLANT_FILE
from benchmarks.results import BenchInterrupted, Results, run_bench
from benchmarks.spec import BenchSpec
from benchmarks.stats import DEFAULT_THRESHOLDS, INSUFFICIENT, REGRESSION, WIN, detectable_effect
from bot.benchmarking import BenchOptions, bench_spec, bench_thresholds, make_runner
from bot.commands.options import add_bench_arguments, bench_options
from bot.commands.table import FromComment
from bot.conventions import TRAILER_OPTIMIZATION, bot_git_environment, state_dir
from bot.errors import BadInput
from bot.formatting import duration, percent
from bot.history import describe_commits
from bot.measurements import measurement
from bot.workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The repository, trials, planted slowdowns, where trials are kept, and the benchmark options."""
    parser.add_argument("--repo", default=".", help="target repository (default: .)")
    parser.add_argument(
        "--trials", type=int, default=20, help="benchmarks of baseline, no-op and plants to run (20; 0: none)"
    )
    parser.add_argument(
        "--slowdown",
        type=float,
        action="append",
        metavar="FRACTION",
        help="planted per-step slowdown, repeatable (default 0.10: every step waits 10%% of its time)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="folder of the trials' results (default: a new one under .bot/calibrate); trials already there "
        "count in the rates, so several calls can add up to one figure",
    )
    add_bench_arguments(parser)


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Run the trials and print the rates over every trial in the folder; exit 1 when the false-win or miss
    rate exceeds 5%."""
    if comment is not None:
        raise BadInput("`bot calibrate` runs many benchmarks; run it from a shell on the runner")
    if args.trials < 0:
        raise BadInput("--trials must be 0 or more")
    if args.drop_regressions:
        raise BadInput("--drop-regressions reverts commits; the self-check has nothing to revert")
    slowdowns = args.slowdown or [0.10]
    if any(not 0 < s < 10 for s in slowdowns):
        raise BadInput("--slowdown must be a fraction above 0 (0.10 for 10%)")
    options = bench_options(args)
    root = Workspace(args.repo).root
    out = (
        Path(args.out)
        if args.out
        else state_dir(root) / "calibrate" / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    )
    out.mkdir(parents=True, exist_ok=True)
    done = len(list(out.glob("trial-*.json")))
    if args.trials:
        _run_trials(root, out, options, slowdowns, range(done, done + args.trials))
    trials = [Results.load(path) for path in sorted(out.glob("trial-*.json"))]
    if not trials:
        raise BadInput(f"{out} holds no trials; run some with --trials N")
    summary = _summary([_judge(results) for results in trials])
    summary.update(device=trials[-1].device, results=str(out))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2) if args.json else _report(summary))
    rates = [summary["false_win_rate"], *(p["miss_rate"] for p in summary["planted"])]
    failing = any(rate is None or rate > 0.05 for rate in rates)
    return 1 if failing else 0


def _run_trials(root: Path, out: Path, options: BenchOptions, slowdowns: list[float], numbers: range) -> None:
    """Benchmark baseline, no-op and plants in a scratch clone once per trial number, saving each trial."""
    clone_dir = out / "repo"
    shutil.rmtree(clone_dir, ignore_errors=True)
    clone = git.Repo.clone_from(root, clone_dir)
    try:
        commits = describe_commits(clone, _plant(clone, slowdowns))
        spec = bench_spec(clone_dir, options)
        runner = make_runner(options, Workspace(clone_dir))
        thresholds = bench_thresholds(options)
        for number in numbers:
            try:
                results = run_bench(clone, spec, commits, runner, thresholds=thresholds)
            except BenchInterrupted as interrupted:  # its runs are kept aside: a cut-short trial is not one
                if interrupted.results is not None:
                    kept = interrupted.results.save(out / f"interrupted-{number:02d}.json")
                    interrupted.args = (
                        f"trial {number + 1}'s finished runs are in {kept}, outside the rates",
                    )
                raise
            results.save(out / f"trial-{number:02d}.json")
            print(f"trial {number + 1}: {_trial_line(_judge(results))}", file=sys.stderr, flush=True)
            spec = _keep_calibration(spec, results)
    finally:
        shutil.rmtree(clone_dir, ignore_errors=True)


def _keep_calibration(spec: BenchSpec, results: Results) -> BenchSpec:
    """The spec with each workload's steps fixed at what ``results`` calibrated, so later trials of the call
    measure the same window without calibration runs of their own (pyperf and asv calibrate a benchmark once),
    under the time budget the calibration chose."""
    workloads = dict(spec.workloads)
    for name, found in results.calibration.items():
        if name in workloads and found.get("min_time_s"):
            workloads[name] = replace(workloads[name], steps=found["steps"], min_time_s=0)
    budgets = [stop["budget_s"] for stop in results.stopping.values() if stop.get("budget_s")]
    return replace(spec, workloads=workloads, time_budget_s=spec.time_budget_s or max(budgets, default=None))


def _plant(repo: git.Repo, slowdowns: list[float]) -> list[str]:
    """Commit the no-op and one planted slowdown per fraction on the clone's HEAD; baseline first."""
    commits = [repo.head.commit.hexsha]
    env = bot_git_environment()
    repo.git.commit(
        "--allow-empty",
        "-q",
        "-m",
        f"perf(calibrate): no-op (+10% tokens/s)\n\n{TRAILER_OPTIMIZATION}: calibrate_noop",
        env=env,
    )
    commits.append(repo.head.commit.hexsha)
    plant = Path(repo.working_dir) / PLANT_FILE
    for slowdown in slowdowns:
        plant.write_text(json.dumps({"slowdown": slowdown}) + "\n", encoding="utf-8")
        repo.git.add("-f", PLANT_FILE)
        repo.git.commit(
            "-q",
            "-m",
            f"perf(calibrate): planted {slowdown:.0%} per-step slowdown (+10% tokens/s)\n\n"
            f"{TRAILER_OPTIMIZATION}: calibrate_slowdown",
            env=env,
        )
        commits.append(repo.head.commit.hexsha)
    return commits


def _judge(results: Results) -> dict[str, Any]:
    """A trial's verdicts of the no-op (the second commit) and the plants (those after it) against the baseline,
    per workload, with the intervals, the baseline's run-to-run CV, the rounds and why they stopped, and how long
    the trial took."""
    seconds = (
        datetime.fromisoformat(results.finished_at) - datetime.fromisoformat(results.started_at)
    ).total_seconds()
    judged: dict[str, Any] = {
        "seconds": seconds,
        "min_effect": float(results.thresholds["min_effect"]),
        "workloads": {},
    }
    for workload, stop in results.stopping.items():
        baseline, *others = (measurement(results, workload, info.sha) for info in results.commits)
        effects = [measured.cumulative if measured else None for measured in others]
        planted = [_planted_slowdown(results, info.sha) for info in results.commits[2:]]
        judged["workloads"][workload] = {
            # the baseline's run-to-run CV, as the bench summarized its runs: what the intervals narrow from
            "baseline_cv": baseline.cv if baseline else None,
            "rounds": stop.get("rounds"),
            "stopped": stop.get("reason"),
            "budget_s": stop.get("budget_s"),
            "noop": _effect(effects[0]),
            "planted": [_effect(e) | {"slowdown": s} for e, s in zip(effects[1:], planted, strict=True)],
        }
    return judged


def _planted_slowdown(results: Results, sha: str) -> float | None:
    """The slowdown the runs of a planted commit report."""
    return next(
        (
            run.metrics["planted_slowdown"]
            for run in results.runs
            if run.commit == sha and run.metrics and "planted_slowdown" in run.metrics
        ),
        None,
    )


def _effect(comparison: Any) -> dict[str, Any]:
    if comparison is None:
        return {"verdict": None, "ratio": None, "ci": None}
    return {"verdict": comparison.verdict, "ratio": comparison.ratio, "ci": comparison.ci}


def _trial_line(trial: dict[str, Any]) -> str:
    parts = []
    for workload, judged in trial["workloads"].items():
        planted = ", ".join(f"plant {p['verdict']} {percent(p['ratio'])}" for p in judged["planted"])
        noop = judged["noop"]
        parts.append(
            f"{workload}: no-op {noop['verdict']} {percent(noop['ratio'])}, {planted} "
            f"({judged['rounds']} rounds, {judged['stopped']})"
        )
    return "; ".join(parts) + f"; {duration(trial['seconds'])}"


def _summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates over all trials and workloads, and the smallest effect detectable at 95% from the intervals.
    A trial whose no-op or plant could not be tested at all (every run failed or was disturbed: the bench said
    "insufficient data") is inconclusive: counted, and left out of that rate."""
    judged = [w for trial in trials for w in trial["workloads"].values()]
    noops = [w["noop"] for w in judged if _conclusive(w["noop"])]
    planted = []
    for slowdown in sorted({p["slowdown"] for w in judged for p in w["planted"]}, key=str):
        everything = [p for w in judged for p in w["planted"] if p["slowdown"] == slowdown]
        effects = [e for e in everything if _conclusive(e)]
        ratios = [e["ratio"] for e in effects if e["ratio"]]
        planted.append(
            {
                "slowdown": slowdown,
                "trials": len(effects),
                "inconclusive": len(everything) - len(effects),
                "detected": sum(e["verdict"] == REGRESSION for e in effects),
                "miss_rate": _rate(sum(e["verdict"] != REGRESSION for e in effects), len(effects)),
                "measured_change": math.exp(statistics.fmean(math.log(r) for r in ratios)) - 1
                if ratios
                else None,
            }
        )
    half_widths = [
        max(e["ci"][1] / e["ratio"], e["ratio"] / e["ci"][0]) - 1
        for w in judged
        for e in [w["noop"], *w["planted"]]
        if e["ci"] and e["ratio"]
    ]
    min_effect = max(trial["min_effect"] for trial in trials)
    spreads = [w["baseline_cv"] for w in judged if w.get("baseline_cv") is not None]
    return {
        "trials": len(trials),
        "judged": len(judged),
        "noop_trials": len(noops),
        "noop_inconclusive": len(judged) - len(noops),
        "false_wins": sum(e["verdict"] == WIN for e in noops),
        "false_win_rate": _rate(sum(e["verdict"] == WIN for e in noops), len(noops)),
        "false_alarms": sum(e["verdict"] == REGRESSION for e in noops),
        "planted": planted,
        "median_half_width": statistics.median(half_widths) if half_widths else None,
        "median_baseline_cv": statistics.median(spreads) if spreads else None,
        "smallest_detectable": smallest_detectable(half_widths, min_effect),
        "min_effect": min_effect,
        "time_budget_s": sorted({w["budget_s"] for w in judged}, key=str),
        "trial_seconds": [trial["seconds"] for trial in trials],
        "rounds": [w["rounds"] for w in judged],
        "stopped": [w["stopped"] for w in judged],
    }


def _conclusive(effect: dict[str, Any]) -> bool:
    return effect["verdict"] not in (None, INSUFFICIENT)


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


def smallest_detectable(half_widths: list[float], min_effect: float) -> float | None:
    """The change a bench with the median interval half-width calls 95% of the time
    (:func:`benchmarks.stats.detectable_effect`)."""
    if not half_widths:
        return None
    return detectable_effect(
        statistics.median(half_widths), replace(DEFAULT_THRESHOLDS, min_effect=min_effect)
    )


def _percent(rate: float | None) -> str:
    return "no trials" if rate is None else f"{rate:.0%}"


def _report(summary: dict[str, Any]) -> str:
    seconds = summary["trial_seconds"]
    budgets = ", ".join(duration(b) for b in summary["time_budget_s"] if b is not None) or "none"
    lines = [
        f"{summary['trials']} trials on {summary['device']} ({summary['judged']} workload trials), "
        f"time budget {budgets} per trial; trials took {duration(min(seconds))}–{duration(max(seconds))} "
        f"(median {duration(statistics.median(seconds))})",
        f"no-op: {summary['false_wins']} false win(s) in {summary['noop_trials']} "
        f"({_percent(summary['false_win_rate'])}), {summary['false_alarms']} false alarm(s) (called a "
        f"regression); {summary['noop_inconclusive']} inconclusive (no undisturbed runs to test)",
    ]
    for planted in summary["planted"]:
        change = planted["measured_change"]
        lines.append(
            f"planted {planted['slowdown']:.0%} slowdown: named a regression in {planted['detected']} of "
            f"{planted['trials']} (miss rate {_percent(planted['miss_rate'])}; {planted['inconclusive']} "
            f"inconclusive); measured {percent(1 + change) if change is not None else 'nothing'} (geometric mean)"
        )
    if summary["smallest_detectable"] is not None:
        lines.append(
            f"median interval half-width ±{summary['median_half_width']:.1%}: a change of "
            f"{summary['smallest_detectable']:.1%} or more is detected ≥ 95% of the time "
            f"(minimum effect {summary['min_effect']:.0%})"
        )
    if summary["median_baseline_cv"] is not None:
        lines.append(
            f"the baseline's run-to-run CV: median {summary['median_baseline_cv']:.2%} (what the intervals "
            "narrow from; a host-bound workload spreads more than a device-bound one)"
        )
    stops = ", ".join(f"{n} {reason}" for reason, n in sorted(Counter(summary["stopped"]).items()))
    lines.append(f"rounds per trial: {min(summary['rounds'])}–{max(summary['rounds'])}; stopped: {stops}")
    lines.append(f"results: {summary['results']}")
    return "\n".join(lines)
