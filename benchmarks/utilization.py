"""The device's busy share measured without a profiler: NVML's GPU utilisation, sampled by ``nvidia-smi`` while a
training program runs, over a window of its steps (``python -m benchmarks.profiling --utilization``).

``torch.profiler`` records every launch and API call on the host, which slows a host-bound step: the example's
tier-2 LoRA step took 70.0 ms unprofiled and 74.0 ms profiled on one H100, so the busy share the profiler reports
is that of a slower host. NVML's utilisation is the share of each sample period in which one or more kernels ran
on the device: the same quantity, with nothing added to the program. The driver averages it over a period of its
own (1/6 s to 1 s, by device), so a window needs seconds of steps, and the median of the samples inside it is
reported.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import IO, Any

from benchmarks.stats import median

# One line per sample: "2026/11/27 08:15:19.231, 86" (local time, percent).
QUERY = ("--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits")
TIMESTAMP = "%Y/%m/%d %H:%M:%S.%f"
PERIOD_MS = 100


@dataclass(frozen=True)
class Utilization:
    """NVML utilisation samples inside a window of steps, in percent."""

    samples: int
    median_percent: float
    mean_percent: float
    min_percent: float
    max_percent: float
    window_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_sample(line: str) -> tuple[datetime, float] | None:
    """The time and percent of one ``nvidia-smi`` line, or ``None`` for a line that is not a sample."""
    stamp, _, percent = line.rpartition(",")
    try:
        return datetime.strptime(stamp.strip(), TIMESTAMP), float(percent.strip())
    except ValueError:
        return None


def summarize(samples: Iterable[tuple[datetime, float]], start: datetime, end: datetime) -> Utilization:
    """The samples taken between ``start`` and ``end``; a ``ValueError`` when there are none."""
    inside = sorted(percent for when, percent in samples if start <= when <= end)
    if not inside:
        raise ValueError(
            f"no utilisation sample between {start:%H:%M:%S.%f} and {end:%H:%M:%S.%f}: "
            "give the window more steps (the driver samples every 1/6 s to 1 s)"
        )
    return Utilization(
        samples=len(inside),
        median_percent=median(inside),
        mean_percent=sum(inside) / len(inside),
        min_percent=inside[0],
        max_percent=inside[-1],
        window_s=(end - start).total_seconds(),
    )


class UtilizationSampler:
    """``nvidia-smi`` polling one device every :data:`PERIOD_MS` ms into a temporary file, from :meth:`start` to
    :meth:`stop`; :meth:`open_window` and :meth:`close_window` mark the steps :meth:`summary` reads."""

    def __init__(self, device: str | None = None, executable: str = "nvidia-smi") -> None:
        found = shutil.which(executable)
        if found is None:
            raise RuntimeError(
                f"device utilisation needs `{executable}` (an NVIDIA driver); it is not on PATH"
            )
        self.command: Sequence[str] = [
            found,
            *QUERY,
            "-lms",
            str(PERIOD_MS),
            *(["-i", device] if device else []),
        ]
        self.window: list[datetime] = []
        self.samples: list[tuple[datetime, float]] = []
        self._file: IO[str] | None = None
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self._file = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen(
            self.command, stdout=self._file, stderr=subprocess.DEVNULL, text=True
        )

    def open_window(self) -> None:
        self.window = [datetime.now()]

    def close_window(self) -> None:
        if len(self.window) == 1:
            self.window.append(datetime.now())

    def stop(self) -> None:
        """Stop polling and keep the samples taken."""
        if self._process is None or self._file is None:
            raise RuntimeError("the sampler was not started")
        self._process.terminate()
        self._process.wait()
        self._file.seek(0)
        self.samples = [sample for sample in map(parse_sample, self._file.read().splitlines()) if sample]
        self._file.close()

    def summary(self) -> Utilization:
        """The samples inside the window, once stopped; a ``ValueError`` when the window never closed."""
        if len(self.window) != 2:
            raise ValueError("the window of steps was not opened and closed: the run ended before it")
        return summarize(self.samples, *self.window)


def cuda_device_id() -> str:
    """``nvidia-smi``'s name for the CUDA device this process uses (its UUID), whatever
    ``CUDA_VISIBLE_DEVICES`` renumbers; a ``RuntimeError`` without one."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("device utilisation needs a CUDA device; this run has none")
    uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def format_utilization(utilization: Utilization, step_ms: float | None) -> str:
    """One line for the terminal."""
    step = "" if step_ms is None else f" · metered step {step_ms:.1f} ms"
    return (
        f"device busy (NVML, no profiler): median {utilization.median_percent:.0f}% "
        f"(mean {utilization.mean_percent:.1f}%, {utilization.min_percent:.0f}-{utilization.max_percent:.0f}%) "
        f"over {utilization.samples} samples in {utilization.window_s:.1f} s{step}"
    )
