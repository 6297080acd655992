"""Profiling a training program's steady-state steps: what bounds them, and what the device spends time on.

    python -m benchmarks.profiling --out DIR [--skip N] [--steps N] [--host-time | --utilization] -- python train.py [ARGS...]

With ``--host-time`` the steps are sampled by :mod:`benchmarks.host_time` instead (``DIR/host_time.json``: the
host's time per step by source and line), without the profiler, which slows a host-bound step's host.
With ``--utilization`` the device's utilisation is sampled by ``nvidia-smi`` over the steps instead
(``DIR/utilization.json``, :mod:`benchmarks.utilization`): the busy share with no profiler in the program.

The program runs in-process under the launch wrapper's meter (for the step phases) and a ``torch.profiler``
whose schedule advances at every optimizer step: ``--skip`` steps are left out (compilation, allocator
warm-up), one more warms the profiler up, then ``--steps`` are recorded. ``DIR/trace.json`` is the Chrome
trace; ``DIR/profile.json`` the summary :func:`summarize` reads from it.

What bounds the steps is decided by :func:`classify`, in this order (the first rule that holds wins):

1. ``input``: the step waits on data (the meter's ``data_wait`` phase) for at least ``INPUT_SHARE`` of its time;
2. ``communication``: collective kernels (NCCL) take at least ``COMMUNICATION_SHARE`` of the device's busy time;
3. ``host``: the device is busy for less than ``HOST_BUSY`` of the step's wall time (it waits for the host to
   launch work: small kernels, Python overhead, host syncs); without a device (a CPU run) the host is what
   computes, so a CPU run that is not input-bound is ``host``-bound;
4. ``memory``: memory-bound kernels (elementwise, copies, reductions, normalisations) take at least
   ``MEMORY_SHARE`` of the device's busy time;
5. ``device``: otherwise: the device is busy with compute (matmuls, attention).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.host_time import HostSampler, HostTime, format_host_time
from benchmarks.utilization import Utilization, UtilizationSampler, cuda_device_id, format_utilization

INPUT_SHARE = 0.25
COMMUNICATION_SHARE = 0.25
HOST_BUSY = 0.60
MEMORY_SHARE = 0.50
BOUNDS = ("input", "communication", "host", "memory", "device")
TOP_OPS = 15
TOP_RUNTIME = 8

# Kernel-name fragments of work that moves bytes rather than doing arithmetic on them.
MEMORY_KERNELS = (
    "elementwise",
    "copy",
    "memcpy",
    "memset",
    "fill",
    "reduce",
    "norm",
    "cat",
    "index",
    "gather",
)
COMMUNICATION_KERNELS = ("nccl",)
LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaGraphLaunch",
)


@dataclass(frozen=True)
class Op:
    """One operator over the recorded steps: calls, time on the device, and time on the host."""

    name: str
    calls: int
    device_ms: float
    host_ms: float


@dataclass
class Profile:
    """The summary of a profiled run."""

    steps: int
    step_ms: float  # median wall time of a recorded step
    device_busy_ms: float | None  # per step; None without a device
    device_busy_fraction: float | None
    launches_per_step: float
    data_wait_share: float | None
    communication_share: float | None
    memory_share: float | None
    bound: str = ""
    top_ops: list[Op] = field(default_factory=list)
    runtime_ms: dict[str, float] = field(default_factory=dict)  # host ms per step in CUDA API calls, by call

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _merged_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total = 0.0
    current: tuple[float, float] | None = None  # the union's interval being extended
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = (start, end)
        else:
            current = (current[0], max(current[1], end))
    if current is not None:
        total += current[1] - current[0]
    return total


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def summarize(trace: Mapping[str, Any], data_wait_share: float | None = None) -> Profile:
    """Read a Chrome trace (``torch.profiler``'s export) of the recorded steps into a :class:`Profile`.

    Steps are the host's ``ProfilerStep#N`` annotations (the profiler also draws each one on the device's
    timeline, as a ``gpu_user_annotation``: counted too, every step would count twice); kernels (category
    ``kernel``) inside them are the device's work; runtime calls named in :data:`LAUNCH_CALLS` count launches;
    CPU operators give the host time.
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"
    ]
    if not steps:
        raise ValueError("the trace holds no ProfilerStep annotations: no training step was recorded")
    first, last = min(s for s, _ in steps), max(e for _, e in steps)

    def inside(event: Mapping[str, Any]) -> bool:
        return first <= event["ts"] <= last

    kernels = [e for e in events if e.get("cat") == "kernel" and inside(e)]
    launches = [
        e for e in events if e.get("cat") == "cuda_runtime" and e.get("name") in LAUNCH_CALLS and inside(e)
    ]
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op" and inside(e)]
    runtime: dict[str, float] = defaultdict(float)
    for event in events:
        if event.get("cat") in ("cuda_runtime", "cuda_driver") and inside(event):
            runtime[event["name"]] += event["dur"] / 1000 / len(steps)
    wall_ms = sum(end - start for start, end in steps) / 1000
    step_ms = _median([(end - start) / 1000 for start, end in steps])

    device_busy_ms = device_fraction = communication = memory = None
    if kernels:
        busy = _merged_length((e["ts"], e["ts"] + e["dur"]) for e in kernels) / 1000
        kernel_ms = sum(e["dur"] for e in kernels) / 1000
        device_busy_ms = busy / len(steps)
        device_fraction = min(1.0, busy / wall_ms) if wall_ms else None

        def share(fragments: tuple[str, ...]) -> float:
            hit = sum(e["dur"] for e in kernels if any(f in e["name"].lower() for f in fragments)) / 1000
            return hit / kernel_ms if kernel_ms else 0.0

        communication, memory = share(COMMUNICATION_KERNELS), share(MEMORY_KERNELS)

    profile = Profile(
        steps=len(steps),
        step_ms=step_ms,
        device_busy_ms=device_busy_ms,
        device_busy_fraction=device_fraction,
        launches_per_step=len(launches) / len(steps),
        data_wait_share=data_wait_share,
        communication_share=communication,
        memory_share=memory,
        top_ops=_top_ops(cpu_ops, kernels),
        runtime_ms={
            name: round(ms, 3) for name, ms in sorted(runtime.items(), key=lambda kv: -kv[1])[:TOP_RUNTIME]
        },
    )
    profile.bound = classify(profile)
    return profile


