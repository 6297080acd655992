"""A workload that cannot run at the baseline is one line with its log's last error and the override that
would fix it: a real `bot bench` on a program that names a Hub model on an offline runner, and each remedy from
a run record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from git_repos import make_repo

from benchmarks.runner import RunRecord
from benchmarks.status import RunStatus
from bot.run_failures import LAUNCH_SUMMARY, last_error_line, remedy

LOADS_A_HUB_MODEL = """\
import argparse

from transformers import AutoModelForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--model_name_or_path")
model = AutoModelForCausalLM.from_pretrained(parser.parse_args().model_name_or_path)
"""
PYPROJECT = """\
[tool.bot.workloads.sft]
command = "python train.py --model_name_or_path Qwen/Qwen2.5-0.5B"
steps = 4
warmup_steps = 1
"""


def record(status: RunStatus, log: str) -> RunRecord:
    return RunRecord("0" * 40, "sft", 0, status, 1.0, log, None)


@pytest.mark.slow
def test_a_model_the_runner_cannot_download_is_one_line_with_the_table_that_fixes_it(tmp_path: Path) -> None:
    root = tmp_path / "target"
    repo = make_repo(
        root, {"train.py": LOADS_A_HUB_MODEL, "pyproject.toml": PYPROJECT, ".gitignore": ".bot/\n"}
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "bench",
            repo.head.commit.hexsha,
            "--repeats",
            "1",
            "--min-time",
            "0",
        ],
        cwd=root,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 1
    [line] = [line for line in done.stdout.splitlines() if "cannot run at the baseline" in line]
    assert line.startswith(
        f"sft cannot run at the baseline {repo.head.commit.hexsha[:7]} (crashed): OSError: "
    )
    assert line.endswith(
        'fix: a model cannot be downloaded here: add [tool.bot.workloads.sft.models."Qwen/Qwen2.5-0.5B"] with '
        "its config (model_type and sizes) to build it with random weights (`bot init` drafts it for the "
        "architectures it knows)"
    )


def test_each_way_a_run_fails_names_its_own_fix() -> None:
    command = "python train.py --dataset_name trl-lib/Capybara"
    oom = remedy(record(RunStatus.OOM, "torch.OutOfMemoryError: CUDA out of memory"), "sft", command)
    assert oom.startswith("out of memory: lower the per-device batch")
    late = remedy(record(RunStatus.TIMEOUT, "[perfbot] timed out after 60 s"), "sft", command)
    assert "raise timeout_s in [tool.bot.workloads.sft]" in late
    offline = "ConnectionError: Couldn't reach 'trl-lib/Capybara' on the Hub (OfflineModeIsEnabled)"
    dataset = remedy(record(RunStatus.CRASHED, offline), "sft", command)
    assert dataset.startswith("dataset trl-lib/Capybara cannot be downloaded here")
    other = record(RunStatus.CRASHED, "train.py: error: unrecognized arguments: --steps 4\n" + LAUNCH_SUMMARY)
    assert remedy(other, "sft", command).endswith(command)
    assert last_error_line(other) == "train.py: error: unrecognized arguments: --steps 4"
