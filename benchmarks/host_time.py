"""Where a training step's host time goes: a sampling profiler that charges the main thread's wall time to the
source of the code it is running (Trainer bookkeeping, TRL, PEFT's LoRA dispatch, compiled-code launchers, the
optimizer, data loading, ...), without the torch profiler's own slowdown of the host.

A background thread reads the main thread's Python stack every ``interval`` seconds (``sys._current_frames``)
and charges the wall time since its previous reading to that stack. Torch releases the GIL while it launches
kernels or waits for the device, so a blocked ``.item()`` is charged to the line that called it. Pure Python
code holds the GIL until the interpreter's switch interval (5 ms by default) makes it let go; the sampler
shortens that interval while it runs, or a reading due during a stretch of Python would be taken at the next
call that releases the GIL (a kernel launch) and charged to it.

A stack is charged to the source of its innermost frame whose file belongs to a named source (:data:`SOURCES`,
``other Python`` for the rest); frames of generic plumbing (:data:`PLUMBING`: ``torch.nn.Module.__call__``,
``functools``, ...) are passed through to their callers.

While the main thread waits in the autograd engine (``backward()``), the backward pass runs on the engine's own
thread; those readings are charged to that thread's stack, prefixed ``backward:``, when it is running Python
(compiled backward graphs are Python launchers), and to ``backward: autograd engine`` otherwise.

``python -m benchmarks.profiling --host-time`` runs this over a program's steady-state steps; ``bot profile
--host-time`` over a workload.
"""

from __future__ import annotations

import linecache
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, TypeVar

# (fragment of a file path, source name), first match wins. Code without a file (``<string>``) is named with
# its function: Dynamo's guards are ``<string>:guard``. Frames of perfbot's meter are its own (``source_of``).
SOURCES: tuple[tuple[str, str], ...] = (
    ("<string>:guard", "torch.compile runtime (Dynamo, guards)"),
    ("/torchinductor_", "compiled code (Inductor launchers)"),
    ("/torch/_inductor/", "compiled code (Inductor runtime, CUDA graphs)"),
    ("/torch/_dynamo/", "torch.compile runtime (Dynamo, guards)"),
    ("/torch/_functorch/", "torch.compile runtime (AOTAutograd wrappers)"),
    ("/torch/nn/attention/flex_attention", "attention masks"),
    ("/transformers/masking_utils", "attention masks"),
    ("/torch/optim/", "optimizer step"),
    ("/transformers/optimization", "optimizer step"),
    ("/torch/nn/utils/clip_grad", "gradient clipping"),
    ("/torch/utils/data/", "data loading (main process)"),
    ("/transformers/data/", "data loading (main process)"),
    ("/torch/autograd/", "backward: autograd engine"),
    ("/peft/", "PEFT (LoRA layers, eager)"),
    ("/trl/", "TRL trainer (loss, metrics)"),
    ("/transformers/trainer_callback", "Trainer callbacks and logging"),
    ("/transformers/integrations/integration_utils", "Trainer callbacks and logging"),
    ("/transformers/trainer", "Trainer loop and bookkeeping"),
    ("/accelerate/", "Accelerate (loader, backward, clipping)"),
    ("/transformers/models/", "model code (eager)"),
    ("/transformers/integrations/", "model code (eager)"),
    ("/transformers/", "transformers (other)"),
    ("/tqdm/", "Trainer callbacks and logging"),
)
# Files whose frames are generic plumbing: the time is their caller's.
PLUMBING = (
    "/torch/nn/modules/",
    "/torch/_ops.py",
    "/torch/utils/_contextlib.py",
    "/torch/utils/_device.py",
    "/torch/_tensor.py",
    "/torch/overrides.py",
    "/torch/cuda/",
    "/torch/nn/functional.py",
    "/torch/functional.py",
    "/torch/amp/",
    "/functools.py",
    "/contextlib.py",
    "<frozen",
    "/transformers/utils/generic.py",
    "/transformers/utils/import_utils.py",
)
OTHER = "other Python"
METER = "perfbot meter"
PERFBOT = Path(__file__).resolve().parent.as_posix() + "/"  # the benchmarks package: the meter and launcher
BACKWARD = "backward: autograd engine"
DEFAULT_INTERVAL = 0.002
SWITCH_INTERVAL = 1e-5  # seconds: the GIL switch interval while sampling (Python's default is 5 ms)
OUTLIER = 1.5  # a step taking this many times the median step is left out of the averages
TOP_LINES = 15


