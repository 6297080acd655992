"""Optimizer-state offload on one GPU: fused AdamW on the GPU, CPU AdamW offload, and PerLayerAdamW.

Run from the repository root on a CUDA machine::

    python3 -m experiments.optimizer_offload.optimizer_offload_bench --sizes 1,7

For each size (billions of fp32 parameters, as a stack of ``--dim`` x ``--dim`` linear layers in an
``nn.ModuleList``, so one layer is one layer group) it measures step time (median and spread over
``--steps`` steps after ``--warmup``, each step synchronized) and GPU memory above the weights and gradients
of (a) ``torch.optim.AdamW(fused=True)`` with its state on the GPU, (b) AdamW on the CPU with master weights,
gradients and state on the host (gradients copied down, weights copied up: what optimizer offload does), with
torch's default CPU implementation and with its fused CPU kernel, and (c) ``PerLayerAdamW`` at each prefetch
depth. It checks (c) bitwise against (a) over ``--steps`` steps with
fresh random gradients, measures pinned host-to-device, device-to-host and both-at-once bandwidth, and scores
(c) against its floor: the state bytes moved each way over the per-direction bandwidth with both directions
busy. Configurations that do not fit are skipped with the reason. A table is printed last; the full results
go to ``$OUT/optimizer_offload_bench.json`` when ``OUT`` is set.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from optimizations.per_layer_stepper.helper import PerLayerAdamW

GB = 1e9
SEED = 1234


class LayerStack(nn.Module):
    """``layers`` bias-free ``dim`` x ``dim`` linear layers: the shape of a transformer's weight stack."""

    def __init__(self, layers: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim, bias=False, device="cuda") for _ in range(layers))

    def reset(self) -> None:
        """Same weights every time, zeroed gradients allocated once."""
        generator = torch.Generator(device="cuda").manual_seed(SEED)
        with torch.no_grad():
            for p in self.parameters():
                p.normal_(0.0, 0.02, generator=generator)
                if p.grad is None:
                    p.grad = torch.zeros_like(p)

    def random_grads(self, step: int) -> None:
        """Fresh gradients for ``step``, identical across models of the same shape."""
        generator = torch.Generator(device="cuda").manual_seed(SEED + 1 + step)
        for p in self.parameters():
            p.grad.normal_(generator=generator)