def _top_ops(cpu_ops: list[Mapping[str, Any]], kernels: list[Mapping[str, Any]]) -> list[Op]:
    """Operators by device time (kernels grouped by name), then by host time (CPU operators)."""
    device: dict[str, list[float]] = defaultdict(list)
    for kernel in kernels:
        device[kernel["name"]].append(kernel["dur"] / 1000)
    host: dict[str, list[float]] = defaultdict(list)
    for op in cpu_ops:
        host[op["name"]].append(op["dur"] / 1000)
    ops = [Op(name, len(times), sum(times), 0.0) for name, times in device.items()]
    ops += [Op(name, len(times), 0.0, sum(times)) for name, times in host.items()]
    ops.sort(key=lambda op: (op.device_ms, op.host_ms), reverse=True)
    return ops[:TOP_OPS]


def classify(profile: Profile) -> str:
    """``input``, ``communication``, ``host``, ``memory`` or ``device``: the module docstring's rules."""
    if profile.data_wait_share is not None and profile.data_wait_share >= INPUT_SHARE:
        return "input"
    if profile.device_busy_fraction is None:
        return "host"
    if (profile.communication_share or 0.0) >= COMMUNICATION_SHARE:
        return "communication"
    if profile.device_busy_fraction < HOST_BUSY:
        return "host"
    if (profile.memory_share or 0.0) >= MEMORY_SHARE:
        return "memory"
    return "device"


