"""`bot bench` in a log: one plain line per finished run on stderr when it is not a terminal, so a CI log
shows a long bench moving. Real processes: the CLI, the runner, the launch wrapper and the tiny CPU loop."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from git_repos import commit_all, make_repo
from test_profiling import LOOP, PYPROJECT

from benchmarks.results import Results

RUN_LINE = re.compile(
    r"benchmarking (?P<done>\d+)/(?P<total>\d+): (?P<commit>[0-9a-f]{7}) loop repeat (?P<repeat>\d+): ok, "
    r"[\d,.]+ samples/s, \d+\.\d s"
)


@pytest.mark.slow
def test_a_bench_whose_output_is_not_a_terminal_prints_a_line_per_finished_run(tmp_path: Path) -> None:
    root = tmp_path / "target"
    repo = make_repo(root, {"loop.py": LOOP, "pyproject.toml": PYPROJECT, ".gitignore": ".bot/\n"})
    base = repo.head.commit.hexsha
    (root / "loop.py").write_text(LOOP + "# unchanged behaviour\n")
    head = commit_all(repo, "perf: a comment")
    once = ["--repeats", "1", "--max-repeats", "1", "--min-time", "0", "--max-host-load", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "bench", base, head, *once],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    matches = [RUN_LINE.fullmatch(line) for line in lines]
    assert all(matches), lines
    runs = Results.load(next((root / ".bot" / "results").glob("*.json"))).runs
    assert [(m["done"], m["total"], m["commit"], m["repeat"]) for m in matches if m] == [
        ("1", "2", base[:7], "0"),
        ("2", "2", head[:7], "0"),
    ]
    assert [(run.commit, run.repeat) for run in runs] == [(base, 0), (head, 0)]
