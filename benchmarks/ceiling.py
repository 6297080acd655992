"""The ceiling a LoRA SFT step is judged against: the same model, adapter and batch, stepped by hand.

    python -m benchmarks.ceiling [--size gpu] [--modes eager,compile,reduce-overhead,max-autotune] [--steps 30]
        [--warmup 10] [--batch 8] [--seq 1024] [--loss full|chunked] [--attention sdpa|sdpa-cudnn|flex] [--json]

No Trainer, no collator, no logging: a fixed batch of ``--batch`` × ``--seq`` random token ids, the causal-LM
cross-entropy over the whole vocabulary, ``backward()``, a fused AdamW step over the LoRA weights. ``--loss
full`` is the model's own loss (the logits of every token at once, upcast to float32); ``--loss chunked``
takes the decoder's hidden states and computes the LM head and its cross-entropy :data:`LOSS_CHUNK` tokens at
a time, each chunk recomputed in the backward (:func:`chunked_causal_lm_loss`), so the batch's logits never
exist whole, as TRL's fused LM head does for the trainers. ``--size gpu`` is the bundled example's GPU
benchmark shape (Qwen2.5-0.5B: hidden 896, 24 layers, 14 heads of 64, 2 KV heads, vocabulary 151,936, tied
head), LoRA r=16 on q/k/v/o, bf16 weights; ``tiny`` is a CPU smoke size. ``--attention`` is the model's attention:
SDPA with the backend torch picks (``sdpa``), SDPA held to cuDNN's fused attention (``sdpa-cudnn``, CUDA only), or
FlexAttention (``flex``, the kernel the example's packed tier heads run). ``max-autotune`` compiles as
``reduce-overhead`` does and also times inductor's candidate matmul kernels for each shape. Each mode is measured
after ``--warmup`` discarded steps (compilation, CUDA graph capture, clocks): the median step time and its
spread over ``--steps`` steps, timed on the device; tokens/s; MFU against the device's dense bf16 peak
(:func:`benchmarks.environment.peak_tflops`, FLOPs per token as the benchmark's
:func:`benchmarks.counting.model_flops_per_token` counts them); and, from a ``torch.profiler`` trace of 5 more
steps, how many kernels each step launched (:func:`benchmarks.profiling.summarize`) and the device time per
step of its kernels grouped by what they compute (:func:`kernel_ms`: matmuls, attention, the cross-entropy
over the vocabulary, the optimizer, the rest), which says what holds each mode's step. The device is as busy
as that kernel time over the timed (unprofiled) step's: recording every operator slows the host, so a
host-bound mode reads less busy under the profiler than it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from benchmarks.counting import model_flops_per_token
from benchmarks.environment import peak_tflops
from benchmarks.profiling import Profile, summarize

if TYPE_CHECKING:
    from peft import PeftModel

MODES = ("eager", "compile", "reduce-overhead", "max-autotune")
LOSSES = ("full", "chunked")
# --attention: the model's attn_implementation for each choice
ATTENTION = {"sdpa": "sdpa", "sdpa-cudnn": "sdpa", "flex": "flex_attention"}
LOSS_CHUNK = 1024  # tokens per chunk of --loss chunked: 1024 × 151,936 float32 logits are 0.6 GB
# The bundled example's model sizes (examples/trainer_repo/model_loading.py), Qwen2 configs with random weights.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=2048,
    ),
    "gpu": dict(
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        vocab_size=151936,
    ),
}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
PROFILED_STEPS = 5
# Kernel-name fragments of each kind of work, checked in this order (flash attention kernels name their
# architecture, as matmuls do, and cuDNN's are "..._native_sdpa_..."; inductor names a fused cross-entropy after
# its log-softmax).
KERNEL_GROUPS = {
    "attention": ("flash", "fmha", "attention", "attn", "sdpa"),
    "cross-entropy": ("log_softmax", "logsoftmax", "nll_loss", "cross_entropy"),
    "optimizer": ("adam", "multi_tensor_apply"),
    "matmul": ("gemm", "nvjet", "xmma", "cutlass", "cublas", "matmul", "sm90_", "sm80_"),
}


@dataclass
class Measured:
    """One mode's steady-state steps."""

    mode: str
    loss: str
    attention: str
    step_ms: float
    step_ms_min: float
    step_ms_max: float
    tokens_per_s: float
    mfu: float | None
    device_busy: float | None
    launches_per_step: float | None
    kernel_ms: dict[str, float]
    first_loss: float
    last_loss: float


