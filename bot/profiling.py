"""``bot profile``: one workload of ``[tool.bot]`` run at one commit under :mod:`benchmarks.profiling`, in its own
worktree; the trace and summary are kept under ``.bot/profiles/``."""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import git

from benchmarks import offline_models
from benchmarks.host_time import HostTime
from benchmarks.profiling import Op, Profile, classify
from benchmarks.runner import PERFBOT_ROOT, RunRecord, worktrees
from benchmarks.spec import BenchSpec
from benchmarks.utilization import Utilization
from bot.conventions import state_dir
from bot.errors import BadInput, BotError
from bot.workload_drafts import launched_at
from bot.workspace import Workspace


class ProfileFailed(BotError):
    """The profiled run crashed or wrote no trace; the message carries the end of its log."""


def profile_workload(
    workspace: Workspace, spec: BenchSpec, revision: str, workload: str | None, steps: int
) -> tuple[Profile, Path]:
    """Profile ``workload`` (the only one when None) at ``revision``: its warm-up steps skipped, ``steps``
    recorded. Returns the summary and the folder holding ``trace.json`` and ``profile.json``."""
    out = _run_profiling(workspace, spec, revision, workload, steps, [], "profile.json")
    data = json.loads((out / "profile.json").read_text())
    data["top_ops"] = [Op(**op) for op in data["top_ops"]]
    return Profile(**data), out


def host_time_workload(
    workspace: Workspace, spec: BenchSpec, revision: str, workload: str | None, steps: int
) -> tuple[HostTime, float | None]:
    """The host time per step of ``workload`` at ``revision`` by source (:mod:`benchmarks.host_time`), over
    ``steps`` steps after its warm-up; returns it and the run's metered step time in ms."""
    data, step_ms = _metered_report(
        workspace, spec, revision, workload, steps, "--host-time", "host_time.json"
    )
    return HostTime.from_dict(data), step_ms


def utilization_workload(
    workspace: Workspace, spec: BenchSpec, revision: str, workload: str | None, steps: int
) -> tuple[Utilization, float | None]:
    """The device's busy share over ``steps`` steps of ``workload`` at ``revision`` after its warm-up, from NVML
    with no profiler in the run (:mod:`benchmarks.utilization`); returns it and the run's metered step in ms."""
    data, step_ms = _metered_report(
        workspace, spec, revision, workload, steps, "--utilization", "utilization.json"
    )
    return Utilization(**data), step_ms


def _metered_report(
    workspace: Workspace,
    spec: BenchSpec,
    revision: str,
    workload: str | None,
    steps: int,
    option: str,
    written: str,
) -> tuple[dict[str, Any], float | None]:
    """Run ``python -m benchmarks.profiling OPTION`` on the workload; the report it wrote to ``written``, without
    the meter's numbers, and the run's metered step time in ms."""
    out = _run_profiling(workspace, spec, revision, workload, steps, [option], written)
    data = json.loads((out / written).read_text())
    step_s = data.pop("meter_step_s", None)
    data.pop("meter_tokens_per_s", None)
    return data, None if step_s is None else step_s * 1000


