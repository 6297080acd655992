"""The Ray runner against a real Ray head started here on 127.0.0.1 (``ray start --head --block``, two CPUs, no
dashboard), stopped by its process group afterwards: the example's tier-1 matrix gives results of the same shape
as the local runner's, a worker killed mid-task is retried, and a task that fails twice is recorded as crashed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from git_repos import IDENTITY, committed_example, make_repo

ray = pytest.importorskip(
    "ray", reason="the Ray runner needs the optional `ray` extra: pip install 'perfbot[ray]'"
)

from benchmarks.ray_runner import RayRunner, make_bundle  # noqa: E402
from benchmarks.results import run_bench  # noqa: E402
from benchmarks.runner import BenchJob, LocalRunner  # noqa: E402
from benchmarks.spec import BenchSpec, Workload  # noqa: E402
from benchmarks.stats import Thresholds  # noqa: E402
from bot.cli import main  # noqa: E402
from bot.conventions import tool_settings  # noqa: E402
from bot.history import describe_commits  # noqa: E402

pytestmark = pytest.mark.slow


# A workload that, on its first attempt, writes the pid of the Ray worker running it (its parent: the launch
# wrapper runs the program in-process, started by the worker) and waits for that worker to die; on the retry it
# just finishes. Each attempt appends its worker pid to STATE.attempts. argv: STATE
SLEEPER = """
import os, sys, time
state = sys.argv[1]
worker = os.getppid()
with open(state + ".attempts", "a") as attempts:
    attempts.write(f"{worker}\\n")
if len(open(state + ".attempts").read().split()) == 1:
    with open(state + ".tmp", "w") as pid:
        pid.write(str(worker))
    os.replace(state + ".tmp", state + ".pid")
    deadline = time.monotonic() + 60
    while os.getppid() == worker and time.monotonic() < deadline:
        time.sleep(0.1)
    sys.exit(3)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {
        "PERFBOT_EXAMPLE_CACHE": str(tmp_path_factory.mktemp("model-cache")),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


@pytest.fixture(scope="module")
def ray_head(env):
    """The address of a Ray head on 127.0.0.1 with 2 CPUs; its processes are killed by group afterwards, and
    its session files and the tasks' scratch directories (under a temporary directory of its own, short
    enough for Ray's socket paths, instead of /tmp/ray and /tmp/perfbot-ray-job-*) removed."""
    port = free_port()
    scratch = tempfile.mkdtemp(prefix="perfbot-test-ray-")
    head = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={scratch}",
        ],
        env={**os.environ, **env, "RAY_USAGE_STATS_ENABLED": "0", "TMPDIR": scratch},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Ray head did not start (exit status {head.poll()})")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="module")
def tier1(tmp_path_factory, env):
    """A git copy of the example repository after `bot apply --tier 1`: (repo, baseline + bot commits)."""
    root = tmp_path_factory.mktemp("ray-tier1") / "example"
    repo = committed_example(root)
    baseline = repo.head.commit.hexsha
    assert main(["apply", "--tier", "1", "--repo", str(root)]) == 0
    bot = [c.hexsha for c in reversed(list(repo.iter_commits(f"{baseline}..HEAD")))]
    assert len(bot) >= 3
    return repo, [baseline, *bot]


