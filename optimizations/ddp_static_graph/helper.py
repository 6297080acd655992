# Vendored by perfbot from optimizations/ddp_static_graph/helper.py; edit it there, not here.
# This module runs inside the target repository: it imports only the standard library and torch (lazily),
# never perfbot.
"""DDP's static graph, on only when every trainable parameter gets a gradient.

``DistributedDataParallel(find_unused_parameters=True)`` searches the autograd graph for unused parameters
after every forward and all-reduces a used-parameter bitmap every step. When no parameter is ever unused, the
search is wasted; ``static_graph=True`` skips it after the first iteration. Whether a model leaves parameters
without a gradient is checked the way the profiling guide's ``find_unused_params`` script does: one forward and
backward on a real batch, listing the parameters with ``requires_grad`` whose gradient is ``None``. Here the
batch is the first one the training loop feeds the DDP model: before that first step runs, the same inputs go
through the model once outside gradient synchronisation (``no_sync``), gradients are taken from every
floating-point output with ``torch.autograd.grad`` (so no ``.grad`` is touched), and random-number and buffer
state are restored, so the real step sees exactly what it would have seen. The ranks agree (an all-reduce) before
DDP's graph is declared static; if any rank saw an unused parameter, or the check could not run, the model keeps
the flags it was built with and the unused parameters are logged.

A parameter reached only on some batches (a branch taken now and then) cannot be seen from one batch; with a
static graph such a model fails loudly at the step that first differs, not silently.

Three entry points, one per place a DDP model comes from:

- :func:`guard_static_graph` for a ``DistributedDataParallel`` built by hand;
- :func:`static_graph_trainer` for a ``transformers``/TRL ``Trainer`` (it wraps the model at ``train()``);
- :func:`static_graph_accelerator` for an ``accelerate.Accelerator`` (it wraps the model in ``prepare``).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

_ORIGINAL_FORWARD = "_perfbot_forward_before_static_graph_check"


def guard_static_graph(ddp_model: Any) -> Any:
    """Arrange for ``ddp_model`` to check its first batch, then return it.

    Does nothing when the model does not search for unused parameters (``find_unused_parameters=False``) or
    already has a static graph. The check runs at the first forward that will synchronise gradients.
    """
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(ddp_model, DistributedDataParallel):
        return ddp_model
    if not ddp_model.find_unused_parameters or ddp_model.static_graph or _ORIGINAL_FORWARD in vars(ddp_model):
        return ddp_model
    original = ddp_model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        import torch

        if torch.is_grad_enabled() and ddp_model.require_backward_grad_sync:
            del ddp_model.forward
            delattr(ddp_model, _ORIGINAL_FORWARD)
            _check_and_switch(ddp_model, args, kwargs)
        return original(*args, **kwargs)

    # the instance's own forward shadows DDP's until the first synchronising batch deletes it
    ddp_model.forward = forward  # type: ignore[method-assign]
    setattr(ddp_model, _ORIGINAL_FORWARD, original)
    return ddp_model


def static_graph_trainer(trainer: Any) -> Any:
    """Guard the DDP model a ``transformers.Trainer`` builds; return the trainer."""
    from transformers import TrainerCallback

    class StaticGraphCheck(TrainerCallback):
        """Guard ``trainer.model_wrapped`` once it exists, before the first step."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            guard_static_graph(trainer.model_wrapped)

    trainer.add_callback(StaticGraphCheck())
    return trainer


def static_graph_accelerator(accelerator: Any) -> Any:
    """Guard every DDP model ``accelerator.prepare`` builds; returns the accelerator."""
    prepare_model = accelerator.prepare_model

    def prepare_and_guard(model: Any, *args: Any, **kwargs: Any) -> Any:
        return guard_static_graph(prepare_model(model, *args, **kwargs))

    accelerator.prepare_model = prepare_and_guard
    return accelerator


def unused_parameters(ddp_model: Any, args: tuple, kwargs: dict) -> list[str]:
    """Trainable parameters of ``ddp_model.module`` left without a gradient.

    Those that one forward/backward on these inputs leaves without a gradient; the model's buffers,
    random-number state and gradient sync state are as before afterwards.
    """
    import torch

    named = [(name, p) for name, p in ddp_model.module.named_parameters() if p.requires_grad]
    buffers = [(b, b.detach().clone()) for b in ddp_model.module.buffers()]
    forward_sync = ddp_model.require_forward_param_sync
    with _rng_preserved(), ddp_model.no_sync():
        outputs = [
            t for t in _tensors(ddp_model(*args, **kwargs)) if t.is_floating_point() and t.requires_grad
        ]
        if not outputs:
            return [name for name, _ in named]
        grads = torch.autograd.grad(
            outputs,
            [p for _, p in named],
            grad_outputs=[torch.ones_like(t) for t in outputs],
            allow_unused=True,
        )
    with torch.no_grad():
        for buffer, saved in buffers:
            buffer.copy_(saved)
    ddp_model.require_forward_param_sync = forward_sync
    return [name for (name, _), grad in zip(named, grads, strict=True) if grad is None]


def _check_and_switch(ddp_model: Any, args: tuple, kwargs: dict) -> None:
    """Check this rank, agree across ranks, and go static when all agree."""
    try:
        unused = unused_parameters(ddp_model, args, kwargs)
        failure = None
    except Exception as error:  # noqa: BLE001
        # any failure keeps the original flags: never worse than before
        unused, failure = [], f"{type(error).__name__}: {error}"
    if _any_rank(ddp_model, bool(unused) or failure is not None):
        if failure is not None:
            logger.warning("DDP static graph not enabled: the unused-parameter check failed (%s)", failure)
        elif unused:
            logger.warning(
                "DDP static graph not enabled: %d trainable parameter(s) got no gradient on this rank's first "
                "batch, keeping find_unused_parameters=True: %s",
                len(unused),
                ", ".join(unused),
            )
        else:
            logger.warning("DDP static graph not enabled: another rank found parameters without a gradient")
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "you do not need to set find_unused_parameters=true": we know
        ddp_model._set_static_graph()  # what DistributedDataParallel(static_graph=True) calls in __init__
    logger.info("DDP static graph enabled: every trainable parameter got a gradient on the first batch")


def _any_rank(ddp_model: Any, flag: bool) -> bool:
    """Tell whether ``flag`` is true on any rank of the model's process group."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    group = ddp_model.process_group
    device = torch.device("cpu")
    if "nccl" in str(dist.get_backend(group)):  # "nccl", or "cpu:gloo,cuda:nccl" for a mixed group
        device = next(ddp_model.module.parameters()).device
    value = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return bool(value.item())


def _tensors(value: Any) -> Iterator[Any]:
    """Every tensor in a model output (a tensor, mapping, list or tuple)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


@contextlib.contextmanager
def _rng_preserved() -> Iterator[None]:
    """Restore torch's CPU and CUDA random-number state on exit.

    Dropout in the check draws from them.
    """
    import torch

    cpu = torch.random.get_rng_state()
    cuda = (
        torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    )
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
