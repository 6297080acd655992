"""Ctrl-C as a terminal sends it: SIGINT (or SIGTERM) to the whole process group of a real ``bot`` process, its
git processes and benchmark runs included, at named points of ``bot apply``, ``bot apply --bench`` and ``bot
review``. Each leaves a record saying where it stopped, a clean tree on the branch's last complete commit, and a
next run that resumes. A point is made deterministic by a wrapper that pauses the process there (the signal
ends the pause); the bench is signalled once its runs have written their metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest
from git_repos import commit_all, committed_example, make_repo
from test_bench_interrupted import PYPROJECT
from test_calibrate import LOOP

from benchmarks.results import INTERRUPTED, Results
from bot.progress import Progress
from bot.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
BRANCH = "bot/plan-tier-1"
CHEAP_PLAN = "## Tier 1\n\n- opt:dataloader_workers\n- opt:packing\n- opt:dpo_precompute\n"
ORDER = ["dataloader_workers", "packing", "dpo_precompute"]

# `bot` with Workspace.commit wrapped: at the commit of one optimization it pauses, before or after committing.
PAUSED_AT_COMMIT = """\
import sys, time
from bot.workspace import Workspace
commit = Workspace.commit

def pausing(self, paths, message):
    sha = None if {before} else commit(self, paths, message)
    if "Bot-Optimization: {optimization}\\n" in message:
        print("paused", file=sys.stderr, flush=True)
        time.sleep(120)
    return sha or commit(self, paths, message)

Workspace.commit = pausing
from bot.cli import main
sys.exit(main(sys.argv[1:]))
"""

# `bot` with the review itself pausing.
PAUSED_IN_REVIEW = """\
import sys, time
from bot.commands import review

def pausing(*args, **kwargs):
    print("paused", file=sys.stderr, flush=True)
    time.sleep(120)

review.review_range = pausing
from bot.cli import main
sys.exit(main(sys.argv[1:]))
"""


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}


def _as_a_terminal_job() -> None:
    """SIGINT at its default in the child, as a shell starts a foreground job: a pytest-xdist worker may hold
    it ignored (seen on a busy 2-core run: every SIGINT case of this file failed on one worker, SIGTERM ones
    passed), and Python leaves a SIGINT ignored at start-up ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(argv: list[str], root: Path) -> subprocess.Popen:
    """The command in a process group of its own, as a terminal starts a job."""
    return subprocess.Popen(
        [sys.executable, *argv], cwd=root, env=environment(), start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_a_terminal_job,
    )  # fmt: skip


def wait_until_paused(process: subprocess.Popen) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        if line.strip() == "paused":
            return
    raise AssertionError(f"never paused: {process.communicate()}")


