"""The planted slowdown of ``bot calibrate``'s self-check: a known regression in an otherwise unchanged program.

After each step closes, the meter (:mod:`benchmarks.metrics`) waits a fraction of the time since the previous
step closed, so the next step lasts that much longer. It waits busy (a sleep would add the CPU's wake-up to the
delay); on CUDA it synchronises the device first, to time the step. It keeps the fraction it actually waited: on
a loaded host a wait preempted at its deadline lasts longer than asked.
"""

from __future__ import annotations

import time

import torch


class PlantedSlowdown:
    """Waits ``fraction`` of every step's duration when the step closes."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self._since = 0.0
        self._waited = 0.0  # seconds waited, and the step time they were a fraction of
        self._of = 0.0

    def restart(self, at: float) -> None:
        """Time the next step from ``at`` (a ``time.perf_counter`` reading): after a pause, or at the start."""
        self._since = at

    def wait(self, device: torch.device | None) -> None:
        """Wait ``fraction`` times the time since the previous step closed (its own wait excluded); ``device``:
        the CUDA device to synchronise first, None on CPU."""
        if device is not None:
            torch.cuda.synchronize(device)
        now = time.perf_counter()
        until = now + self.fraction * (now - self._since)
        while time.perf_counter() < until:  # busy: a sleeping CPU would add its wake-up to the delay
            pass
        self._of += now - self._since
        self._since = time.perf_counter()
        self._waited += self._since - now

    @property
    def waited(self) -> float:
        """The fraction of the step time actually waited: more than asked for when the host preempted the wait at
        its deadline."""
        return self._waited / self._of if self._of else 0.0
