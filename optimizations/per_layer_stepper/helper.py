# Vendored by perfbot from optimizations/per_layer_stepper/helper.py. Self-contained (torch and the
# standard library only) and must not import perfbot: edit the original and re-vendor instead.
"""AdamW with its state in pinned host memory, on the GPU a layer group at a time.

``PerLayerAdamW`` is a drop-in ``torch.optim.Optimizer`` for ``torch.optim.AdamW``. Parameters and
gradients stay on the GPU; ``exp_avg``/``exp_avg_sq`` stay in pinned host memory and are streamed through a
fixed pool of device buffers during ``step()``: a host-to-device stream loads the next groups while the
current stream runs torch's own fused AdamW kernel on the loaded group and a device-to-host stream copies the
previous group back. The result is bitwise identical to ``torch.optim.AdamW(fused=True)``, ``state_dict()``
has the same format (checkpoints load either way), LR schedulers, ``clip_grad_norm_`` and ``GradScaler``
keep working, and the GPU holds at most ``prefetch_depth + 2`` groups of state (one group at depth 0).

Layer groups come from the model: the children of its largest ``nn.ModuleList`` (the transformer layers),
the embeddings, and the rest. A group larger than the largest transformer layer is cut into pieces of that
size (a parameter may be split; the kernel is elementwise, so the result is unchanged).

Not supported (``ValueError`` at construction): ``amsgrad=True`` (a third state tensor), ``capturable=True``
(CUDA graphs cannot capture the host transfers), ``differentiable=True``, ``foreach=True`` or
``fused=False`` (the stepper always runs the fused kernel), parameters that are not floating point CUDA
tensors on one device (complex included: the fused kernel has no complex path) or not contiguous. Gradients
must be dense and sit on the parameters' device.

Entry points for edited training code: ``per_layer_adamw(...)`` takes ``torch.optim.AdamW``'s arguments and
returns a ``PerLayerAdamW``, or a plain ``torch.optim.AdamW`` when CUDA is not available or the arguments
are ones the stepper refuses; ``with_per_layer_adamw(trainer)`` gives a transformers/TRL ``Trainer`` the
stepper built as its own ``create_optimizer`` builds AdamW, or leaves the trainer as it was.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, cast

import torch
from torch import Tensor, nn

__all__ = [
    "LayerGroup",
    "PerLayerAdamW",
    "adamw_defaults",
    "per_layer_adamw",
    "plan_layer_groups",
    "remap_saved_state",
    "trainer_adamw_blocker",
    "with_per_layer_adamw",
]

_ALIGN = 256  # byte alignment of every tensor inside a state buffer (the CUDA allocator's is 512)
_STATE_KEYS = ("exp_avg", "exp_avg_sq")
_UNSPLIT_PIECES = 16  # without transformer layers, state is streamed in this many pieces


@dataclass(frozen=True, eq=False)
class LayerGroup:
    """Parameters whose optimizer state is moved to the GPU together."""

    name: str
    kind: str  # "embeddings", "layer" or "rest"
    params: tuple[Tensor, ...]


def _largest_module_list(model: nn.Module, wanted: set[int]) -> str | None:
    """Name the ``nn.ModuleList`` holding the most elements of ``wanted``."""
    best_name, best_size = None, 0
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or not name:
            continue
        size = sum(p.numel() for p in module.parameters() if id(p) in wanted)
        if size > best_size:
            best_name, best_size = name, size
    return best_name


def _inferred_list_prefix(names: Iterable[str], sizes: Iterable[int]) -> str | None:
    """Find, from names alone, the layer prefix that covers the most elements."""
    totals: dict[str, int] = defaultdict(int)
    for name, size in zip(names, sizes, strict=True):
        parts = name.split(".")
        for i, part in enumerate(parts[:-1]):
            if part.isdigit() and i > 0:
                totals[".".join(parts[:i])] += size
                break
    return max(totals, key=totals.__getitem__) if totals else None


def _looks_like_embedding(name: str) -> bool:
    return any("embed" in part or part in ("wte", "wpe") for part in name.split(".")[:-1])


def plan_layer_groups(
    params: Sequence[Tensor], *, model: nn.Module | None = None, names: Sequence[str] | None = None
) -> list[LayerGroup]:
    """Split ``params`` into groups: embeddings, one per layer, the rest.

    With ``model``, the layers are the children of its largest ``nn.ModuleList`` and the embeddings the
    parameters of its ``nn.Embedding`` modules. With ``names`` only (named parameters), the layer list is
    the dotted prefix before an integer component covering the most elements, and embeddings are names
    with an ``embed``/``wte``/``wpe`` module. With neither, all parameters form one group ``params``.
    """
    if model is None and names is None:
        return [LayerGroup("params", "rest", tuple(params))] if params else []
    wanted = {id(p) for p in params}
    embedding_ids: set[int] = set()
    if model is not None:
        name_of = {id(p): n for n, p in model.named_parameters() if id(p) in wanted}
        list_prefix = _largest_module_list(model, wanted)
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                embedding_ids.update(id(p) for p in module.parameters(recurse=False))
    elif names is not None:  # with neither, the groups were returned above
        name_of = {id(p): n for p, n in zip(params, names, strict=True)}
        list_prefix = _inferred_list_prefix(name_of.values(), (p.numel() for p in params))
        embedding_ids = {id(p) for p in params if _looks_like_embedding(name_of[id(p)])}

    embeddings: list[Tensor] = []
    layers: dict[int, list[Tensor]] = defaultdict(list)
    rest: list[Tensor] = []
    for p in params:
        name = name_of.get(id(p), "")
        if list_prefix is not None and name.startswith(list_prefix + "."):
            index = name[len(list_prefix) + 1 :].split(".", 1)[0]
            if index.isdigit():
                layers[int(index)].append(p)
                continue
        (embeddings if id(p) in embedding_ids else rest).append(p)

    groups = [LayerGroup("embeddings", "embeddings", tuple(embeddings))] if embeddings else []
    groups += [LayerGroup(f"{list_prefix}.{i}", "layer", tuple(layers[i])) for i in sorted(layers)]
    if rest:
        groups.append(LayerGroup("rest", "rest", tuple(rest)))
    return groups


def _scalar(value: float | Tensor) -> float | Tensor:
    """Pass a hyperparameter as torch's fused path does: a float, or a 0-dim tensor."""
    return value.squeeze() if isinstance(value, Tensor) and value.dim() != 0 else value


