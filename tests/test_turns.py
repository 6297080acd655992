"""Turn-taking runs (``bot bench --interleave``): the plan of a run's turns, the taker's ABBA order over real
sockets, and a round of real training processes under the launch wrapper taking turns on one device."""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import git
import pytest
from git_repos import commit_all, make_repo

from benchmarks.runner import LocalRunner, plan_jobs
from benchmarks.spec import BenchSpec, Workload
from benchmarks.turns import TurnClient, TurnPlan, TurnTaker, window_steps_for
from bot.benchmarking import BenchOptions, make_runner
from bot.commands.options import add_bench_arguments, bench_options
from bot.errors import BadInput


def _history(root: Path, versions: dict[str, str]) -> list[str]:
    """A repository at ``root`` with one commit per version of ``train.py`` (message: its label), in order."""
    shas = []
    for label, text in versions.items():
        if not shas:
            repo = make_repo(root, {"train.py": text}, label)
            shas.append(repo.head.commit.hexsha)
        else:
            (root / "train.py").write_text(text)
            shas.append(commit_all(repo, label))
    return shas


def test_a_plan_ends_turns_after_the_warmup_and_every_window_but_the_last():
    plan = TurnPlan(warmup_steps=2, windows=3, window_steps=4)
    assert [n for n in range(20) if plan.turn_ends_after(n)] == [2, 6, 10]
    assert [n for n in range(20) if plan.done_after(n)][0] == 14
    no_warmup = TurnPlan(warmup_steps=0, windows=2, window_steps=5)  # the first turn is the first window
    assert [n for n in range(20) if no_warmup.turn_ends_after(n)] == [5]
    assert window_steps_for(30, 4) == 8 and window_steps_for(32, 4) == 8 and window_steps_for(1, 4) == 1
    with pytest.raises(ValueError):
        TurnPlan(warmup_steps=0, windows=0, window_steps=1)
    # a run that warms up together with its round asks for its first turn only once warmed up
    assert plan.first_turn_at_start and no_warmup.first_turn_at_start
    assert not TurnPlan(2, 3, 4, warm_up_together=True).first_turn_at_start
    assert TurnPlan(0, 3, 4, warm_up_together=True).first_turn_at_start  # nothing to warm up


class _Holder:
    """Who holds the device: a run that finds it held by another has overlapped it."""

    def __init__(self) -> None:
        self.lock, self.current, self.overlaps = threading.Lock(), None, []

    def enter(self, key: str) -> None:
        with self.lock:
            if self.current is not None:
                self.overlaps.append((self.current, key))
            self.current = key

    def leave(self) -> None:
        with self.lock:
            self.current = None


def _client(path: str, key: str, turns: int, holder: _Holder, log: list[str], ended) -> None:
    client = TurnClient(path, key, TurnPlan(1, turns - 1, 1))
    for _ in range(turns):
        client.take()
        holder.enter(key)
        log.append(key)
        time.sleep(0.005)  # hold the turn a while: another run let in meanwhile would be seen
        holder.leave()
    client.close()
    ended(key)  # what the runner says once it has seen the process exit


