"""The outcome of a benchmark run, as the launch wrapper, the runners and the results file record it."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """How a run ended; the values are what metrics and results JSON files hold."""

    OK = "ok"  # finished and measured
    CRASHED = "crashed"  # an exception, a non-zero exit, or no metrics
    OOM = "oom"  # out of memory
    TIMEOUT = "timeout"  # killed at the workload's time limit