def _check_group_settings(group: dict[str, Any]) -> None:
    if group.get("amsgrad"):
        raise ValueError(
            "PerLayerAdamW does not support amsgrad=True (it streams exp_avg and exp_avg_sq only); "
            "use torch.optim.AdamW for AMSGrad."
        )
    if group.get("capturable"):
        raise ValueError(
            "PerLayerAdamW does not support capturable=True: its step copies state to and from the host, "
            "which a CUDA graph cannot capture. Drop capturable=True."
        )
    if group.get("differentiable"):
        raise ValueError("PerLayerAdamW does not support differentiable=True; use torch.optim.AdamW.")
    if group.get("foreach"):
        raise ValueError(
            "PerLayerAdamW always runs torch's fused AdamW kernel; drop foreach=True (or pass fused=True)."
        )
    if group.get("fused") is False:
        raise ValueError(
            "PerLayerAdamW always runs torch's fused AdamW kernel; drop fused=False (or pass fused=True)."
        )


def adamw_defaults(
    lr: float | Tensor = 1e-3,
    betas: tuple[float | Tensor, float | Tensor] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
    amsgrad: bool = False,
    *,
    maximize: bool = False,
    foreach: bool | None = None,
    capturable: bool = False,
    differentiable: bool = False,
    fused: bool | None = None,
) -> dict[str, Any]:
    """Validate the param-group defaults of a fused ``torch.optim.AdamW``."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for index, beta in enumerate(betas):
        if isinstance(beta, Tensor) and beta.numel() != 1:
            raise ValueError(f"Tensor betas[{index}] must be 1-element")
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {index}: {beta}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    defaults = {
        "lr": lr,
        "betas": tuple(_scalar(b) for b in betas),
        "eps": eps,
        "weight_decay": weight_decay,
        "amsgrad": amsgrad,
        "maximize": maximize,
        "foreach": foreach,
        "capturable": capturable,
        "differentiable": differentiable,
        "fused": fused,
        "decoupled_weight_decay": True,
    }
    _check_group_settings(defaults)
    defaults["fused"] = True
    return defaults


def remap_saved_state(
    state_dict: dict[str, Any], param_groups: list[dict[str, Any]]
) -> tuple[dict[int, Tensor], list[dict[str, Any]]]:
    """Match a saved AdamW/PerLayerAdamW state dict to ``param_groups``.

    Returns the saved parameter ids mapped to the live parameters, and the saved param groups normalized
    to this optimizer's settings (fused kernel, decoupled weight decay). Raises ``ValueError`` when the
    groups do not line up or the checkpoint needs a setting the stepper does not support (AMSGrad).
    """
    saved_groups = copy.deepcopy(state_dict["param_groups"])
    if len(saved_groups) != len(param_groups):
        raise ValueError("loaded state dict has a different number of parameter groups")
    if any(len(s["params"]) != len(g["params"]) for s, g in zip(saved_groups, param_groups, strict=True)):
        raise ValueError(
            "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
        )
    for group in saved_groups:
        if group.get("amsgrad"):
            raise ValueError(
                "the checkpoint was written with amsgrad=True, which PerLayerAdamW does not support"
            )
        group.update(
            foreach=None, fused=True, capturable=False, differentiable=False, decoupled_weight_decay=True
        )
        for key in ("amsgrad", "maximize"):
            group.setdefault(key, False)
    id_map = dict(
        zip(
            chain.from_iterable(g["params"] for g in saved_groups),
            chain.from_iterable(g["params"] for g in param_groups),
            strict=True,
        )
    )
    return id_map, saved_groups


@dataclass(frozen=True, eq=False)
class _Segment:
    """Elements ``[start, stop)`` of a parameter, ``offset`` bytes into a slot."""

    param: Tensor
    group_index: int
    start: int
    stop: int
    offset: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.param.numel()


@dataclass(frozen=True, eq=False)
class _Bucket:
    """Bytes ``[lo, hi)`` of a layer group's state: the unit of one transfer."""

    layer: int
    lo: int
    hi: int
    segments: tuple[_Segment, ...]


