"""The steps a meter records (:mod:`benchmarks.metrics`): their boundaries, the phase each interval between two
boundaries belongs to, and the numbers they resolve into once the run has ended.

A boundary is a :class:`Mark`: a host timestamp and, on CUDA, an event recorded on the current stream, so the
phases are GPU-timeline durations and nothing synchronises inside the loop. Token and sample counts and losses
stay ints or device tensors until :func:`step_numbers` resolves them, with one device-to-host copy per device.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

PHASES = ("data_wait", "forward", "backward", "optimizer")
DATA_WAIT, FORWARD, BACKWARD, OPTIMIZER = range(4)

# Where the loop is, between two boundary events.
IDLE, IN_FORWARD, AFTER_FORWARD, AFTER_BACKWARD, IN_OPTIMIZER, AFTER_OPTIMIZER = range(6)
# Boundary events.
(
    FORWARD_BEGIN,
    FORWARD_END,
    BACKWARD_END,
    OPTIMIZER_BEGIN,
    OPTIMIZER_END,
    STEP_BEGIN,
    STEP_END,
    PAUSE,
) = range(8)
STATE_AFTER = {
    FORWARD_BEGIN: IN_FORWARD,
    FORWARD_END: AFTER_FORWARD,
    BACKWARD_END: AFTER_BACKWARD,
    OPTIMIZER_BEGIN: IN_OPTIMIZER,
    OPTIMIZER_END: AFTER_OPTIMIZER,
    STEP_BEGIN: IDLE,
    STEP_END: IDLE,
}


def phase_between(state: int, event: int) -> int:
    """The phase of the time from the last boundary (which left the loop in ``state``) to ``event``."""
    if state == IDLE:
        return DATA_WAIT
    if state == IN_FORWARD:
        return FORWARD
    if state == AFTER_FORWARD:
        return FORWARD if event == FORWARD_BEGIN else BACKWARD
    if state == AFTER_BACKWARD:
        return DATA_WAIT if event == FORWARD_BEGIN else BACKWARD
    if state == IN_OPTIMIZER:
        return OPTIMIZER
    return BACKWARD if event == BACKWARD_END else OPTIMIZER


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, median and 95th percentile of ``values`` (all None when empty)."""
    if not values:
        return {"mean": None, "median": None, "p95": None}
    return {
        "mean": sum(values) / len(values),
        "median": percentile(values, 50),
        "p95": percentile(values, 95),
    }


def median_rate(counts: Sequence[float | None], step_ms: Sequence[float]) -> float | None:
    """The median over steps of count / step time (steps without a count or a duration left out)."""
    rates = [c * 1000.0 / ms for c, ms in zip(counts, step_ms, strict=True) if c is not None and ms > 0]
    return percentile(rates, 50) if rates else None


class Mark:
    """One step boundary: a host timestamp and, on CUDA, an event recorded on the current stream."""

    __slots__ = ("host", "event")

    def __init__(self, cuda: bool):
        self.host = time.perf_counter()
        self.event = None
        if cuda:
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record()


def elapsed_ms(start: Mark, end: Mark) -> float:
    """The time from ``start`` to ``end``: on the GPU's timeline when both carry an event, else the host's."""
    if start.event is not None and end.event is not None:
        return start.event.elapsed_time(end.event)
    return (end.host - start.host) * 1000.0


class Step:
    """What one training step recorded; resolved into numbers after the run."""

    __slots__ = (
        "segments",
        "comm_waits",
        "tokens",
        "samples",
        "losses",
        "stepped",
        "given_tokens",
        "given_samples",
    )

    def __init__(self) -> None:
        self.segments: list[tuple[int, Mark, Mark]] = []
        self.comm_waits: list[tuple[Mark, Mark]] = []
        self.tokens: list[int | torch.Tensor] = []
        self.samples: list[int | torch.Tensor] = []
        self.losses: list[torch.Tensor] = []
        self.stepped = False
        self.given_tokens: int | torch.Tensor | None = None
        self.given_samples: int | torch.Tensor | None = None


def _resolve_numbers(values: Sequence[int | float | torch.Tensor]) -> list[float]:
    """Turn ints and tensors (summed) into floats, with one device-to-host copy per device."""
    result = [float(v) if not isinstance(v, torch.Tensor) else math.nan for v in values]
    by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
    for index, value in enumerate(values):
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append((index, value))
    for tensors in by_device.values():
        stacked = torch.stack([tensor.detach().to(torch.float64).sum() for _, tensor in tensors]).cpu()
        for (index, _), number in zip(tensors, stacked.tolist(), strict=True):
            result[index] = number
    return result


