"""The local bench runner, results file and git notes, on a temporary repository with fake workloads.

The workloads are tiny scripts that write a metrics JSON themselves; the runner's launch command is swapped
for one that runs them directly, so these tests exercise scheduling, worktrees, failure capture and notes
without the in-process launch wrapper.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import git
import pytest

from benchmarks import host
from benchmarks.ray_runner import RayRunner
from benchmarks.results import Results, build_results, run_bench
from benchmarks.runner import PERFBOT_ROOT, LocalRunner, RunRecord, launch_command, plan_jobs
from benchmarks.spec import BenchSpec, Workload
from benchmarks.stats import WIN
from benchmarks.status import RunStatus
from bot.conventions import tool_settings
from bot.history import describe_commits
from bot.notes import read_note, write_notes

PYPROJECT = """\
[project]
name = "target"

[tool.bot]
seed = 7

[tool.bot.workloads.train]
command = "python train.py --steps {steps} --seed {seed}"
steps = 10
warmup_steps = 2
repeats = 3
min_time_s = 0.5

[tool.bot.workloads.slow]
command = "python slow.py --seed {seed}"
steps = 5
repeats = 1
timeout_s = 1.5
min_time_s = 0
"""

# A fake training program: logs that it ran, then writes metrics or crashes, as its commit dictates.
TRAIN = """\
import argparse, json, os, random, time
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
parser.add_argument("--seed", type=int)
parser.add_argument("--out")
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
LABEL, SPEED, MODE = {label!r}, {speed!r}, {mode!r}
started = time.time()
with open(os.environ["BENCH_ORDER_LOG"], "a") as log:
    log.write(f"{{LABEL}} train {{args.seed}}\\n")
if MODE == "crash":
    for step in range(100):
        print(f"step {{step}} loss 2.0", flush=True)
    raise RuntimeError("boom at step 100")
time.sleep(args.sleep)
loss = [{{"step": s, "tokens_seen": 100 * s, "loss": 3.0 - 0.01 * s}} for s in range(1, args.steps + 1)]
metrics = {{
    "schema": "perfbot.run/v1", "status": "ok", "steps_measured": args.steps, "timing": "host_clock",
    "step_time_s": {{"median": 0.01}},
    "tokens_per_s": SPEED * (1 + random.uniform(-0.002, 0.002)), "peak_memory_bytes": 1e9, "loss": loss,
    "env": {{"gpu": "FakeGPU", "host": "testhost"}},
    "seen": {{"pythonpath": os.environ["PYTHONPATH"], "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "threads": os.environ.get("OMP_NUM_THREADS"), "cwd": os.getcwd(), "start": started,
              "end": time.time()}},
}}
with open(args.out, "w") as out:
    json.dump(metrics, out)
"""

SLOW = """\
import argparse, json, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int)
parser.add_argument("--out")
args = parser.parse_args()
LABEL, MODE = {label!r}, {mode!r}
with open(os.environ["BENCH_ORDER_LOG"], "a") as log:
    log.write(f"{{LABEL}} slow {{args.seed}}\\n")
if MODE == "oom":
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
    raise SystemExit(1)
if MODE == "hang":
    time.sleep(60)
with open(args.out, "w") as out:
    json.dump({{"status": "ok", "tokens_per_s": 50.0}}, out)
"""

COMMITS = [  # (label, train speed, train mode, slow mode, message)
    ("A", 1000.0, "ok", "ok", "baseline"),
    ("B", 1100.0, "ok", "oom", "perf(train): faster\n\nBot-Optimization: fa2\nBot-Plan-Item: A, G\n"),
    ("C", 1100.0, "crash", "hang", "perf(train): broken\n\nBot-Optimization: packing\nBot-Plan-Item: B\n"),
]


def load_spec(root) -> BenchSpec:
    """The target's spec, built as ``bot`` builds it."""
    return BenchSpec.from_table(tool_settings(Path(root)), Path(root) / "pyproject.toml")


def _direct(job, metrics_path: Path) -> list[str]:
    """Run the workload's script directly (no launch wrapper): it writes the metrics file itself."""
    return [sys.executable, *shlex.split(job.command)[1:], "--out", str(metrics_path)]


@pytest.fixture
def target(tmp_path, monkeypatch):
    """A target repository with three commits (A: baseline, B: faster, C: crashes and hangs)."""
    root = tmp_path / "target"
    repo = git.Repo.init(root)
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test")
        config.set_value("user", "email", "test@example.com")
    (root / "pyproject.toml").write_text(PYPROJECT)
    shas = []
    for label, speed, train_mode, slow_mode, message in COMMITS:
        (root / "train.py").write_text(TRAIN.format(label=label, speed=speed, mode=train_mode))
        (root / "slow.py").write_text(SLOW.format(label=label, mode=slow_mode))
        repo.index.add(["pyproject.toml", "train.py", "slow.py"])
        shas.append(repo.index.commit(message).hexsha)
    order_log = tmp_path / "order.log"
    monkeypatch.setenv("BENCH_ORDER_LOG", str(order_log))
    return repo, shas, order_log