def build(
    size: str, device: torch.device, seed: int = 0, attention: str = "sdpa"
) -> tuple[PeftModel, torch.optim.Optimizer]:
    """The model with its LoRA adapter (r=16 on q/k/v/o) and a fused AdamW over the adapter's weights."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    # attn_implementation is one of the keywords every config takes beyond its own fields.
    settings = {**SIZES[size], "attn_implementation": ATTENTION[attention]}
    config = Qwen2Config(**settings, tie_word_embeddings=True, max_position_embeddings=4096)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    base: torch.nn.Module = Qwen2ForCausalLM(config)
    base.to(device=device, dtype=dtype)
    model = get_peft_model(
        base, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=list(LORA_TARGETS))
    )
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=2e-4, fused=device.type == "cuda")
    return model, optimizer


def chunked_causal_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The mean next-token cross-entropy of ``hidden`` (batch, seq, hidden) under the LM head ``weight``
    (vocab, hidden) against ``ids`` (batch, seq), :data:`LOSS_CHUNK` positions at a time: each chunk's logits
    are made, upcast and reduced to a sum, and made again in the backward, never all at once."""
    from torch.utils.checkpoint import checkpoint

    states = hidden[:, :-1].reshape(-1, hidden.size(-1))
    targets = ids[:, 1:].reshape(-1)
    total = states.new_zeros((), dtype=torch.float32)
    for start in range(0, targets.numel(), LOSS_CHUNK):
        end = start + LOSS_CHUNK
        total = total + checkpoint(
            _summed_nll, states[start:end], weight, targets[start:end], use_reentrant=False
        )
    return total / targets.numel()


def _summed_nll(states: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = (states @ weight.t()).float()
    return torch.nn.functional.cross_entropy(logits, targets, reduction="sum")


def make_step(
    model: PeftModel, optimizer: torch.optim.Optimizer, mode: str, loss: str = "full"
) -> Callable[[torch.Tensor], torch.Tensor]:
    """One training step on a batch of token ids (labels are the ids): forward, backward, optimizer step, with
    the model's own loss (``full``) or :func:`chunked_causal_lm_loss` (``chunked``)."""

    def full(ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, labels=ids).loss

    def chunked(ids: torch.Tensor) -> torch.Tensor:
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state
        return chunked_causal_lm_loss(hidden, model.get_output_embeddings().weight, ids)

    compute = full if loss == "full" else chunked
    forward = compute if mode == "eager" else torch.compile(compute, mode=None if mode == "compile" else mode)

    def step(ids: torch.Tensor) -> torch.Tensor:
        loss = forward(ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def timed(run: Callable[[], object], device: torch.device, repeats: int) -> list[float]:
    """Each call's time in ms, timed on the device (CUDA events) or the host clock."""
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            run()
            times.append((time.perf_counter() - began) * 1000)
    return times


def measure(
    mode: str,
    size: str,
    batch: int,
    seq: int,
    steps: int,
    warmup: int,
    device: torch.device,
    loss: str = "full",
    attention: str = "sdpa",
) -> Measured:
    """``mode``'s step: ``warmup`` discarded, ``steps`` timed, ``PROFILED_STEPS`` more under the profiler."""
    model, optimizer = build(size, device, attention=attention)
    step = make_step(model, optimizer, mode, loss)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, SIZES[size]["vocab_size"], (batch, seq), generator=generator).to(device)
    with _sdpa_backend(attention):
        losses = [float(step(ids)) for _ in range(warmup)]
        times = timed(lambda: losses.append(float(step(ids))), device, steps)
        profile, kernels = _profile(lambda: step(ids), device)
    median = statistics.median(times)
    tokens_per_s = batch * seq / (median / 1000)
    peak = peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    flops = model_flops_per_token(model) * tokens_per_s
    return Measured(
        mode=mode,
        loss=loss,
        attention=attention,
        step_ms=median,
        step_ms_min=min(times),
        step_ms_max=max(times),
        tokens_per_s=tokens_per_s,
        mfu=flops / (peak * 1e12) if peak else None,
        device_busy=min(1.0, sum(kernels.values()) / median) if kernels else None,
        launches_per_step=profile.launches_per_step if profile else None,
        kernel_ms=kernels,
        first_loss=losses[0],
        last_loss=losses[-1],
    )


def _sdpa_backend(attention: str) -> contextlib.AbstractContextManager:
    """SDPA held to cuDNN's fused attention for ``sdpa-cudnn``, else torch's own choice. A compiled step takes
    the backend in force when it is traced (the first warm-up step); AOTAutograd's cache is off meanwhile, since
    its key (the traced graph) does not hold the backend and would hand back another backend's compiled step."""
    if attention != "sdpa-cudnn":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    stack = contextlib.ExitStack()
    stack.enter_context(sdpa_kernel([SDPBackend.CUDNN_ATTENTION]))
    stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


def _profile(run: Callable[[], object], device: torch.device) -> tuple[Profile | None, dict[str, float]]:
    """:func:`benchmarks.profiling.summarize` of ``PROFILED_STEPS`` steps (after one warm-up step) and their
    :func:`kernel_ms`; CUDA only."""
    if device.type != "cuda":
        return None, {}
    from torch.profiler import ProfilerActivity, profile, schedule

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        plan = schedule(wait=0, warmup=1, active=PROFILED_STEPS, repeat=1)
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=plan,
            on_trace_ready=lambda p: p.export_chrome_trace(path),
        ) as profiler:
            for _ in range(PROFILED_STEPS + 1):
                run()
                profiler.step()
        torch.cuda.synchronize(device)
        with open(path, encoding="utf-8") as file:
            trace = json.load(file)
    return summarize(trace), kernel_ms(trace, PROFILED_STEPS)


