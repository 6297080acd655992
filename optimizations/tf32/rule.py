"""TF32: float32 matmuls and convolutions on tensor cores, and cuDNN autotuning, set once at start-up.
README.md says what it changes, what it refuses and why."""

from __future__ import annotations

from optimizations.program.hf import HF_CONFIGS
from optimizations.program.repository import RepoContext
from optimizations.program.training_loops import BACKWARD
from optimizations.registry import Numerics, Optimization

from .edit import EnableTf32
from .examples import EXAMPLES


class Tf32(Optimization):
    """Float32 matmuls and convolutions on tensor cores (TF32); cuDNN picks the fastest convolution kernels."""

    id = "tf32"
    title = "TF32 matmuls/convolutions and cuDNN autotuning"
    tier = 2
    expected = "up to 2-3x float32 matmul throughput on Ampere+; changes float32 rounding"
    summary = "enable_tf32() at start-up (fp32_precision API or legacy flags, never both); Trainer: tf32=True"
    scope = "train"
    numerics = Numerics.ROUNDING
    numerics_reason = "float32 matmuls and convolutions round their inputs to TF32's 10-bit mantissa"
    keywords = (
        "tf32",
        "tensorfloat",
        "allow_tf32",
        "fp32_precision",
        "cudnn.benchmark",
        "float32 matmul",
        "matmul precision",
    )
    codemods = (EnableTf32,)
    done_by_settings = (("tf32", "on"),)
    chosen_by_launches = (
        ("tf32", "off", "the launch switches TF32 off explicitly, and perfbot keeps that choice"),
    )
    examples = EXAMPLES
    needs = (BACKWARD, *HF_CONFIGS, "allow_tf32", "float32_matmul_precision", "fp32_precision")

    def run_refusal(self, ctx: RepoContext, path: str) -> str | None:
        """Refused where every run that loads ``path`` casts its weights to bf16 (DeepSpeed's bf16, a bf16
        ``param_dtype``): no float32 matmul is left for TF32 to speed up, and the commit would change nothing."""
        from optimizations.program.runs.every_run import done_in_every_run  # loads libcst: not for listing
        from optimizations.program.runs.settings import cite

        bf16 = done_in_every_run(ctx, path, (("mixed_precision", "bf16_weights"),))
        if bf16:
            return (
                f"every run that loads this file computes with bf16 weights ({cite(bf16)}): no float32 matmul "
                "is left for TF32"
            )
        return super().run_refusal(ctx, path)
