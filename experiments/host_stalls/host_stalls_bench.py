"""Host-side stalls in the reference hand-written loop (issue 7), measured on one GPU.

    python3 -m experiments.host_stalls.host_stalls_bench            # --size gpu on a CUDA machine
    python3 -m experiments.host_stalls.host_stalls_bench --size tiny --steps 6 --repeats 1   # a CPU dry run

The workload is ``examples/trainer_repo/train_vision.py`` (two 3x224x224 float32 camera images per sample,
batch 64, a ResNet-18-shaped encoder, AdamW, a per-step ``loss.item()``). The loop is rebuilt here in the
cumulative variants the issue-7 transforms produce, each one commit further than the previous:

    baseline          blocking ``.to(device)``, ``loss.item()`` every step
    prefetcher        ``DataLoader(pin_memory=True)`` + ``CudaPrefetcher`` (copies on a side stream, 1 ahead)
    pinned_collate    + ``NumpyPinnedCollate`` (the batch is stacked straight into pinned memory)
    sync_free         + losses kept on the device, ``.item()`` only at the logging condition and at the end
    fused_adamw       + ``AdamW(fused=True)`` and a cached parameter list for gradient clipping
    tf32              + TF32 matmuls and ``cudnn.benchmark`` (changes the numerics: a flagged change)

Reported: per-step time of every variant (median and range over interleaved repeats), the share of the step
the host spends blocked in host-to-device copies and in syncs and the share of GPU time with an exposed copy
or nothing running (torch.profiler trace), pinned and pageable H2D bandwidth, the compute-only step time (batch
already on the GPU), the floor max(compute-only, batch bytes / pinned bandwidth), and whether every step's
loss is bit-identical to the baseline's. A table is printed last; JSON goes to ``$OUT/host_stalls_bench.json``
when ``OUT`` is set.
"""

from __future__ import annotations

import os

# Deterministic cuBLAS needs this before its first use (train_vision sets it at the start of main()).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse
import datetime
import importlib.util
import json
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.deterministic
from torch.utils.data import DataLoader

REPO_ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO_ROOT))

from optimizations.prefetcher.helper import CudaPrefetcher, NumpyPinnedCollate  # noqa: E402
from optimizations.runtime import gpu_flags  # noqa: E402

WORKLOAD_PATH = REPO_ROOT / "examples" / "trainer_repo" / "train_vision.py"
LOG_EVERY = 10
LEARNING_RATE = 1e-3


@dataclass(frozen=True)
class Variant:
    """One point of the cumulative chain of transforms."""

    name: str
    prefetcher: bool = False
    pinned_collate: bool = False
    sync_free: bool = False
    fused_adamw: bool = False
    tf32: bool = False

    @property
    def compute_config(self) -> str:
        """Which compute-only measurement this variant's floor uses."""
        return "fused+tf32" if self.tf32 else "fused" if self.fused_adamw else "default"


VARIANTS = (
    Variant("baseline"),
    Variant("prefetcher", prefetcher=True),
    Variant("pinned_collate", prefetcher=True, pinned_collate=True),
    Variant("sync_free", prefetcher=True, pinned_collate=True, sync_free=True),
    Variant("fused_adamw", prefetcher=True, pinned_collate=True, sync_free=True, fused_adamw=True),
    Variant("tf32", prefetcher=True, pinned_collate=True, sync_free=True, fused_adamw=True, tf32=True),
)
COMPUTE_CONFIGS = {"default": Variant("default"), "fused": VARIANTS[4], "fused+tf32": VARIANTS[5]}