class _HostLayer:
    """Pinned host storage of a layer group: ``[exp_avg | exp_avg_sq]``."""

    def __init__(self, group: LayerGroup) -> None:
        self.group = group
        self.offsets: dict[Tensor, int] = {}
        offset = 0
        for p in group.params:
            self.offsets[p] = offset
            offset += -(-p.numel() * p.element_size() // _ALIGN) * _ALIGN
        self.region_bytes = offset
        self.buffer: Tensor | None = None  # allocated the first time one of its parameters gets state

    def views(self, p: Tensor) -> tuple[Tensor, Tensor]:
        """``exp_avg`` and ``exp_avg_sq`` of ``p`` as views into the pinned buffer."""
        if self.buffer is None:
            self.buffer = torch.empty(2 * self.region_bytes, dtype=torch.uint8, pin_memory=True)
        start, nbytes = self.offsets[p], p.numel() * p.element_size()
        exp_avg, exp_avg_sq = (
            self.buffer[base + start : base + start + nbytes].view(p.dtype).view(p.shape)
            for base in (0, self.region_bytes)
        )
        return exp_avg, exp_avg_sq


def _buckets_of(
    layer_index: int, host: _HostLayer, cap: int, group_index: dict[Tensor, int]
) -> list[_Bucket]:
    """Cut a layer group's region into near-equal pieces of at most ``cap`` bytes."""
    region = host.region_bytes
    if region == 0:
        return []
    pieces = max(1, math.ceil(region / cap))
    step = -(-math.ceil(region / pieces) // _ALIGN) * _ALIGN
    buckets = []
    for lo in range(0, region, step):
        hi = min(region, lo + step)
        segments = []
        for p, offset in host.offsets.items():
            a, b = max(lo, offset), min(hi, offset + p.numel() * p.element_size())
            if a < b:
                size = p.element_size()
                segments.append(
                    _Segment(p, group_index[p], (a - offset) // size, (b - offset) // size, a - lo)
                )
        buckets.append(_Bucket(layer_index, lo, hi, tuple(segments)))
    return buckets


def _imported_state(
    host: _HostLayer, p: Tensor, saved: dict[str, Any], device: torch.device | None
) -> dict[str, Any]:
    """Load a saved AdamW state of ``p`` into its pinned host views."""
    unknown = set(saved) - {"step", *_STATE_KEYS}
    if unknown or not set(_STATE_KEYS) <= set(saved):
        raise ValueError(
            f"PerLayerAdamW expects AdamW state with step/exp_avg/exp_avg_sq, got keys {sorted(saved)}"
        )
    exp_avg, exp_avg_sq = host.views(p)
    for key, target in zip(_STATE_KEYS, (exp_avg, exp_avg_sq), strict=True):
        if tuple(saved[key].shape) != tuple(p.shape):
            raise ValueError(f"saved {key} has shape {tuple(saved[key].shape)}, parameter {tuple(p.shape)}")
        target.copy_(saved[key])
    step = saved["step"]
    step = (step if isinstance(step, Tensor) else torch.tensor(float(step))).to(device, torch.float32)
    return {"step": step.clone(), "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}


class _DeviceSlots:
    """The device buffers optimizer state streams through during a step.

    A host-to-device and a device-to-host stream, the events that order the two around each slot's update,
    and the slots (allocated at the first step). Reads the optimizer's host layers and buckets, which grow as
    param groups are added.
    """

    def __init__(
        self, device: torch.device | None, count: int, hosts: list[_HostLayer], buckets: list[_Bucket]
    ) -> None:
        self.device, self.hosts, self.buckets = device, hosts, buckets
        self.h2d = torch.cuda.Stream(device=device)
        self.d2h = torch.cuda.Stream(device=device)
        self.loaded = [torch.cuda.Event() for _ in range(count)]
        self.computed = [torch.cuda.Event() for _ in range(count)]
        self.copied_back = [torch.cuda.Event() for _ in range(count)]
        self.all_copied_back = torch.cuda.Event()
        self.slots: list[Tensor] = []  # the device buffer pool, allocated at the first step
        self._views: dict[tuple[int, int], list[tuple[Tensor, Tensor]]] = {}

    def reset(self) -> None:
        """Drop the buffers: the buckets changed, the next step allocates new ones."""
        self.slots, self._views = [], {}

    def pool(self, compute: torch.cuda.Stream) -> list[Tensor]:
        """Return the device buffers, allocated once.

        Each is ``[exp_avg half | exp_avg_sq half]``.
        """
        if not self.slots:
            half = max(b.hi - b.lo for b in self.buckets)
            count = min(len(self.loaded), len(self.buckets))
            self.slots = [torch.empty(2 * half, dtype=torch.uint8, device=self.device) for _ in range(count)]
            for slot in self.slots:  # freeing the pool must wait for the copies queued on the side streams
                slot.record_stream(self.h2d)
                slot.record_stream(self.d2h)
            self.h2d.wait_stream(
                compute
            )  # the memory may still be in use by work queued before it was allocated
        return self.slots

    def views(self, slot_index: int, bucket_index: int) -> list[tuple[Tensor, Tensor]]:
        """Return each segment's ``(exp_avg, exp_avg_sq)`` in a slot."""
        key = (slot_index, bucket_index)
        if key not in self._views:
            slot = self.slots[slot_index]
            half = slot.numel() // 2
            views = []
            for seg in self.buckets[bucket_index].segments:
                nbytes = (seg.stop - seg.start) * seg.param.element_size()
                pair = [
                    slot[base + seg.offset : base + seg.offset + nbytes].view(seg.param.dtype)
                    for base in (0, half)
                ]
                if seg.whole:
                    pair = [v.view(seg.param.shape) for v in pair]
                views.append((pair[0], pair[1]))
            self._views[key] = views
        return self._views[key]

    def load(self, position: int, bucket_index: int) -> None:
        """Queue the copy of a bucket's state into the slot of its position."""
        slot_index = position % len(self.slots)
        bucket = self.buckets[bucket_index]
        host = self.hosts[bucket.layer]
        buffer = cast(Tensor, host.buffer)  # allocated: the bucket's parameters have state
        slot = self.slots[slot_index]
        half, size = slot.numel() // 2, bucket.hi - bucket.lo
        with torch.cuda.stream(self.h2d):
            self.h2d.wait_event(self.copied_back[slot_index])
            for base_slot, base_host in ((0, 0), (half, host.region_bytes)):
                slot[base_slot : base_slot + size].copy_(
                    buffer[base_host + bucket.lo : base_host + bucket.hi], non_blocking=True
                )
            self.loaded[slot_index].record(self.h2d)

    def copy_back(self, slot_index: int, bucket_index: int) -> None:
        """Queue the copy of an updated slot back into its host buffer."""
        bucket = self.buckets[bucket_index]
        host = self.hosts[bucket.layer]
        buffer = cast(Tensor, host.buffer)  # allocated: the bucket's parameters have state
        slot = self.slots[slot_index]
        half, size = slot.numel() // 2, bucket.hi - bucket.lo
        with torch.cuda.stream(self.d2h):
            self.d2h.wait_event(self.computed[slot_index])
            for base_slot, base_host in ((0, 0), (half, host.region_bytes)):
                buffer[base_host + bucket.lo : base_host + bucket.hi].copy_(
                    slot[base_slot : base_slot + size], non_blocking=True
                )
            self.copied_back[slot_index].record(self.d2h)


class PerLayerAdamW(torch.optim.Optimizer):
    """``torch.optim.AdamW`` with its state in pinned memory, streamed per layer group.

    Args are those of ``torch.optim.AdamW`` plus:
        model: the module the parameters belong to; its blocks define the layer groups. Without it, names
            from ``model.named_parameters()`` passed as ``params`` are used, else one group cut in pieces.
        prefetch_depth: 0 moves one group at a time, synchronously; ``d >= 1`` loads ``d`` groups ahead
            of the one being updated while the previous one is copied back (``d + 2`` device buffers).
        bucket_bytes: most bytes of one state tensor kind per transfer (default: the largest transformer
            layer's, or 1/16 of the total without transformer layers).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]] | Iterable[tuple[str, Tensor]],
        lr: float | Tensor = 1e-3,
        betas: tuple[float | Tensor, float | Tensor] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        model: nn.Module | None = None,
        prefetch_depth: int = 1,
        bucket_bytes: int | None = None,
    ) -> None:
        """Validate the arguments; plan the layer groups, buckets and streams."""
        if not isinstance(prefetch_depth, int) or prefetch_depth < 0:
            raise ValueError(f"prefetch_depth must be an int >= 0, got {prefetch_depth!r}")
        if bucket_bytes is not None and bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes!r}")
        self._device: torch.device | None = None
        self._planned = False  # set once the layer groups, streams and events exist
        self._hosts: list[_HostLayer] = []
        self._buckets: list[_Bucket] = []
        defaults = adamw_defaults(
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
        )
        super().__init__(params, defaults)
        self._step_supports_amp_scaling = True  # GradScaler hands grad_scale/found_inf to the fused kernel
        self.prefetch_depth = prefetch_depth

        all_params = [p for g in self.param_groups for p in g["params"]]
        names = None
        if model is None and all("param_names" in g for g in self.param_groups):
            names = [n for g in self.param_groups for n in g["param_names"]]
        layer_groups = plan_layer_groups(all_params, model=model, names=names)
        self._hosts = [_HostLayer(g) for g in layer_groups]
        self._host_index = {p: i for i, h in enumerate(self._hosts) for p in h.group.params}
        layer_bytes = [h.region_bytes for h in self._hosts if h.group.kind == "layer"]
        total = sum(h.region_bytes for h in self._hosts)
        cap = bucket_bytes or (max(layer_bytes) if layer_bytes else math.ceil(total / _UNSPLIT_PIECES))
        self._bucket_cap = max(_ALIGN, -(-cap // _ALIGN) * _ALIGN)
        group_index = self._group_index()
        for index, host in enumerate(self._hosts):
            self._buckets += _buckets_of(index, host, self._bucket_cap, group_index)

        slots = 1 if prefetch_depth == 0 else prefetch_depth + 2
        self._streams = _DeviceSlots(self._device, slots, self._hosts, self._buckets)
        self._planned = True

    @property
    def layer_groups(self) -> list[LayerGroup]:
        """The layer groups the state is streamed by, in streaming order."""
        return [h.group for h in self._hosts]

    def _group_index(self) -> dict[Tensor, int]:
        return {p: i for i, g in enumerate(self.param_groups) for p in g["params"]}

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group (validated), as a layer group of its own."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            _check_group_settings(group)
            for i, p in enumerate(group["params"]):
                self._check_param(p, group.get("param_names", [None] * len(group["params"]))[i])
        except (TypeError, ValueError):
            self.param_groups.pop()
            raise
        if not self._planned:
            return  # still inside __init__: the layer groups are planned once all groups are in
        self._wait_for_copy_back()
        host = _HostLayer(
            LayerGroup(f"param_group_{len(self.param_groups) - 1}", "rest", tuple(group["params"]))
        )
        self._hosts.append(host)
        self._host_index.update((p, len(self._hosts) - 1) for p in host.group.params)
        self._buckets += _buckets_of(len(self._hosts) - 1, host, self._bucket_cap, self._group_index())
        self._streams.reset()

    def _check_param(self, p: Tensor, name: str | None) -> None:
        label = f"parameter {name!r}" if name else f"a parameter of shape {tuple(p.shape)}"
        if p.device.type != "cuda":
            raise ValueError(
                f"PerLayerAdamW keeps parameters and gradients on the GPU and streams only the optimizer state, "
                f"but {label} is on {p.device}: move the model to CUDA before building the optimizer "
                "(for CPU training use torch.optim.AdamW)."
            )
        if self._device is None:
            self._device = p.device
        elif p.device != self._device:
            raise ValueError(
                f"PerLayerAdamW works on one GPU, but {label} is on {p.device} and others on {self._device}."
            )
        if torch.is_complex(p) or not torch.is_floating_point(p):
            raise TypeError(
                f"PerLayerAdamW needs floating point parameters (torch's fused AdamW kernel has no {p.dtype} "
                f"path), but {label} is {p.dtype}; use torch.optim.AdamW for it."
            )
        if not p.is_contiguous():
            raise ValueError(
                f"PerLayerAdamW needs contiguous parameters, but {label} is not; call .contiguous()."
            )

    def _wait_for_copy_back(self) -> None:
        if self._planned:
            self._streams.all_copied_back.synchronize()

    def state_dict(self) -> dict[str, Any]:
        """Return the state in ``torch.optim.AdamW`` format, in pinned memory.

        ``exp_avg`` and ``exp_avg_sq`` are pinned host tensors.
        """
        self._wait_for_copy_back()
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load an AdamW or ``PerLayerAdamW`` state dict into pinned memory."""
        state_dict = state_dict.copy()
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = pre_hook(self, state_dict)
            if result is not None:
                state_dict = result
        id_map, saved_groups = remap_saved_state(state_dict, self.param_groups)
        self._wait_for_copy_back()
        state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                p = id_map[key]
                state[p] = _imported_state(self._hosts[self._host_index[p]], p, value, self._device)
            else:  # state not tied to a parameter is kept as is, like torch does
                state[key] = value
        for group, saved in zip(self.param_groups, saved_groups, strict=True):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
        self.__setstate__({"state": state, "param_groups": saved_groups})
        for post_hook in self._optimizer_load_state_dict_post_hooks.values():
            post_hook(self)

    def _stepped_params(self) -> dict[Tensor, Tensor]:
        """Parameters with a gradient, their state created at first use."""
        stepped: dict[Tensor, Tensor] = {}
        for group in self.param_groups:
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if grad.is_sparse:
                    raise RuntimeError(
                        "Adam does not support sparse gradients, please consider SparseAdam instead"
                    )
                if p.device != self._device or grad.device != self._device or grad.dtype != p.dtype:
                    raise ValueError(
                        f"PerLayerAdamW needs parameters and gradients on {self._device} with matching dtypes, "
                        f"got a {p.dtype} parameter on {p.device} with a {grad.dtype} gradient on {grad.device}: "
                        "do not move the model or offload/cast gradients after building the optimizer."
                    )
                state = self.state[p]
                if not state:
                    self._wait_for_copy_back()
                    exp_avg, exp_avg_sq = self._hosts[self._host_index[p]].views(p)
                    exp_avg.zero_()
                    exp_avg_sq.zero_()
                    state.update(
                        step=torch.zeros((), dtype=torch.float32, device=p.device),
                        exp_avg=exp_avg,
                        exp_avg_sq=exp_avg_sq,
                    )
                stepped[p] = grad
        return stepped

    def _update(
        self, slot_index: int, bucket_index: int, stepped: dict[Tensor, Tensor], amp: dict[str, Any]
    ) -> None:
        """Run the fused AdamW kernel on a loaded bucket.

        One call per (param group, dtype).
        """
        calls: dict[tuple[int, torch.dtype], tuple[list[Tensor], ...]] = {}
        bucket = self._buckets[bucket_index]
        for seg, (exp_avg, exp_avg_sq) in zip(
            bucket.segments, self._streams.views(slot_index, bucket_index), strict=True
        ):
            grad = stepped.get(seg.param)
            if grad is None:
                continue
            if seg.whole:
                param = seg.param
            else:
                if not grad.is_contiguous():
                    raise ValueError(
                        "PerLayerAdamW splits this parameter across transfers and needs its grad contiguous"
                    )
                param, grad = seg.param.view(-1)[seg.start : seg.stop], grad.view(-1)[seg.start : seg.stop]
            lists = calls.setdefault((seg.group_index, seg.param.dtype), ([], [], [], [], []))
            for target, item in zip(
                lists, (param, grad, exp_avg, exp_avg_sq, self.state[seg.param]["step"]), strict=True
            ):
                target.append(item)
        for (group_index, _), (params, grads, exp_avgs, exp_avg_sqs, steps) in calls.items():
            group = self.param_groups[group_index]
            lr = group["lr"]
            if isinstance(lr, Tensor) and lr.device.type != "cpu" and lr.device != self._device:
                lr = lr.to(device=self._device, non_blocking=True)
            beta1, beta2 = group["betas"]
            # torch's stub types the betas as floats; the kernel takes a 0-dim tensor as well (_scalar).
            torch._fused_adamw_(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=lr,
                beta1=_scalar(beta1),  # type: ignore[arg-type]
                beta2=_scalar(beta2),  # type: ignore[arg-type]
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=group["maximize"],
                grad_scale=amp["grad_scale"],
                found_inf=amp["found_inf"],
            )

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW step, bitwise equal to ``torch.optim.AdamW(fused=True).step()``."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        stepped = self._stepped_params()
        if not stepped:
            return loss
        compute = torch.cuda.current_stream(self._device)
        amp = {}
        for key in ("grad_scale", "found_inf"):
            value = getattr(self, key, None)
            amp[key] = value.to(self._device, non_blocking=True) if value is not None else None
        steps = [self.state[p]["step"] for p in stepped]
        torch._foreach_add_(steps, 1)

        active = [i for i, b in enumerate(self._buckets) if any(s.param in stepped for s in b.segments)]
        streams = self._streams
        slots = streams.pool(compute)
        # Loads may overlap the end of the backward pass; they only wait for the previous step's copy-back
        # into the host buffers they read.
        streams.h2d.wait_event(streams.all_copied_back)
        ahead = self.prefetch_depth
        for position in range(min(ahead + 1, len(active))):
            streams.load(position, active[position])
        for position, bucket_index in enumerate(active):
            slot_index = position % len(slots)
            compute.wait_event(streams.loaded[slot_index])
            self._update(slot_index, bucket_index, stepped, amp)
            streams.computed[slot_index].record(compute)
            streams.copy_back(slot_index, bucket_index)
            following = position + ahead + 1
            if following < len(active):
                streams.load(following, active[following])
        streams.all_copied_back.record(streams.d2h)

        if amp["found_inf"] is not None:
            torch._foreach_sub_(steps, [amp["found_inf"]] * len(steps))
        return loss


def _materialized(params: Any) -> list[Any]:
    """``params`` as a list, each group's own listed, to be handed out twice."""
    if isinstance(params, Tensor):
        return [params]
    listed = list(params)
    return [
        {**item, "params": [item["params"]] if isinstance(item["params"], Tensor) else list(item["params"])}
        if isinstance(item, dict)
        else item
        for item in listed
    ]


def per_layer_adamw(
    params: Any, *args: Any, model: nn.Module | None = None, prefetch_depth: int = 1, **kwargs: Any
):
    """Build a ``PerLayerAdamW``, or a ``torch.optim.AdamW`` where it cannot run.

    The fallback is taken silently when CUDA is not available, and with a warning when the stepper refuses
    the parameters or settings (parameters off the GPU, ``amsgrad=True``, ...).
    """
    params = _materialized(params)
    if torch.cuda.is_available():
        try:
            return PerLayerAdamW(
                _materialized(params), *args, model=model, prefetch_depth=prefetch_depth, **kwargs
            )
        except (TypeError, ValueError) as exc:
            warnings.warn(f"PerLayerAdamW not used, torch.optim.AdamW instead: {exc}", stacklevel=2)
    return torch.optim.AdamW(params, *args, **kwargs)


_TRAINER_ADAMW = ("adamw_torch", "adamw_torch_fused")


def trainer_adamw_blocker(trainer: Any) -> str | None:
    """Say why ``trainer``'s optimizer must stay; ``None`` when it can be replaced."""
    args = trainer.args
    optim = getattr(args, "optim", "adamw_torch")
    optim = getattr(optim, "value", optim)
    if getattr(trainer, "optimizer", None) is not None:
        return "the trainer was given an optimizer"
    if getattr(trainer, "optimizer_cls_and_kwargs", None) is not None:
        return "the trainer was given optimizer_cls_and_kwargs"
    if getattr(trainer, "model_init", None) is not None:
        return "the trainer re-creates its model with model_init"
    if getattr(trainer, "is_fsdp_enabled", False) or getattr(trainer, "is_deepspeed_enabled", False):
        return "FSDP/DeepSpeed shard the optimizer state themselves"
    if optim not in _TRAINER_ADAMW:
        return f"args.optim is {optim!r}, not one of {', '.join(_TRAINER_ADAMW)}"
    return None


def with_per_layer_adamw(trainer: Any, prefetch_depth: int = 1) -> Any:
    """Give ``trainer`` a ``PerLayerAdamW``, built as its ``create_optimizer`` would.

    Same decay/no-decay groups (``trainer.get_decay_parameter_names``), learning rate, betas, epsilon and
    weight decay from ``trainer.args``, layer groups from ``trainer.model``; the trainer still creates its LR
    scheduler. The trainer is returned unchanged, to build its own optimizer, when CUDA is not available
    (silently) or when :func:`trainer_adamw_blocker` or the stepper itself objects (with a warning).
    """
    if not torch.cuda.is_available():
        return trainer
    reason = trainer_adamw_blocker(trainer)
    if reason is None:
        args, model = trainer.args, trainer.model
        try:
            decay = set(trainer.get_decay_parameter_names(model))
            named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            groups = [
                {"params": [p for n, p in named if n in decay], "weight_decay": args.weight_decay},
                {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
            ]
            trainer.optimizer = PerLayerAdamW(
                groups,
                lr=args.learning_rate,
                betas=(args.adam_beta1, args.adam_beta2),
                eps=args.adam_epsilon,
                model=model,
                prefetch_depth=prefetch_depth,
            )
        except (AttributeError, TypeError, ValueError) as exc:
            reason = str(exc)
    if reason is not None:
        warnings.warn(f"PerLayerAdamW not used, the trainer builds its own optimizer: {reason}", stacklevel=2)
    return trainer