def source_of(filename: str) -> str | None:
    """The source a frame of ``filename`` belongs to, or None when it is plumbing (charged to its caller)."""
    path = filename.replace("\\", "/")
    if path.startswith(PERFBOT):
        return METER
    if any(fragment in path for fragment in PLUMBING):
        return None
    for fragment, name in SOURCES:
        if fragment in path:
            return name
    return OTHER


@dataclass(frozen=True)
class Site:
    """A line that host time was charged to."""

    filename: str
    line: int
    function: str

    def describe(self) -> str:
        code = linecache.getline(self.filename, self.line).strip()
        short = "/".join(self.filename.replace("\\", "/").split("/")[-2:])
        return f"{short}:{self.line} {self.function}: {code[:80]}"


class HostSampler:
    """Samples the main thread's Python stack from a background thread while recording (see the module doc)."""

    def __init__(self, interval: float = DEFAULT_INTERVAL) -> None:
        if interval <= 0:
            raise ValueError("the sampling interval must be positive")
        self.interval = interval
        self._target = threading.main_thread().ident
        self._steps: list[_StepTime] = []
        self._step = _StepTime()
        self._known: dict[str, str | None] = {}
        self._recording = False
        self._halt = threading.Lock()  # held while the sampler runs; released to stop it
        self._thread: threading.Thread | None = None
        self._switch_interval = sys.getswitchinterval()

    def _source(self, code: CodeType) -> str | None:
        name = code.co_filename
        if name == "<string>":
            name = f"<string>:{code.co_name}"
        if name not in self._known:
            self._known[name] = source_of(name)
        return self._known[name]

    def _charge(self, frame: FrameType | None) -> tuple[str, Site | None]:
        """The source and line of the innermost frame of ``frame``'s stack that is not plumbing."""
        while frame is not None:
            source = self._source(frame.f_code)
            if source is not None:
                # A frame caught at an instruction without a line number (CPython 3.11+: between a call's
                # setup and its first line) has none: it is charged to the function's first line.
                line = frame.f_lineno if frame.f_lineno is not None else frame.f_code.co_firstlineno
                return source, Site(frame.f_code.co_filename, line, frame.f_code.co_name)
            frame = frame.f_back
        return OTHER, None

    def _engine_frame(self, frames: dict[int, FrameType]) -> FrameType | None:
        """The innermost frame of a thread started outside Python (the autograd engine's), if one runs Python."""
        for ident, frame in frames.items():
            if ident in (self._target, threading.get_ident()):
                continue
            bottom = frame
            while bottom.f_back is not None:
                bottom = bottom.f_back
            if not bottom.f_code.co_filename.endswith("threading.py"):
                return frame
        return None

    def _sample(self, frames: dict[int, FrameType], elapsed: float) -> None:
        frame = frames.get(self._target) if self._target is not None else None
        if frame is None:
            return
        source, site = self._charge(frame)
        if source == BACKWARD:
            engine = self._engine_frame(frames)
            if engine is not None:
                inner, inner_site = self._charge(engine)
                source, site = ("backward: " + inner.removeprefix("backward: "), inner_site or site)
        step = self._step
        step.sources[source] += elapsed
        if site is not None:
            step.sites[(source, site)] += elapsed
        step.seconds += elapsed
        step.samples += 1

    def _run(self) -> None:
        # A bare lock's timed acquire, and the stacks read first thing after it: any Python run between the
        # wake-up and the reading lets the main thread take the GIL back and be read where it waits for it.
        last = time.perf_counter()
        while not self._halt.acquire(timeout=self.interval):
            frames = sys._current_frames()
            now = time.perf_counter()
            if self._recording:
                self._sample(frames, now - last)
            last = now
        self._halt.release()  # taken to stop; free for the next start

    def start(self) -> None:
        """Start the sampling thread (readings are kept only while recording)."""
        if self._thread is None:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(self._switch_interval, SWITCH_INTERVAL))
            self._halt.acquire()
            self._thread = threading.Thread(target=self._run, name="perfbot-host-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the sampling thread."""
        if self._thread is not None:
            self._halt.release()
            self._thread.join()
            self._thread = None
            sys.setswitchinterval(self._switch_interval)

    def record(self, on: bool) -> None:
        """Keep readings from now on (``on``: the step being recorded starts now, if none is) or drop them
        (between the recorded steps)."""
        if on and not self._step.recorded:
            self._step = _StepTime(recorded=True)
        self._recording = on

    def end_step(self) -> None:
        """Close the step being recorded: readings from now on belong to the next."""
        if self._step.recorded:
            self._step.wall = time.perf_counter() - self._step.started
            self._steps.append(self._step)
        self._step = _StepTime()

    @contextmanager
    def recording(self) -> Iterator[HostSampler]:
        """Sample and keep every reading until exit, as one step."""
        self.start()
        self.record(True)
        try:
            yield self
        finally:
            self.record(False)
            self.stop()
            self.end_step()

    def report(self) -> HostTime:
        """The recorded steps' host time per step, by source and line, averaged over the typical steps: those
        within :data:`OUTLIER` times the median step (a recompilation or a collection pause in one step would
        otherwise be spread over all of them); the others are listed with what took their time."""
        self.end_step()
        if not self._steps:
            raise ValueError("no step was recorded")
        median = statistics.median(step.wall for step in self._steps)
        typical = [step for step in self._steps if step.wall <= OUTLIER * median]
        sources: defaultdict[str, float] = defaultdict(float)
        sites: defaultdict[tuple[str, Site], float] = defaultdict(float)
        for step in typical:
            for name, seconds in step.sources.items():
                sources[name] += seconds
            for key, seconds in step.sites.items():
                sites[key] += seconds
        per_step = 1000 / len(typical)
        outliers = [
            OutlierStep(
                index,
                round(step.wall * 1000, 1),
                max(step.sources, key=step.sources.__getitem__, default=OTHER),
            )
            for index, step in enumerate(self._steps)
            if step.wall > OUTLIER * median
        ]
        return HostTime(
            steps=len(typical),
            step_ms=round(sum(step.wall for step in typical) * per_step, 3),
            sampled_ms=round(sum(step.seconds for step in typical) * per_step, 3),
            samples=sum(step.samples for step in typical),
            interval_ms=self.interval * 1000,
            sources_ms={name: round(seconds * per_step, 3) for name, seconds in _longest_first(sources)},
            top_lines=[
                LineTime(source, site.describe(), round(seconds * per_step, 3))
                for (source, site), seconds in _longest_first(sites)[:TOP_LINES]
            ],
            outlier_steps=outliers,
        )


_Key = TypeVar("_Key")


def _longest_first(seconds: dict[_Key, float]) -> list[tuple[_Key, float]]:
    """The entries by time, longest first; ties in the order they were first charged."""
    return sorted(seconds.items(), key=lambda entry: entry[1], reverse=True)


@dataclass
class _StepTime:
    recorded: bool = False
    started: float = field(default_factory=time.perf_counter)
    wall: float = 0.0
    seconds: float = 0.0  # charged by the samples
    samples: int = 0
    sources: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    sites: defaultdict[tuple[str, Site], float] = field(default_factory=lambda: defaultdict(float))


@dataclass(frozen=True)
class OutlierStep:
    """A recorded step left out of the averages: its index among the recorded steps, its host time and the
    source that took most of it."""

    index: int
    ms: float
    top_source: str


@dataclass(frozen=True)
class LineTime:
    """Host time per step charged to one line."""

    source: str
    line: str
    ms: float


@dataclass(frozen=True)
class HostTime:
    """The main thread's wall time per recorded step, by source and by line."""

    steps: int
    step_ms: float  # wall time per step, from the step boundaries
    sampled_ms: (
        float  # the part of it the samples charged (the rest fell between the last sample and the end)
    )
    samples: int
    interval_ms: float
    sources_ms: dict[str, float]
    top_lines: list[LineTime] = field(default_factory=list)
    outlier_steps: list[OutlierStep] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostTime:
        return cls(
            **{
                **data,
                "top_lines": [LineTime(**line) for line in data.get("top_lines", [])],
                "outlier_steps": [OutlierStep(**step) for step in data.get("outlier_steps", [])],
            }
        )


def format_host_time(host: HostTime, step_ms: float | None = None) -> str:
    """A table of host time per step by source, then the lines that took most; ``step_ms`` is the unprofiled
    step time to compare with, where known."""
    head = f"host time per step: {host.step_ms:.1f} ms over {host.steps} typical steps, {host.sampled_ms:.1f} ms "
    head += f"of it charged by {host.samples} samples every {host.interval_ms:g} ms"
    if step_ms:
        head += f"; the unsampled step took {step_ms:.1f} ms"
    rows = [head, f"  {'ms/step':>8} {'share':>6}  source"]
    for name, ms in host.sources_ms.items():
        rows.append(f"  {ms:8.2f} {ms / host.sampled_ms if host.sampled_ms else 0:6.1%}  {name}")
    rows.append(f"  {'ms/step':>8}  line")
    rows.extend(f"  {line.ms:8.2f}  {line.line}" for line in host.top_lines)
    for step in host.outlier_steps:
        rows.append(f"  left out: recorded step {step.index}, {step.ms:.1f} ms, mostly {step.top_source}")
    return "\n".join(rows)