def kernel_ms(trace: dict, steps: int) -> dict[str, float]:
    """Device time per step of a Chrome trace's kernels, by what they compute: the first group of
    :data:`KERNEL_GROUPS` whose name fragment a kernel's name holds, else ``other``."""
    found = dict.fromkeys([*KERNEL_GROUPS, "other"], 0.0)
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "X" and event.get("cat") == "kernel":
            name = str(event.get("name", "")).lower()
            group = next(
                (g for g, fragments in KERNEL_GROUPS.items() if any(f in name for f in fragments)), "other"
            )
            found[group] += event.get("dur", 0) / 1000 / steps
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ceiling", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="gpu")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--loss", choices=LOSSES, default="full", help="the model's own loss, or chunked")
    parser.add_argument(
        "--attention", choices=sorted(ATTENTION), default="sdpa", help="the model's attention"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.attention == "sdpa-cudnn" and device.type != "cuda":
        parser.error("--attention sdpa-cudnn needs a CUDA device")
    results = [
        measure(
            m, args.size, args.batch, args.seq, args.steps, args.warmup, device, args.loss, args.attention
        )
        for m in modes
    ]
    if args.json:
        print(json.dumps({"device": str(device), "modes": [asdict(r) for r in results]}, indent=1))
        return 0
    print(
        f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}; loss: {args.loss}; "
        f"attention: {args.attention}; batch {args.batch} x {args.seq}"
    )
    print(
        "mode             step ms (min-max)      tokens/s   MFU    device busy  launches/step  loss first→last"
    )
    for r in results:
        mfu = f"{r.mfu:.1%}" if r.mfu is not None else "–"
        busy = f"{r.device_busy:.0%}" if r.device_busy is not None else "–"
        launches = f"{r.launches_per_step:.0f}" if r.launches_per_step is not None else "–"
        print(
            f"{r.mode:16s} {r.step_ms:7.1f} ({r.step_ms_min:.1f}-{r.step_ms_max:.1f})  {r.tokens_per_s:11,.0f}  "
            f"{mfu:6s} {busy:12s} {launches:14s} {r.first_loss:.3f}→{r.last_loss:.3f}"
        )
    for r in results:
        if r.kernel_ms:
            groups = ", ".join(f"{group} {ms:.1f}" for group, ms in r.kernel_ms.items())
            print(f"{r.mode}: device ms per step by kernel group: {groups}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
