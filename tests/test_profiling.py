"""``bot profile``: the bound read from synthetic traces of every kind, and a real profile of a CPU loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from git_repos import make_repo

from benchmarks.profiling import BOUNDS, classify, summarize
from bot.cli import main


def trace(step_us: float, kernels=(), launches: int = 0, steps: int = 2) -> dict:
    """A Chrome trace of ``steps`` steps of ``step_us`` each; ``kernels`` (name, start, duration) per step."""
    events = []
    for index in range(steps):
        start = index * step_us
        events.append(
            {
                "ph": "X",
                "name": f"ProfilerStep#{index}",
                "cat": "user_annotation",
                "ts": start,
                "dur": step_us,
            }
        )
        for name, offset, duration in kernels:
            events.append({"ph": "X", "name": name, "cat": "kernel", "ts": start + offset, "dur": duration})
        for n in range(launches):
            events.append(
                {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": start + n, "dur": 1}
            )
        events.append({"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": start, "dur": step_us / 10})
    return {"traceEvents": events}


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>"


@pytest.mark.parametrize(
    ("bound", "kernels", "data_wait"),
    [
        ("input", [(GEMM, 0, 900)], 0.4),
        ("communication", [(GEMM, 0, 500), ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 500, 400)], 0.0),
        ("host", [(GEMM, 0, 200), (ELEMENTWISE, 300, 100)], 0.0),
        ("memory", [(GEMM, 0, 300), (ELEMENTWISE, 300, 600)], 0.0),
        ("device", [(GEMM, 0, 800), (ELEMENTWISE, 800, 150)], 0.0),
    ],
)
def test_each_bound_is_read_from_its_trace(bound, kernels, data_wait):
    profile = summarize(trace(1000, kernels, launches=7), data_wait)
    assert profile.bound == bound
    assert profile.launches_per_step == 7 and profile.steps == 2 and profile.step_ms == pytest.approx(1.0)


def test_busy_fraction_merges_overlapping_kernels_and_tops_ops_by_device_time():
    profile = summarize(trace(1000, [(GEMM, 0, 600), (ELEMENTWISE, 500, 200)]), 0.0)
    assert profile.device_busy_fraction == pytest.approx(0.7)  # 0..700 µs busy, overlap counted once
    assert profile.device_busy_ms == pytest.approx(0.7)
    assert profile.top_ops[0].name == GEMM and profile.top_ops[0].calls == 2
    assert profile.top_ops[0].device_ms == pytest.approx(1.2)


def test_the_device_timelines_copy_of_each_step_is_not_a_step_of_its_own():
    # the profiler draws every ProfilerStep on the device's timeline too, spanning that step's kernels
    recorded = trace(1000, [(GEMM, 100, 800)], launches=4)
    recorded["traceEvents"] += [
        {
            "ph": "X",
            "name": f"ProfilerStep#{n}",
            "cat": "gpu_user_annotation",
            "ts": n * 1000 + 100,
            "dur": 800,
        }
        for n in range(2)
    ]
    profile = summarize(recorded, 0.0)
    assert profile.steps == 2 and profile.launches_per_step == 4
    assert profile.step_ms == pytest.approx(1.0) and profile.device_busy_fraction == pytest.approx(0.8)
    assert profile.bound == "device"


def test_a_cpu_run_has_no_busy_fraction_and_is_host_or_input_bound():
    cpu = summarize(trace(1000), 0.05)
    assert cpu.device_busy_fraction is None and cpu.bound == "host"
    assert summarize(trace(1000), 0.5).bound == "input"
    assert set(BOUNDS) == {"input", "communication", "host", "memory", "device"}
    assert classify(cpu) == "host"


def test_a_trace_without_steps_is_refused():
    with pytest.raises(ValueError, match="no ProfilerStep"):
        summarize({"traceEvents": []})


LOOP = """\
import torch

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
import sys

steps = int(sys.argv[sys.argv.index("--steps") + 1])
for _ in range(steps):
    x = torch.randn(16, 32)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

PYPROJECT = """\
[tool.bot.workloads.loop]
command = "python loop.py --steps {steps}"
steps = 4
warmup_steps = 2
"""


