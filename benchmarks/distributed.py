"""Multi-process workloads: ``torchrun ...`` and ``accelerate launch ...`` commands, measured on every rank.

The launch wrapper keeps the user's launcher and its options and puts itself between the launcher and the
training program: ``torchrun --nproc-per-node 2 train.py ARGS`` runs as ::

    python -m torch.distributed.run --nproc-per-node 2 -m benchmarks.launch --out OUT --per-rank \\
        --warmup-steps W -- train.py ARGS

so each rank runs the program in-process under its own meter and writes ``OUT.rank<RANK>``; ``accelerate
launch`` is rewritten the same way (``python -m accelerate.commands.launch ... -m benchmarks.launch ...``).
Once the launcher exits, :func:`aggregate_ranks` merges the per-rank records into one ``perfbot.run/v1`` record:

- ``tokens``, ``samples``, ``tokens_per_s``, ``samples_per_s``, ``achieved_tflops``: summed over ranks (every
  rank trains on its own shard of the global batch, in lock-step);
- ``peak_memory_bytes``: the largest over ranks;
- ``phases``, ``step_time_s``, ``data_wait_host``, ``allreduce_wait``, ``loss`` and ``env``: rank 0's
  (``allreduce_wait`` is the part of DDP's gradient all-reduce that backward did not hide, see
  :mod:`benchmarks.allreduce`); ``mfu`` is the summed achieved FLOP/s over ``world_size`` × one GPU's peak;
- ``files_loaded``: every rank's, merged (:mod:`benchmarks.files_loaded`);
- ``world_size`` and ``ranks`` (each rank's status, tokens/s, peak memory, median step time and all-reduce wait).

The merged status is ``ok`` only when the launcher exited 0 and every rank of ``world_size`` reported ``ok``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.files_loaded import FILES_LOADED
from benchmarks.status import RunStatus

RANK_SUFFIX = ".rank"
_LAUNCHERS = {
    "torchrun": "torch.distributed.run",
    "torch.distributed.run": "torch.distributed.run",
    "torch.distributed.launch": "torch.distributed.run",
    "accelerate": "accelerate.commands.launch",
    "accelerate.commands.launch": "accelerate.commands.launch",
}


class LauncherError(ValueError):
    """A launcher command perfbot cannot measure per rank."""


@dataclass(frozen=True)
class DistributedLaunch:
    """A launcher command split into the launcher module, its own options, and the program it starts."""

    module: str
    options: tuple[str, ...]
    program: tuple[str, ...]

    def argv(self, out: str, warmup_steps: int, stop_after: int | None = None) -> list[str]:
        """The launcher running ``benchmarks.launch`` on every rank, each writing ``out.rank<RANK>`` (and each
        ending after ``stop_after`` steps, when given)."""
        stop = [] if stop_after is None else ["--stop-after-steps", str(stop_after)]
        return [
            sys.executable,
            "-m",
            self.module,
            *self.options,
            "-m",
            "benchmarks.launch",
            "--out",
            out,
            "--per-rank",
            "--warmup-steps",
            str(warmup_steps),
            *stop,
            "--",
            *self.program,
        ]


def parse_launcher(command: Sequence[str]) -> DistributedLaunch | None:
    """Read ``torchrun ...``, ``accelerate launch ...`` or ``python -m torch.distributed.run ...``.

    Returns ``None`` for any other command (a plain Python program). The launcher's own argument parser
    finds where its options end and the training program starts, so every option it accepts is kept.
    """
    module = _launcher_module(list(command))
    if module is None:
        return None
    name, rest = module
    parser = _launcher_parser(name)
    try:
        parsed = parser.parse_args(rest)
    except SystemExit as exit_:
        raise LauncherError(f"`{' '.join(command)}` is not a valid {name} command") from exit_
    if parsed.no_python:
        raise LauncherError("--no-python runs a non-Python program, which benchmarks.launch cannot measure")
    script_args = list(parsed.training_script_args)
    split = len(rest) - len(script_args) - 1
    options = [option for option in rest[:split] if option not in ("-m", "--module")]
    program = ["python", "-m", parsed.training_script] if parsed.module else [parsed.training_script]
    return DistributedLaunch(name, tuple(options), (*program, *script_args))


def _launcher_module(command: list[str]) -> tuple[str, list[str]] | None:
    """``(launcher module, the arguments after it)``, or ``None`` when ``command`` starts no launcher."""
    if not command:
        return None
    head = os.path.basename(command[0])
    if head == "torchrun":
        return _LAUNCHERS[head], command[1:]
    if head == "accelerate":
        if len(command) < 2 or command[1] != "launch":
            return None
        return _LAUNCHERS[head], command[2:]
    rest = command[1:]
    while rest and rest[0] in ("-u", "-B"):
        rest = rest[1:]
    if head.startswith("python") and len(rest) >= 2 and rest[0] == "-m" and rest[1] in _LAUNCHERS:
        return _LAUNCHERS[rest[1]], rest[2:]
    return None


def _launcher_parser(module: str) -> argparse.ArgumentParser:
    if module == "torch.distributed.run":
        from torch.distributed.run import get_args_parser

        return get_args_parser()
    from accelerate.commands.launch import launch_command_parser

    return launch_command_parser()


def rank_path(out: str, rank: int | str) -> str:
    """Where rank ``rank`` writes its record."""
    return f"{out}{RANK_SUFFIX}{rank}"


def read_rank_records(out: str) -> list[dict[str, Any]]:
    """Every per-rank record written next to ``out``, by rank."""
    records = []
    for path in glob.glob(glob.escape(out) + RANK_SUFFIX + "*"):
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("rank"), int):
            records.append(record)
    return sorted(records, key=lambda record: record["rank"])


def aggregate_ranks(
    records: Sequence[dict[str, Any]], command: Sequence[str], exit_code: int
) -> dict[str, Any] | None:
    """One ``perfbot.run/v1`` record from every rank's (see the module docstring); ``None`` without any."""
    if not records:
        return None
    first = records[0]
    world_size = max(int(record.get("world_size") or 1) for record in records)
    seen = {record["rank"] for record in records}
    problems = [f"rank {record['rank']}: {record['error']}" for record in records if record.get("error")]
    missing = sorted(set(range(world_size)) - seen)
    if missing:
        problems.append(f"rank(s) {', '.join(map(str, missing))} wrote no metrics")
    if exit_code != 0:
        problems.append(f"the launcher exited with status {exit_code}")
    statuses = [record.get("status") for record in records]
    if RunStatus.OOM in statuses:
        status = RunStatus.OOM
    elif missing or exit_code != 0 or any(s != RunStatus.OK for s in statuses):
        status = RunStatus.CRASHED
    else:
        status = RunStatus.OK
    merged = {key: value for key, value in first.items() if key not in ("rank", "error")}
    merged["status"] = status
    if problems:
        merged["error"] = "; ".join(problems)
    for key in ("tokens", "samples"):
        merged[key] = sum(record.get(key) or 0 for record in records)
    for key in ("tokens_per_s", "samples_per_s", "achieved_tflops"):
        merged[key] = _sum_or_none(record.get(key) for record in records)
    merged["peak_memory_bytes"] = max(
        (record["peak_memory_bytes"] for record in records if record.get("peak_memory_bytes") is not None),
        default=None,
    )
    peak = first.get("peak_tflops")
    achieved = merged["achieved_tflops"]
    merged["mfu"] = achieved / (peak * world_size) if achieved is not None and peak else None
    merged[FILES_LOADED] = sorted({path for record in records for path in record.get(FILES_LOADED) or []})
    merged["world_size"] = world_size
    merged["ranks"] = [
        {
            "rank": record["rank"],
            "status": record.get("status"),
            "tokens_per_s": record.get("tokens_per_s"),
            "peak_memory_bytes": record.get("peak_memory_bytes"),
            "step_time_median_s": (record.get("step_time_s") or {}).get("median"),
            "allreduce_wait_median_ms": (record.get("allreduce_wait") or {}).get("median_ms"),
        }
        for record in records
    ]
    merged["command"] = list(command)
    return merged


def _sum_or_none(values: Any) -> float | None:
    numbers = [value for value in values if value is not None]
    return sum(numbers) if numbers else None
