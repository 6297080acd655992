"""``bot profile [REV] --workload NAME [--host-time | --utilization]``: what bounds a workload's training steps at
one commit, where its host time goes, or how busy the device is with no profiler in the run."""

from __future__ import annotations

import argparse
import json

from benchmarks.host_time import format_host_time
from benchmarks.profiling import format_profile
from benchmarks.utilization import format_utilization
from bot.benchmarking import BenchOptions, bench_spec
from bot.commands.options import workload_size
from bot.commands.table import FromComment
from bot.errors import BadInput, require
from bot.profiling import host_time_workload, profile_workload, utilization_workload
from bot.workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The revision, the workload, its size and how many steps to record."""
    parser.add_argument(
        "rev", nargs="?", default="HEAD", metavar="REV", help="commit to profile (default HEAD)"
    )
    parser.add_argument("--repo", default=".", help="target repository (default: .)")
    parser.add_argument("--workload", metavar="NAME", help="the workload to profile (default: the only one)")
    parser.add_argument("--size", type=workload_size, help="workload size from [tool.bot] (e.g. tiny, gpu)")
    parser.add_argument("--steps", type=int, default=5, help="steady-state steps to record (default 5)")
    parser.add_argument(
        "--host-time",
        action="store_true",
        help="where the host's time per step goes, by source (Trainer, TRL, PEFT, compiled code, ...), from "
        "sampling its Python stack, not torch.profiler",
    )
    parser.add_argument(
        "--utilization",
        action="store_true",
        help="the device's busy share from NVML (nvidia-smi) with nothing added to the run, not torch.profiler, "
        "which slows a host-bound step",
    )


def run(args: argparse.Namespace, comment: FromComment | None = None) -> int:
    """Profile; print the bound, device-busy fraction, launches per step and top ops, and keep the trace; or,
    with ``--host-time``, the host's time per step by source and line; with ``--utilization``, the device's busy
    share."""
    if args.steps < 1:
        raise BadInput(f"--steps must be at least 1 (got {args.steps})")
    if args.host_time and args.utilization:
        raise BadInput("--host-time and --utilization measure separate runs; choose one")
    require("torch", "bot profile")
    workspace = Workspace("." if comment else args.repo)
    spec = bench_spec(workspace.root, BenchOptions(size=args.size))
    if args.utilization:
        utilization, step_ms = utilization_workload(workspace, spec, args.rev, args.workload, args.steps)
        if args.json:
            print(json.dumps(utilization.to_dict() | {"step_ms": step_ms}, indent=1))
        else:
            print(format_utilization(utilization, step_ms))
        return 0
    if args.host_time:
        host, step_ms = host_time_workload(workspace, spec, args.rev, args.workload, args.steps)
        if args.json:
            print(json.dumps(host.to_dict() | {"step_ms_unsampled": step_ms}, indent=1))
        else:
            print(format_host_time(host, step_ms))
        return 0
    profile, folder = profile_workload(workspace, spec, args.rev, args.workload, args.steps)
    if args.json:
        print(json.dumps(profile.to_dict() | {"trace": str(folder / "trace.json")}, indent=1))
        return 0
    print(format_profile(profile))
    print(f"trace: {folder / 'trace.json'} (open it in https://ui.perfetto.dev)")
    return 0
