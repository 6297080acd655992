"""What the rounds of a cut-off calibration trial said, round by round.

A trial that the machine's end cut off writes no results file, but every finished run left its metrics in the
trial's scratch repository (``.bot/bench/bench-*/runs/<sha>-<workload>-r<round>/metrics.json``); a trial that
was interrupted (SIGTERM, a command's time limit) keeps its finished runs in ``interrupted-NN.json``. This
prints, after every ``--every`` rounds, each commit's effect against the baseline (the measured commit that all
others descend from) as ``bot bench`` would judge it (paired by round, :func:`benchmarks.stats.compare`), then
each commit's run-to-run CV and the smallest effect the last intervals would detect 95% of the time
(:func:`bot.commands.calibrate.smallest_detectable`). Several results files (trials on different machines)
pool their rounds: commits are matched by subject, and each round stays paired within its own machine.

Usage: python -m experiments.calibration.rounds TRIAL_REPO [--workload loop] [--every 4]
       python -m experiments.calibration.rounds interrupted-00.json [MORE.json ...] --workload sft
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import git

from benchmarks.stats import DEFAULT_THRESHOLDS, compare, cv
from bot.commands.calibrate import smallest_detectable

ROUNDS_PER_FILE = 1000  # pooled results files: file k's rounds are numbered from k * 1000
# A measured run's folder, as benchmarks.runner.BenchJob.key names it (calibration runs do not match).
RUN_FOLDER = re.compile(r"(?P<sha>[0-9a-f]+)-(?P<workload>.+)-r(?P<round>\d+)$")


def values_by_commit(repo: Path, workload: str) -> dict[str, dict[int, float]]:
    """``{sha prefix: {round: tokens/s}}`` of the workload's successful measured runs under ``repo/.bot/bench``."""
    values: dict[str, dict[int, float]] = {}
    for metrics_path in repo.glob(".bot/bench/bench-*/runs/*/metrics.json"):
        match = RUN_FOLDER.match(metrics_path.parent.name)
        metrics = json.loads(metrics_path.read_text())
        if match and match["workload"] == workload and metrics.get("status") == "ok":
            values.setdefault(match["sha"], {})[int(match["round"])] = metrics["tokens_per_s"]
    return values


def values_by_subject(results: list[Path], workload: str) -> tuple[dict[str, dict[int, float]], str]:
    """``({commit subject: {round: tokens/s}}, baseline subject)`` of the workload's successful runs in bench
    results files; file ``k``'s round ``r`` is round ``k * ROUNDS_PER_FILE + r``, so files never share a round."""
    values: dict[str, dict[int, float]] = {}
    baselines = set()
    for k, path in enumerate(results):
        data = json.loads(path.read_text())
        subjects = {commit["sha"]: commit["subject"] for commit in data["commits"]}
        baselines.add(subjects[data["baseline"]])
        for run in data["runs"]:
            if run["workload"] == workload and run["status"] == "ok":
                by_round = values.setdefault(subjects[run["commit"]], {})
                by_round[k * ROUNDS_PER_FILE + run["repeat"]] = run["metrics"]["tokens_per_s"]
    if len(baselines) > 1:
        raise SystemExit(f"the results files measure different baselines: {', '.join(sorted(baselines))}")
    return values, baselines.pop() if baselines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sources", type=Path, nargs="+", help="the trial's scratch repository, or bench results files"
    )
    parser.add_argument("--workload", default="loop")
    parser.add_argument("--every", type=int, default=4, help="print the effects after every N rounds")
    args = parser.parse_args()
    if len(args.sources) == 1 and args.sources[0].is_dir():
        repo = args.sources[0]
        by_sha = values_by_commit(repo, args.workload)
        if not by_sha:
            raise SystemExit(f"no finished {args.workload} runs under {repo}/.bot/bench")
        repository = git.Repo(repo)
        commits = {sha: repository.commit(sha) for sha in by_sha}
        first = min(by_sha, key=lambda sha: sum(1 for _ in repository.iter_commits(commits[sha])))
        values = {commits[sha].summary: by_round for sha, by_round in by_sha.items()}
        baseline = commits[first].summary
    else:
        values, baseline = values_by_subject(args.sources, args.workload)
        if not values:
            raise SystemExit(f"no finished {args.workload} runs in {', '.join(map(str, args.sources))}")
    ordered = sorted({r for by_round in values.values() for r in by_round})
    half_widths: list[float] = []
    for subject in (subject for subject in values if subject != baseline):
        print(subject)
        for upto in [*range(args.every, len(ordered), args.every), len(ordered)]:
            kept = set(ordered[:upto])
            effect = compare(
                {r: v for r, v in values[subject].items() if r in kept},
                {r: v for r, v in values[baseline].items() if r in kept},
                higher_is_better=True,
            )
            low, high = effect["ci"]
            print(
                f"  {effect['n']:>2} rounds: {effect['ratio'] - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}] "
                f"p={effect['p_value']:.3f} {effect['verdict']}"
            )
        half_widths.append(effect["half_width"])
    for subject, by_round in values.items():
        role = "baseline" if subject == baseline else subject
        print(f"CV {cv(list(by_round.values())):.1%} over {len(by_round)} runs: {role}")
    detectable = smallest_detectable(half_widths, DEFAULT_THRESHOLDS.min_effect)
    widths = ", ".join(f"±{width:.1%}" for width in half_widths)
    print(f"smallest effect detected ≥ 95% of the time at the last intervals ({widths}): {detectable:.1%}")


if __name__ == "__main__":
    main()