def load_workload() -> ModuleType:
    """Import the reference training script (a target-repo file, not a package)."""
    spec = importlib.util.spec_from_file_location("train_vision", WORKLOAD_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PrecisionFlags:
    """Save and restore the TF32/cuDNN flags, through the same API ``enable_tf32`` uses."""

    def __init__(self) -> None:
        backends = torch.backends
        if gpu_flags.has_fp32_precision_api():
            self.attribute = "fp32_precision"
            self.backends = (backends.cuda.matmul, backends.cudnn.conv, backends.cudnn.rnn)
        else:
            self.attribute = "allow_tf32"
            self.backends = (backends.cuda.matmul, backends.cudnn)
        self.values = [getattr(backend, self.attribute) for backend in self.backends]
        self.benchmark = backends.cudnn.benchmark

    def restore(self) -> None:
        for backend, value in zip(self.backends, self.values, strict=True):
            setattr(backend, self.attribute, value)
        torch.backends.cudnn.benchmark = self.benchmark


@dataclass
class RunResult:
    """One training run of a variant."""

    step_ms: float
    losses: list[float]


def train_run(
    workload: ModuleType,
    dataset,
    size: dict,
    variant: Variant,
    device: torch.device,
    steps: int,
    warmup: int,
    seed: int,
    inside_window: Callable[[], Any] | None = None,
) -> RunResult:
    """Train ``warmup + steps`` steps of the reference loop as ``variant`` and time the last ``steps``.

    ``inside_window`` (a context-manager factory) wraps the timed steps, for profiling them.
    """
    flags = PrecisionFlags()
    if variant.tf32:
        gpu_flags.enable_tf32()
    torch.manual_seed(seed)
    loader = DataLoader(
        dataset,
        batch_size=size["batch_size"],
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(seed),
        pin_memory=variant.prefetcher and device.type == "cuda",
        collate_fn=NumpyPinnedCollate() if variant.pinned_collate else None,
    )
    model = workload.VisionPolicy(size["width"]).to(device)
    if variant.fused_adamw:
        trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
        fused = device.type == "cuda" and all(p.is_cuda and p.is_floating_point() for p in trainable)
        optimizer = torch.optim.AdamW(trainable, lr=LEARNING_RATE, weight_decay=0.01, fused=fused)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    batches = CudaPrefetcher(loader, device) if variant.prefetcher else loader

    losses: list = []
    log_lines: list[str] = []
    window = None
    started = 0.0
    model.train()
    for step, batch in enumerate(batches):
        if step == warmup:
            synchronize(device)
            if inside_window is not None:
                window = inside_window()
                window.__enter__()
            started = time.perf_counter()
        if variant.prefetcher:
            images, actions = batch["images"], batch["actions"]
        else:
            images = batch["images"].to(device)
            actions = batch["actions"].to(device)
        loss = F.mse_loss(model(images), actions)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable if variant.fused_adamw else model.parameters(), max_norm=1.0)
        optimizer.step()
        if variant.sync_free:
            losses.append(loss.detach())
            if step % LOG_EVERY == 0:
                log_lines.append(f"step {step} loss {float(losses[-1]):.4f}")
        else:
            losses.append(loss.item())
            if step % LOG_EVERY == 0:
                log_lines.append(f"step {step} loss {losses[-1]:.4f}")
        if step + 1 == warmup + steps:
            break
    synchronize(device)
    elapsed = time.perf_counter() - started
    if window is not None:
        window.__exit__(None, None, None)
    flags.restore()
    return RunResult(step_ms=1000 * elapsed / steps, losses=[float(value) for value in losses])


def compute_only_ms(workload, dataset, size, config: Variant, device, steps: int, seed: int) -> float:
    """Per-step time of forward, backward, clipping and the optimizer with one batch already on the device."""
    flags = PrecisionFlags()
    if config.tf32:
        gpu_flags.enable_tf32()
    torch.manual_seed(seed)
    batch = next(iter(DataLoader(dataset, batch_size=size["batch_size"])))
    images, actions = batch["images"].to(device), batch["actions"].to(device)
    model = workload.VisionPolicy(size["width"]).to(device)
    parameters = list(model.parameters())
    optimizer = torch.optim.AdamW(
        parameters, lr=LEARNING_RATE, fused=config.fused_adamw and device.type == "cuda"
    )

    def one_step():
        loss = F.mse_loss(model(images), actions)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, max_norm=1.0)
        optimizer.step()

    for _ in range(3):
        one_step()
    synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        one_step()
    synchronize(device)
    flags.restore()
    return 1000 * (time.perf_counter() - started) / steps


def h2d_bandwidth_gbps(nbytes: int, pinned: bool, repeats: int = 20) -> float:
    """Median host-to-device bandwidth for one ``nbytes`` copy, timed with CUDA events."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
    device_buffer = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(repeats + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        device_buffer.copy_(host, non_blocking=pinned)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return nbytes / (statistics.median(times[2:]) / 1000) / 1e9


def host_collate_ms(dataset, size, pinned: bool, batches: int = 8) -> float:
    """Host time to produce one batch (indexing + collate [+ pinning]) on the main thread."""
    loader = DataLoader(
        dataset,
        batch_size=size["batch_size"],
        collate_fn=NumpyPinnedCollate() if pinned else None,
        pin_memory=pinned and torch.cuda.is_available(),
    )
    iterator = iter(loader)
    next(iterator)
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return 1000 * (time.perf_counter() - started) / batches


# ------------------------------------------------------------------------------------- trace analysis


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _subtract(
    intervals: list[tuple[float, float]], cover: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Parts of (merged) ``intervals`` not covered by (merged) ``cover``."""
    left = []
    for start, end in intervals:
        cursor = start
        for cover_start, cover_end in cover:
            if cover_end <= cursor or cover_start >= end:
                continue
            if cover_start > cursor:
                left.append((cursor, cover_start))
            cursor = max(cursor, cover_end)
        if cursor < end:
            left.append((cursor, end))
    return left