# What to try next for each bound, as the reviewer note says it.
NEXT_STEPS = {
    "input": "the steps wait for data: more dataloader workers, pinned memory, a batch prefetcher",
    "host": "the device waits for the host: fewer, larger launches (torch.compile of the repeated layers, "
    "CUDA graphs), no per-step host syncs or dtype casts, a larger batch",
    "memory": "the device is busy with memory-bound kernels: fused kernels (norms, activations, the loss), "
    "bf16 instead of fp32, fewer copies",
    "communication": "the gradient sync dominates: overlap it (DDP buckets, static graph), fewer or larger "
    "all-reduces, gradient accumulation",
    "device": "the device is busy computing: faster kernels (FlashAttention, fused optimizer) or less work "
    "per token",
}


def format_profile(profile: Profile) -> str:
    """A few lines for the terminal."""
    busy = (
        "n/a (no device)" if profile.device_busy_fraction is None else f"{profile.device_busy_fraction:.0%}"
    )
    lines = [
        f"bound: {profile.bound} · device busy {busy} of a {profile.step_ms:.1f} ms step · "
        f"{profile.launches_per_step:.0f} launches/step · {profile.steps} steps recorded",
        "top ops (device ms / host ms over the recorded steps, calls):",
    ]
    lines += [
        f"  {op.device_ms:9.2f} {op.host_ms:9.2f} {op.calls:6d}  {op.name[:100]}" for op in profile.top_ops
    ]
    if profile.runtime_ms:
        lines.append("host ms per step in CUDA API calls:")
        lines += [f"  {ms:9.2f}  {name}" for name, ms in profile.runtime_ms.items()]
    return "\n".join(lines)


def _step_profiler(profiler: Any) -> Any:
    """A global optimizer-step hook that advances the profiler's schedule once per optimizer step."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def advance(optimizer: Any, args: Any, kwargs: Any) -> None:
        profiler.step()

    return register_optimizer_step_post_hook(advance)


def profile_program(command: Sequence[str], out: Path, skip: int, steps: int) -> Profile:
    """Run the program with the meter and the profiler; write ``trace.json`` and ``profile.json`` to ``out``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from benchmarks.launch import build_record, parse_command, run_program
    from benchmarks.metrics import Meter

    program = parse_command(command)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.json"
    meter = Meter()
    with profile(
        activities=activities,
        schedule=schedule(wait=skip, warmup=1, active=steps, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace)),
    ) as profiler:
        hook = _step_profiler(profiler)
        try:
            status, error, _ = run_program(program, meter)
        finally:
            hook.remove()
    record = build_record(meter, skip, status, error, command)
    if not trace.exists():
        raise RuntimeError(_too_short(record, skip + 1 + steps, "no trace was written"))
    data_wait = ((record.get("phases") or {}).get("data_wait") or {}).get("share")
    result = summarize(json.loads(trace.read_text()), data_wait)
    (out / "profile.json").write_text(json.dumps(result.to_dict(), indent=1))
    return result


def _too_short(record: Mapping[str, Any], needed: int, what: str) -> str:
    return (
        f"{what}: the run ended ({record['status']}) before {needed} optimizer steps; "
        "give it more steps or fewer --skip/--steps"
    )


def _sampled_run(
    command: Sequence[str], skip: int, sampler: Any, on_step: Callable[[int], None]
) -> tuple[dict[str, Any], int]:
    """Run the program in-process under the meter, ``sampler`` started before it and stopped after it (also when
    it raises), ``on_step(n)`` called after its ``n``-th optimizer step. Returns the meter's record (``skip``
    steps left out) and the steps done."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from benchmarks.launch import build_record, parse_command, run_program
    from benchmarks.metrics import Meter

    program = parse_command(command)
    meter = Meter()
    done = 0

    def advance(optimizer: Any, args: Any, kwargs: Any) -> None:
        nonlocal done
        done += 1
        on_step(done)

    hook = register_optimizer_step_post_hook(advance)
    sampler.start()
    try:
        status, error, _ = run_program(program, meter)
    finally:
        hook.remove()
        sampler.stop()
    return build_record(meter, skip, status, error, command), done


def _write_metered(path: Path, report: dict[str, Any], record: dict[str, Any]) -> float | None:
    """Write ``report`` with the meter's median step and tokens/s beside it; returns that step in ms."""
    step_s = (record.get("step_time_s") or {}).get("median")
    metered = {"meter_step_s": step_s, "meter_tokens_per_s": record.get("tokens_per_s")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report | metered, indent=1))
    return None if step_s is None else step_s * 1000