def finish(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def bot(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], cwd=root, env=environment(), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


def record(root: Path) -> Progress:
    progress = Progress.from_comment((root / ".bot/issues/plan/progress.md").read_text(), 1)
    assert progress is not None
    return progress


def optimizations_on_branch(root: Path) -> list[str]:
    workspace = Workspace(root)
    return [c.optimization for c in workspace.bot_commits(workspace.baseline())]


def assert_consistent(root: Path, repo: git.Repo, progress: Progress) -> None:
    """A clean tree on the work branch, and every row as the branch has it: landed with its commit, or not."""
    assert repo.active_branch.name == BRANCH and not repo.is_dirty(untracked_files=True)
    on_branch = {c.optimization: c.sha for c in Workspace(root).bot_commits(progress.baseline)}
    for row in progress.rows:
        assert row.status.value != "applying"
        assert (row.optimization in on_branch) == row.status.landed, row
        if row.status.landed:
            assert row.commit == on_branch[row.optimization]


def assert_resumes(root: Path) -> None:
    """The same command picks the run up and ends done, each optimization committed once, in plan order."""
    resumed = bot(root, "apply", "--tier", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert record(root).headline.startswith("Done: 3 landed")
    assert optimizations_on_branch(root) == ORDER


@pytest.fixture
def example(tmp_path: Path) -> tuple[Path, git.Repo]:
    root = tmp_path / "example"
    repo = committed_example(root)
    (root / "PLAN.md").write_text(CHEAP_PLAN)
    commit_all(repo, "the cheap items of tier 1")
    return root, repo


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_mid_change_leaves_the_last_commit_and_says_where(example, stop) -> None:
    root, repo = example
    paused = PAUSED_AT_COMMIT.format(before=True, optimization="packing")
    process = start(["-c", paused, "apply", "--tier", "1"], root)
    wait_until_paused(process)
    assert repo.is_dirty()  # packing's edits are in the tree, not committed
    os.killpg(process.pid, stop)
    code, stderr = finish(process)

    assert code == 130 and stderr.strip().endswith("bot: interrupted"), stderr
    progress = record(root)
    assert progress.headline == "Interrupted at 2/3 (packing); run the same command again to resume"
    assert [r.status.value for r in progress.rows] == ["landed", "interrupted", "pending"]
    assert_consistent(root, repo, progress)
    assert optimizations_on_branch(root) == ["dataloader_workers"]
    status = bot(root, "status")
    assert status.returncode == 0 and "Interrupted at 2/3 (packing)" in status.stdout
    assert "⏹ interrupted" in status.stdout and "applying" not in status.stdout
    assert_resumes(root)


def test_a_commit_made_just_before_the_signal_is_recorded_as_landed(example) -> None:
    root, repo = example
    paused = PAUSED_AT_COMMIT.format(before=False, optimization="packing")
    process = start(["-c", paused, "apply", "--tier", "1"], root)
    wait_until_paused(process)
    os.killpg(process.pid, signal.SIGINT)
    code, stderr = finish(process)

    assert code == 130, stderr
    progress = record(root)
    assert progress.headline.startswith("Interrupted at 2/3 (packing)")
    assert [r.status.value for r in progress.rows] == ["landed", "landed", "pending"]
    assert_consistent(root, repo, progress)
    assert optimizations_on_branch(root) == ["dataloader_workers", "packing"]
    assert_resumes(root)


def test_ctrl_c_pressed_again_during_the_cleanup_does_not_cut_the_record_short(example) -> None:
    root, repo = example
    paused = PAUSED_AT_COMMIT.format(before=True, optimization="packing")
    process = start(["-c", paused, "apply", "--tier", "1"], root)
    wait_until_paused(process)
    deadline = time.monotonic() + 3
    while process.poll() is None and time.monotonic() < deadline:  # an impatient user: Ctrl-C every 20 ms
        try:
            os.killpg(process.pid, signal.SIGINT)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    code, stderr = finish(process)

    # The cleanup finished under the later signals; one that comes after it may stop the exit itself.
    assert code in (130, -signal.SIGINT), stderr
    progress = record(root)
    assert progress.headline.startswith("Interrupted at 2/3 (packing)")
    assert_consistent(root, repo, progress)
    assert_resumes(root)


@pytest.fixture
def loop(tmp_path: Path) -> tuple[Path, git.Repo]:
    """A tiny AdamW loop that two cheap optimizations change, benchmarked in two rounds."""
    root = tmp_path / "loop"
    train = LOOP.replace("torch.optim.SGD(", "torch.optim.AdamW(")
    bench = PYPROJECT.replace("repeats = 20", "repeats = 1").replace("steps = 12", "steps = 6")
    files = {
        "loop.py": train,
        "pyproject.toml": bench,
        "PLAN.md": "## Tier 1\n\n- opt:fused_adamw\n- opt:tf32\n",
    }
    return root, make_repo(root, files)


@pytest.mark.slow
def test_apply_interrupted_while_benchmarking_keeps_a_partial_record_marked_so(loop) -> None:
    root, repo = loop
    argv = ["-m", "bot.cli", "apply", "--tier", "1", "--bench", "--max-host-load", "1"]
    process = start(argv, root)
    deadline = time.monotonic() + 120
    while len(list((root / ".bot").rglob("metrics.json"))) < 2:  # a warm-up, then a measured run
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the runs did not finish in time"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    code, stderr = finish(process)

    assert code == 130 and "Traceback" not in stderr, stderr
    results = root / ".bot/results"
    # one file of its own, marked interrupted, and none that claims a finished bench
    [kept] = results.glob("bot-plan-tier-1-*.json")
    assert kept.name.endswith("-interrupted.json"), kept.name
    partial = Results.load(kept)
    assert partial.stopping["loop"]["reason"] == INTERRUPTED and partial.runs
    progress = record(root)
    assert progress.headline == (
        f"Interrupted while benchmarking; the {len(partial.runs)} measured runs that finished are in "
        f"{kept}; run the same command again to resume"
    )
    assert_consistent(root, repo, progress)
    assert optimizations_on_branch(root) == ["fused_adamw", "tf32"]
    assert len(repo.git.worktree("list").splitlines()) == 1

    resumed = bot(root, "apply", "--tier", "1", "--bench", "--max-host-load", "1")
    assert resumed.returncode == 0, resumed.stderr
    # both commits landed before the interrupt: the resumed run only benchmarks
    assert (
        record(root).headline == "Benchmarked; nothing new to commit: all 2 items are already on the branch"
    )
    [finished] = set(results.glob("bot-plan-tier-1-*.json")) - {kept}  # the interrupted one is kept beside it
    assert Results.load(finished).stopping["loop"]["reason"] != INTERRUPTED
    assert optimizations_on_branch(root) == ["fused_adamw", "tf32"]


def test_an_interrupted_review_posts_no_verdict_and_status_says_so(loop) -> None:
    root, repo = loop
    assert bot(root, "apply", "--tier", "1").returncode == 0
    head = repo.head.commit.hexsha
    process = start(["-c", PAUSED_IN_REVIEW, "review", "--post"], root)
    wait_until_paused(process)
    os.killpg(process.pid, signal.SIGINT)
    code, stderr = finish(process)

    assert code == 130 and stderr.strip().endswith("bot: interrupted"), stderr
    assert not (root / ".bot/issues/plan/reviewer-verdict.md").exists()
    assert repo.head.commit.hexsha == head and not repo.is_dirty(untracked_files=True)
    status = bot(root, "status")
    assert "review interrupted while reviewing the branch: no verdict was posted" in status.stdout

    reviewed = bot(root, "review", "--post")
    assert reviewed.returncode in (0, 1), reviewed.stderr  # a verdict, whichever it is
    assert (root / ".bot/issues/plan/reviewer-verdict.md").is_file()
    assert "review interrupted" not in bot(root, "status").stdout
