"""The part of DDP's gradient all-reduce that a backward pass did not hide, as the meter times it.

In a distributed run (``torch.distributed`` initialised with more than one rank), a hook on the loss queues an
autograd final callback at the start of the backward. It runs once every gradient has been computed and before
DDP's own end-of-backward callback waits for the all-reduce, so the time from that point to the return of
``backward`` is the wait (plus copying the reduced buckets back into ``.grad``).
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.steps import Mark


def in_distributed_run() -> bool:
    """Whether ``torch.distributed`` is initialised with more than one rank."""
    distributed = torch.distributed
    return distributed.is_available() and distributed.is_initialized() and distributed.get_world_size() > 1


class GradientsComputed:
    """Marks the moment a backward pass had computed every gradient, for the backward it watches."""

    def __init__(self, cuda: bool) -> None:
        self._cuda = cuda
        self.mark: Mark | None = None

    def watch(self, loss: Any) -> None:
        """Forget the last backward's mark, and mark when ``loss``'s backward (about to start) computes its last
        gradient."""
        self.mark = None
        if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
            loss.register_hook(self._on_backward_start)

    def _on_backward_start(self, grad: torch.Tensor) -> None:
        """Loss hook: queue :meth:`_on_gradients_computed` ahead of DDP's end-of-backward callback."""
        torch.autograd.Variable._execution_engine.queue_callback(self._on_gradients_computed)

    def _on_gradients_computed(self) -> None:
        self.mark = Mark(self._cuda)
