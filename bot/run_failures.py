"""A workload that cannot run at the baseline, in one line: how it ended, the last line of its log, and the
override that would fix it (a model or a dataset the runner cannot download, memory, time). Such a workload
measures nothing at any commit, and says so here rather than as a regression of a commit."""

from __future__ import annotations

import re
import shlex

from benchmarks.results import Results
from benchmarks.runner import RunRecord
from benchmarks.status import RunStatus
from bot.workload_drafts import MODEL_KEYS

# What the log of a run says when a download was needed and the runner is offline.
MODEL_DOWNLOAD = re.compile(
    r"couldn't connect to 'https://huggingface\.co'|is not a local folder and is not a valid model identifier"
    r"|LocalEntryNotFoundError|Cannot find an appropriate cached snapshot"
)
LAUNCH_SUMMARY = "=========== benchmarks.launch:"  # where the launcher's own summary starts in a run's log
DATASET_DOWNLOAD = re.compile(r"Couldn't reach '([^']+)' on the Hub|DatasetNotFoundError: Dataset '([^']+)'")


def baseline_failures(results: Results) -> list[str]:
    """One line for each workload none of whose runs at the baseline ended ``ok``."""
    if not results.commits:
        return []
    baseline = results.commits[0].sha
    lines = []
    for name, workload in results.workloads.items():
        runs = [run for run in results.runs if run.workload == name and run.commit == baseline]
        if runs and not any(run.ok for run in runs):
            last = runs[-1]
            lines.append(
                f"{name} cannot run at the baseline {baseline[:7]} ({last.status}): {last_error_line(last)}; "
                f"fix: {remedy(last, name, str(workload.get('command', '')))}"
            )
    return lines


def remedy(run: RunRecord, workload: str, command: str) -> str:
    """The override that would let the run go through, from how it ended and what its log says."""
    table = f"[tool.bot.workloads.{workload}]"
    if run.status == RunStatus.OOM:
        return f"out of memory: lower the per-device batch or the length in its command in {table}"
    if run.status == RunStatus.TIMEOUT:
        return f"it ran past its time limit: raise timeout_s in {table}, or lower its steps"
    dataset = DATASET_DOWNLOAD.search(run.log_tail)
    if dataset:
        name = dataset.group(1) or dataset.group(2)
        return f"dataset {name} cannot be downloaded here: put a local copy in its place in the command in {table}"
    if MODEL_DOWNLOAD.search(run.log_tail):
        model = _named_model(command) or "<model id>"
        return (
            f'a model cannot be downloaded here: add [tool.bot.workloads.{workload}.models."{model}"] with its '
            "config (model_type and sizes) to build it with random weights (`bot init` drafts it for the "
            "architectures it knows)"
        )
    return f"run its command by hand at the baseline and fix what the log says: {command}"


def _named_model(command: str) -> str | None:
    """The model id the command passes with ``--model_name_or_path`` (or a like-named flag)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for index, word in enumerate(words[:-1]):
        name, _, value = word.lstrip("-").partition("=")
        if word.startswith("--") and name.replace("-", "_") in MODEL_KEYS:
            return value or words[index + 1]
    return None


def last_error_line(run: RunRecord) -> str:
    """The program's last error line (else its last line), before the launcher's summary and perfbot's notes."""
    program = run.log_tail.split(LAUNCH_SUMMARY, 1)[0]
    lines = [
        line.strip() for line in program.splitlines() if line.strip() and not line.startswith("[perfbot]")
    ]
    errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception)\b|\S+: error: ", line)]
    return (errors or lines or ["(no output)"])[-1][:300]
