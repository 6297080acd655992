# Vendored by perfbot from optimizations/runtime/compile.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library, never perfbot.
"""``torch.compile`` where it pays off and can be switched off.

What it compiles: a hand-written loop's whole model (:func:`compile_model`), or the repeated layers of a model
a trainer trains (:func:`compile_repeated_layers`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch._functorch.config
import torch._inductor.config

LOG = logging.getLogger(__name__)

# Set to 0 (or false/no/off) to train without compiling.
SWITCH = "PERFBOT_COMPILE"
# Set to 0 to compile without CUDA graphs where ``cuda_graphs=True`` asked for them.
GRAPHS_SWITCH = "PERFBOT_CUDA_GRAPHS"
# Inductor's CUDA graphs without cudagraph trees: each compiled graph records once into a memory pool of its own
# and replays with static inputs and outputs (no tree liveness checks: pytorch/pytorch#194124).
FLAT_GRAPHS: dict[str, str | int | bool | Callable[..., Any]] = {
    "triton.cudagraphs": True,
    "triton.cudagraph_trees": False,
}
# The forward functions whose graphs belong to a module already (see TrainingGraphs).
GRAPHED_FORWARDS: set[Any] = set()
# The graphed backward must not reuse the saved activations' memory (see TrainingGraphs); older torch never does.
NO_DONATION = {"donated_buffer": False} if hasattr(torch._functorch.config, "donated_buffer") else {}

Model = TypeVar("Model")


def _switched_off(switch: str = SWITCH) -> bool:
    return os.environ.get(switch, "1").strip().lower() in ("0", "false", "no", "off")


def compile_model(model: torch.nn.Module) -> None:
    """Compile ``model`` in place, its class and state-dict keys unchanged.

    Skipped, leaving the model as it was, when ``PERFBOT_COMPILE=0``, when torch has no ``nn.Module.compile``
    (before 2.2), or when none of the model's parameters is on a CUDA device (compiling for the CPU costs more
    start-up than it saves in a short run).
    """
    if _switched_off() or not hasattr(torch, "compile") or not hasattr(model, "compile"):
        return
    if not any(p.is_cuda for p in model.parameters()):
        return
    model.compile()


def repeated_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Return the blocks of the longest ``nn.ModuleList`` of blocks all of one class.

    For a transformer, its decoder layers (``model.model.layers``). ``[]`` when the model has no such list of
    two or more.
    """
    longest: list[torch.nn.Module] = []
    for module in model.modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) <= max(1, len(longest)):
            continue
        if len({type(block) for block in module}) == 1:
            longest = list(module)
    return longest