def shape(value):
    """The keys of nested dicts (list items by their first element), with leaf values dropped."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return None


def test_tier1_matrix_on_ray_matches_the_local_runner(ray_head, tier1, env, monkeypatch, tmp_path):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    repo, commits = tier1
    root = Path(repo.working_tree_dir)
    spec = BenchSpec.from_table(tool_settings(root), root / "pyproject.toml")
    # one round, no calibration: the test compares the two runners' records, not the statistics' power
    # the plain torch loop starts in a second, where the TRL workloads take several: the runners are compared
    spec = spec.override(workloads=["loop"], size="tiny", steps=3, repeats=1, max_repeats=1, min_time_s=0)
    commits = describe_commits(repo, commits[:3])  # the baseline and two bot commits: a matrix of three
    keep_every_run = Thresholds(max_host_load=1.0)  # the suite's own load may not leave runs out of one side
    local = run_bench(repo, spec, commits, LocalRunner(repo, tmp_path / "local"), thresholds=keep_every_run)
    seen = []
    runner = RayRunner(repo, ray_head)
    remote = run_bench(
        repo,
        spec,
        commits,
        runner,
        thresholds=keep_every_run,
        progress=lambda done, total, run: seen.append((done, total)),
    )

    assert [run.status for run in remote.runs] == ["ok"] * len(commits), [r.log_tail for r in remote.runs]
    assert [run.status for run in local.runs] == ["ok"] * len(commits)
    jobs = [(run.commit, run.workload, run.repeat) for run in local.runs]
    assert [(run.commit, run.workload, run.repeat) for run in remote.runs] == jobs
    assert seen == [(done, len(commits)) for done in range(1, len(commits) + 1)]
    local_dict, remote_dict = local.to_dict(), remote.to_dict()
    assert remote_dict.keys() == local_dict.keys()
    for ours, theirs in zip(remote_dict["runs"], local_dict["runs"], strict=True):
        assert shape(ours) == shape(theirs)
    assert shape(remote_dict["summary"]) == shape(local_dict["summary"])
    assert remote.summary["loop"]["commits"].keys() == local.summary["loop"]["commits"].keys()
    assert all(run.metrics["tokens"] > 0 for run in remote.runs)
    assert runner.device.startswith(f"Ray cluster at {ray_head}: 0 GPU(s), 2 CPU(s), 1 node(s)")
    assert not ray.is_initialized()  # the runner disconnects from the cluster it joined


def test_a_killed_worker_is_retried(ray_head, tmp_path):
    repo = make_repo(tmp_path / "sleeper", {"sleeper.py": SLEEPER}, "sleeper", branch=None)
    state = tmp_path / "state"
    workload = Workload(
        "sleeper", f"python sleeper.py {state}", steps=1, warmup_steps=0, repeats=1, timeout_s=120
    )
    job = BenchJob(repo.head.commit.hexsha, workload, repeat=0, size="tiny", seed=0)

    records = []
    thread = threading.Thread(target=lambda: records.extend(RayRunner(repo, ray_head).run([job])))
    thread.start()
    deadline = time.monotonic() + 120
    pid_file = Path(f"{state}.pid")
    while not pid_file.exists():
        assert time.monotonic() < deadline and thread.is_alive(), "the first attempt never started"
        time.sleep(0.2)
    killed = int(pid_file.read_text())
    os.kill(killed, signal.SIGKILL)
    thread.join(timeout=180)
    assert not thread.is_alive()

    (record,) = records
    assert record.status == "ok", record.log_tail
    assert (record.commit, record.workload, record.repeat) == (job.commit, "sleeper", 0)
    attempts = [int(pid) for pid in Path(f"{state}.attempts").read_text().split()]
    assert len(attempts) == 2 and attempts[0] == killed and attempts[1] != killed


def test_a_task_failing_twice_is_recorded_not_dropped(ray_head, tier1):
    repo, commits = tier1
    workload = Workload("sft", "python train_sft.py", steps=2, repeats=1)
    jobs = [BenchJob(sha, workload, repeat=0, size="tiny", seed=0) for sha in commits[:2]]
    runner = RayRunner(repo, ray_head, remote_url=str(Path(repo.working_tree_dir) / "no-such-remote"))
    records = runner.run(jobs)
    assert [(r.commit, r.status, r.metrics) for r in records] == [
        (sha, "crashed", None) for sha in commits[:2]
    ]
    assert all("GitCommandError" in r.log_tail and "failed 2 times" in r.log_tail for r in records)


def test_the_bundle_carries_commits_on_no_branch(tmp_path):
    repo = make_repo(tmp_path / "repo", {"a.txt": "a"}, "a", branch=None)
    first = repo.head.commit.hexsha
    (tmp_path / "repo" / "a.txt").write_text("b")
    repo.git.commit("-qam", "b", env=IDENTITY)
    detached = repo.head.commit.hexsha
    repo.git.reset("--hard", first)  # `detached` is now on no branch
    refs_before = repo.git.for_each_ref()
    bundle = make_bundle(repo, [first, detached], tmp_path / "commits.bundle")
    assert repo.git.for_each_ref() == refs_before
    heads = subprocess.run(
        ["git", "bundle", "list-heads", str(bundle)], capture_output=True, text=True
    ).stdout
    assert first in heads and detached in heads


def test_bot_bench_runs_on_ray_from_the_command_line(ray_head, tier1, env, monkeypatch, capsys):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    repo, commits = tier1
    root = repo.working_tree_dir
    options = ["--workload", "loop", "--size", "tiny", "--steps", "3", "--repeats", "1", commits[0]]
    assert main(["bench", "--repo", root, "--runner", "ray", "--address", ray_head, *options]) == 0
    assert "results:" in capsys.readouterr().out
    assert main(["bench", "--repo", root, "--address", ray_head, *options]) == 2
    assert "use it with --runner ray" in capsys.readouterr().err
