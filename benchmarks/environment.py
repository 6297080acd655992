"""Where a benchmark ran: device, driver and library versions, and the device's matmul ceiling for MFU.

Peak TFLOP/s are the vendor's dense (no sparsity) bf16 tensor-core figures. H100 SXM and H200 share the same
compute die and both list 989 TFLOP/s; the largest bf16 GEMMs measured on these parts reach only about
775-798 TFLOP/s, so an MFU against the spec peak tops out near 0.8 even with perfect kernels. Set
``PERFBOT_PEAK_TFLOPS`` to use another ceiling (a measured one, or a device missing from the table).
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata

import torch

PEAK_TFLOPS_ENV = "PERFBOT_PEAK_TFLOPS"

# First matching substring of the device name wins, so the specific H100 variants come before "H100".
PEAK_BF16_DENSE_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM5 (reported as "H100 80GB HBM3")
    ("H800", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
)

_LIBRARIES = ("transformers", "trl", "peft", "accelerate")


def peak_tflops(gpu_name: str | None) -> float | None:
    """Dense bf16 peak of ``gpu_name`` in TFLOP/s, ``PERFBOT_PEAK_TFLOPS`` if set, None when unknown."""
    override = os.environ.get(PEAK_TFLOPS_ENV)
    if override:
        try:
            return float(override)
        except ValueError:
            raise ValueError(f"{PEAK_TFLOPS_ENV} must be a number of TFLOP/s, got {override!r}") from None
    if gpu_name is None:
        return None
    return next((peak for marker, peak in PEAK_BF16_DENSE_TFLOPS if marker in gpu_name), None)


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _driver_version() -> str | None:
    try:
        completed = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = completed.stdout.strip().splitlines()
    return lines[0].strip() if lines else None


def collect_environment() -> dict[str, str | None]:
    """GPU, driver, CUDA and library versions, Python version and host name of this machine."""
    has_gpu = torch.cuda.is_available()
    return {
        "gpu": torch.cuda.get_device_name() if has_gpu else None,
        "driver": _driver_version() if has_gpu else None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        **{name: _package_version(name) for name in _LIBRARIES},
        "python": platform.python_version(),
        "host": socket.gethostname(),
    }