def compile_repeated_layers(model: Model, fixed_budget: Any = None, cuda_graphs: bool = False) -> Model:
    """Regional compilation of ``model``'s :func:`repeated_layers`, in place.

    ``nn.Module.compile()`` on each of them; returns ``model``. The blocks share their code, so one compiled
    graph serves them all (compiling takes seconds, not the minutes of a whole model), and what surrounds them
    (a PEFT wrapper, the loss, the trainer's own hooks) stays eager. PEFT adapters added later are compiled
    with the blocks, which are traced at their first call. Anything but an ``nn.Module`` (a checkpoint name a
    trainer loads itself) is returned untouched, as is every model when ``PERFBOT_COMPILE=0``, when torch has
    no ``nn.Module.compile`` (before 2.2), when no GPU is present (compiling for the CPU costs more start-up
    than it saves in a short run), or when the model is quantized (:func:`is_quantized`: compiling
    bitsandbytes' layers is not measured here).

    ``fixed_budget``: the TRL ``SFTConfig`` the model trains with, or the ``SFTTrainer`` built with it (whose
    collator read the config already). When its packing is padding-free, every packed batch is padded to one
    token budget (:func:`fix_token_budget`), and with one shape per step the whole decoder (the module holding
    the layers) is compiled as one region instead: one guard check and one autograd wrapper a step instead of
    one per layer. A decoder compiled whole without a fixed shape recompiles for new lengths, so any other
    config keeps the per-layer compilation.

    ``fixed_budget`` may also be a TRL ``DPOConfig`` (or a ``DPOTrainer``) that precomputes its reference
    log-probs: each step's chosen and rejected sequences are then packed into one row of :func:`pair_budget`
    tokens (:class:`PackedPairs`), and the decoder compiled whole runs that one shape.

    ``cuda_graphs``: a decoder compiled whole replays its training forward and backward as CUDA graphs
    (:class:`TrainingGraphs`), and the config's logged loss is no longer filtered (:func:`unfilter_logged_loss`).
    It is compiled without graphs when ``PERFBOT_CUDA_GRAPHS=0``, under activation checkpointing
    (:func:`checkpoints_activations`) and where parameters are sharded (:func:`shards_parameters`). Per-layer
    compilation ignores it.
    """
    if _switched_off() or not isinstance(model, torch.nn.Module) or not hasattr(model, "compile"):
        return model
    if not torch.cuda.is_available():
        return model
    if is_quantized(model):
        LOG.info(
            "not compiling %s: its weights are quantized (compiling them is not measured)",
            type(model).__name__,
        )
        return model
    layers = repeated_layers(model)
    config, collator = _config_and_collator(fixed_budget)
    decoder = _holder(model, layers) if config is not None else None
    graphs = cuda_graphs and not _switched_off(GRAPHS_SWITCH) and decoder is not None
    graphs = graphs and not _graphs_unsafe(model, config)
    if decoder is not None and fix_token_budget(config, collator):
        if graphs:
            decoder.forward = TrainingGraphs(decoder.forward)
            unfilter_logged_loss(config)
        else:
            decoder.compile()
        return model
    budget = pair_budget(config) if decoder is not None and feeds_token_ids(model) else None
    if budget is not None and decoder is not None:  # a budget is read for a decoder only
        eager = decoder.forward
        packed = TrainingGraphs(eager) if graphs else torch.compile(eager, dynamic=False)
        decoder.forward = PackedPairs(packed, eager, budget)
        if graphs:
            unfilter_logged_loss(config)
        return model
    for block in layers:
        block.compile()
    return model


def is_quantized(model: torch.nn.Module) -> bool:
    """Tell whether ``model`` has quantized weights.

    Integer parameters (bitsandbytes' int8 and 4-bit layers), or transformers' ``is_quantized`` flag.
    """
    if getattr(model, "is_quantized", False):
        return True
    return any(not (p.is_floating_point() or p.is_complex()) for p in model.parameters())


def _config_and_collator(fixed_budget: Any) -> tuple[Any, Any]:
    """Return the config ``fixed_budget`` is, or a built trainer's and its collator."""
    if hasattr(fixed_budget, "args") and hasattr(fixed_budget, "data_collator"):
        return fixed_budget.args, fixed_budget.data_collator
    return fixed_budget, None


def fix_token_budget(config: Any, collator: Any = None) -> bool:
    """Pad a TRL ``SFTConfig``'s padding-free packed batches to one length.

    Every padding-free packed batch of the config is padded to the same number of tokens: its
    ``pad_to_multiple_of`` is set to ``per_device_train_batch_size * max_length`` (the most a batch packs)
    where it is unset, as is that of the ``collator`` a trainer built from it already. Each pad token becomes
    a one-token sequence of its own with label -100: no real token attends to it and the loss, normalised by
    the real tokens, is unchanged. True when the config (and the collator) has that budget.
    """
    strategy = getattr(config, "packing_strategy", None)
    padding_free = getattr(config, "padding_free", False) or (
        getattr(config, "packing", False) and strategy in ("bfd", "bfd_split")
    )
    batch = getattr(config, "per_device_train_batch_size", None)
    length = getattr(config, "max_length", None)
    if not padding_free or not batch or not length or not hasattr(config, "pad_to_multiple_of"):
        return False
    if config.pad_to_multiple_of is None:
        config.pad_to_multiple_of = batch * length
    if collator is not None and getattr(collator, "pad_to_multiple_of", 0) is None:
        collator.pad_to_multiple_of = config.pad_to_multiple_of
    padded = collator is None or getattr(collator, "pad_to_multiple_of", None) == batch * length
    return config.pad_to_multiple_of == batch * length and padded


