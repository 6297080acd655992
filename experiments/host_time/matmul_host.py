"""Host time per bf16 matmul call through cuBLASLt and through cuBLAS, at the LoRA step's shapes: what one
``extern_kernels.mm`` of a compiled layer costs the launching thread.

    python experiments/host_time/matmul_host.py
"""

from __future__ import annotations

import time

import torch

SHAPES = {  # (M, K, N): a projection, the MLP's up projection, LoRA's A and B, a weight gradient
    "q_proj 8192x896x896": (8192, 896, 896),
    "mlp 8192x896x4864": (8192, 896, 4864),
    "lora_A 8192x896x16": (8192, 896, 16),
    "lora_B 8192x16x896": (8192, 16, 896),
    "grad_A 16x8192x896": (16, 8192, 896),
}
CALLS = 400


def host_us_per_call(m: int, k: int, n: int) -> tuple[float, float]:
    """Host microseconds per ``torch.mm(out=)`` call over CALLS calls, and the device's microseconds per call."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        torch.mm(a, b, out=out)
    torch.cuda.synchronize()
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start = time.perf_counter()
    start_event.record()
    for _ in range(CALLS):
        torch.mm(a, b, out=out)
    host = time.perf_counter() - start
    end_event.record()
    torch.cuda.synchronize()
    return host / CALLS * 1e6, start_event.elapsed_time(end_event) / CALLS * 1000


def main() -> None:
    print(f"{'shape':24} {'library':9} {'host us/call':>12} {'device us/call':>14}")
    for library in ("cublaslt", "cublas"):
        torch.backends.cuda.preferred_blas_library(library)
        for name, shape in SHAPES.items():
            host, device = host_us_per_call(*shape)
            print(f"{name:24} {library:9} {host:12.1f} {device:14.1f}")


if __name__ == "__main__":
    main()