def _clip(intervals: list[tuple[float, float]], window: tuple[float, float]) -> list[tuple[float, float]]:
    return [(max(s, window[0]), min(e, window[1])) for s, e in intervals if e > window[0] and s < window[1]]


SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}
COPY_CALLS = {"cudaMemcpyAsync", "cudaMemcpy"}


def stall_shares(trace: dict, gpu_timeline: bool) -> dict[str, Any]:
    """Shares of the profiled window: host blocked in H2D copies, in syncs, in data loading; GPU copy/idle.

    A CUDA runtime call is a *copy* stall when it runs under ``aten::copy_`` (a blocking ``.to(device)``
    from pageable memory waits for its copy) and a *sync* stall when it runs under
    ``aten::_local_scalar_dense`` (``.item()``, ``float(tensor)``) or is a ``*Synchronize`` call elsewhere.
    """
    events = [event for event in trace["traceEvents"] if event.get("ph") == "X" and "dur" in event]
    window_event = next(e for e in events if e.get("cat") == "user_annotation" and e["name"] == "timed_steps")
    gpu = [event for event in events if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    window_end = max([window_event["ts"] + window_event["dur"], *(e["ts"] + e["dur"] for e in gpu)])
    window = (window_event["ts"], window_end)
    wall = window[1] - window[0]

    def spans(predicate) -> list[tuple[float, float]]:
        return _clip([(e["ts"], e["ts"] + e["dur"]) for e in events if predicate(e)], window)

    item_ops = spans(lambda e: e.get("cat") == "cpu_op" and e["name"] == "aten::_local_scalar_dense")
    copy_ops = spans(lambda e: e.get("cat") == "cpu_op" and e["name"] == "aten::copy_")

    def inside(event, ops) -> bool:
        return any(start <= event["ts"] and event["ts"] + event["dur"] <= end for start, end in ops)

    copy_stall = sync_stall = 0.0
    for event in events:
        if event.get("cat") != "cuda_runtime" or event["name"] not in SYNC_CALLS | COPY_CALLS:
            continue
        if not window[0] <= event["ts"] < window[1]:
            continue
        if inside(event, item_ops):
            sync_stall += event["dur"]
        elif inside(event, copy_ops):
            copy_stall += event["dur"]
        elif event["name"] in SYNC_CALLS:
            sync_stall += event["dur"]
    data_wait = _length(
        _union(spans(lambda e: e.get("cat") == "user_annotation" and "DataLoader" in e["name"]))
    )
    kernels = _union(spans(lambda e: e.get("cat") == "kernel"))
    h2d = _union(spans(lambda e: e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]))
    busy = _union(spans(lambda e: e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")))
    shares = {
        "window_ms": wall / 1000,
        "host_blocked_in_h2d_copies": copy_stall / wall,
        "host_blocked_in_syncs": sync_stall / wall,
        "host_in_data_loading": data_wait / wall,
        "event_counts": dict(Counter(e.get("cat", "") for e in events if window[0] <= e["ts"] < window[1])),
    }
    if gpu_timeline:
        shares["gpu_h2d_busy"] = _length(h2d) / wall
        shares["gpu_h2d_exposed"] = _length(_subtract(h2d, kernels)) / wall
        shares["gpu_idle"] = 1 - _length(busy) / wall
    return shares


def profile_variant(workload, dataset, size, variant, device, steps, seed) -> dict[str, Any]:
    """Run ``variant`` under torch.profiler and return :func:`stall_shares` of its timed steps."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        train_run(
            workload,
            dataset,
            size,
            variant,
            device,
            steps=steps,
            warmup=3,
            seed=seed,
            inside_window=lambda: record_function("timed_steps"),
        )
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "trace.json"
        profiler.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    return stall_shares(trace, gpu_timeline=device.type == "cuda")


# ------------------------------------------------------------------------------------------- report


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _first_difference(losses: list[float], reference: list[float]) -> dict[str, Any]:
    differing = [index for index, (a, b) in enumerate(zip(losses, reference, strict=True)) if a != b]
    return {
        "identical": not differing,
        "first_differing_step": differing[0] if differing else None,
        "max_abs_difference": max((abs(a - b) for a, b in zip(losses, reference, strict=True)), default=0.0),
    }


def format_table(result: dict) -> str:
    """The summary table: per-step time, speed-up, distance to the floor, stall shares, loss parity."""
    header = (
        f"{'variant':<15}{'step ms (median [min-max])':>28}{'speedup':>9}{'x floor':>9}"
        f"{'copy':>7}{'sync':>7}{'data':>7}{'h2d exp':>9}{'gpu idle':>10}  losses"
    )
    lines = [header, "-" * len(header)]
    baseline = result["variants"]["baseline"]["step_ms"]["median"]
    for name, row in result["variants"].items():
        step = row["step_ms"]
        shares = row.get("shares") or {}

        def share(key, shares=shares):
            return f"{100 * shares[key]:.0f}%" if key in shares else "-"

        parity = (
            "identical"
            if row["losses"]["identical"]
            else f"differ from step {row['losses']['first_differing_step']}"
        )
        lines.append(
            f"{name:<15}{step['median']:>10.1f} [{step['min']:.1f}-{step['max']:.1f}]".ljust(43)
            + f"{baseline / step['median']:>9.2f}{step['median'] / row['floor_ms']:>9.2f}"
            + f"{share('host_blocked_in_h2d_copies'):>7}{share('host_blocked_in_syncs'):>7}"
            + f"{share('host_in_data_loading'):>7}{share('gpu_h2d_exposed'):>9}{share('gpu_idle'):>10}  {parity}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "gpu"), default="gpu")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats of every variant")
    parser.add_argument("--profile-steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.size == "gpu" and device.type != "cuda":
        print("--size gpu needs a CUDA device; use --size tiny for a CPU dry run", file=sys.stderr)
        return 2
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False

    workload = load_workload()
    size = workload.SIZES[args.size]
    steps_per_run = args.warmup + args.steps
    dataset = workload.CameraEpisodes(
        length=steps_per_run * size["batch_size"],
        image_size=size["image_size"],
        frames=size["frames"],
        seed=args.seed,
    )
    sample = dataset[0]
    batch_bytes = size["batch_size"] * (sample["images"].nbytes + sample["actions"].nbytes)

    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tf32_api": "fp32_precision" if gpu_flags.has_fp32_precision_api() else "allow_tf32",
        "cpu_threads": torch.get_num_threads(),
        "settings": {**vars(args), "log_every": LOG_EVERY, "batch_bytes": batch_bytes},
    }
    if device.type == "cuda":
        result["h2d_gbps"] = {
            "pinned": h2d_bandwidth_gbps(batch_bytes, pinned=True),
            "pageable": h2d_bandwidth_gbps(batch_bytes, pinned=False),
        }
        copy_floor_ms = 1000 * batch_bytes / (result["h2d_gbps"]["pinned"] * 1e9)
    else:
        result["h2d_gbps"] = None
        copy_floor_ms = 0.0
    result["host_batch_ms"] = {
        "default_collate": host_collate_ms(dataset, size, pinned=False),
        "pinned_collate": host_collate_ms(dataset, size, pinned=True),
    }
    result["compute_only_ms"] = {
        name: compute_only_ms(workload, dataset, size, config, device, steps=args.steps, seed=args.seed)
        for name, config in COMPUTE_CONFIGS.items()
    }
    print(
        json.dumps({key: result[key] for key in ("device", "h2d_gbps", "host_batch_ms", "compute_only_ms")})
    )

    runs: dict[str, list[RunResult]] = {variant.name: [] for variant in VARIANTS}
    for repeat in range(args.repeats):
        for variant in VARIANTS:
            run = train_run(workload, dataset, size, variant, device, args.steps, args.warmup, args.seed)
            runs[variant.name].append(run)
            print(f"repeat {repeat} {variant.name:<15} {run.step_ms:8.2f} ms/step", flush=True)

    reference = runs["baseline"][0].losses
    result["baseline_repeats_identical"] = all(run.losses == reference for run in runs["baseline"])
    result["variants"] = {}
    for variant in VARIANTS:
        floor_ms = max(result["compute_only_ms"][variant.compute_config], copy_floor_ms)
        try:
            shares = profile_variant(workload, dataset, size, variant, device, args.profile_steps, args.seed)
        except Exception as error:  # the profiler is optional: the timings stand without it
            shares = {"error": f"{type(error).__name__}: {error}"}
        result["variants"][variant.name] = {
            "flags": asdict(variant),
            "step_ms": _spread([run.step_ms for run in runs[variant.name]]),
            "floor_ms": floor_ms,
            "shares": shares,
            "losses": {
                **_first_difference(runs[variant.name][0].losses, reference),
                "repeats_identical": all(
                    run.losses == runs[variant.name][0].losses for run in runs[variant.name]
                ),
            },
        }
    result["losses_baseline"] = reference

    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "host_stalls_bench.json"
        out.write_text(json.dumps(result, indent=2))
    pinned_gbps = result["h2d_gbps"]["pinned"] if result["h2d_gbps"] else float("nan")
    print(
        f"\n{result['device']} · torch {result['torch']} · batch {batch_bytes / 1e6:.1f} MB · "
        f"pinned H2D {pinned_gbps:.1f} GB/s · "
        f"copy floor {copy_floor_ms:.2f} ms · compute-only "
        + ", ".join(f"{name} {value:.1f} ms" for name, value in result["compute_only_ms"].items())
    )
    print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
