"""experiments.calibration.rounds on a fake cut-off trial: a git repository of baseline, no-op and plant, with
run metrics in bench folders as the runner leaves them, some rounds failed or of another workload."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import git
import pytest

from experiments.calibration import rounds

# tokens/s per round: the plant is 15% slower than the baseline with noise; the no-op moves with the baseline
BASELINE = [100.0, 104.0, 98.0, 101.0, 103.0, 99.0, 102.0, 100.0]
NOOP = [101.0, 103.0, 99.0, 100.0, 104.0, 98.0, 101.0, 101.0]
PLANT = [85.0, 89.0, 84.0, 85.5, 87.0, 85.0, 86.5, 85.0]


def write_run(repo: Path, batch: str, sha: str, workload: str, round_: int, metrics: dict) -> None:
    folder = repo / ".bot" / "bench" / batch / "runs" / f"{sha[:12]}-{workload}-r{round_}"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))


@pytest.fixture
def trial(tmp_path: Path) -> Path:
    repository = git.Repo.init(tmp_path, initial_branch="main")
    shas = []
    for subject in ("example trainer", "perf(calibrate): no-op", "perf(calibrate): planted slowdown"):
        (tmp_path / "log.txt").write_text(subject)
        repository.index.add(["log.txt"])
        shas.append(repository.index.commit(subject).hexsha)
    baseline, noop, plant = shas
    for round_ in range(len(BASELINE)):
        batch = f"bench-{round_ // 2}"  # two rounds per batch, as bench adds them
        for sha, values in ((plant, PLANT), (baseline, BASELINE), (noop, NOOP)):
            write_run(tmp_path, batch, sha, "loop", round_, {"status": "ok", "tokens_per_s": values[round_]})
        write_run(tmp_path, batch, baseline, "sft", round_, {"status": "ok", "tokens_per_s": 1e6})
    write_run(tmp_path, "bench-9", plant, "loop", 8, {"status": "oom"})
    return tmp_path


def test_values_are_grouped_by_commit_and_round_for_the_workload_only(trial: Path) -> None:
    values = rounds.values_by_commit(trial, "loop")
    assert sorted(len(by_round) for by_round in values.values()) == [8, 8, 8]
    assert all(1e6 not in by_round.values() for by_round in values.values())


def test_the_plant_is_a_regression_and_the_noop_no_change(
    trial: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["rounds", str(trial), "--every", "4"])
    rounds.main()
    lines = capsys.readouterr().out.splitlines()

    def at_8_rounds(subject: str) -> str:
        block = lines[lines.index(subject) + 1 :]
        return next(line for line in block if line.strip().startswith("8 rounds:"))

    assert at_8_rounds("perf(calibrate): no-op").endswith("no change")
    plant = at_8_rounds("perf(calibrate): planted slowdown")
    assert plant.endswith("regression")
    assert -0.16 < float(plant.split(": ")[1].split("%")[0]) / 100 < -0.14
    assert "CV 2.0% over 8 runs: baseline" in lines
    assert lines[-1].startswith("smallest effect detected")


def test_no_finished_runs_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git.Repo.init(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rounds", str(tmp_path)])
    with pytest.raises(SystemExit, match="no finished loop runs"):
        rounds.main()


def write_results(path: Path, suffix: str, rounds_: range) -> Path:
    """A bench results file of one machine (its own SHAs), as ``interrupted-NN.json`` keeps it."""
    subjects = ("example trainer", "perf(calibrate): no-op", "perf(calibrate): planted slowdown")
    commits = [{"sha": f"{i}{suffix}" * 8, "subject": subject} for i, subject in enumerate(subjects)]
    runs = [
        {
            "commit": commit["sha"],
            "workload": "loop",
            "repeat": r - rounds_.start,
            "status": "ok",
            "metrics": {"tokens_per_s": values[r]},
        }
        for r in rounds_
        for commit, values in zip(commits, (BASELINE, NOOP, PLANT), strict=True)
    ]
    runs.append(
        {"commit": commits[2]["sha"], "workload": "loop", "repeat": 9, "status": "oom", "metrics": {}}
    )
    path.write_text(json.dumps({"baseline": commits[0]["sha"], "commits": commits, "runs": runs}))
    return path


def test_results_files_of_two_machines_pool_their_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = write_results(tmp_path / "a.json", "a", range(0, 4))
    second = write_results(tmp_path / "b.json", "b", range(4, 8))
    values, baseline = rounds.values_by_subject([first, second], "loop")
    assert baseline == "example trainer"
    assert sorted(values[baseline].values()) == sorted(BASELINE)  # round 0 of each file kept apart
    monkeypatch.setattr(sys, "argv", ["rounds", str(first), str(second), "--every", "4"])
    rounds.main()
    lines = capsys.readouterr().out.splitlines()
    plant = lines[lines.index("perf(calibrate): planted slowdown") + 2]
    assert plant.strip().startswith("8 rounds:") and plant.endswith("regression")
    assert "CV 2.0% over 8 runs: baseline" in lines


def test_results_files_of_different_baselines_are_refused(tmp_path: Path) -> None:
    first = write_results(tmp_path / "a.json", "a", range(0, 4))
    other = json.loads(first.read_text())
    other["commits"][0]["subject"] = "another trainer"
    (tmp_path / "b.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="different baselines"):
        rounds.values_by_subject([first, tmp_path / "b.json"], "loop")