def test_bench_matrix_end_to_end(target, tmp_path):
    repo, shas, order_log = target
    spec = load_spec(repo.working_tree_dir)
    runner = LocalRunner(repo.working_tree_dir, tmp_path / "bench", gpus=[], launch=_direct)
    progress = []
    results = run_bench(
        repo,
        spec,
        describe_commits(repo, shas),
        runner,
        progress=lambda done, total, run: progress.append((done, total)),
    )

    # a calibration run at the baseline, then rounds in ABBA order across commits, the same seed everywhere,
    # and progress after every job
    executed = order_log.read_text().split("\n")[:-1]
    expected = ["A train 7"]  # calibration: 10 ms per step, so 2 + 50 steps measure 0.5 s
    expected += ["A train 7", "B train 7", "C train 7", "A slow 7", "B slow 7", "C slow 7"]
    expected += ["C train 7", "B train 7", "A train 7", "A train 7", "B train 7", "C train 7"]
    assert executed == expected
    assert progress == [(1, 1)] + [(done, 13) for done in range(2, 14)]
    assert results.calibration["train"]["steps"] == results.workloads["train"]["steps"] == 52
    assert results.calibration["slow"]["steps"] == 5
    assert "--steps 52" in results.workloads["train"]["command"]
    # B's ±0.2% noise gives an interval narrower than the minimum effect after the first rounds; nothing
    # more can be learnt about C (never ran) or the slow workload (one successful commit)
    assert results.stopping["train"]["reason"] == "precise"
    assert results.stopping["slow"]["reason"] == "nothing to compare"
    assert results.stopping["train"]["rounds"] == 3

    # every commit × workload × repeat is in the results, each with the right outcome
    status = {(r.commit, r.workload, r.repeat): r.status for r in results.runs}
    assert len(status) == 12
    a, b, c = shas
    assert all(status[(sha, "train", k)] == "ok" for sha in (a, b) for k in range(3))
    assert all(status[(c, "train", k)] == "crashed" for k in range(3))
    assert (status[(a, "slow", 0)], status[(b, "slow", 0)], status[(c, "slow", 0)]) == (
        "ok",
        "oom",
        "timeout",
    )

    runs = {(r.commit, r.workload, r.repeat): r for r in results.runs}
    crash = runs[(c, "train", 0)]
    assert "RuntimeError: boom at step 100" in crash.log_tail
    assert len(crash.log_tail.splitlines()) <= 40 and "step 0 loss" not in crash.log_tail
    assert crash.metrics is None
    assert "CUDA out of memory" in runs[(b, "slow", 0)].log_tail
    assert "timed out after 1.5 s" in runs[(c, "slow", 0)].log_tail
    assert runs[(c, "slow", 0)].duration_s < 15

    seen = runs[(a, "train", 0)].metrics["seen"]
    assert seen["pythonpath"].split(":")[0] == str(PERFBOT_ROOT)
    assert Path(seen["cwd"]) != Path(repo.working_tree_dir)  # ran in a worktree, not the checkout

    # the worktrees are gone, and git no longer knows about them
    assert len(repo.git.worktree("list").splitlines()) == 1
    assert not any((tmp_path / "bench").glob("bench-*/worktrees/*"))

    # the summary and the results file
    train = results.summary["train"]["commits"]
    assert train[b]["cumulative"]["verdict"] == WIN
    assert train[c]["failed"] == {"crashed": 3}
    assert results.device == "FakeGPU on testhost"
    assert [commit.optimization for commit in results.commits] == [None, "fa2", "packing"]
    assert results.commits[1].plan_items == ["A", "G"]
    saved = results.save(tmp_path / "results.json")
    stored = json.loads(saved.read_text())
    assert stored["schema"] == "perfbot.results/v1"
    assert {run["status"] for run in stored["runs"]} == {"ok", "crashed", "oom", "timeout"}
    assert Results.load(saved).to_dict() == results.to_dict()
    assert {type(run.status) for run in Results.load(saved).runs} == {RunStatus}

    # one note per commit, one line per workload
    write_notes(repo, results)
    notes = [read_note(repo, sha) for sha in shas]
    assert all(len(note.splitlines()) == 2 for note in notes)
    assert notes[0].startswith("train: tokens_per_s") and "baseline" in notes[0]
    train_b = notes[1].splitlines()[0]
    marginal = re.search(r"vs previous \+(\d+\.\d)% \[", train_b)
    assert marginal and abs(float(marginal.group(1)) - 10.0) < 0.6
    assert train_b.count(WIN) == 2
    assert "slow: no successful runs (1 oom)" in notes[1]
    assert notes[2].splitlines() == [
        "train: no successful runs (3 crashed)",
        "slow: no successful runs (1 timeout)",
    ]