def timed(step: Callable[[], None], warmup: int, steps: int) -> list[float]:
    """Seconds per synchronized call of ``step``, after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    return {
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "stdev_s": statistics.stdev(seconds) if len(seconds) > 1 else 0.0,
        "n": len(seconds),
    }


def bandwidth(nbytes: int, repeats: int = 5) -> dict[str, float]:
    """Best pinned host<->device bandwidth in GB/s: each direction alone, and both at once (bytes of both)."""
    hosts = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    devices = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(2)]
    for t in (*hosts, *devices):
        t.fill_(1)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]

    def run(h2d: bool, d2h: bool) -> float:
        times = []
        for _ in range(repeats + 1):
            torch.cuda.synchronize()
            start = time.perf_counter()
            if h2d:
                with torch.cuda.stream(streams[0]):
                    devices[0].copy_(hosts[0], non_blocking=True)
            if d2h:
                with torch.cuda.stream(streams[1]):
                    hosts[1].copy_(devices[1], non_blocking=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return min(times[1:])

    return {
        "h2d_GBps": nbytes / run(True, False) / GB,
        "d2h_GBps": nbytes / run(False, True) / GB,
        "both_GBps": 2 * nbytes / run(True, True) / GB,
        "buffer_bytes": nbytes,
    }


def fits(bytes_needed: float, headroom: float = 2 * GB) -> bool:
    free, _ = torch.cuda.mem_get_info()
    return bytes_needed + headroom < free


def release() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def bench_size(billions: float, args: argparse.Namespace, bw: dict[str, float]) -> dict:
    dim = args.dim
    layers = max(1, round(billions * GB / (dim * dim)))
    params = layers * dim * dim
    steps = args.steps if billions < args.large_from else args.large_steps
    state_each_way = 2 * 4 * params  # exp_avg + exp_avg_sq, fp32
    layer_state = 2 * 4 * dim * dim
    floor_s = 2 * state_each_way / (bw["both_GBps"] * GB)
    out: dict = {
        "billions": params / GB,
        "layers": layers,
        "steps": steps,
        "floor_s": floor_s,
        "layer_group_state_bytes": layer_state,
        "runs": {},
        "skipped": {},
    }
    weights_and_grads = 2 * 4 * params
    check_bitwise = fits(2 * weights_and_grads + state_each_way + 4 * params)
    reference: list[torch.Tensor] | None = None

    if fits(weights_and_grads + state_each_way):
        model = LayerStack(layers, dim)
        model.reset()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        optimizer = torch.optim.AdamW(model.parameters(), fused=True)
        peak = 0
        if check_bitwise:
            for step in range(steps):
                model.random_grads(step)
                optimizer.step()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            reference = [p.detach().clone() for p in model.parameters()]
        torch.cuda.reset_peak_memory_stats()  # the reference copy is not the optimizer's
        seconds = timed(optimizer.step, args.warmup, steps)
        peak = max(peak, torch.cuda.max_memory_allocated() - sum(r.nbytes for r in reference or []))
        out["runs"]["a_fused_adamw_gpu"] = {**summary(seconds), "peak_extra_bytes": peak - base}
        del model, optimizer
        release()
    else:
        out["skipped"]["a_fused_adamw_gpu"] = "weights, grads and state do not fit in GPU memory"
    if reference is None:
        out["skipped"]["bitwise_check"] = "two models and the fused state do not fit in GPU memory"

    model = LayerStack(layers, dim)
    for depth in args.depths:
        model.reset()
        release()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        optimizer = PerLayerAdamW(model.parameters(), model=model, prefetch_depth=depth)
        run: dict = {}
        peak = 0
        if reference is not None:
            for step in range(steps):
                model.random_grads(step)
                optimizer.step()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            run["bitwise_equal_to_a"] = all(
                torch.equal(p, r) for p, r in zip(model.parameters(), reference, strict=True)
            )
            torch.cuda.reset_peak_memory_stats()  # torch.equal's temporaries are not the optimizer's
        seconds = timed(optimizer.step, args.warmup, steps)
        run.update(summary(seconds))
        run["peak_extra_bytes"] = max(peak, torch.cuda.max_memory_allocated()) - base
        run["moved_GBps"] = 2 * state_each_way / run["median_s"] / GB
        run["peak_budget_bytes"] = (depth + 2) * layer_state
        out["runs"][f"c_stepper_depth{depth}"] = run
        del optimizer
        release()
    del model, reference
    release()

    for variant in ("default", "fused"):
        if billions <= args.cpu_max:
            out["runs"][f"b_cpu_adamw_{variant}"] = bench_cpu_offload(layers, dim, variant, args)
        else:
            out["skipped"][f"b_cpu_adamw_{variant}"] = f"above --cpu-max {args.cpu_max}B (host memory, time)"
    return out


def bench_cpu_offload(layers: int, dim: int, variant: str, args: argparse.Namespace) -> dict:
    """Master weights, gradients and state on the host: grads down, CPU AdamW step, weights up.

    ``variant`` "default" is the implementation torch picks for CPU tensors (what an offloading wrapper
    around ``torch.optim.AdamW`` runs), "fused" torch's fused CPU kernel.
    """
    model = LayerStack(layers, dim)
    model.reset()
    device_params = list(model.parameters())
    host_params = [p.detach().cpu().pin_memory() for p in device_params]
    for hp in host_params:
        hp.grad = torch.empty_like(hp).pin_memory()
    optimizer = torch.optim.AdamW(host_params, fused=variant == "fused" or None)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()

    def step() -> None:
        for p, hp in zip(device_params, host_params, strict=True):
            hp.grad.copy_(p.grad, non_blocking=True)
        torch.cuda.synchronize()
        optimizer.step()
        for p, hp in zip(device_params, host_params, strict=True):
            p.data.copy_(hp, non_blocking=True)

    seconds = timed(step, 1, args.cpu_steps)
    result = {
        **summary(seconds),
        "peak_extra_bytes": torch.cuda.max_memory_allocated() - base,
        "cpu_threads": torch.get_num_threads(),
    }
    return result


def table(results: dict) -> str:
    bw = results["bandwidth"]
    lines = [
        f"device: {results['device']}  torch {results['torch']}  {results['date']}",
        f"pinned bandwidth GB/s: H2D {bw['h2d_GBps']:.1f}  D2H {bw['d2h_GBps']:.1f}  "
        f"both at once {bw['both_GBps']:.1f} (sum of both directions)",
        "extra GB: peak GPU memory above weights and grads; budget: (depth + 2) layer groups of state; "
        "bdef/x, bfus/x: (b) default / (b) fused time over this row's",
        f"{'size':>6} {'method':<22} {'median s':>9} {'min s':>7} {'max s':>7} {'n':>3} "
        f"{'extra GB':>9} {'budget GB':>9} {'x floor':>8} {'bdef/x':>7} {'bfus/x':>7} {'bitwise':>8}",
    ]
    for size in results["sizes"]:
        runs = size["runs"]
        for name, run in sorted(runs.items()):
            vs_floor = run["median_s"] / size["floor_s"]
            speedups = [
                f"{runs[b]['median_s'] / run['median_s']:.1f}" if b in runs else "-"
                for b in ("b_cpu_adamw_default", "b_cpu_adamw_fused")
            ]
            bitwise = {True: "yes", False: "NO"}.get(run.get("bitwise_equal_to_a"), "-")
            budget = f"{run['peak_budget_bytes'] / GB:.2f}" if "peak_budget_bytes" in run else "-"
            lines.append(
                f"{size['billions']:>5.2f}B {name:<22} {run['median_s']:>9.3f} {run['min_s']:>7.3f} "
                f"{run['max_s']:>7.3f} {run['n']:>3} {run['peak_extra_bytes'] / GB:>9.2f} {budget:>9} "
                f"{vs_floor:>8.2f} {speedups[0]:>7} {speedups[1]:>7} {bitwise:>8}"
            )
        lines.append(
            f"{size['billions']:>5.2f}B floor {size['floor_s']:.3f} s; "
            f"layer group state {size['layer_group_state_bytes'] / GB:.3f} GB; "
            + "; ".join(f"skipped {k}: {v}" for k, v in size["skipped"].items())
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,7", help="billions of parameters, comma separated")
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--depths", default="0,1,2")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--large-from", type=float, default=4.0, help="sizes from here use --large-steps")
    parser.add_argument("--large-steps", type=int, default=5)
    parser.add_argument("--cpu-steps", type=int, default=3)
    parser.add_argument("--cpu-max", type=float, default=2.0, help="largest size (billions) to run (b) at")
    parser.add_argument("--bandwidth-bytes", type=int, default=2 << 30)
    args = parser.parse_args(argv)
    args.depths = [int(d) for d in args.depths.split(",")]
    if not torch.cuda.is_available():
        print("optimizer_offload_bench needs a CUDA GPU", file=sys.stderr)
        return 2

    results = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(
            [sys.executable, "-m", "experiments.optimizer_offload.optimizer_offload_bench", *sys.argv[1:]]
        ),
        "bandwidth": bandwidth(args.bandwidth_bytes),
        "sizes": [],
    }
    for size in (float(s) for s in args.sizes.split(",")):
        results["sizes"].append(bench_size(size, args, results["bandwidth"]))
        print(json.dumps(results["sizes"][-1], indent=1), flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "optimizer_offload_bench.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
