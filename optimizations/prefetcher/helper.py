# Vendored by perfbot from optimizations/prefetcher/helper.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library,
# never perfbot.
"""Overlap host-to-device copies with compute: a prefetcher and a pinned collate."""

from __future__ import annotations

import collections
import collections.abc
import copy
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import default_collate, get_worker_info
from torch.utils.data._utils.collate import collate, default_collate_fn_map


def map_tensors(data: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor in a nested batch, keeping its structure."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        mapped = {key: map_tensors(value, fn) for key, value in data.items()}
        if isinstance(data, collections.abc.MutableMapping):
            # A copy keeps the mapping's own attributes (defaultdict factory, BatchEncoding fields).
            clone = copy.copy(data)
            clone.update(mapped)
            return clone
        mapping_type: type[Any] = type(data)  # a concrete mapping class, whatever its constructor takes
        try:
            return mapping_type(mapped)
        except TypeError:
            return mapped
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(map_tensors(value, fn) for value in data))
    if isinstance(data, (list, tuple)):
        mapped_items = [map_tensors(value, fn) for value in data]
        try:
            return type(data)(mapped_items)
        except TypeError:
            return mapped_items
    return data


def iter_tensors(data: Any) -> Iterator[torch.Tensor]:
    """Yield every tensor in a nested batch (mappings, lists, tuples, namedtuples)."""
    if isinstance(data, torch.Tensor):
        yield data
    elif isinstance(data, collections.abc.Mapping):
        for value in data.values():
            yield from iter_tensors(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from iter_tensors(value)


def move_to_device(data: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Move every tensor in a nested batch to ``device`` with ``Tensor.to``."""
    return map_tensors(data, lambda tensor: tensor.to(device, non_blocking=non_blocking))


class CudaPrefetcher:
    """Iterate over ``iterable`` with each batch copied to ``device`` ahead of use.

    On CUDA, host tensors are pinned (unless they already are) and copied on a dedicated stream, so the
    copy of the next batch overlaps the compute on the current one; the consumer's current stream waits
    on the copy's event and every handed-over tensor is ``record_stream``-ed on that stream, so the caching
    allocator cannot reuse its memory before the consumer is done with it. Each prefetched batch costs one
    batch of device memory. Anywhere else (CPU device, no CUDA) it is a plain loop that calls ``.to(device)``.
    """

    def __init__(
        self, iterable: Iterable[Any], device: torch.device | str | int | None = None, depth: int = 1
    ):
        """Prefetch ``depth`` batches of ``iterable`` ahead onto ``device``.

        ``device`` defaults to CUDA where it is available.
        """
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.iterable = iterable
        self.device = torch.device(device)
        self.depth = depth
        self._copy_stream: torch.cuda.Stream | None = None

    def __len__(self) -> int:
        """Return the wrapped iterable's length."""
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        """Yield the batches on the device, each copied during the one before."""
        if self.device.type != "cuda" or not torch.cuda.is_available():
            for batch in self.iterable:
                yield move_to_device(batch, self.device)
            return
        yield from self._prefetch_on_cuda()

    def _stream(self) -> torch.cuda.Stream:
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(device=self.device)
        return self._copy_stream

    def _copy_to_device(self, tensor: torch.Tensor, copy_stream: torch.cuda.Stream) -> torch.Tensor:
        if tensor.device.type == "cpu":
            if not tensor.is_pinned():
                tensor = tensor.pin_memory()
        elif tensor.device != self.device:
            # A tensor produced on another device must be complete there before this stream reads it.
            copy_stream.wait_stream(torch.cuda.current_stream(tensor.device))
        return tensor.to(self.device, non_blocking=True)

    def _prefetch_on_cuda(self) -> Iterator[Any]:
        copy_stream = self._stream()
        batches = iter(self.iterable)
        in_flight: collections.deque[tuple[Any, torch.cuda.Event]] = collections.deque()

        def start_next_copy() -> None:
            try:
                batch = next(batches)
            except StopIteration:
                return
            with torch.cuda.stream(copy_stream):
                on_device = map_tensors(batch, lambda tensor: self._copy_to_device(tensor, copy_stream))
                copied = torch.cuda.Event()
                copied.record(copy_stream)
            in_flight.append((on_device, copied))

        for _ in range(self.depth):
            start_next_copy()
        while in_flight:
            batch, copied = in_flight.popleft()
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_event(copied)
            for tensor in iter_tensors(batch):
                if tensor.is_cuda:
                    tensor.record_stream(consumer)
            start_next_copy()
            yield batch


def _stack_tensors(batch: list[torch.Tensor], *, pin_memory: bool, collate_fn_map: dict | None = None) -> Any:
    first = batch[0]
    if first.device.type != "cpu" or first.layout != torch.strided or first.is_nested:
        return default_collate(batch)
    dtype = first.dtype
    for tensor in batch[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    out = torch.empty((len(batch), *first.shape), dtype=dtype, pin_memory=pin_memory)
    return torch.stack(batch, 0, out=out)


class NumpyPinnedCollate:
    """A ``default_collate`` that stacks arrays and tensors into pinned memory.

    The batch is written once, into page-locked memory that the CUDA copy reads directly (no second copy
    by ``pin_memory``). Pinned blocks come from PyTorch's caching host allocator, which hands a block out
    again only after the asynchronous copies reading it have finished, so no fixed buffer is overwritten
    while a copy is in flight. ``pin_memory`` defaults to whether CUDA is available. In a DataLoader worker
    process it is exactly ``default_collate`` (the DataLoader's ``pin_memory=True`` pins in the main process).
    """

    def __init__(self, pin_memory: bool | None = None) -> None:
        """Collate into pinned memory when ``pin_memory`` (default: with CUDA)."""
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        stack = functools.partial(_stack_tensors, pin_memory=self.pin_memory)
        self._collate_fn_map: dict[type | tuple[type, ...], Callable[..., Any]] = {
            **default_collate_fn_map,
            torch.Tensor: stack,
        }

    def __call__(self, samples: list[Any]) -> Any:
        """Collate ``samples``, into pinned memory in the main process."""
        if get_worker_info() is not None:
            return default_collate(samples)
        return collate(samples, collate_fn_map=self._collate_fn_map)
