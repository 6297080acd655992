"""Bad input a new user meets, through the real command line (a ``python -m bot.cli`` process): a read-only
checkout, the ML extra not installed, an oversized plan, a misspelled optimization id, Ctrl-C or SIGTERM mid-run,
files that do not parse, a negative tier, untracked files. Each ends in one line (or JSON with ``--json``), exit
2 (130 when interrupted), no traceback, and nothing lost: the tree clean, no half commit, the progress record
saying where the run stopped."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest
from git_repos import commit_all, make_repo
from test_cli import PLAN, TRAIN, snapshot

from bot.errors import bad_input_from
from bot.sources import MAX_PLAN_CHARS

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = '[tool.bot.workloads.loop]\ncommand = "python train.py"\nsteps = 3\n'
# Python without torch, as after `pip install perfbot` without the ML extra: importing it fails as a missing
# package does (scipy and the rest still import).
NO_TORCH = """\
import sys


class NoTorch:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTorch)
"""
# The real command line with one step of ``bot.apply`` made slow (``owner.attribute``), so a signal lands in it.
SLOW_STEP = """\
import sys, time
from bot import apply
setattr({owner}, "{attribute}", lambda *args, **kwargs: time.sleep(120))
from bot.cli import main
sys.exit(main(sys.argv[1:]))
"""


def bot(*args: str, code: str | None = None) -> list[str]:
    """The argv of the ``bot`` command line (``code``: run through ``python -c`` instead of ``-m bot.cli``)."""
    return [sys.executable, *(["-c", code] if code else ["-m", "bot.cli"]), *args]


def run_bot(
    *args: str, extra_path: str | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """Run ``bot ARGS`` in a process of its own (``extra_path`` first on its PYTHONPATH)."""
    path = os.pathsep.join(p for p in (extra_path, str(ROOT)) if p)
    return subprocess.run(
        [*prefix, *bot(*args)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line_error(done: subprocess.CompletedProcess, *said: str, code: int = 2) -> str:
    """The run exited ``code`` with exactly one line on stderr, ``bot: error: ...`` saying ``said``."""
    err = done.stderr.strip()
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and len(err.splitlines()) == 1, err
    assert err.startswith("bot: error: ") and all(s in err for s in said), err
    return err


@pytest.fixture
def target(tmp_path: Path) -> tuple[Path, git.Repo]:
    root = tmp_path / "target"
    repo = make_repo(root, {"train.py": TRAIN, "PLAN.md": PLAN, "pyproject.toml": WORKLOADS})
    return root, repo


def can_mount_read_only(path: Path) -> bool:
    probe = subprocess.run(read_only(path, "true"), capture_output=True)
    return probe.returncode == 0


def read_only(path: Path, *command: str) -> list[str]:
    """``command`` with ``path`` mounted read-only (a private mount namespace: nothing else sees it)."""
    script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, str(path), *command]


def test_a_read_only_checkout_is_one_line(target):
    root, _ = target
    if not can_mount_read_only(root):
        pytest.skip("needs unshare and mount (a private read-only mount) to make a read-only checkout")
    before = snapshot(root)
    done = subprocess.run(
        read_only(root, *bot("apply", "--tier", "1", "--repo", str(root))),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    one_line_error(
        done,
        f"cannot write {root}/.git/info/exclude: the file system is read-only",
        "run the bot in a writable",
    )
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            PermissionError(errno.EACCES, "Permission denied", "/repo/.bot"),
            "no permission for /repo/.bot: give this user read and write access to the checkout",
        ),
        (OSError(errno.ENOSPC, "No space left on device", "/repo/.bot/results"), "free some space"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "/repo/x"), "/repo/x: no such file"),
    ],
)
def test_an_operating_system_error_says_what_to_do(error, said):
    """Not the raw ``[Errno 13] Permission denied``: the path, what is wrong in words, and what to do."""
    message = str(bad_input_from(error))
    assert said in message and "Errno" not in message and "\n" not in message
    assert "re-run" in message


@pytest.mark.parametrize(
    ("command", "needs"),
    [
        (("profile",), "bot profile needs torch"),
        (("calibrate",), "bot calibrate needs torch"),
        (("bench",), "benchmarking on this machine needs torch"),
    ],
)
def test_without_the_ml_extra_each_measuring_command_names_it(target, tmp_path, command, needs):
    root, _ = target
    blocker = tmp_path / "no-torch"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(NO_TORCH)
    before = snapshot(root)
    done = run_bot(*command, "--repo", str(root), extra_path=str(blocker))
    one_line_error(done, needs, "pip install 'perfbot[ml]'")
    as_json = run_bot("--json", *command, "--repo", str(root), extra_path=str(blocker))
    assert as_json.returncode == 2 and as_json.stderr == ""
    assert json.loads(as_json.stdout) == {
        "error": done.stderr.strip().removeprefix("bot: error: "),
        "exit_code": 2,
    }
    assert snapshot(root) == before and not (root / ".bot" / "results").exists()


def test_a_plan_over_the_size_limit_is_refused_before_anything_starts(target):
    root, _ = target
    huge = root.parent / "huge.md"
    huge.write_text(PLAN + "\n" + "- opt:dataloader_workers more words\n" * (5_000_000 // 36))
    before = snapshot(root)
    for command in (("plan", str(huge)), ("apply", "--tier", "1", "--repo", str(root), "--plan", str(huge))):
        one_line_error(run_bot(*command), f"over the {MAX_PLAN_CHARS:,} a plan may have")
    assert snapshot(root) == before


def test_a_commit_message_longer_than_a_command_line_argument_is_committed_whole(target):
    root, repo = target
    long_item = "- opt:dataloader_workers " + "because " * 40_000  # 320 kB: one argv string may hold 128 kB
    plan = root.parent / "long.md"
    plan.write_text(f"## Tier 1\n\n{long_item}\n")
    done = run_bot("apply", "--tier", "1", "--repo", str(root), "--plan", str(plan))
    assert done.returncode == 0, done.stderr
    assert repo.head.commit.message.count("because") == 40_000
    assert "Done: 1 landed" in (root / ".bot/issues/long/progress.md").read_text()


def test_a_misspelled_optimization_id_names_the_closest_and_starts_nothing(target):
    root, _ = target
    (root / "PLAN.md").write_text("## Tier 1\n\n- opt:packign\n- opt:dataloader_workers\n")
    repo = git.Repo(root)
    commit_all(repo, "plan")
    before = snapshot(root)
    done = run_bot("apply", "--tier", "1", "--repo", str(root))
    one_line_error(done, "opt:packign (did you mean packing?)", "bot list")
    as_json = run_bot("--json", "apply", "--tier", "1", "--repo", str(root))
    assert as_json.returncode == 2 and as_json.stderr == ""
    assert "did you mean packing" in json.loads(as_json.stdout)["error"]
    assert snapshot(root) == before and repo.active_branch.name == "main"


def interrupt_when(command: list[str], progress: Path, shown: str) -> subprocess.CompletedProcess:
    """Start ``command``, send SIGTERM once ``progress`` shows ``shown``, and wait for it to end."""
    process = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (progress.is_file() and shown in progress.read_text()):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{progress} never showed {shown!r}"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def test_an_interrupted_apply_says_so_in_the_progress_record_and_bot_status(target):
    root, repo = target
    base = repo.head.commit.hexsha
    progress = root / ".bot/issues/plan/progress.md"
    slow = SLOW_STEP.format(owner="apply.TierRun", attribute="_apply_row")
    done = interrupt_when(
        bot("apply", "--tier", "1", "--repo", str(root), code=slow), progress, "Applying 1/1"
    )

    assert (
        done.returncode == 130
        and done.stderr.strip() == "bot: interrupted"
        and "Traceback" not in done.stderr
    )
    record = progress.read_text()
    assert "Interrupted at 1/1 (dataloader_workers)" in record and "⏹ interrupted" in record
    assert "🔄 applying" not in record
    status = run_bot("status", "--repo", str(root))
    assert status.returncode == 0 and "Interrupted at 1/1 (dataloader_workers)" in status.stdout
    assert "⏹ interrupted" in status.stdout
    assert repo.head.commit.hexsha == base and not repo.is_dirty(untracked_files=True)
    resumed = run_bot("apply", "--tier", "1", "--repo", str(root))  # the same command picks the run up
    assert resumed.returncode == 0 and "Done: 1 landed" in progress.read_text()


def test_an_apply_interrupted_while_benchmarking_keeps_its_commits_and_says_where_it_stopped(target):
    root, repo = target
    progress = root / ".bot/issues/plan/progress.md"
    slow = SLOW_STEP.format(owner="apply", attribute="bench_and_report")
    command = bot("apply", "--tier", "1", "--repo", str(root), "--bench", code=slow)
    done = interrupt_when(command, progress, "Commits done, benchmarking")

    assert done.returncode == 130 and "Traceback" not in done.stderr
    assert "Interrupted while benchmarking" in progress.read_text()
    assert repo.head.commit.message.startswith("perf(") and not repo.is_dirty(untracked_files=True)


def test_files_that_do_not_parse_are_skipped_named_and_counted(target):
    root, repo = target
    (root / "legacy.py").write_text('print "python 2"\n')
    (root / "templated.py").write_text("def {{ name }}():\n    pass\n")
    commit_all(repo, "messy files")
    scanned = run_bot("scan", str(root))
    lines = scanned.stderr.splitlines()
    assert scanned.returncode == 0 and all(line.startswith("bot: skipped ") for line in lines), lines
    assert [line.split(":")[1] for line in lines] == [" skipped legacy.py", " skipped templated.py"]
    assert "2 file(s) skipped, not readable as Python: legacy.py, templated.py" in scanned.stdout
    applied = run_bot("apply", "--tier", "1", "--repo", str(root))
    assert applied.returncode == 0 and "bot: skipped legacy.py:1: cannot parse" in applied.stderr
    assert set(repo.head.commit.stats.files) == {"train.py"}
    # the progress comment names them too, for whoever reads the run on the issue
    [progress] = (root / ".bot" / "issues").glob("*/progress.md")
    listed = progress.read_text().split("**Files skipped", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert [line.split(":")[0] for line in listed] == ["- legacy.py", "- templated.py"]


def test_a_negative_tier_is_refused(target):
    root, _ = target
    before = snapshot(root)
    done = run_bot("apply", "--tier", "-1", "--repo", str(root))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        done.stderr.splitlines()[0] == "bot: error: argument --tier: a tier is a number, 0 or more (got '-1')"
    )
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("bench", "commits to measure"),
        ("init", "the training repository to set up"),
        ("serve", "address to listen on"),
        ("serve", "port to listen on"),
    ],
)
def test_every_argument_has_help(command, said):
    done = run_bot(command, "--help")
    assert done.returncode == 0 and said in " ".join(done.stdout.split())


def test_untracked_files_block_only_when_git_does_not_ignore_them(target):
    root, repo = target
    (root / ".gitignore").write_text("outputs/\n")
    commit_all(repo, "ignore outputs")
    (root / "outputs").mkdir()
    (root / "outputs" / "run.log").write_text("ignored by the target\n")
    (root / ".bot" / "results").mkdir(parents=True)
    (root / ".bot" / "results" / "earlier.json").write_text("{}\n")  # perfbot's own, before it listed .bot/
    (root / "notes.txt").write_text("mine\n")
    before = snapshot(root)
    done = run_bot("apply", "--tier", "1", "--repo", str(root))
    one_line_error(done, "untracked files git does not ignore (notes.txt)", ".gitignore")
    assert snapshot(root) == before
    (root / "notes.txt").unlink()
    assert run_bot("apply", "--tier", "1", "--repo", str(root)).returncode == 0
    assert (root / ".bot" / "results" / "earlier.json").exists() and (root / "outputs" / "run.log").exists()