def test_bot_profile_runs_a_workload_on_cpu(tmp_path, capsys):
    repo = make_repo(tmp_path, {"loop.py": LOOP, "pyproject.toml": PYPROJECT})
    assert main(["--json", "profile", "--repo", str(tmp_path), "--steps", "3"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["bound"] == "host" and data["device_busy_fraction"] is None and data["steps"] == 3
    assert any(op["name"] == "aten::addmm" for op in data["top_ops"])
    assert (tmp_path / ".bot" / "profiles").is_dir() and not repo.is_dirty(untracked_files=True)
    assert main(["profile", "--repo", str(tmp_path), "--workload", "nope"]) == 2


def test_bench_profile_keeps_each_commits_bound_and_the_note_says_what_to_try_next(tmp_path, capsys):
    import json

    from git_repos import commit_all

    from benchmarks.results import Results
    from bot.comments.note import render_note
    from bot.comments.results import render_results
    from bot.review import review

    repo = make_repo(tmp_path, {"loop.py": LOOP, "pyproject.toml": PYPROJECT})
    base = repo.head.commit.hexsha
    (tmp_path / "loop.py").write_text(LOOP.replace("Linear(64, 1)", "Linear(64, 2)"))
    head = commit_all(repo, "wider head")
    once = ["--repeats", "1", "--max-repeats", "1", "--min-time", "0", "--max-host-load", "1"]
    assert main(["bench", base, head, "--repo", str(tmp_path), "--profile", "2", *once]) == 0
    printed = capsys.readouterr().out
    assert printed.count("host-bound, no device of a") == printed.count("; top op ") == 2
    [path] = (tmp_path / ".bot" / "results").glob("*.json")
    results = Results.load(path)
    assert set(results.profiles) == {base, head}
    for sha in (base, head):
        entry = results.profiles[sha]["loop"]
        assert entry["bound"] == "host" and entry["device_busy_fraction"] is None and entry["steps"] == 2
        assert json.loads(Path(entry["trace"]).read_text())["traceEvents"]
    comment = render_results(results)
    assert "### Where the step time goes" in comment and comment.count("| **host** | n/a (no device) |") == 2
    note = render_note(review(repo, base, head, results=results), results=results)
    assert f"Next for `loop` at `{head[:7]}`" in note and "fewer, larger launches" in note
    assert main(["bench", "--repo", str(tmp_path), "--profile", "0"]) == 2

    # the progress callback follows the runs, then the profiles
    from bot.benchmarking import BenchOptions, bench_revisions
    from bot.workspace import Workspace

    steps = []
    options = BenchOptions(repeats=1, max_repeats=1, min_time_s=0, max_host_load=1)
    bench_revisions(
        Workspace(tmp_path), options, [base, head], profile_steps=1, on_step=lambda *step: steps.append(step)
    )
    labels = [label for *_, label in steps]
    assert [label.split(", ")[0] for label in labels[:2]] == [
        f"{base[:7]} loop repeat 0: ok",
        f"{head[:7]} loop repeat 0: ok",
    ]
    assert all(" samples/s, " in label and label.endswith(" s") for label in labels[:2])
    assert labels[2:] == [f"profiling loop @ {base[:7]}", f"profiling loop @ {head[:7]}"]
    assert [(done, total) for done, total, _ in steps] == [(1, 2), (2, 2), (0, 2), (1, 2)]


def test_bench_reads_device_busy_against_its_unprofiled_steps():
    """A host-bound GPU step slows under the profiler: 57 ms of kernels in a 210 ms profiled step read 27%
    busy, but the measured runs took 91 ms a step, so the device was busy 63% of it and the bound is read
    again from that."""
    from benchmarks.runner import RunRecord
    from bot.comments.results import profile_line
    from bot.profiling import busy_against_measured_steps

    entry = {
        "steps": 5,
        "step_ms": 210.0,
        "device_busy_ms": 57.2,
        "device_busy_fraction": 57.2 / 210.0,
        "launches_per_step": 411.0,
        "data_wait_share": 0.03,
        "communication_share": 0.0,
        "memory_share": 0.25,
        "bound": "host",
        "top_ops": [{"name": "flex_attention_backward", "calls": 5, "device_ms": 35.4, "host_ms": 0.0}],
    }
    cpu = {**entry, "device_busy_ms": None, "device_busy_fraction": None}
    profiles = {"abc": {"sft": entry, "loop": cpu}, "def": {"sft": dict(entry)}}

    def run(commit, step_s, status="ok", workload="sft"):
        metrics = {"step_time_s": {"median": step_s}} if step_s else None
        return RunRecord(commit, workload, 0, status, 30.0, "", metrics)

    runs = [
        run("abc", 0.090),
        run("abc", 0.092),
        run("abc", 0.5, status="crashed"),
        run("abc", 0.01, workload="loop"),
    ]
    busy_against_measured_steps(profiles, runs)
    assert entry["measured_step_ms"] == pytest.approx(91.0)
    assert entry["device_busy_fraction"] == pytest.approx(57.2 / 91.0)
    assert entry["device_busy_fraction_profiled"] == pytest.approx(57.2 / 210.0)
    assert entry["bound"] == "device"  # 63% busy, a quarter of it memory-bound kernels
    assert (
        "measured_step_ms" not in profiles["def"]["sft"] and "measured_step_ms" not in cpu
    )  # no runs, no device
    assert "device busy 63% of the measured 91.0 ms step (27% of the 210.0 ms step under the profiler)" in (
        profile_line(entry)
    )
