"""The short table of a ``measure.sh`` run per repository: each commit benched, its primary metric's median and
its change against the baseline (with the interval), read from the results JSON each run left in OUT/NAME/.
``python -m experiments.public_repos.table OUT``."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(out: Path) -> list[str]:
    """One line per commit of every results file under ``out``; a repository with none says so."""
    lines = [
        f"{'repo':<9} {'workload':<15} {'commit':<8} {'tokens/s':>12} {'vs baseline':>26} {'n':>2}  subject"
    ]
    for folder in sorted(path for path in out.iterdir() if path.is_dir()):
        found = sorted(folder.glob("*.json"))
        if not found:
            lines.append(f"{folder.name:<9} no results: see {folder}/bench.txt")
            continue
        results = json.loads(found[-1].read_text(encoding="utf-8"))
        subjects = {commit["sha"]: commit["subject"] for commit in results["commits"]}
        for workload, summary in results["summary"].items():
            for sha, measured in summary["commits"].items():
                median = measured.get("median")
                change = measured.get("cumulative") or measured.get("marginal")
                versus = ""
                if change:
                    low, high = change["ci"]
                    versus = f"{change['ratio'] - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}]"
                value = f"{median:,.0f}" if isinstance(median, int | float) else "failed"
                lines.append(
                    f"{folder.name:<9} {workload:<15} {sha[:7]:<8} {value:>12} {versus:>26} {measured['n']:>2}  "
                    f"{subjects.get(sha, '')[:60]}"
                )
    return lines


if __name__ == "__main__":
    print("\n".join(rows(Path(sys.argv[1]))))