def test_the_taker_gives_one_turn_at_a_time_in_abba_order(tmp_path):
    holder, log = _Holder(), []
    with TurnTaker(str(tmp_path / "socket"), ["A", "B", "C"]) as taker:
        threads = [
            threading.Thread(target=_client, args=(taker.path, key, 5, holder, log, taker.ended))
            for key in ("C", "A", "B")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    # warm-up turns in the round's order, then windows forward and backward in turn
    assert log == list("ABCCBAABCCBAABC")
    assert holder.overlaps == []
    assert not (tmp_path / "socket").exists()


def test_a_run_that_never_connects_or_leaves_early_holds_nobody_up(tmp_path):
    holder, log = _Holder(), []
    with TurnTaker(str(tmp_path / "socket"), ["A", "B", "C"]) as taker:
        taker.ended("B")  # crashed while loading: the runner saw its process exit
        early = threading.Thread(target=_client, args=(taker.path, "A", 2, holder, log, taker.ended))
        full = threading.Thread(target=_client, args=(taker.path, "C", 4, holder, log, taker.ended))
        for thread in (early, full):
            thread.start()
        for thread in (early, full):
            thread.join(timeout=30)
        assert not full.is_alive()
    assert log == ["A", "C", "C", "A", "C", "C"]


LOOP = """\
import argparse, os, time
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
args = parser.parse_args()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 8)
for step in range(args.steps):
    loss = model(data).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep({pause})
    with open(os.environ["TURN_LOG"], "a") as log:
        log.write(f"{label}{{step}}\\n")
"""


def _rounds(
    tmp_path, monkeypatch, pauses: dict[str, float], repeats: int, **runner
) -> tuple[list, list, Path]:
    """``repeats`` rounds of a loop at one commit per label (each step sleeping its pause) taking turns in 3
    windows of 2 steps after 2 warm-up steps: the shas, the runs, and the log of steps in the order they ran."""
    root = tmp_path / "target"
    shas = _history(root, {label: LOOP.format(label=label, pause=pause) for label, pause in pauses.items()})
    log = tmp_path / "turns.log"
    monkeypatch.setenv("TURN_LOG", str(log))
    workload = Workload(
        name="loop", command="python train.py --steps {steps}", steps=8, warmup_steps=2, repeats=repeats
    )
    jobs = plan_jobs(BenchSpec(workloads={"loop": workload}), shas)
    return shas, LocalRunner(root, tmp_path / "bench", gpus=[], interleave=3, **runner).run(jobs), log


def test_a_round_of_training_processes_takes_turns_under_the_launch_wrapper(tmp_path, monkeypatch):
    shas, runs, log = _rounds(tmp_path, monkeypatch, {"A": 0.01, "B": 0.1}, repeats=2)

    assert [run.status for run in runs] == ["ok"] * 4, [run.log_tail for run in runs]
    # 6 measured steps in 3 windows of 2: the warm-ups in the round's order, then the windows ABBA; the
    # second round runs the commits the other way round
    first = "A0 A1 B0 B1 B2 B3 A2 A3 A4 A5 B4 B5 B6 B7 A6 A7"
    second = "B0 B1 A0 A1 A2 A3 B2 B3 B4 B5 A4 A5 A6 A7 B6 B7"
    assert log.read_text().split() == f"{first} {second}".split()
    for run in runs:
        turns = run.metrics["turns"]
        assert (turns["windows"], turns["window_steps"], run.metrics["steps_measured"]) == (3, 2, 6)
        assert len(turns["tokens_per_s"]) == 3
        assert len(run.metrics["per_step"]["ms"]) == len(run.metrics["per_step"]["tokens"]) == 6
    # the waits for the other run's turns are in no step: A's 6 measured steps take about 6 × 10 ms, while
    # B's two windows between A's second and third took 4 × 100 ms
    a_run = next(run for run in runs if run.commit == shas[0])
    assert 0.01 <= a_run.metrics["step_time_s"]["median"] < 0.06
    assert a_run.metrics["wall_s"] < 0.35


def test_a_round_that_warms_up_together_measures_only_once_every_run_has_warmed_up(tmp_path, monkeypatch):
    # A's warm-up (2 steps of 10 ms) ends long before B's (2 of 300 ms): its first window must wait for B's
    shas, runs, log = _rounds(tmp_path, monkeypatch, {"A": 0.01, "B": 0.3}, repeats=1, warm_up_together=True)

    assert [run.status for run in runs] == ["ok"] * 2, [run.log_tail for run in runs]
    steps = log.read_text().split()
    assert set(steps[:4]) == {"A0", "A1", "B0", "B1"}  # both warm-ups before any window
    assert steps[4:] == "A2 A3 B2 B3 B4 B5 A4 A5 A6 A7 B6 B7".split()  # then the windows in ABBA order
    for run in runs:
        timeline = run.metrics["timeline"]
        assert timeline["start_up_s"] > 0 and timeline["warm_up_s"] >= 0
        # launch to the last window: start-up, warm-up, the turns waited for, the measured steps
        spent = timeline["start_up_s"] + timeline["warm_up_s"] + timeline["waiting_s"]
        assert spent - 0.01 <= timeline["last_step_s"] <= run.duration_s
    a_run, b_run = (next(run for run in runs if run.commit == sha) for sha in shas)
    # A waited for B's warm-up (about 0.6 s) and B's two windows (4 × 0.3 s) at least
    assert a_run.metrics["timeline"]["waiting_s"] >= 1.2
    assert b_run.metrics["timeline"]["warm_up_s"] >= 0.5


def test_units_keep_calibration_and_multi_gpu_runs_alone(tmp_path):
    repo = git.Repo.init(tmp_path)
    workload = Workload(name="w", command="python t.py", steps=4, repeats=1)
    wide = Workload(name="wide", command="python t.py", steps=4, repeats=1, gpus=2)
    spec = BenchSpec(workloads={"w": workload, "wide": wide})
    jobs = plan_jobs(spec, ["a" * 40, "b" * 40])
    assert [
        len(unit) for unit in LocalRunner(Path(repo.working_dir), gpus=["0", "1"], interleave=4)._units(jobs)
    ] == [
        2,
        1,
        1,
    ]
    assert [len(unit) for unit in LocalRunner(Path(repo.working_dir), gpus=["0", "1"])._units(jobs)] == [
        1,
        1,
        1,
        1,
    ]


def test_interleave_takes_two_windows_or_more_and_only_on_this_machine():
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    assert bench_options(parser.parse_args(["--interleave", "4"])).interleave == 4
    assert bench_options(parser.parse_args([])).interleave == 0
    for bad in ("1", "-2"):
        with pytest.raises(BadInput, match="2 or more windows"):
            bench_options(parser.parse_args(["--interleave", bad]))
    with pytest.raises(BadInput, match="--runner local"):
        make_runner(BenchOptions(runner="ray", interleave=4), workspace=None)
    together = bench_options(parser.parse_args(["--interleave", "4", "--warm-up-together"]))
    assert (
        together.warm_up_together
        and not bench_options(parser.parse_args(["--interleave", "4"])).warm_up_together
    )
    with pytest.raises(BadInput, match="use it with --interleave"):
        bench_options(parser.parse_args(["--warm-up-together"]))


def test_a_round_that_cannot_take_turns_is_recorded_as_crashed(tmp_path, monkeypatch):
    shas = _history(tmp_path / "target", {label: f"print('never runs')  # {label}\n" for label in ("A", "B")})
    deep = tmp_path / ("d" * 100)  # a Unix socket's path holds at most 107 bytes
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    workload = Workload(name="loop", command="python train.py", steps=4, warmup_steps=1, repeats=1)
    runs = LocalRunner(tmp_path / "target", tmp_path / "bench", gpus=[], interleave=2).run(
        plan_jobs(BenchSpec(workloads={"loop": workload}), shas)
    )
    assert [(run.commit, run.status) for run in runs] == [(sha, "crashed") for sha in shas]
    assert "set TMPDIR to a shorter folder" in runs[0].log_tail


SHARED_OOM = """\
import os, sys
if {oom} and os.environ.get("PERFBOT_TURN_SOCKET"):
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB.", flush=True)
    sys.exit(1)
print("trained", flush=True)
"""


def test_a_run_out_of_memory_beside_its_round_runs_again_alone(tmp_path):
    shas = _history(
        tmp_path / "target", {"A": SHARED_OOM.format(oom=False), "B": SHARED_OOM.format(oom=True)}
    )
    workload = Workload(name="loop", command="python train.py", steps=4, warmup_steps=1, repeats=1)
    runs = LocalRunner(tmp_path / "target", tmp_path / "bench", gpus=[], interleave=2).run(
        plan_jobs(BenchSpec(workloads={"loop": workload}), shas)
    )
    assert [(run.commit, run.status) for run in runs] == [(sha, "ok") for sha in shas]
    assert "ran out of GPU memory while its round's other runs held theirs" in runs[1].log_tail
    assert "out of memory" not in runs[0].log_tail