def test_worktrees_are_removed_when_the_run_is_interrupted(target, tmp_path):
    repo, shas, _ = target
    spec = load_spec(repo.working_tree_dir).override(workloads=["train"], repeats=1)
    runner = LocalRunner(repo.working_tree_dir, tmp_path / "bench", gpus=[], launch=_direct)

    def interrupt(done, total, run):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run(plan_jobs(spec, shas), progress=interrupt)
    assert len(repo.git.worktree("list").splitlines()) == 1


def test_one_job_per_gpu_at_a_time(target, tmp_path):
    repo, shas, _ = target
    workload = Workload(
        name="train", command="python train.py --steps 3 --seed 0 --sleep 0.5", steps=3, repeats=3
    )
    spec = BenchSpec(workloads={"train": workload})
    runner = LocalRunner(repo.working_tree_dir, tmp_path / "bench", gpus=["0", "1"], launch=_direct)
    runs = runner.run(plan_jobs(spec, shas[:2]))
    seen = [run.metrics["seen"] for run in runs]
    assert sorted(s["devices"] for s in seen) == ["0", "0", "0", "1", "1", "1"]
    overlapping = [
        (x, y)
        for i, x in enumerate(seen)
        for y in seen[i + 1 :]
        if x["start"] < y["end"] and y["start"] < x["end"]
    ]
    assert overlapping, "two GPUs should run two jobs at once"
    assert all(x["devices"] != y["devices"] for x, y in overlapping)


def test_a_cpu_run_leaves_a_core_to_the_host_unless_the_user_chose(target, tmp_path, monkeypatch):
    repo, shas, _ = target
    workload = Workload(name="train", command="python train.py --steps 1 --seed 0", steps=1, repeats=1)
    jobs = plan_jobs(BenchSpec(workloads={"train": workload}), shas[:1])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))

    def threads(gpus: list[str]) -> str | None:
        [run] = LocalRunner(repo.working_tree_dir, tmp_path / "bench", gpus=gpus, launch=_direct).run(jobs)
        return run.metrics["seen"]["threads"]

    assert threads([]) == str(max(1, cores - 1))
    assert threads(["0"]) is None  # a GPU run's threads are the program's business
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads([]) == "3"


def test_a_job_wider_than_the_machine_is_refused(target, tmp_path):
    repo, shas, _ = target
    spec = BenchSpec(workloads={"big": Workload(name="big", command="python train.py", steps=2, gpus=4)})
    runner = LocalRunner(repo.working_tree_dir, tmp_path / "bench", gpus=["0", "1"], launch=_direct)
    with pytest.raises(ValueError, match="need more"):
        runner.run(plan_jobs(spec, shas))


READS_DATA = """\
import argparse, json, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--out")
args = parser.parse_args()
rows = pathlib.Path("data/local/rows.txt").read_text().split()
with open(args.out, "w") as out:
    json.dump({"status": "ok", "tokens_per_s": float(len(rows))}, out)
"""


def test_data_git_ignores_is_linked_into_every_commits_checkout(tmp_path):
    root = tmp_path / "target"
    repo = git.Repo.init(root)
    (root / ".gitignore").write_text("data/\n")
    (root / "reads.py").write_text(READS_DATA)
    repo.index.add([".gitignore", "reads.py"])
    first = repo.index.commit("reads local data").hexsha
    (root / "reads.py").write_text(READS_DATA + "# a second commit\n")
    repo.index.add(["reads.py"])
    second = repo.index.commit("touch").hexsha
    (root / "data" / "local").mkdir(parents=True)
    (root / "data" / "local" / "rows.txt").write_text("a b c\n")
    workload = Workload(name="reads", command="python reads.py", steps=1, repeats=1, inputs=("data/local",))
    runner = LocalRunner(root, tmp_path / "bench", gpus=[], launch=_direct)

    runs = runner.run(plan_jobs(BenchSpec(workloads={"reads": workload}), [first, second]))

    assert [run.status for run in runs] == [RunStatus.OK, RunStatus.OK]
    assert [run.metrics["tokens_per_s"] for run in runs] == [3.0, 3.0]
    missing = replace(workload, inputs=("data/elsewhere",))
    with pytest.raises(ValueError, match=r"data/elsewhere not found in .*drop it from the workload's inputs"):
        runner.run(plan_jobs(BenchSpec(workloads={"reads": missing}), [first]))
    assert len(repo.git.worktree("list").splitlines()) == 1


