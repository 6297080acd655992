"""In-process training-step meter: step-time phases, token counts, loss and model FLOPs of a training run.

The launch wrapper (``python -m benchmarks.launch``) creates one :class:`Meter` and attaches it to the process
before the training program runs; the meter then observes the program through global hooks only, so the program
itself is not modified:

- the outermost module call (``torch.nn.modules.module`` global forward pre-hook/hook) marks the forward phase and,
  for the model being trained, gives the batch: non-padding tokens and sequences are counted from it
  (:func:`count_batch`);
- ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped: the scalar loss is kept as a detached
  device tensor, and the return of the call marks the end of the backward pass;
- the global optimizer step pre/post hooks mark the optimizer phase and, in a hand-written loop, the end of a step
  (a step closes at its last optimizer step, when the next step's first forward starts or the run ends).

Phases partition each step, so their shares add up to 1:

- ``data_wait``: from the end of the previous step to the first forward (and between a backward and the next
  micro-batch's forward under gradient accumulation): fetching and moving the batch, logging, host syncs;
- ``forward``: the outermost forward calls, and the time between consecutive ones (a DPO reference forward);
- ``backward``: from the end of the forward to the optimizer step (loss, backward, gradient clipping);
- ``optimizer``: from the first optimizer step call to the end of the step (scheduler and ``zero_grad`` included
  when the step end is explicit).

In a distributed run (``torch.distributed`` initialised with more than one rank) the end of each backward is also
split: a hook on the loss queues an autograd final callback at the start of the backward, which runs once every
gradient has been computed and before DDP's own end-of-backward callback waits for the gradient all-reduce.
The time from that point to the return of ``backward`` is reported as ``allreduce_wait``: the part of DDP's
gradient all-reduce (plus copying the reduced buckets back into ``.grad``) that backward compute did not hide.
It is part of the ``backward`` phase, not a phase of its own.

Throughput (``tokens_per_s``, ``samples_per_s``) is the median over the measured steps of each step's count divided
by its duration, so a straggling step (a collection pause, another tenant's burst) moves it no more than any other
step would; ``tokens``, ``samples`` and ``step_time_s`` keep the totals and the spread, and ``per_step`` each
measured step's duration and tokens (a program run with one seed feeds every commit the same batches, so step
``i`` of two runs did the same work).

A meter made with ``planted_slowdown`` (the self-check of ``bot calibrate``; see :mod:`benchmarks.launch`) waits
that fraction of every step's duration when the step closes, so the next step lasts that much longer: a known
regression in an otherwise unchanged program. It waits busy (a sleep would add the CPU's wake-up to the delay);
on CUDA it synchronises the device first, to time the step. The record keeps the fraction it actually waited
(``planted_waited``): on a loaded host a wait preempted at its deadline lasts longer than asked.

A meter given a :class:`benchmarks.turns.TurnClient` is one run of a round whose runs take turns on one device
(``bot bench --interleave``): it waits for its turn before its first step (after its warm-up when the round
warms up together, ``--warm-up-together``), hands the device on after its warm-up and after each measured
window (synchronising the device and returning its cached memory first, so the runs of a round need one run's
peak memory plus the others' weights and optimizer state, not three peaks), and measures nothing after its last
window; ``turns`` in the record gives each window's throughput. The waits
belong to no step. ``timeline`` in the record says where the run's other time went: start-up, warm-up, and
waiting for turns (:mod:`benchmarks.timeline`).

``host_load_others`` is the share of the host's CPUs that other processes kept busy while the measured steps ran
(:mod:`benchmarks.host`): a benchmark sharing its machine measures the other tenants too, and the statistics leave
such runs out (:mod:`benchmarks.stats`). It is null where ``/proc`` is not readable.

On CUDA every boundary records a CUDA event on the current stream (no synchronisation inside the loop; events,
losses and token counts are resolved once, after the run), so the phases are GPU-timeline durations and
``data_wait`` is the GPU time between the step end and the first forward: idle waiting for the host to deliver the
next batch, or copying it. The host-side time of that interval is reported beside it as ``data_wait_host``. On CPU every boundary is a ``time.perf_counter`` reading.
Measurement starts at the first forward of a module with trainable parameters under autograd; forwards before
that (model loading, DPO reference precompute) are ignored, and so are forwards run during a backward pass
(activation-checkpoint recomputation).

Hand-written loops may mark their steps explicitly; without the launcher the context manager does nothing::

    from benchmarks.metrics import step_metrics

    for batch in loader:
        with step_metrics(tokens=batch["attention_mask"].sum(), samples=len(batch["input_ids"])):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

``tokens`` and ``samples`` are optional (ints or device tensors, read after the run, so no host sync); when given
they replace the counts taken from the model's inputs. ``samples`` counts sequences, so a DPO pair (chosen and
rejected, concatenated into one forward) counts as two. Once explicit steps are used the optimizer hooks no longer
end steps. The HF ``Trainer`` integration in :mod:`benchmarks.launch` ends steps the same way, from the Trainer's
``on_step_end``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from benchmarks import host
from benchmarks.timeline import Timeline
from benchmarks.turns import TurnClient

PHASES = ("data_wait", "forward", "backward", "optimizer")
_DATA_WAIT, _FORWARD, _BACKWARD, _OPTIMIZER = range(4)

# Where the loop is, between two boundary events.
_IDLE, _IN_FORWARD, _AFTER_FORWARD, _AFTER_BACKWARD, _IN_OPTIMIZER, _AFTER_OPTIMIZER = range(6)
# Boundary events.
(
    _FORWARD_BEGIN,
    _FORWARD_END,
    _BACKWARD_END,
    _OPTIMIZER_BEGIN,
    _OPTIMIZER_END,
    _STEP_BEGIN,
    _STEP_END,
    _PAUSE,
) = range(8)
_STATE_AFTER = {
    _FORWARD_BEGIN: _IN_FORWARD,
    _FORWARD_END: _AFTER_FORWARD,
    _BACKWARD_END: _AFTER_BACKWARD,
    _OPTIMIZER_BEGIN: _IN_OPTIMIZER,
    _OPTIMIZER_END: _AFTER_OPTIMIZER,
    _STEP_BEGIN: _IDLE,
    _STEP_END: _IDLE,
}
_IGNORE_INDEX = -100

_active: Meter | None = None


def _phase_between(state: int, event: int) -> int:
    """The phase of the time from the last boundary (which left the loop in ``state``) to ``event``."""
    if state == _IDLE:
        return _DATA_WAIT
    if state == _IN_FORWARD:
        return _FORWARD
    if state == _AFTER_FORWARD:
        return _FORWARD if event == _FORWARD_BEGIN else _BACKWARD
    if state == _AFTER_BACKWARD:
        return _DATA_WAIT if event == _FORWARD_BEGIN else _BACKWARD
    if state == _IN_OPTIMIZER:
        return _OPTIMIZER
    return _BACKWARD if event == _BACKWARD_END else _OPTIMIZER


def count_batch(
    args: Sequence[Any], kwargs: dict[str, Any], pad_token_id: int | None = None
) -> tuple[int | torch.Tensor | None, int | torch.Tensor]:
    """Non-padding tokens and sequences in one model call's inputs, as ints or 0-d tensors (never synced).

    Tokens: ``attention_mask.sum()`` when a mask of the input's shape is given; otherwise every input token except
    padding (``input_ids == pad_token_id`` whose label, when labels are given, is -100, so an EOS that doubles as
    the pad token still counts inside packed sequences); all of ``input_ids`` when no pad id is known. Sequences:
    the rows of the batch, or, for packed batches (``position_ids`` and no mask), the positions where
    ``position_ids`` restarts at 0. Returns ``(None, rows)`` when the call has no integer token ids.
    """
    input_ids = kwargs.get("input_ids")
    if not _is_token_tensor(input_ids):
        input_ids = next((arg for arg in args if _is_token_tensor(arg)), None)
    if input_ids is None:
        first = next(
            (t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.dim() > 0), None
        )
        return None, (first.shape[0] if first is not None else 0)
    rows = input_ids.shape[0] if input_ids.dim() > 1 else 1
    attention_mask = kwargs.get("attention_mask")
    if isinstance(attention_mask, torch.Tensor) and attention_mask.shape == input_ids.shape:
        return attention_mask.sum(), rows
    real = None
    if pad_token_id is not None:
        real = input_ids != pad_token_id
        labels = kwargs.get("labels")
        if isinstance(labels, torch.Tensor) and labels.shape == input_ids.shape:
            real = real | (labels != _IGNORE_INDEX)
    tokens = real.sum() if real is not None else input_ids.numel()
    position_ids = kwargs.get("position_ids")
    if isinstance(position_ids, torch.Tensor) and position_ids.shape == input_ids.shape:
        starts = position_ids == 0
        return tokens, (starts & real if real is not None else starts).sum()
    return tokens, rows


def _is_token_tensor(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and value.dim() > 0
        and not value.is_floating_point()
        and value.dtype != torch.bool
    )


def model_flops_per_token(model: torch.nn.Module) -> float:
    """Training FLOPs per token: 2·N forward + 2·N input gradients + 2·N_trainable weight gradients.

    N counts the weights of the matmul layers (``nn.Linear``, which includes a tied LM head and LoRA's A/B
    matrices; embedding lookups cost no matmul FLOPs), N_trainable those that require grad. A full fine-tune gives
    the usual 6·N; LoRA about 4·N. Attention score/value matmuls (12·layers·hidden·seq_len per token, ~2% for a
    0.5B model at 257 tokens) and activation-checkpoint recomputation are not counted, as in the usual MFU
    definition. Models without ``nn.Linear`` layers fall back to all parameters.
    """
    linear = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights = linear or list(model.parameters())
    total = sum(w.numel() for w in weights)
    trainable = sum(w.numel() for w in weights if w.requires_grad)
    return float(4 * total + 2 * trainable)


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


class _Mark:
    """One step boundary: a host timestamp and, on CUDA, an event recorded on the current stream."""

    __slots__ = ("host", "event")

    def __init__(self, cuda: bool):
        self.host = time.perf_counter()
        self.event = None
        if cuda:
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record()


def _elapsed_ms(start: _Mark, end: _Mark) -> float:
    if start.event is not None and end.event is not None:
        return start.event.elapsed_time(end.event)
    return (end.host - start.host) * 1000.0


class _Step:
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
        self.segments: list[tuple[int, _Mark, _Mark]] = []
        self.comm_waits: list[tuple[_Mark, _Mark]] = []
        self.tokens: list[int | torch.Tensor] = []
        self.samples: list[int | torch.Tensor] = []
        self.losses: list[torch.Tensor] = []
        self.stepped = False
        self.given_tokens: int | torch.Tensor | None = None
        self.given_samples: int | torch.Tensor | None = None


def _resolve_numbers(values: Sequence[int | float | torch.Tensor]) -> list[float]:
    """Turn ints and tensors (summed) into floats, with one device-to-host copy per device."""
    result = [float(v) if not isinstance(v, torch.Tensor) else math.nan for v in values]
    by_device: dict[torch.device, list[int]] = {}
    for index, value in enumerate(values):
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(index)
    for indices in by_device.values():
        stacked = torch.stack([values[i].detach().to(torch.float64).sum() for i in indices]).cpu()
        for index, number in zip(indices, stacked.tolist(), strict=True):
            result[index] = number
    return result


class Meter:
    """Records training steps through global torch hooks; see the module docstring for what is measured."""

    def __init__(
        self, planted_slowdown: float = 0.0, load_from_step: int = 0, turns: TurnClient | None = None
    ) -> None:
        self.planted_slowdown = planted_slowdown
        self._turns = turns
        self.timeline = Timeline()
        self._plant_since = 0.0
        self._planted_waited = 0.0  # seconds the plant waited, and the step time it was a fraction of
        self._planted_of = 0.0
        self._load_from_step = load_from_step
        self._load_start: host.Reading | None = None
        self._load_spans: list[tuple[host.Reading | None, host.Reading | None]] = []
        self._steps: list[_Step] = []
        self._step = _Step()
        self._started = False
        self._cuda = False
        self._device: torch.device | None = None
        self._explicit = False
        self._in_explicit_step = False
        self._paused = False
        self._in_backward = False
        self._module_depth = 0
        self._optimizer_depth = 0
        self._distributed = False
        self._grads_computed: _Mark | None = None
        self._outer_call_timed = False
        self._outer_call_counts = False
        self._state = _IDLE
        self._last: _Mark | None = None
        self._model: torch.nn.Module | None = None
        self._pad_token_id: int | None = None
        self._trainable: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()

    # -- attaching to the process ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def attached(self) -> Iterator[Meter]:
        """Install the global hooks and make this the meter :func:`step_metrics` reports to, until exit."""
        global _active
        handles = [
            register_module_forward_pre_hook(self._on_forward_begin),
            register_module_forward_hook(self._on_forward_end, with_kwargs=True, always_call=True),
            register_optimizer_step_pre_hook(self._on_optimizer_begin),
            register_optimizer_step_post_hook(self._on_optimizer_end),
        ]
        original_backward = torch.autograd.backward
        torch.autograd.backward = self._wrap_backward(original_backward)
        previous, _active = _active, self
        try:
            yield self
        finally:
            _active = previous
            torch.autograd.backward = original_backward
            for handle in handles:
                handle.remove()

    def use_explicit_steps(self) -> None:
        """Let :meth:`end_step` / :meth:`step` alone end steps (the optimizer hooks no longer do)."""
        self._explicit = True

    def set_pad_token_id(self, pad_token_id: int | None) -> None:
        """Use this pad id to exclude padding from batches that carry no attention mask."""
        if pad_token_id is not None:
            self._pad_token_id = int(pad_token_id)

    # -- explicit API -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def step(
        self, tokens: int | torch.Tensor | None = None, samples: int | torch.Tensor | None = None
    ) -> Iterator[None]:
        """One training step; ``tokens``/``samples`` replace the counts taken from the model inputs if given."""
        if self._in_explicit_step:
            raise RuntimeError("meter steps cannot be nested")
        self.use_explicit_steps()
        if self._started and not self._paused:
            self._boundary(_STEP_BEGIN)
        self._step.given_tokens, self._step.given_samples = tokens, samples
        self._in_explicit_step = True
        try:
            yield
        finally:
            self._in_explicit_step = False
        self.end_step()

    def end_step(self) -> None:
        """End the current step here (the Trainer integration calls this from ``on_step_end``)."""
        if self._started and not self._paused:
            self._boundary(_STEP_END)
            self._close_step()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave out everything run inside (evaluation); the step resumes where it was."""
        if not self._started or self._paused:
            yield
            return
        self._boundary(_PAUSE)
        self._paused = True
        try:
            yield
        finally:
            self._paused = False
            self._last = _Mark(self._cuda)

    # -- hooks --------------------------------------------------------------------------------------------------

    def _ignores_module_calls(self) -> bool:
        return torch.compiler.is_compiling() or self._paused or self._in_backward

    def _on_forward_begin(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self._ignores_module_calls():
            return
        self._module_depth += 1
        if self._module_depth > 1:
            return
        training = torch.is_grad_enabled() and self._has_trainable_parameters(module)
        if not self._started:
            if not training:
                self._outer_call_timed = False
                return
            self._start(module)
        self._outer_call_timed = True
        self._outer_call_counts = training and module is self._model
        if not self._explicit and self._step.stepped:
            self._close_step()
        self._boundary(_FORWARD_BEGIN)

    def _on_forward_end(self, module: torch.nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        # Called as (module, args, kwargs, output), or (module, args, output) when the forward raised.
        if self._ignores_module_calls():
            return
        self._module_depth -= 1
        if self._module_depth > 0 or not self._outer_call_timed:
            return
        self._boundary(_FORWARD_END)
        if self._outer_call_counts and len(rest) == 2:
            tokens, samples = count_batch(args, rest[0], self._pad_token_id)
            if tokens is not None:
                self._step.tokens.append(tokens)
            self._step.samples.append(samples)

    def _on_optimizer_begin(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._started or self._paused:
            return
        self._optimizer_depth += 1
        if self._optimizer_depth == 1:
            self._boundary(_OPTIMIZER_BEGIN)

    def _on_optimizer_end(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._started or self._paused or self._optimizer_depth == 0:
            return
        self._optimizer_depth -= 1
        if self._optimizer_depth == 0:
            self._boundary(_OPTIMIZER_END)
            self._step.stepped = True

    def _wrap_backward(self, backward: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(backward)
        def measured_backward(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            if not self._started or self._paused or self._in_backward:
                return backward(tensors, grad_tensors, *args, **kwargs)
            if grad_tensors is None and isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
                self._step.losses.append(tensors.detach().clone())
            self._grads_computed = None
            if self._distributed and isinstance(tensors, torch.Tensor) and tensors.grad_fn is not None:
                tensors.register_hook(self._on_backward_start)
            self._in_backward = True
            try:
                result = backward(tensors, grad_tensors, *args, **kwargs)
            finally:
                self._in_backward = False
            self._boundary(_BACKWARD_END)
            if self._grads_computed is not None:
                self._step.comm_waits.append((self._grads_computed, self._last))
            return result

        return measured_backward

    def _on_backward_start(self, grad: torch.Tensor) -> None:
        """Loss hook: queue :meth:`_on_gradients_computed` ahead of DDP's end-of-backward callback."""
        torch.autograd.Variable._execution_engine.queue_callback(self._on_gradients_computed)

    def _on_gradients_computed(self) -> None:
        self._grads_computed = _Mark(self._cuda)

    # -- bookkeeping --------------------------------------------------------------------------------------------

    def _has_trainable_parameters(self, module: torch.nn.Module) -> bool:
        known = self._trainable.get(module)
        if known is None:
            known = any(p.requires_grad for p in module.parameters())
            self._trainable[module] = known
        return known

    def _start(self, model: torch.nn.Module) -> None:
        self._started = True
        distributed = torch.distributed
        self._distributed = (
            distributed.is_available() and distributed.is_initialized() and distributed.get_world_size() > 1
        )
        self._model = model
        first = next(model.parameters(), None)
        self._cuda = first is not None and first.is_cuda
        if self._cuda:
            self._device = first.device
            torch.cuda.reset_peak_memory_stats(self._device)
        if self._pad_token_id is None:
            pad = getattr(getattr(model, "config", None), "pad_token_id", None)
            self._pad_token_id = pad if isinstance(pad, int) else None
        self.timeline.first_step()
        if self._load_from_step == 0:
            self.timeline.warmed_up()
        if self._turns is not None and self._turns.plan.first_turn_at_start:
            self._take_turn()
            return
        self._last = _Mark(self._cuda)
        self._plant_since = self._last.host
        if self._load_from_step == 0:
            self._load_start = host.read()

    def _boundary(self, event: int) -> None:
        mark = _Mark(self._cuda)
        self._step.segments.append((_phase_between(self._state, event), self._last, mark))
        self._last = mark
        self._state = _STATE_AFTER.get(event, self._state)

    def _close_step(self, hand_over: bool = True) -> None:
        """Close the current step; at a turn's end, ``hand_over`` the device and wait for the next turn."""
        self._steps.append(self._step)
        self._step = _Step()
        self._state = _IDLE
        if self.planted_slowdown > 0:
            self._plant_delay()
        done = len(self._steps)
        if not self._paused:
            self.timeline.step_closed()
        if done == self._load_from_step:
            self.timeline.warmed_up()
        if self._turns is not None and hand_over and self._turns.plan.turn_ends_after(done):
            self._take_turn()
        elif self._turns is not None and self._turns.plan.done_after(done):
            self._close_load_span()
            self._paused = True  # the last window is measured: later steps are not, and the turn is kept
        elif done == self._load_from_step:
            self._load_start = host.read()

    def _take_turn(self) -> None:
        """Hand the device to the next run of the round and wait for this run's next turn
        (:mod:`benchmarks.turns`); the wait is part of no step and of no span of the host load. What the loop did
        since the last boundary (a hand-written loop's logging before the forward that closed its step) stays
        in the next step."""
        if self._last is not None:
            self._boundary(_PAUSE)
        if self._cuda:
            torch.cuda.synchronize(self._device)
            torch.cuda.empty_cache()  # the cached blocks of this run's steps are room for the next run's
        self._close_load_span()
        with self.timeline.waiting():
            self._turns.take()
        if len(self._steps) >= self._load_from_step:
            self._load_start = host.read()
        self._last = _Mark(self._cuda)
        self._plant_since = self._last.host

    def _close_load_span(self) -> None:
        if self._load_start is not None:
            self._load_spans.append((self._load_start, host.read()))
            self._load_start = None

    def _plant_delay(self) -> None:
        """Wait ``planted_slowdown`` times the time since the previous step closed (its own wait excluded)."""
        if self._cuda:
            torch.cuda.synchronize(self._device)
        now = time.perf_counter()
        until = now + self.planted_slowdown * (now - self._plant_since)
        while time.perf_counter() < until:  # busy: a sleeping CPU would add its wake-up to the delay
            pass
        self._planted_of += now - self._plant_since
        self._plant_since = time.perf_counter()
        self._planted_waited += self._plant_since - now

    @property
    def planted_waited(self) -> float:
        """The fraction of the step time the plant actually waited: more than asked for when the host preempted
        the wait at its deadline."""
        return self._planted_waited / self._planted_of if self._planted_of else 0.0

    # -- results ------------------------------------------------------------------------------------------------

    def report(self, warmup_steps: int, peak_tflops: float | None) -> dict[str, Any]:
        """The measured part of the run's metrics (``perfbot.run/v1`` keys), read once the program has ended.

        A last step that stepped its optimizer is closed; an unfinished one is dropped. Timings, tokens and
        samples cover the steps after ``warmup_steps``; the loss covers every step, against the tokens seen up to
        and including that step (null when it was not finite).
        """
        if self._started and not self._explicit and self._step.stepped:
            self._close_step(hand_over=False)  # the run is over: no turn to wait for
        self._close_load_span()
        steps = self._steps
        if self._cuda:
            torch.cuda.synchronize(self._device)
        phase_ms = [[0.0] * len(PHASES) for _ in steps]
        host_wait_ms = [0.0] * len(steps)
        for index, step in enumerate(steps):
            for phase, start, end in step.segments:
                phase_ms[index][phase] += _elapsed_ms(start, end)
                if phase == _DATA_WAIT:
                    host_wait_ms[index] += (end.host - start.host) * 1000.0
        tokens, samples, losses = self._resolve_counts(steps)
        measured = range(min(warmup_steps, len(steps)), len(steps))
        step_ms = [sum(phase_ms[i]) for i in measured]
        seconds = sum(step_ms) / 1000.0
        step_tokens = [tokens[i] for i in measured]
        saw_tokens = any(count is not None for count in step_tokens)
        measured_tokens = round(sum(count or 0.0 for count in step_tokens))
        measured_samples = round(sum(samples[i] for i in measured))
        tokens_per_s = median_rate(step_tokens, step_ms) if saw_tokens else None
        phases = {}
        for phase_index, name in enumerate(PHASES):
            values = [phase_ms[i][phase_index] for i in measured]
            stats = summarize(values)
            phases[name] = {
                "mean_ms": stats["mean"],
                "median_ms": stats["median"],
                "p95_ms": stats["p95"],
                "share": sum(values) / 1000.0 / seconds if seconds > 0 else None,
            }
        allreduce_wait = None
        if self._distributed:
            waits = [sum(_elapsed_ms(start, end) for start, end in steps[i].comm_waits) for i in measured]
            stats = summarize(waits)
            allreduce_wait = {
                "mean_ms": stats["mean"],
                "median_ms": stats["median"],
                "p95_ms": stats["p95"],
                "share": sum(waits) / 1000.0 / seconds if seconds > 0 else None,
            }
        wall_s = 0.0
        if self._turns is not None:
            wall_s = seconds  # the windows' steps: the other runs' turns between them are not this run's
        elif measured:
            window = [segment for i in measured for segment in steps[i].segments]
            wall_s = _elapsed_ms(window[0][1], window[-1][2]) / 1000.0 if window else 0.0
        model_params = trainable_params = flops_per_token = None
        if self._model is not None:
            parameters = list(self._model.parameters())
            model_params = sum(p.numel() for p in parameters)
            trainable_params = sum(p.numel() for p in parameters if p.requires_grad)
            flops_per_token = model_flops_per_token(self._model)
        achieved = flops_per_token * tokens_per_s / 1e12 if flops_per_token and tokens_per_s else None
        loss_curve = []
        seen = 0.0
        for index, loss in enumerate(losses):
            seen += tokens[index] or 0.0
            if loss is not None:
                loss_curve.append(
                    {"step": index, "tokens_seen": round(seen), "loss": loss if math.isfinite(loss) else None}
                )
        return {
            "warmup_steps": warmup_steps,
            "steps_measured": len(measured),
            "wall_s": wall_s,
            "tokens": measured_tokens,
            "samples": measured_samples,
            "tokens_per_s": tokens_per_s,
            "samples_per_s": median_rate([samples[i] for i in measured], step_ms),
            "step_time_s": {
                key: (v / 1000.0 if v is not None else None) for key, v in summarize(step_ms).items()
            },
            "per_step": {
                "ms": [round(value, 3) for value in step_ms],
                "tokens": step_tokens,
            },
            "phases": phases,
            "data_wait_host": {
                f"{key}_ms": value for key, value in summarize([host_wait_ms[i] for i in measured]).items()
            },
            "allreduce_wait": allreduce_wait,
            "timing": "cuda_events" if self._cuda else "host_clock",
            "host_load_others": host.others_share_over(self._load_spans),
            "peak_memory_bytes": torch.cuda.max_memory_allocated(self._device) if self._cuda else None,
            "loss": loss_curve,
            "model_params": model_params,
            "trainable_params": trainable_params,
            "attn_implementation": getattr(
                getattr(self._model, "config", None), "_attn_implementation", None
            ),
            "flops_per_token": flops_per_token,
            "achieved_tflops": achieved,
            "peak_tflops": peak_tflops,
            "mfu": achieved / peak_tflops if achieved is not None and peak_tflops else None,
            "turns": self._turns_report(step_tokens, step_ms),
            "timeline": self.timeline.report(),
        }

    def _turns_report(self, step_tokens: list[float | None], step_ms: list[float]) -> dict[str, Any] | None:
        """Per window of a turn-taking run, its throughput (the median rate of its steps); None otherwise."""
        if self._turns is None:
            return None
        size = self._turns.plan.window_steps
        rates = [
            median_rate(step_tokens[start : start + size], step_ms[start : start + size])
            for start in range(0, len(step_ms), size)
        ]
        return {"windows": len(rates), "window_steps": size, "tokens_per_s": rates}

    @staticmethod
    def _resolve_counts(steps: list[_Step]) -> tuple[list[float | None], list[float], list[float | None]]:
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
        tokens, samples, losses = [], [], []
        for n_tokens, n_samples, n_losses in layout:
            token_numbers = [next(numbers) for _ in range(n_tokens)]
            tokens.append(sum(token_numbers) if token_numbers else None)
            samples.append(sum(next(numbers) for _ in range(n_samples)))
            loss_numbers = [next(numbers) for _ in range(n_losses)]
            losses.append(sum(loss_numbers) if loss_numbers else None)
        return tokens, samples, losses


def median_rate(counts: Sequence[float | None], step_ms: Sequence[float]) -> float | None:
    """The median over steps of count / step time (steps without a count or a duration left out)."""
    rates = [c * 1000.0 / ms for c, ms in zip(counts, step_ms, strict=True) if c is not None and ms > 0]
    return percentile(rates, 50) if rates else None


@contextlib.contextmanager
def step_metrics(
    tokens: int | torch.Tensor | None = None, samples: int | torch.Tensor | None = None
) -> Iterator[None]:
    """Mark one training step for the launch wrapper's meter; does nothing when no meter is attached."""
    if _active is None:
        yield
        return
    with _active.step(tokens=tokens, samples=samples):
        yield