def pair_budget(config: Any) -> int | None:
    """Return the token budget of a TRL ``DPOConfig``'s packed step.

    ``per_device_train_batch_size * max_length``: the tokens of its pairs' chosen and rejected sequences where
    they average half the longest allowed. None for any other config, one without both settings, and one that
    does not precompute its reference log-probs (its reference pass each step would run uncompiled, see
    :class:`PackedPairs`).
    """
    if not any(cls.__name__ == "DPOConfig" for cls in type(config).__mro__):
        return None
    batch = getattr(config, "per_device_train_batch_size", None)
    length = getattr(config, "max_length", None)
    precomputed = getattr(config, "precompute_ref_log_probs", False) is True
    return batch * length if batch and length and precomputed else None


def feeds_token_ids(model: torch.nn.Module) -> bool:
    """Whether ``model`` gives its decoder token ids.

    Token ids are what :class:`PackedPairs` packs. Not so for a vision-language model (its language decoder is
    given embeddings with the image's in them), nor for one under a prompt-learning PEFT adapter (virtual
    tokens prepended as embeddings).
    """
    config: Any = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    adapter = getattr(model, "active_peft_config", None)
    return text is config and not getattr(adapter, "is_prompt_learning", False)


class PackedPairs:
    """A decoder's forward that runs a padded batch as one packed row.

    The padded batch (a DPO step's chosen and rejected sequences, one a row) runs as one packed row of a fixed
    token budget, and the hidden states are handed back in the batch's padded layout.

    The real tokens (the attention mask's ones) are laid end to end, each sequence with its own positions from 0;
    the budget's unused slots are one-token sequences of their own. transformers reads sequence boundaries from
    the positions, so no token attends across sequences, and padded positions come back as zeros: the caller's
    loss sees what it saw before, without computing the padding. With gradients on, the row has one shape a step
    (``budget``), so ``packed`` (the decoder compiled whole, or its CUDA graphs) compiles once.

    ``eager`` (the decoder uncompiled) runs the rest, packed to its real tokens: a pass without gradients (the
    reference log-probs computed before training, evaluation), and a training step with more real tokens than the
    budget. Once more than one step in 16 has been over it, the budget doubles (a new shape, compiled once). A
    call this cannot pack (embeddings given, a cache, positions of its own, other per-token inputs) goes to
    ``eager`` unchanged. Reading the real tokens' count is one device sync a step.
    """

    PASSED = frozenset({"use_cache", "return_dict", "output_attentions", "output_hidden_states"})
    OVER_BUDGET_SHARE = 16  # one step in this many may run over the budget before it grows

    def __init__(self, packed: Any, eager: Any, budget: int) -> None:
        """Pack with ``packed`` at ``budget`` tokens; run the rest with ``eager``."""
        self.packed = packed
        self.eager = eager
        self.budget = budget
        self.steps = self.over_budget = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the decoder on the batch packed into one row, in the batch's layout."""
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if (
            args
            or not isinstance(ids, torch.Tensor)
            or not isinstance(mask, torch.Tensor)
            or not self._packable(ids, mask, kwargs)
        ):
            return self.eager(*args, **kwargs)
        real = mask.reshape(-1).bool()
        tokens = int(real.sum())
        fits = torch.is_grad_enabled() and self._fits(tokens)
        length = self.budget if fits else tokens
        slot = torch.cumsum(real, 0) - 1  # each real token's place in the row
        source = torch.zeros(length + 1, dtype=torch.long, device=ids.device)
        source.scatter_(0, torch.where(real, slot, length), torch.arange(real.numel(), device=ids.device))
        source = source[:length]
        used = torch.arange(length, device=ids.device) < tokens
        positions = (torch.cumsum(mask, 1) - 1).reshape(-1)[source]
        row = {key: value for key, value in kwargs.items() if key in self.PASSED}
        row["input_ids"] = torch.where(used, ids.reshape(-1)[source], 0)[None]
        row["position_ids"] = torch.where(used, positions, 0)[None]
        # no cache: where transformers builds one, it reads no sequence boundaries from the positions
        row["use_cache"] = False
        output = (self.packed if fits else self.eager)(**row)
        hidden = output.last_hidden_state[0].index_select(0, slot.clamp(0, length - 1))
        hidden = hidden * real[:, None].to(hidden.dtype)
        output.last_hidden_state = hidden.view(*ids.shape, -1)
        return output

    def _fits(self, tokens: int) -> bool:
        """Whether a training step of ``tokens`` real tokens runs at budget.

        The budget grows where too many steps are over it.
        """
        self.steps += 1
        if tokens <= self.budget:
            return True
        self.over_budget += 1
        if self.over_budget * self.OVER_BUDGET_SHARE <= max(self.steps, self.OVER_BUDGET_SHARE):
            return False
        while tokens > self.budget:
            self.budget *= 2
        LOG.warning(
            "%d of %d packed steps had more tokens than the budget: it is now %d tokens (compiled once more)",
            self.over_budget,
            self.steps,
            self.budget,
        )
        self.steps = self.over_budget = 0
        return True

    def _packable(self, ids: torch.Tensor, mask: torch.Tensor, kwargs: dict[str, Any]) -> bool:
        if ids.dim() != 2 or mask.shape != ids.shape or kwargs.get("use_cache"):
            return False
        if kwargs.get("output_hidden_states") or kwargs.get("output_attentions"):
            return False
        given = {key for key, value in kwargs.items() if value is not None}
        return given <= self.PASSED | {"input_ids", "attention_mask"}