def test_the_ray_runner_refuses_git_ignored_inputs_before_ray_starts(tmp_path):
    repo = git.Repo.init(tmp_path / "repo")
    (tmp_path / "repo" / "train.py").write_text("print('train')\n")
    repo.index.add(["train.py"])
    sha = repo.index.commit("train").hexsha
    workload = Workload(name="sft", command="python train.py", steps=1, inputs=("data/sft",))

    with pytest.raises(ValueError, match=r"workload\(s\) sft read git-ignored inputs, which the Ray runner"):
        RayRunner(repo).run(plan_jobs(BenchSpec(workloads={"sft": workload}), [sha]))


def test_plan_interleaves_repeats_and_the_default_launch_wraps_the_command():
    spec = BenchSpec(
        workloads={
            "sft": Workload(
                name="sft", command="python sft.py --size {size} --steps {steps}", steps=20, repeats=2
            ),
            "dpo": Workload(name="dpo", command="python dpo.py", steps=8, warmup_steps=3, repeats=1),
        },
        size="gpu",
        seed=3,
    )
    jobs = plan_jobs(spec, ["a", "b"])
    assert [(j.repeat, j.workload.name, j.commit) for j in jobs] == [
        (0, "sft", "a"),
        (0, "sft", "b"),
        (0, "dpo", "a"),
        (0, "dpo", "b"),
        (1, "sft", "b"),  # ABBA: the second round runs the commits in reverse
        (1, "sft", "a"),
    ]
    assert {j.seed for j in jobs} == {3}
    argv = launch_command(jobs[2], Path("/tmp/m.json"))
    assert argv[1:] == [
        "-m",
        "benchmarks.launch",
        "--out",
        "/tmp/m.json",
        "--warmup-steps",
        "3",
        "--",
        "python",
        "dpo.py",
    ]
    assert jobs[0].command == "python sft.py --size gpu --steps 20"


def test_notes_are_written_where_git_has_no_identity(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no global git config
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for variable in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        monkeypatch.delenv(variable, raising=False)
    repo = git.Repo.init(tmp_path / "bare-ci")
    author = git.Actor("Someone", "someone@example.com")
    (tmp_path / "bare-ci" / "a.txt").write_text("a")
    repo.index.add(["a.txt"])
    sha = repo.index.commit("only", author=author, committer=author).hexsha
    spec = BenchSpec(workloads={"w": Workload(name="w", command="python w.py", steps=3, repeats=1)})
    run = RunRecord(sha, "w", 0, "ok", 1.0, "", {"status": "ok", "tokens_per_s": 123.4})
    results = build_results(
        repo, spec, describe_commits(repo, [sha]), [run], started_at="t0", finished_at="t1"
    )
    write_notes(repo, results)
    assert read_note(repo, sha) == "w: tokens_per_s 123.4 [123.4 – 123.4] (0% CI) n=1 | baseline"


def test_warmup_rounds_run_first_and_are_not_measured():
    from benchmarks.runner import plan_jobs
    from benchmarks.spec import BenchSpec, Workload

    spec = BenchSpec({"w": Workload("w", "python x.py", steps=4, repeats=2)}, warmup_rounds=1)
    jobs = plan_jobs(spec, ["a", "b"])
    assert [(j.commit, j.repeat, j.warmup) for j in jobs] == [
        ("a", -1, True),
        ("b", -1, True),
        ("a", 0, False),
        ("b", 0, False),
        ("b", 1, False),
        ("a", 1, False),
    ]


def test_warmup_round_runs_but_is_left_out_of_the_results(target, tmp_path):
    repo, shas, order_log = target
    spec = load_spec(repo.working_tree_dir).override(
        workloads=["train"], repeats=1, max_repeats=1, warmup_rounds=1, min_time_s=0
    )
    runner = LocalRunner(repo.working_tree_dir, tmp_path / "bench", gpus=[], launch=_direct)
    results = run_bench(repo, spec, describe_commits(repo, shas[:2]), runner)
    assert order_log.read_text().split("\n")[:-1] == ["A train 7", "B train 7", "A train 7", "B train 7"]
    assert sorted((r.commit, r.repeat) for r in results.runs) == sorted((sha, 0) for sha in shas[:2])
    assert results.stopping["train"]["reason"] == "max repeats"  # one pair cannot be tested


def test_the_host_load_share_stays_a_share_over_short_windows():
    cpus = os.cpu_count() or 1
    start = host.Reading(wall=100.0, busy=50.0, session=10.0)
    # 10 ms of wall time: one more clock tick on every CPU than the window holds, none of it ours
    over = host.Reading(wall=100.01, busy=50.0 + 0.02 * cpus, session=10.0)
    # our session's counters moved more than the host's (a process read after its parent)
    under = host.Reading(wall=100.01, busy=50.0, session=10.02)
    assert host.others_share(start, over) == 1.0
    assert host.others_share(start, under) == 0.0
    assert 0.0 <= host.others_share(host.read(), host.read()) <= 1.0