def host_time_program(
    command: Sequence[str], out: Path, skip: int, steps: int
) -> tuple[HostTime, float | None]:
    """Run the program with the meter and the host sampler (:mod:`benchmarks.host_time`) over ``steps`` steps
    after ``skip``; write ``host_time.json`` to ``out``. Returns the report and the meter's median step time
    (ms) over the same run, to compare the sampled host time with."""
    sampler = HostSampler()

    def advance(done: int) -> None:
        sampler.end_step()
        sampler.record(skip <= done < skip + steps)

    record, done = _sampled_run(command, skip, sampler, advance)
    if done < skip + steps:
        raise RuntimeError(_too_short(record, skip + steps, "too few steps were sampled"))
    report = sampler.report()
    return report, _write_metered(out / "host_time.json", report.to_dict(), record)


def utilization_program(
    command: Sequence[str], out: Path, skip: int, steps: int
) -> tuple[Utilization, float | None]:
    """Run the program with the meter while ``nvidia-smi`` samples the device's utilisation
    (:mod:`benchmarks.utilization`), summarized over ``steps`` steps after ``skip``; write ``utilization.json``
    to ``out``. Returns the summary and the meter's median step time (ms) over the same run."""
    sampler = UtilizationSampler(cuda_device_id())

    def advance(done: int) -> None:
        if done == skip:
            sampler.open_window()
        elif done == skip + steps:
            sampler.close_window()

    if skip == 0:
        sampler.open_window()
    record, _ = _sampled_run(command, skip, sampler, advance)
    try:
        utilization = sampler.summary()
    except ValueError as problem:
        raise RuntimeError(_too_short(record, skip + steps, str(problem))) from None
    return utilization, _write_metered(out / "utilization.json", utilization.to_dict(), record)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profiling",
        usage="python -m benchmarks.profiling --out DIR [--skip N] [--steps N] [--host-time | --utilization] -- python TRAIN.py ...",
        description="Profile a training program's steady-state steps and say what bounds them.",
    )
    parser.add_argument("--out", default="perfbot-profile", help="folder for trace.json and profile.json")
    parser.add_argument("--skip", type=int, default=3, help="steps left out before recording (default 3)")
    parser.add_argument("--steps", type=int, default=5, help="steps recorded (default 5)")
    parser.add_argument(
        "--host-time",
        action="store_true",
        help="sample the host's Python stack instead of running torch.profiler: host time per step by source",
    )
    parser.add_argument(
        "--utilization",
        action="store_true",
        help="sample the device's utilisation with nvidia-smi instead of running torch.profiler: the busy share "
        "of the steps with nothing added to the program",
    )
    options = parser.parse_args(argv[:split])
    if options.skip < 0 or options.steps < 1:
        parser.error("--skip must be >= 0 and --steps >= 1")
    if options.host_time and options.utilization:
        parser.error("--host-time and --utilization measure separate runs; choose one")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    command, out = argv[split + 1 :], Path(options.out)
    try:
        if options.utilization:
            utilization, step_ms = utilization_program(command, out, options.skip, options.steps)
            print(format_utilization(utilization, step_ms), file=sys.stderr)
        elif options.host_time:
            host, step_ms = host_time_program(command, out, options.skip, options.steps)
            print(format_host_time(host, step_ms), file=sys.stderr)
        else:
            print(format_profile(profile_program(command, out, options.skip, options.steps)), file=sys.stderr)
    except (ValueError, RuntimeError) as error:
        print(f"benchmarks.profiling: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
