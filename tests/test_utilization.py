"""The device's busy share without a profiler (`benchmarks.utilization`, `python -m benchmarks.profiling
--utilization`): nvidia-smi's samples are read, only those inside the window of steps count, the device argument
reaches nvidia-smi, and a run without a device or without nvidia-smi is refused in words."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from datetime import datetime, timedelta

import pytest
from git_repos import make_repo
from test_profiling import LOOP, PYPROJECT

from benchmarks.profiling import main as profiling_main
from benchmarks.utilization import UtilizationSampler, parse_sample, summarize

torch = pytest.importorskip("torch")

# Prints a sample every 20 ms in nvidia-smi's format until killed: 42% for the device it was asked about, 7% else.
FAKE_NVIDIA_SMI = f"""#!{sys.executable}
import sys, time
from datetime import datetime
percent = 42 if sys.argv[-2:] == ["-i", "GPU-test"] else 7
while True:
    print(f"{{datetime.now():%Y/%m/%d %H:%M:%S.%f}}"[:-3] + f", {{percent}}", flush=True)
    time.sleep(0.02)
"""


def test_a_line_of_nvidia_smi_is_a_time_and_a_percent():
    assert parse_sample("2026/11/27 08:15:19.231, 86") == (datetime(2026, 11, 27, 8, 15, 19, 231000), 86.0)
    assert parse_sample("timestamp, utilization.gpu [%]") is None
    assert parse_sample("2026/11/27 08:15:19.231, [N/A]") is None
    assert parse_sample("") is None


def test_only_the_samples_inside_the_window_count():
    start = datetime(2026, 11, 27, 8, 0, 0)
    samples = [
        (start + timedelta(seconds=s), p) for s, p in [(-1, 0), (0, 80), (1, 90), (2, 70), (3, 85), (4, 0)]
    ]
    utilization = summarize(samples, start, start + timedelta(seconds=3))
    assert utilization.samples == 4 and utilization.median_percent == 82.5
    assert utilization.mean_percent == pytest.approx(81.25) and (
        utilization.min_percent,
        utilization.max_percent,
    ) == (70, 90)
    assert utilization.window_s == 3.0
    with pytest.raises(ValueError, match="no utilisation sample between 08:00:05"):
        summarize(samples, start + timedelta(seconds=5), start + timedelta(seconds=6))


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    executable = tmp_path / "bin" / "nvidia-smi"
    executable.parent.mkdir()
    executable.write_text(FAKE_NVIDIA_SMI)
    executable.chmod(executable.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{executable.parent}{os.pathsep}{os.environ['PATH']}")
    return executable


@pytest.mark.parametrize(("device", "percent"), [("GPU-test", 42), (None, 7)])
def test_the_sampler_polls_the_device_it_is_given_over_the_window(fake_nvidia_smi, device, percent):
    sampler = UtilizationSampler(device)
    assert sampler.command[0] == str(fake_nvidia_smi) and "-lms" in sampler.command
    sampler.start()
    time.sleep(1.0)  # the fake's start-up (slow on a loaded machine), then samples before the window
    sampler.open_window()
    time.sleep(0.5)
    sampler.close_window()
    time.sleep(0.2)
    sampler.stop()
    assert sampler._process.poll() is not None  # nvidia-smi is not left running
    utilization = sampler.summary()
    assert utilization.median_percent == percent and utilization.samples >= 3
    assert 0.49 <= utilization.window_s < 2.0


def test_a_window_never_closed_is_an_error_not_a_number(fake_nvidia_smi):
    sampler = UtilizationSampler("GPU-test")
    sampler.start()
    sampler.open_window()
    sampler.stop()
    with pytest.raises(ValueError, match="the run ended before it"):
        sampler.summary()


def test_without_nvidia_smi_the_sampler_says_what_is_missing(tmp_path):
    with pytest.raises(RuntimeError, match="needs `no-such-smi` .* not on PATH"):
        UtilizationSampler(executable="no-such-smi")


def test_the_cli_takes_one_kind_of_run_and_refuses_a_run_without_a_device(tmp_path, monkeypatch, capsys):
    (tmp_path / "loop.py").write_text("print('never runs')\n")
    monkeypatch.chdir(tmp_path)
    command = ["--out", "out", "--skip", "1", "--steps", "2", "--", "python", "loop.py"]
    with pytest.raises(SystemExit) as exit_status:
        profiling_main(["--host-time", "--utilization", *command])
    assert exit_status.value.code == 2 and "choose one" in capsys.readouterr().err
    if torch.cuda.is_available():
        return
    assert profiling_main(["--utilization", *command]) == 1
    assert "device utilisation needs a CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "out" / "utilization.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a run without a device")
def test_bot_profile_utilization_without_a_device_fails_in_words_and_leaves_the_repo_clean(tmp_path, capsys):
    from bot.cli import main

    repo = make_repo(tmp_path, {"loop.py": LOOP, "pyproject.toml": PYPROJECT})
    assert main(["profile", "--repo", str(tmp_path), "--steps", "3", "--host-time", "--utilization"]) == 2
    assert "choose one" in capsys.readouterr().err
    assert main(["profile", "--repo", str(tmp_path), "--steps", "3", "--utilization"]) != 0
    assert "device utilisation needs a CUDA device" in capsys.readouterr().err
    assert not repo.is_dirty(untracked_files=True)


GPU_LOOP = """\
import torch

model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
for step in range(200):
    batch = torch.randn(8192, 2048, device="cuda")  # ~30 ms a step in float32
    loss = model(batch).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
torch.cuda.synchronize()
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_loop_is_measured_busy_by_nvml(tmp_path, monkeypatch, capsys):
    (tmp_path / "loop.py").write_text(GPU_LOOP)
    monkeypatch.chdir(tmp_path)
    command = ["--utilization", "--out", "out", "--skip", "20", "--steps", "150", "--", "python", "loop.py"]
    assert profiling_main(command) == 0
    data = json.loads((tmp_path / "out" / "utilization.json").read_text())
    assert data["samples"] >= 3 and 50 <= data["median_percent"] <= 100  # a device-bound loop
    assert data["meter_step_s"] > 0
    assert "device busy (NVML, no profiler): median" in capsys.readouterr().err
