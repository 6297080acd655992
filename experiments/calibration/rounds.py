"""What the rounds of a cut-off calibration trial said, round by round.

A trial that the machine's end cut off writes no results file, but every finished run left its metrics in the
trial's scratch repository (``.bot/bench/bench-*/runs/<sha>-<workload>-r<round>/metrics.json``). This prints,
after every ``--every`` rounds, each commit's effect against the baseline (the measured commit that all others
descend from) as ``bot bench`` would judge it (paired by round, :func:`benchmarks.stats.compare`), then each
commit's run-to-run CV and the smallest effect the last intervals would detect 95% of the time
(:func:`bot.commands.calibrate.smallest_detectable`).

Usage: python -m experiments.calibration.rounds TRIAL_REPO [--workload loop] [--every 4]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import git

from benchmarks.stats import DEFAULT_THRESHOLDS, compare, cv
from bot.commands.calibrate import smallest_detectable

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path, help="the trial's scratch repository")
    parser.add_argument("--workload", default="loop")
    parser.add_argument("--every", type=int, default=4, help="print the effects after every N rounds")
    args = parser.parse_args()
    values = values_by_commit(args.repo, args.workload)
    if not values:
        raise SystemExit(f"no finished {args.workload} runs under {args.repo}/.bot/bench")
    repository = git.Repo(args.repo)
    commits = {sha: repository.commit(sha) for sha in values}
    baseline = min(values, key=lambda sha: sum(1 for _ in repository.iter_commits(commits[sha])))
    rounds = max(max(by_round) for by_round in values.values()) + 1
    half_widths: list[float] = []
    for sha in (sha for sha in values if sha != baseline):
        print(commits[sha].summary)
        for upto in [*range(args.every, rounds, args.every), rounds]:
            effect = compare(
                {r: v for r, v in values[sha].items() if r < upto},
                {r: v for r, v in values[baseline].items() if r < upto},
                higher_is_better=True,
            )
            low, high = effect["ci"]
            print(
                f"  {effect['n']:>2} rounds: {effect['ratio'] - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}] "
                f"p={effect['p_value']:.3f} {effect['verdict']}"
            )
        half_widths.append(effect["half_width"])
    for sha, by_round in values.items():
        role = "baseline" if sha == baseline else commits[sha].summary
        print(f"CV {cv(list(by_round.values())):.1%} over {len(by_round)} runs: {role}")
    detectable = smallest_detectable(half_widths, DEFAULT_THRESHOLDS.min_effect)
    widths = ", ".join(f"±{width:.1%}" for width in half_widths)
    print(f"smallest effect detected ≥ 95% of the time at the last intervals ({widths}): {detectable:.1%}")


if __name__ == "__main__":
    main()