def checkpoints_activations(model: torch.nn.Module, config: Any) -> bool:
    """Whether activation (gradient) checkpointing is on.

    On in the trainer config, or on the model already. Graphs would hold a step's activations in memory of
    their own for the whole run, which a run that recomputes activations to save memory cannot spare; and the
    recomputation inside the backward was not measured with them. transformers 5 names the setting
    ``activation_checkpointing``; earlier versions and TRL scripts, ``gradient_checkpointing``.
    """
    names = ("activation_checkpointing", "gradient_checkpointing")
    # under a PEFT wrapper; torch types a Module's unknown attribute as a tensor or module, not a method
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]
    on_model = next((f"is_{name}" for name in names if hasattr(type(base), f"is_{name}")), None)
    return any(getattr(config, name, False) is True for name in names) or (
        on_model is not None and getattr(base, on_model) is True
    )


def shards_parameters(config: Any) -> bool:
    """Whether DeepSpeed or FSDP trains the model.

    Read from the trainer config or from the environment ``accelerate launch`` sets. They gather each
    parameter for its use and free it after, so a parameter is not at one address from step to step, which a
    graph's replay assumes.
    """
    environment = any(
        os.environ.get(name, "").strip().lower() in ("1", "true", "yes")
        for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP")
    )
    return environment or bool(getattr(config, "deepspeed", None)) or bool(getattr(config, "fsdp", None))


def _graphs_unsafe(model: torch.nn.Module, config: Any) -> bool:
    return checkpoints_activations(model, config) or shards_parameters(config)


def unfilter_logged_loss(config: Any) -> None:
    """Turn off a Trainer config's ``logging_nan_inf_filter``.

    With it on, the Trainer reads every step's loss on the host (``torch.isnan(loss) or torch.isinf(loss)``)
    to keep a non-finite loss out of the logged mean: a device sync after each backward, where the host would
    queue the next step's graphs. Without it a non-finite loss is logged as it is (nan or inf). The weights
    train the same either way.
    """
    if getattr(config, "logging_nan_inf_filter", False):
        config.logging_nan_inf_filter = False


def _holder(model: torch.nn.Module, layers: list[torch.nn.Module]) -> torch.nn.Module | None:
    """Find the module whose ``nn.ModuleList`` child holds ``layers`` (the decoder)."""
    for module in model.modules() if layers else ():
        for child in module.children():
            if isinstance(child, torch.nn.ModuleList) and len(child) and child[0] is layers[0]:
                return module
    return None


