"""Where the spread of turn-taking trials (``bot calibrate --interleave``) lies: within a run, between runs of
one commit, and in the per-round comparison that ``bot bench`` judges.

For each trial's results JSON in a folder it prints, per commit, the runs' throughput by round, the CV of the
windows within a run (median over runs) and the CV between its runs; then, per commit against the baseline,
the log-ratio of each round and their standard deviation (what the paired interval is made of), by three
estimators: the runs' medians as ``bot bench`` compares them, matched windows, and matched steps.

Usage: python -m experiments.calibration.windows FOLDER [--workload loop]
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from benchmarks.results import Results
from benchmarks.stats import cv


def trial_table(results: Results, workload: str) -> list[str]:
    """The lines for one trial."""
    shas = [commit.sha for commit in results.commits]
    by_commit: dict[str, dict[int, float]] = {sha: {} for sha in shas}
    window_cvs: dict[str, list[float]] = {sha: [] for sha in shas}
    for run in results.runs:
        if run.workload != workload or not run.ok or run.repeat < 0:
            continue
        by_commit[run.commit][run.repeat] = run.metrics["tokens_per_s"]
        windows = [v for v in (run.metrics.get("turns") or {}).get("tokens_per_s", []) if v]
        if len(windows) > 1:
            window_cvs[run.commit].append(cv(windows))
    lines = []
    for index, sha in enumerate(shas):
        values = by_commit[sha]
        within = statistics.median(window_cvs[sha]) if window_cvs[sha] else None
        between = cv(list(values.values())) if len(values) > 1 else None
        lines.append(
            f"  {index} {sha[:7]}  rounds {len(values)}  "
            + " ".join(f"{values[r]:.0f}" for r in sorted(values))
            + f"  | window CV {_percent(within)}  run CV {_percent(between)}"
        )
    runs = {
        (run.commit, run.repeat): run.metrics for run in results.runs if run.ok and run.workload == workload
    }
    for index, sha in enumerate(shas[1:], start=1):
        rounds = sorted(r for r in by_commit[shas[0]] if r in by_commit[sha])
        if len(rounds) < 2:
            continue
        lines.append(f"  {index} vs 0, per round (SD of the round log-ratios):")
        for name, estimate in ESTIMATORS.items():
            ratios = [estimate(runs[(shas[0], r)], runs[(sha, r)]) for r in rounds]
            if None in ratios:
                continue
            lines.append(
                f"    {name:<22} mean {math.expm1(statistics.mean(ratios)):+.2%}  SD {statistics.stdev(ratios):.4f}  "
                + " ".join(f"{math.expm1(r):+.1%}" for r in ratios)
            )
    return lines


def _run_medians(base: dict, other: dict) -> float:
    """What ``bot bench`` compares: the log-ratio of the runs' median per-step throughput."""
    return math.log(other["tokens_per_s"] / base["tokens_per_s"])


def _matched_windows(base: dict, other: dict) -> float | None:
    """The mean log-ratio of window ``i`` of one run against window ``i`` of the other (same batches, taken
    next to each other in ABBA order)."""
    pairs = zip(
        (base.get("turns") or {}).get("tokens_per_s", []),
        (other.get("turns") or {}).get("tokens_per_s", []),
        strict=False,
    )
    ratios = [math.log(b / a) for a, b in pairs if a and b]
    return statistics.mean(ratios) if ratios else None


def _matched_steps(base: dict, other: dict) -> float | None:
    """The mean log-ratio of step ``i``'s duration in one run against the other's (same batch), where both runs
    recorded their steps and fed the same tokens."""
    first, second = base.get("per_step"), other.get("per_step")
    if not first or not second or first["tokens"] != second["tokens"]:
        return None
    return statistics.mean(math.log(a / b) for a, b in zip(first["ms"], second["ms"], strict=True))


ESTIMATORS = {
    "run medians (bench)": _run_medians,
    "matched windows": _matched_windows,
    "matched steps": _matched_steps,
}


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--workload", default="loop")
    args = parser.parse_args()
    for path in sorted(args.folder.glob("*.json")):
        if path.name == "summary.json":
            continue
        results = Results.load(path)
        print(f"{path.name} ({results.device}):")
        print("\n".join(trial_table(results, args.workload)))


if __name__ == "__main__":
    main()
