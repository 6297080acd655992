"""The adaptive bench of `run_bench`: calibration of the measured window, ABBA rounds, rounds added until every
interval is precise (within the minimum effect, or narrow enough for the resolution asked), and the time budget and round limit that stop it, on a fake runner
whose runs measure known values (no processes, a fake clock)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import git
import pytest

from benchmarks.results import (
    BUDGET,
    INTERRUPTED,
    MAX_REPEATS,
    PRECISE,
    BenchInterrupted,
    CommitInfo,
    run_bench,
)
from benchmarks.runner import RunRecord
from benchmarks.spec import BenchSpec, Workload
from benchmarks.stats import DEFAULT_THRESHOLDS, detectable_effect, precise_half_width, summarize

COMMITS = [CommitInfo("a" * 40, "base"), CommitInfo("b" * 40, "perf: faster (+10%)", "opt")]


class FakeRunner:
    """Runs nothing: each job 'measures' ``speed[commit] × drift(round) × noise`` and takes ``seconds``."""

    device = "CPU on fakehost"

    def __init__(self, clock, speed, noise=0.0, seconds=10.0, step_s=0.01, window_s=3.0, calibration_s=None):
        self.clock, self.speed, self.noise, self.seconds = clock, speed, noise, seconds
        self.calibration_s = seconds if calibration_s is None else calibration_s
        self.step_s, self.window_s = step_s, window_s
        self.timing = "host_clock"
        self.calibration_loads: list[float] = []  # other processes' load during each calibration run, in turn
        self.calibration_steps_ms: list[float] | None = None  # each calibration run's measured steps
        self.timeline: dict | None = None  # what each run says its time went to, when set
        self.jobs: list = []
        self.rng = random.Random(5)

    def run(self, jobs, progress=None):
        records = []
        for done, job in enumerate(jobs, start=1):
            self.jobs.append(job)
            self.clock.now += self.calibration_s if job.calibration else self.seconds
            drift = 1 + 0.2 * math.sin(job.repeat)  # the machine's speed changes from round to round
            value = self.speed[job.commit] * drift * math.exp(self.rng.gauss(0, self.noise))
            metrics = {
                "status": "ok",
                "tokens_per_s": value,
                "timing": self.timing,
                "step_time_s": {"median": self.step_s},
                "wall_s": (job.workload.steps - job.workload.warmup_steps) * self.step_s
                if job.calibration
                else self.window_s,
            }
            if self.timeline is not None:
                metrics["timeline"] = self.timeline
            if job.calibration and self.calibration_steps_ms is not None:
                metrics["per_step"] = {"ms": self.calibration_steps_ms}
            if job.calibration and self.calibration_loads:
                metrics["host_load_others"] = self.calibration_loads.pop(0)
            record = RunRecord(job.commit, job.workload.name, job.repeat, "ok", self.seconds, "", metrics)
            records.append(record)
            if progress:
                progress(done, len(jobs), record)
        return records


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def repo(tmp_path):
    return git.Repo.init(tmp_path / "r")


def _spec(budget=None, **workload):
    settings = {"steps": 10, "warmup_steps": 2, "repeats": 4, "max_repeats": 20} | workload
    return BenchSpec(
        {"loop": Workload("loop", "python loop.py --steps {steps}", **settings)}, time_budget_s=budget
    )


def test_calibration_sets_the_steps_and_repeats_a_run_that_was_mostly_warm_up(repo):
    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1100.0})
    results = run_bench(repo, _spec(), COMMITS, runner, clock=clock)
    calibration = results.calibration["loop"]
    # 10 ms per step on CPU: 2 warm-up + 300 steps measure 3 s; the first run measured 0.08 s, so twice
    assert (calibration["steps"], calibration["runs"], calibration["min_time_s"]) == (302, 2, 3.0)
    assert [job.workload.steps for job in runner.jobs[:2]] == [10, 302]
    assert all(job.workload.steps == 302 for job in runner.jobs[2:])
    assert results.workloads["loop"]["steps"] == 302 and calibration["window_s"] == 3.0
    assert sum(job.calibration for job in runner.jobs) == 2 and all(run.repeat >= 0 for run in results.runs)
    assert results.stopping["loop"]["budget_s"] == 600.0  # the CPU default; a GPU run gets 30 min
    runner.timing = "cuda_events"
    on_gpu = run_bench(repo, _spec(), COMMITS, runner, clock=clock)
    assert on_gpu.calibration["loop"]["min_time_s"] == 10.0 and on_gpu.stopping["loop"]["budget_s"] == 1800.0


def test_a_short_calibration_run_whose_steps_settled_is_not_run_again(repo):
    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1100.0})
    runner.calibration_steps_ms = [
        900.0,
        40.0,
        10.0,
        10.0,
        10.0,
        10.0,
    ]  # compiled in the first measured steps
    settled = run_bench(repo, _spec(), COMMITS, runner, clock=clock).calibration["loop"]
    assert (settled["steps"], settled["runs"], settled["settled"]) == (302, 1, True)
    runner.calibration_steps_ms = [30.0, 25.0, 20.0, 15.0, 12.0, 10.0]  # still speeding up
    unsettled = run_bench(repo, _spec(), COMMITS, runner, clock=clock).calibration["loop"]
    assert (unsettled["runs"], unsettled["settled"]) == (2, False)


def test_the_measurement_setup_says_where_a_runs_time_went(repo):
    from bot.comments.results import measurement_setup

    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1100.0}, seconds=130.0)
    assert "a run lasted" not in measurement_setup(
        run_bench(repo, _spec(), COMMITS, runner, clock=clock), "loop"
    )
    runner.timeline = {"start_up_s": 41.0, "warm_up_s": 24.3, "waiting_s": 0.0, "last_step_s": 120.0}
    setup = measurement_setup(run_bench(repo, _spec(), COMMITS, runner, clock=clock), "loop")
    assert "; a run lasted 2.2 min: start-up 41.0 s, warm-up 24.3 s)" in setup  # no turns waited for


def test_a_disturbed_calibration_run_is_run_again(repo):
    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1100.0}, window_s=0.01)
    runner.calibration_loads = [0.6, 0.5, 0.0]  # another tenant during the first two
    results = run_bench(repo, _spec(min_time_s=0.05), COMMITS, runner, clock=clock)
    calibration = results.calibration["loop"]
    assert (calibration["runs"], calibration["disturbed"]) == (3, False)
    runner.calibration_loads = [0.6, 0.6, 0.6]
    stuck = run_bench(repo, _spec(min_time_s=0.05), COMMITS, runner, clock=clock).calibration["loop"]
    assert (stuck["runs"], stuck["disturbed"]) == (3, True)  # three at most, and it says so


def test_rounds_run_in_abba_order_and_stop_once_precise(repo):
    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1100.0}, noise=0.03)
    results = run_bench(repo, _spec(min_time_s=0), COMMITS, runner, clock=clock)
    order = [(job.repeat, job.commit[0]) for job in runner.jobs]
    assert order[:8] == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b"), (3, "b"), (3, "a")]
    stop = results.stopping["loop"]
    assert stop["reason"] == PRECISE and stop["imprecise"] == []
    assert stop["rounds"] > 4  # ±3% noise needs more than 4 rounds
    effect = results.summary["loop"]["commits"]["b" * 40]["marginal"]
    assert effect["half_width"] <= 0.03 and effect["verdict"] == "win"
    assert effect["ci"][0] < 1.1 < effect["ci"][1]  # the drift between rounds cancels in the pairs
    assert effect["n"] == stop["rounds"]
    # rounds are added one at a time, and the bench stopped at the first that was precise
    earlier = [run for run in results.runs if run.repeat < stop["rounds"] - 1]
    summary = summarize([c.sha for c in COMMITS], _spec(min_time_s=0).workloads, earlier, DEFAULT_THRESHOLDS)
    assert not summary["loop"]["commits"]["b" * 40]["marginal"]["precise"]


def test_a_resolution_asked_adds_rounds_until_the_intervals_would_detect_it(repo):
    clock = Clock()
    speeds = {"a" * 40: 1000.0, "b" * 40: 1100.0}
    default = run_bench(
        repo, _spec(min_time_s=0), COMMITS, FakeRunner(clock, speeds, noise=0.03), clock=clock
    )
    thresholds = replace(DEFAULT_THRESHOLDS, resolve=0.05)
    runner = FakeRunner(clock, speeds, noise=0.03)
    resolved = run_bench(repo, _spec(min_time_s=0), COMMITS, runner, clock=clock, thresholds=thresholds)
    effect = resolved.summary["loop"]["commits"]["b" * 40]["marginal"]
    assert resolved.stopping["loop"]["reason"] == PRECISE
    assert effect["half_width"] <= precise_half_width(thresholds) < 0.03  # narrower than the default asks
    assert resolved.stopping["loop"]["rounds"] > default.stopping["loop"]["rounds"]
    assert detectable_effect(effect["half_width"], thresholds) <= 0.05
    from bot.comments.results import measurement_setup

    assert "stopped with every interval narrow enough to detect 5%" in measurement_setup(resolved, "loop")
    assert "stopped with every interval within ±3%" in measurement_setup(default, "loop")


def test_the_time_budget_counts_rounds_by_their_own_time_not_calibrations(repo):
    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1000.0}, noise=0.2, calibration_s=100.0)
    results = run_bench(repo, _spec(budget=230.0, min_time_s=0.05), COMMITS, runner, clock=clock)
    # one 100 s calibration run (its steps settle at once), 4 rounds of 2 runs (80 s), then rounds of 20 s:
    # the 5th ends at 200 s, a 6th would end at 220 s, a 7th at 240 s > 230 s. Counting the calibration in
    # the mean time per job (180 s / 9 jobs) would have priced a round at 40 s and stopped after the 5th.
    assert (results.stopping["loop"]["reason"], results.stopping["loop"]["rounds"]) == (BUDGET, 6)
    assert results.calibration["loop"]["runs"] == 1 and clock.now == 220.0


def test_the_time_budget_stops_the_rounds_and_says_what_is_still_wide(repo):
    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1000.0}, noise=0.2)
    results = run_bench(repo, _spec(budget=130.0, min_time_s=0), COMMITS, runner, clock=clock)
    stop = results.stopping["loop"]
    # 4 rounds of 2 runs take 80 s; one more ends at 100 s, another at 120 s, a third would at 140 s > 130 s
    assert (stop["reason"], stop["rounds"], stop["budget_s"]) == (BUDGET, 6, 130.0)
    assert stop["imprecise"] == ["b" * 40 + " marginal"] and clock.now == 120.0


def test_max_repeats_bounds_the_rounds(repo):
    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1000.0}, noise=0.2)
    results = run_bench(repo, _spec(max_repeats=6, min_time_s=0), COMMITS, runner, clock=clock)
    assert (results.stopping["loop"]["reason"], results.stopping["loop"]["rounds"]) == (MAX_REPEATS, 6)


def interrupt_after(runs: int):
    """A progress callback that interrupts the bench (as Ctrl-C would) once ``runs`` runs have finished."""

    def progress(done, total, record):
        if done == runs:
            raise KeyboardInterrupt

    return progress


def test_an_interrupted_bench_keeps_the_measured_runs_that_finished(repo):
    clock = Clock()
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1000.0}, noise=0.2)
    # 2 calibration runs, 8 runs of the first 4 rounds, 2 of the 5th, then 1 of the 6th
    with pytest.raises(BenchInterrupted) as interrupted:
        run_bench(repo, _spec(), COMMITS, runner, clock=clock, progress=interrupt_after(13))
    results = interrupted.value.results
    assert len(runner.jobs) == 13 and len(results.runs) == 11
    assert all(run.repeat >= 0 for run in results.runs)  # the calibration runs measure nothing
    assert sorted({run.repeat for run in results.runs}) == [0, 1, 2, 3, 4, 5]
    stop = results.stopping["loop"]
    assert (stop["reason"], stop["rounds"]) == (INTERRUPTED, 6)
    assert results.summary["loop"]["commits"]["b" * 40]["marginal"]["n"] == 5  # round 5 has one commit's run
    assert results.calibration["loop"]["steps"] == 302


class StoppedRunner(FakeRunner):
    """Interrupted while its first run runs."""

    def run(self, jobs, progress=None):
        raise KeyboardInterrupt


def test_an_interrupt_before_any_measured_run_keeps_nothing(repo):
    clock = Clock()
    stopped = StoppedRunner(clock, {})
    with pytest.raises(BenchInterrupted) as interrupted:
        run_bench(repo, _spec(min_time_s=0), COMMITS, stopped, clock=clock)
    assert interrupted.value.results is None
    runner = FakeRunner(clock, {"a" * 40: 1000.0, "b" * 40: 1000.0})
    with pytest.raises(KeyboardInterrupt) as during_calibration:
        run_bench(repo, _spec(), COMMITS, runner, clock=clock, progress=interrupt_after(1))
    assert not isinstance(during_calibration.value, BenchInterrupted)


def test_bot_bench_names_each_commit_and_prints_cv_and_effects(tmp_path, monkeypatch, capsys):
    from git_repos import commit_all, make_repo

    import bot.benchmarking
    from bot.cli import main

    pyproject = (
        '[tool.bot]\n[tool.bot.workloads.loop]\ncommand = "python loop.py --steps {steps}"\nsteps = 10\n'
    )
    root = tmp_path / "target"
    repo = make_repo(root, {"pyproject.toml": pyproject, "loop.py": "pass\n"})
    shas = [repo.head.commit.hexsha]
    for message in (
        "perf: sleep 10% of every step (+10% tokens/s)",
        "perf(train): fused AdamW\n\nBot-Optimization: fused_adamw",
    ):
        (root / "loop.py").write_text(f"# {len(shas)}\n")
        shas.append(commit_all(repo, message))
    speed = dict(zip(shas, (1000.0, 910.0, 1200.0), strict=True))
    monkeypatch.setattr(
        bot.benchmarking, "make_runner", lambda options, workspace: FakeRunner(Clock(), speed, 0.01)
    )
    assert main(["bench", *shas, "--repo", str(root)]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert [row[0] for row in rows] == [sha[:7] for sha in shas]
    assert rows[0][1] == "baseline" and rows[1][1:3] == ["perf:", "sleep"] and rows[2][1] == "fused_adamw"
    assert sum(row[1] == "baseline" for row in rows) == 1  # only the first revision measured is the baseline
    assert "CV" in out and "(regression) vs previous" in out and "(win) vs previous" in out
    assert "loop: 302 steps" in out and "rounds per commit in ABBA order" in out


def test_max_host_load_sets_the_quiet_wait_and_the_disturbed_rule(tmp_path, capsys):
    from git_repos import make_repo

    from bot.benchmarking import BenchOptions, bench_thresholds, make_runner
    from bot.cli import main
    from bot.workspace import Workspace

    root = tmp_path / "target"
    make_repo(root, {"pyproject.toml": '[tool.bot.workloads.loop]\ncommand = "python loop.py"\nsteps = 5\n'})
    workspace = Workspace(root)
    assert make_runner(BenchOptions(), workspace).quiet_below == 0.10
    assert make_runner(BenchOptions(max_host_load=0.5), workspace).quiet_below == 0.5
    assert make_runner(BenchOptions(max_host_load=1), workspace).quiet_below is None  # no waiting at all
    assert bench_thresholds(BenchOptions(max_host_load=0.5), loss_tolerance=0.02).max_host_load == 0.5
    assert bench_thresholds(BenchOptions(), loss_tolerance=0.02).loss_tolerance == 0.02
    head = git.Repo(root).head.commit.hexsha
    assert main(["bench", "--max-host-load", "0", "--repo", str(root)]) == 2
    assert "--max-host-load is a share of the host's CPUs" in capsys.readouterr().err
    assert bench_thresholds(BenchOptions(resolve=0.05)).resolve == 0.05
    assert main(["bench", "--resolve", "0.02", "--repo", str(root)]) == 2  # below the minimum effect
    assert "--resolve is a change to detect, above the 3% minimum effect" in capsys.readouterr().err
    assert git.Repo(root).head.commit.hexsha == head and not (root / ".bot" / "results").exists()
