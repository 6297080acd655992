"""Where a run's wall time goes around its measured steps.

A benchmark run measures seconds but lasts minutes: start-up (interpreter, imports, model and data, up to the
first training step), warm-up (its first steps: compilation, graph capture), and, when a round's runs take turns
(:mod:`benchmarks.turns`), waiting for the device. The meter keeps a :class:`Timeline` of those and reports it
with the run's metrics; what follows the last step, to the process's exit, is the runner's ``duration_s`` less
``last_step_s``.

The runner stamps each launch with the monotonic clock (:func:`launch_environment`), which the processes of one
machine share, so the measured process can say how long it took to reach its first step.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

LAUNCHED_AT_ENV = "PERFBOT_LAUNCHED_AT"


def launch_environment() -> dict[str, str]:
    """The variable that stamps a run launched now."""
    return {LAUNCHED_AT_ENV: repr(time.monotonic())}


class Timeline:
    """Moments of one run, on the monotonic clock: its launch (from the runner's stamp, when there is one), its
    first step, the end of its warm-up, and its last step; and the seconds it spent waiting for turns."""

    def __init__(self, launched_at: float | None = None):
        if launched_at is None:
            with contextlib.suppress(KeyError, ValueError):
                launched_at = float(os.environ[LAUNCHED_AT_ENV])
        self.launched_at = launched_at
        self.first_step_at: float | None = None
        self.warmed_up_at: float | None = None
        self.last_step_at: float | None = None
        self.waited_s = 0.0
        self._waited_in_warm_up = 0.0

    def first_step(self) -> None:
        """The first step begins."""
        self.first_step_at = time.monotonic()

    def warmed_up(self) -> None:
        """The warm-up's last step has closed (or, with no warm-up steps, the first step begins)."""
        self.warmed_up_at = time.monotonic()
        self._waited_in_warm_up = self.waited_s

    def step_closed(self) -> None:
        """A step has closed."""
        self.last_step_at = time.monotonic()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Time spent waiting for a turn."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.waited_s += time.monotonic() - began

    def report(self) -> dict[str, Any]:
        """Seconds: ``start_up_s`` (launch to first step), ``warm_up_s`` (first step to warmed up, less the
        turns waited for meanwhile), ``waiting_s`` (for turns, in all) and ``last_step_s`` (launch to the last
        closed step); None where a moment is unknown."""

        def between(start: float | None, end: float | None, less: float = 0.0) -> float | None:
            return round(end - start - less, 3) if start is not None and end is not None else None

        return {
            "start_up_s": between(self.launched_at, self.first_step_at),
            "warm_up_s": between(self.first_step_at, self.warmed_up_at, self._waited_in_warm_up),
            "waiting_s": round(self.waited_s, 3),
            "last_step_s": between(self.launched_at, self.last_step_at),
        }