def _run_profiling(
    workspace: Workspace,
    spec: BenchSpec,
    revision: str,
    workload: str | None,
    steps: int,
    options: list[str],
    written: str,
) -> Path:
    """Run ``python -m benchmarks.profiling [options]`` on ``workload`` at ``revision`` in its own worktree;
    returns the folder it wrote ``written`` to."""
    if workload is None:
        if len(spec.workloads) != 1:
            raise BadInput(f"name a workload with --workload: {', '.join(spec.workloads)}")
        workload = next(iter(spec.workloads))
    if workload not in spec.workloads:
        raise BadInput(f"no workload {workload!r} in [tool.bot]; workloads: {', '.join(spec.workloads)}")
    try:
        sha = workspace.repo.commit(revision).hexsha
    except (git.BadName, ValueError) as error:
        raise BadInput(f"{revision}: not a commit in {workspace.root} ({error})") from error
    chosen = spec.workloads[workload]
    skip = chosen.warmup_steps
    run = replace(launched_at(workspace.repo, spec, [sha]).workloads[workload], steps=skip + 1 + steps + 1)
    # (one spare step above, so the recording window closes)
    out = state_dir(workspace.root) / "profiles" / f"{sha[:12]}-{workload}"
    command = [
        sys.executable,
        "-m",
        "benchmarks.profiling",
        *options,
        "--out",
        str(out),
        "--skip",
        str(skip),
        "--steps",
        str(steps),
        "--",
        *shlex.split(run.render(spec.size, spec.seed, sha)),
    ]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PERFBOT_ROOT), os.environ.get("PYTHONPATH")])),
    }
    if run.models:  # built from their configs, as the bench builds them
        environment[offline_models.ENVIRONMENT] = json.dumps(run.models)
    with worktrees(
        workspace.repo, [sha], state_dir(workspace.root) / "profile-worktrees", run.inputs
    ) as trees:
        try:
            done = subprocess.run(
                command,
                cwd=trees[sha] / (run.directory or ""),
                env=environment,
                capture_output=True,
                text=True,
                timeout=chosen.timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as error:
            raise ProfileFailed(
                f"the profiled {workload} run passed its {chosen.timeout_s:.0f} s timeout"
            ) from error
    if done.returncode != 0 or not (out / written).exists():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ProfileFailed(f"the profiled {workload} run failed (exit {done.returncode}):\n{tail}")
    return out


def profile_commits(
    workspace: Workspace,
    spec: BenchSpec,
    shas: list[str],
    steps: int,
    on_step: Callable[[int, int, str], None] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``bot bench --profile``: every workload of ``spec`` profiled at every commit, after the measured runs.
    A run that cannot be profiled is recorded as ``{"error": ...}``, so one failure loses no measurement.
    ``on_step(done, total, label)`` is called before each profile."""
    profiles: dict[str, dict[str, dict[str, Any]]] = {}
    jobs = [(sha, workload) for sha in shas for workload in spec.workloads]
    for done, (sha, workload) in enumerate(jobs):
        if on_step is not None:
            on_step(done, len(jobs), f"profiling {workload} @ {sha[:7]}")
        try:
            profile, folder = profile_workload(workspace, spec, sha, workload, steps)
        except ProfileFailed as error:
            entry = {"error": str(error).splitlines()[0]}
        else:
            entry = profile.to_dict() | {"trace": str(folder / "trace.json")}
        profiles.setdefault(sha, {})[workload] = entry
    return profiles


def busy_against_measured_steps(
    profiles: dict[str, dict[str, dict[str, Any]]], runs: list[RunRecord]
) -> None:
    """Re-read each profiled workload's device-busy fraction against the median step of its measured runs, in
    place: the profiler slows a host-bound step's host (about 2x on the example's LoRA step), so kernel time
    over a profiled step understates how busy the device is when nothing watches. The profiled fraction is
    kept as ``device_busy_fraction_profiled``, the step as ``measured_step_ms``; the bound is read again."""
    for sha, workloads in profiles.items():
        for workload, entry in workloads.items():
            steps = [
                median
                for run in runs
                if run.ok
                and run.commit == sha
                and run.workload == workload
                and (median := ((run.metrics or {}).get("step_time_s") or {}).get("median"))
            ]
            if entry.get("device_busy_ms") is None or not steps:
                continue
            measured_ms = statistics.median(steps) * 1000
            entry["device_busy_fraction_profiled"] = entry["device_busy_fraction"]
            entry["measured_step_ms"] = measured_ms
            entry["device_busy_fraction"] = min(1.0, entry["device_busy_ms"] / measured_ms)
            fields = {name: entry[name] for name in Profile.__dataclass_fields__ if name in entry}
            entry["bound"] = classify(Profile(**{**fields, "top_ops": []}))
