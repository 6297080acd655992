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
It is part of the ``backward`` phase, not a phase of its own (:mod:`benchmarks.allreduce`).

Throughput (``tokens_per_s``, ``samples_per_s``) is the median over the measured steps of each step's count divided
by its duration, so a straggling step (a collection pause, another tenant's burst) moves it no more than any other
step would; ``tokens``, ``samples`` and ``step_time_s`` keep the totals and the spread, and ``per_step`` each
measured step's duration and tokens (a program run with one seed feeds every commit the same batches, so step
``i`` of two runs did the same work).

A meter made with ``planted_slowdown`` (the self-check of ``bot calibrate``; see :mod:`benchmarks.launch`) waits
that fraction of every step's duration when the step closes, so the next step lasts that much longer: a known
regression in an otherwise unchanged program. It waits busy (a sleep would add the CPU's wake-up to the delay);
on CUDA it synchronises the device first, to time the step. The record keeps the fraction it actually waited
(``planted_waited``): on a loaded host a wait preempted at its deadline lasts longer than asked
(:mod:`benchmarks.plant`).

A meter made with ``stop_after`` ends the program once that many steps have closed, by raising
:class:`StepLimitReached` (a ``BaseException``, so a program's ``except Exception`` does not swallow it) from the
hook that closed the step: a program with no step option of its own runs exactly the workload's steps, and what it
would do after training (saving, evaluating, uploading) is not run. The launcher records such a run as ``ok``.

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
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from benchmarks import host
from benchmarks.allreduce import GradientsComputed, in_distributed_run
from benchmarks.counting import count_batch, model_facts
from benchmarks.plant import PlantedSlowdown
from benchmarks.steps import (
    BACKWARD_END,
    FORWARD_BEGIN,
    FORWARD_END,
    IDLE,
    OPTIMIZER_BEGIN,
    OPTIMIZER_END,
    PAUSE,
    STATE_AFTER,
    STEP_BEGIN,
    STEP_END,
    Mark,
    Step,
    phase_between,
    step_numbers,
)
from benchmarks.timeline import Timeline
from benchmarks.turns import TurnClient

_active: Meter | None = None


class StepLimitReached(BaseException):
    """Raised by a meter made with ``stop_after`` once that many steps have closed: the run is done."""

    def __init__(self, steps: int):
        super().__init__(f"stopped after {steps} steps, as the workload asks")
        self.steps = steps


class Meter:
    """Records training steps through global torch hooks; see the module docstring for what is measured."""

    def __init__(
        self,
        planted_slowdown: float = 0.0,
        load_from_step: int = 0,
        turns: TurnClient | None = None,
        stop_after: int | None = None,
    ) -> None:
        self.planted_slowdown, self._stop_after = planted_slowdown, stop_after
        self._turns = turns
        self.timeline = Timeline()
        self._plant = PlantedSlowdown(planted_slowdown)
        self._load_from_step = load_from_step
        self._load = host.MeasuredSpans()
        self._steps: list[Step] = []
        self._step = Step()
        self._started = self._cuda = False
        self._device: torch.device | None = None
        self._explicit = False
        self._in_explicit_step = False
        self._paused = False
        self._in_backward = False
        self._module_depth = 0
        self._optimizer_depth = 0
        self._gradients: GradientsComputed | None = None  # in a distributed run: when backward has them all
        self._outer_call_timed = False
        self._outer_call_counts = False
        self._state = IDLE
        self._last: Mark | None = None
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
            self._boundary(STEP_BEGIN)
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
            self._boundary(STEP_END)
            self._close_step()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave out everything run inside (evaluation); the step resumes where it was."""
        if not self._started or self._paused:
            yield
            return
        self._boundary(PAUSE)
        self._paused = True
        try:
            yield
        finally:
            self._paused = False
            self._last = Mark(self._cuda)

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
        self._boundary(FORWARD_BEGIN)

    def _on_forward_end(self, module: torch.nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        # Called as (module, args, kwargs, output), or (module, args, output) when the forward raised.
        if self._ignores_module_calls():
            return
        self._module_depth -= 1
        if self._module_depth > 0 or not self._outer_call_timed:
            return
        self._boundary(FORWARD_END)
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
            self._boundary(OPTIMIZER_BEGIN)

    def _on_optimizer_end(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._started or self._paused or self._optimizer_depth == 0:
            return
        self._optimizer_depth -= 1
        if self._optimizer_depth == 0:
            self._boundary(OPTIMIZER_END)
            self._step.stepped = True

    def _wrap_backward(self, backward: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(backward)
        def measured_backward(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            if not self._started or self._paused or self._in_backward:
                return backward(tensors, grad_tensors, *args, **kwargs)
            if grad_tensors is None and isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
                self._step.losses.append(tensors.detach().clone())
            if self._gradients is not None:
                self._gradients.watch(tensors)
            self._in_backward = True
            try:
                result = backward(tensors, grad_tensors, *args, **kwargs)
            finally:
                self._in_backward = False
            end = self._boundary(BACKWARD_END)
            if self._gradients is not None and self._gradients.mark is not None:
                self._step.comm_waits.append((self._gradients.mark, end))
            return result

        return measured_backward

    # -- bookkeeping --------------------------------------------------------------------------------------------

    def _has_trainable_parameters(self, module: torch.nn.Module) -> bool:
        known = self._trainable.get(module)
        if known is None:
            known = any(p.requires_grad for p in module.parameters())
            self._trainable[module] = known
        return known

    def _start(self, model: torch.nn.Module) -> None:
        self._started = True
        self._model = model
        first = next(model.parameters(), None)
        if first is not None and first.is_cuda:
            self._cuda = True
            self._device = first.device
            torch.cuda.reset_peak_memory_stats(self._device)
        if in_distributed_run():
            self._gradients = GradientsComputed(self._cuda)
        if self._pad_token_id is None:
            pad = getattr(getattr(model, "config", None), "pad_token_id", None)
            self._pad_token_id = pad if isinstance(pad, int) else None
        self.timeline.first_step()
        if self._load_from_step == 0:
            self.timeline.warmed_up()
        if self._turns is not None and self._turns.plan.first_turn_at_start:
            self._take_turn(self._turns)
            return
        self._last = Mark(self._cuda)
        self._plant.restart(self._last.host)
        if self._load_from_step == 0:
            self._load.open()

    def _boundary(self, event: int) -> Mark:
        assert self._last is not None, "a step boundary before the meter started"
        mark = Mark(self._cuda)
        self._step.segments.append((phase_between(self._state, event), self._last, mark))
        self._last = mark
        self._state = STATE_AFTER.get(event, self._state)
        return mark

    def _close_step(self, hand_over: bool = True) -> None:
        """Close the current step; at a turn's end, ``hand_over`` the device and wait for the next turn."""
        self._steps.append(self._step)
        self._step = Step()
        self._state = IDLE
        if self.planted_slowdown > 0:
            self._plant.wait(self._device if self._cuda else None)
        done = len(self._steps)
        if not self._paused:
            self.timeline.step_closed()
        if done == self._load_from_step:
            self.timeline.warmed_up()
        if self._turns is not None and hand_over and self._turns.plan.turn_ends_after(done):
            self._take_turn(self._turns)
        elif self._turns is not None and self._turns.plan.done_after(done):
            self._load.close()
            self._paused = True  # the last window is measured: later steps are not, and the turn is kept
        elif done == self._load_from_step:
            self._load.open()
        if hand_over and self._stop_after is not None and done >= self._stop_after:
            self._paused = True  # nothing after the last step is measured, whatever the program does next
            raise StepLimitReached(done)

    def _take_turn(self, turns: TurnClient) -> None:
        """Hand the device to the next run of the round and wait for this run's next turn
        (:mod:`benchmarks.turns`); the wait is part of no step and of no span of the host load. What the loop did
        since the last boundary (a hand-written loop's logging before the forward that closed its step) stays
        in the next step."""
        if self._last is not None:
            self._boundary(PAUSE)
        if self._cuda:
            torch.cuda.synchronize(self._device)
            torch.cuda.empty_cache()  # the cached blocks of this run's steps are room for the next run's
        self._load.close()
        with self.timeline.waiting():
            turns.take()
        if len(self._steps) >= self._load_from_step:
            self._load.open()
        self._last = Mark(self._cuda)
        self._plant.restart(self._last.host)

    @property
    def planted_waited(self) -> float:
        """The fraction of the step time the plant actually waited (:class:`benchmarks.plant.PlantedSlowdown`)."""
        return self._plant.waited

    # -- results ------------------------------------------------------------------------------------------------

    def report(self, warmup_steps: int, peak_tflops: float | None) -> dict[str, Any]:
        """The measured part of the run's metrics (``perfbot.run/v1`` keys), read once the program has ended.

        A last step that stepped its optimizer is closed; an unfinished one is dropped. Timings, tokens and
        samples cover the steps after ``warmup_steps``; the loss covers every step, against the tokens seen up to
        and including that step (null when it was not finite): :func:`benchmarks.steps.step_numbers`.
        """
        if self._started and not self._explicit and self._step.stepped:
            self._close_step(hand_over=False)  # the run is over: no turn to wait for, nothing to stop
        self._load.close()
        if self._cuda:
            torch.cuda.synchronize(self._device)
        window_steps = self._turns.plan.window_steps if self._turns is not None else None
        numbers = step_numbers(self._steps, warmup_steps, self._gradients is not None, window_steps)
        loss_curve, turns = numbers.pop("loss"), numbers.pop("turns")
        model = model_facts(self._model)
        flops_per_token, tokens_per_s = model["flops_per_token"], numbers["tokens_per_s"]
        achieved = flops_per_token * tokens_per_s / 1e12 if flops_per_token and tokens_per_s else None
        return {
            **numbers,
            "timing": "cuda_events" if self._cuda else "host_clock",
            "host_load_others": self._load.others_share(),
            "peak_memory_bytes": torch.cuda.max_memory_allocated(self._device) if self._cuda else None,
            "loss": loss_curve,
            **model,
            "achieved_tflops": achieved,
            "peak_tflops": peak_tflops,
            "mfu": achieved / peak_tflops if achieved is not None and peak_tflops else None,
            "turns": turns,
            "timeline": self.timeline.report(),
        }


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
