"""`bot bench` and `bot calibrate` stopped by SIGTERM (a scheduler's or a shutting-down machine's signal) while
they run: the runs that finished are saved beside the results, nothing else is touched, and the exit says where
they are. Real processes: the CLI, the runner, the launch wrapper and a small torch loop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest
from git_repos import commit_all, make_repo
from test_calibrate import LOOP

from benchmarks.results import INTERRUPTED, Results

PYPROJECT = """\
[tool.bot.workloads.loop]
command = "python loop.py --steps {steps}"
steps = 12
warmup_steps = 2
repeats = 20
max_repeats = 20
min_time_s = 0
primary = "samples_per_s"
"""


def interrupt_once_runs_finish(command: list[str], root: Path, runs: int) -> subprocess.CompletedProcess:
    """Start the bot, send SIGTERM once ``runs`` runs have written their metrics under ``root/.bot``, wait."""
    process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list((root / ".bot").rglob("metrics.json"))) < runs:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the runs did not finish in time"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.fixture
def target(tmp_path: Path) -> tuple[git.Repo, Path]:
    root = tmp_path / "target"
    repo = make_repo(root, {"loop.py": LOOP, "pyproject.toml": PYPROJECT, ".gitignore": ".bot/\n"})
    (root / "loop.py").write_text(LOOP + "# unchanged behaviour\n")
    commit_all(repo, "perf: a comment")
    return repo, root


@pytest.mark.slow
def test_bench_keeps_the_finished_runs_and_touches_nothing_else(target: tuple[git.Repo, Path]) -> None:
    repo, root = target
    earlier = root / ".bot" / "results" / "main.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("the last complete bench\n")
    bench = [sys.executable, "-m", "bot.cli", "bench", "HEAD~1", "HEAD", "--max-host-load", "1"]
    done = interrupt_once_runs_finish(bench, root, runs=3)

    assert done.returncode == 130, done.stderr
    [kept] = (root / ".bot" / "results").glob("main-*-interrupted.json")  # a file of its own, beside others
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("bot: interrupted; the ") and message.endswith(
        f"measured runs that finished are in {kept}"
    )
    results = Results.load(kept)
    assert results.stopping["loop"]["reason"] == INTERRUPTED
    assert 2 <= len(results.runs) < 40 and all(run.ok for run in results.runs)
    assert int(message.split("the ")[1].split()[0]) == len(results.runs)
    # the last complete results and the commits' notes are as they were; no worktree, no change to the checkout
    assert earlier.read_text() == "the last complete bench\n"
    assert repo.git.notes("--ref", "perfbot", "list") == ""
    assert len(repo.git.worktree("list").splitlines()) == 1
    assert not repo.is_dirty(untracked_files=False)
    assert not any(root.joinpath(".bot", "bench").glob("bench-*/worktrees/*"))


@pytest.mark.slow
def test_calibrate_keeps_the_cut_short_trial_outside_the_rates(target: tuple[git.Repo, Path]) -> None:
    repo, root = target
    head = repo.head.commit.hexsha
    out = root / ".bot" / "cal"
    calibrate = [sys.executable, "-m", "bot.cli", "calibrate", "--trials", "3", "--out", str(out)]
    done = interrupt_once_runs_finish([*calibrate, "--max-host-load", "1"], root, runs=4)

    assert done.returncode == 130, done.stderr
    kept = out / "interrupted-00.json"
    assert done.stderr.strip().endswith(f"trial 1's finished runs are in {kept}, outside the rates")
    assert Results.load(kept).stopping["loop"]["reason"] == INTERRUPTED
    assert not list(out.glob("trial-*.json")) and not (out / "repo").exists()
    assert repo.head.commit.hexsha == head and not repo.is_dirty(untracked_files=False)
    summary = subprocess.run(
        [*calibrate[:4], "--trials", "0", "--out", str(out)], cwd=root, capture_output=True
    )
    assert summary.returncode == 2 and b"holds no trials" in summary.stderr
    assert os.listdir(out) == ["interrupted-00.json"]