class TrainingGraphs:
    """A module's forward replayed as CUDA graphs in training, eager where unsafe.

    A graph replays into the same memory every time: the outputs and the activations saved for the backward
    of one replay are overwritten by the next. So the graphs run only for a forward with gradients on whose
    predecessor's backward has run (a training step: forward, then backward). A forward under ``no_grad``
    (a reference model's log-probs, evaluation, generation) and a second forward before the first one's
    backward run eagerly, as uncompiled code does. Each shape compiles and records its own graphs.

    Three guards for inductor's graphs without trees (torch 2.11-2.13):

    - The backward may not reuse the saved activations' memory ("donated buffers"). It reads them in place,
      and the graph's first call runs it twice (a warm-up, then the replay): the warm-up's reuse corrupted
      every new shape's first gradients.
    - One module per forward function is graphed in a process. Dynamo shares a compiled forward between
      modules of one class and the graphs replay at their first module's parameter addresses, so a second
      module (a second model in a sweep) is compiled without graphs.
    - The graphs replay only while the module's parameters are where they were recorded; once one has moved
      (``model.to(...)``, ``param.data = ...``) the forward runs eagerly. Inductor's own check of that reads
      every input of every replay in Python, hundreds of saved activations in the backward's: milliseconds
      of a host-bound step. So a graphed module turns inductor's size asserts off for the process
      (``torch._inductor.config.size_asserts``, read when a graph first runs; they only check, and change no
      result) and compares its parameters' addresses itself, one read a parameter a step.
    """

    def __init__(self, forward: Any) -> None:
        """Graph ``forward`` unless its function is graphed for another module."""
        self.eager = forward
        function = getattr(forward, "__func__", forward)
        graphs = function not in GRAPHED_FORWARDS
        GRAPHED_FORWARDS.add(function)
        self.graphed = torch.compile(forward, dynamic=False, options=FLAT_GRAPHS if graphs else None)
        module = getattr(forward, "__self__", None)
        self.module = module if graphs and isinstance(module, torch.nn.Module) else None
        self.parameters: list[torch.nn.Parameter] = []
        self.addresses: list[int] | None = None  # the parameters' addresses where the graphs recorded
        self.pending = False  # a graphed forward's backward has yet to run

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Replay the graphs where that is safe (see the class), else run eagerly."""
        if self.pending or not torch.is_grad_enabled() or not self._parameters_in_place():
            return self.eager(*args, **kwargs)
        torch._inductor.config.size_asserts = False  # its replays' own address checks: see the class
        with torch._functorch.config.patch(NO_DONATION):
            output = self.graphed(*args, **kwargs)
        node = next((t.grad_fn for t in _tensors(output) if t.grad_fn is not None), None)
        if node is not None:  # a node of this forward's own graph: each replay hands back the same tensors
            self.pending = True
            node.register_hook(self._backward_ran)
        return output

    def _backward_ran(self, grad_inputs: Any, grad_outputs: Any) -> None:
        self.pending = False

    def _parameters_in_place(self) -> bool:
        """Whether the parameters are at the addresses where the graphs recorded.

        They are read at that call, after any adapter a trainer added since the module was wrapped.
        """
        if self.addresses is None:
            self.parameters = list(self.module.parameters()) if self.module is not None else []
            self.addresses = [parameter.data_ptr() for parameter in self.parameters]
        addresses = [parameter.data_ptr() for parameter in self.parameters]
        if addresses == self.addresses:
            return True
        if self.parameters:
            LOG.warning(
                "a graphed module's parameters moved after its CUDA graphs recorded: it runs eagerly now"
            )
            self.parameters = []  # warned once; the recorded addresses stay, so no later call replays
        return False


def _tensors(output: Any) -> list[torch.Tensor]:
    """List the tensors of a forward's output: a tensor, sequence or ``ModelOutput``."""
    if isinstance(output, torch.Tensor):
        return [output]
    values = (
        output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    )
    return [value for value in values if isinstance(value, torch.Tensor)]