def _resolve_counts(steps: list[Step]) -> tuple[list[float | None], list[float], list[float | None]]:
    """Per step: tokens (None when no token ids were seen), sequences, and the summed loss (None if none)."""
    values: list[int | torch.Tensor] = []
    layout = []
    for step in steps:
        token_values = [step.given_tokens] if step.given_tokens is not None else step.tokens
        sample_values = [step.given_samples] if step.given_samples is not None else step.samples
        layout.append((len(token_values), len(sample_values), len(step.losses)))
        values.extend(token_values)
        values.extend(sample_values)
        values.extend(step.losses)
    numbers = iter(_resolve_numbers(values))
    tokens: list[float | None] = []
    samples: list[float] = []
    losses: list[float | None] = []
    for n_tokens, n_samples, n_losses in layout:
        token_numbers = [next(numbers) for _ in range(n_tokens)]
        tokens.append(sum(token_numbers) if token_numbers else None)
        samples.append(sum(next(numbers) for _ in range(n_samples)))
        loss_numbers = [next(numbers) for _ in range(n_losses)]
        losses.append(sum(loss_numbers) if loss_numbers else None)
    return tokens, samples, losses


def _timing_summary(values: Sequence[float], seconds: float) -> dict[str, float | None]:
    """A phase's (or a wait's) mean, median and p95 in ms, and its share of the measured ``seconds``."""
    stats = summarize(values)
    return {
        "mean_ms": stats["mean"],
        "median_ms": stats["median"],
        "p95_ms": stats["p95"],
        "share": sum(values) / 1000.0 / seconds if seconds > 0 else None,
    }


def step_numbers(
    steps: list[Step], warmup_steps: int, distributed: bool, window_steps: int | None
) -> dict[str, Any]:
    """The recorded steps as the run's metrics (``perfbot.run/v1`` keys), in the record's order.

    Timings, tokens and samples cover the steps after ``warmup_steps``; ``loss`` covers every step, against the
    tokens seen up to and including that step (null when it was not finite). ``window_steps`` is the length of a
    turn-taking run's measured windows (None for a run that kept the device): such a run's wall time is its
    steps' own, and ``turns`` gives each window's throughput.
    """
    phase_ms = [[0.0] * len(PHASES) for _ in steps]
    host_wait_ms = [0.0] * len(steps)
    for index, step in enumerate(steps):
        for phase, start, end in step.segments:
            phase_ms[index][phase] += elapsed_ms(start, end)
            if phase == DATA_WAIT:
                host_wait_ms[index] += (end.host - start.host) * 1000.0
    tokens, samples, losses = _resolve_counts(steps)
    measured = range(min(warmup_steps, len(steps)), len(steps))
    step_ms = [sum(phase_ms[i]) for i in measured]
    seconds = sum(step_ms) / 1000.0
    step_tokens = [tokens[i] for i in measured]
    saw_tokens = any(count is not None for count in step_tokens)
    allreduce_wait = None
    if distributed:
        waits = [sum(elapsed_ms(start, end) for start, end in steps[i].comm_waits) for i in measured]
        allreduce_wait = _timing_summary(waits, seconds)
    wall_s = 0.0
    if window_steps is not None:
        wall_s = seconds  # the windows' steps: the other runs' turns between them are not this run's
    elif measured:
        window = [segment for i in measured for segment in steps[i].segments]
        wall_s = elapsed_ms(window[0][1], window[-1][2]) / 1000.0 if window else 0.0
    loss_curve = []
    seen = 0.0
    for index, loss in enumerate(losses):
        seen += tokens[index] or 0.0
        if loss is not None:
            loss_curve.append(
                {"step": index, "tokens_seen": round(seen), "loss": loss if math.isfinite(loss) else None}
            )
    turns = None
    if window_steps is not None:
        rates = [
            median_rate(step_tokens[start : start + window_steps], step_ms[start : start + window_steps])
            for start in range(0, len(step_ms), window_steps)
        ]
        turns = {"windows": len(rates), "window_steps": window_steps, "tokens_per_s": rates}
    return {
        "warmup_steps": warmup_steps,
        "steps_measured": len(measured),
        "wall_s": wall_s,
        "tokens": round(sum(count or 0.0 for count in step_tokens)),
        "samples": round(sum(samples[i] for i in measured)),
        "tokens_per_s": median_rate(step_tokens, step_ms) if saw_tokens else None,
        "samples_per_s": median_rate([samples[i] for i in measured], step_ms),
        "step_time_s": {
            key: (v / 1000.0 if v is not None else None) for key, v in summarize(step_ms).items()
        },
        "per_step": {"ms": [round(value, 3) for value in step_ms], "tokens": step_tokens},
        "phases": {
            name: _timing_summary([phase_ms[i][index] for i in measured], seconds)
            for index, name in enumerate(PHASES)
        },
        "data_wait_host": {
            f"{key}_ms": value for key, value in summarize([host_wait_ms[i] for i in measured]).items()
        },
        "allreduce_wait": allreduce_wait,
        "loss": loss_curve,
        "turns": turns,
    }
