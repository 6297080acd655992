# Vendored by perfbot from optimizations/steady_bookkeeping/helper.py; edit it there, not here.
# This module runs inside the target repository: it imports only torch and the standard library, never perfbot.
"""A ``transformers.Trainer``'s per-step bookkeeping, paid once, not every step.

Every optimizer step the Trainer (and every TRL trainer built on it) does three walks over the whole model that
change nothing in a training run:

- ``floating_point_ops`` counts the model's parameters (``num_parameters(exclude_embeddings=True)``: a walk
  over every module and parameter) for the ``total_flos`` it logs;
- ``training_step`` calls ``model.train()``, which visits every module to set a flag that is already set;
- gradient clipping lists ``model.parameters()``, a walk through nested generators, one per level of modules.

On a LoRA model of ~1,300 modules each walk takes milliseconds of a host-bound step.
:func:`steady_bookkeeping` counts the parameters once per count asked for (a trainable-only count is still
counted each time: freezing changes it), lets ``train()`` return at once while every module is already in
training mode, and lists ``parameters()`` from the model's modules listed once. Each call compares every listed
module's submodules with those listed (one list comparison, no recursion) and lists the modules again when one
was assigned, replaced or removed; each module's own parameters are read at every call. So ``parameters()``
gives what ``nn.Module.parameters`` gives, whatever changed in the model.
A model with a module whose class brings its own ``train()`` keeps the full ``train()`` walk, and one whose
class brings its own ``parameters()`` keeps that. Nothing the model computes changes. The state lives on the
model object and the methods are bound to it, so a deep copy of the model (a reference model) gets its own.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from typing import TypeVar

import torch

# Set to 0 (or false/no/off) to keep the Trainer's own per-step walks.
SWITCH = "PERFBOT_STEADY_BOOKKEEPING"
# train() of these classes only adds work when the mode changes, which the fast path never skips.
MODE_CHANGE_ONLY = frozenset({"Module.train", "PreTrainedModel.train"})

Trainer = TypeVar("Trainer")


def _switched_off() -> bool:
    return os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off")


def steady_bookkeeping(trainer: Trainer) -> Trainer:
    """Make the per-step parameter count, ``train()`` and ``parameters()`` walks cheap.

    Those of ``trainer.model`` (see the module); returns ``trainer``. Anything without an ``nn.Module`` model,
    and every trainer when ``PERFBOT_STEADY_BOOKKEEPING=0``, is returned untouched.
    """
    model = getattr(trainer, "model", None)
    if _switched_off() or not isinstance(model, torch.nn.Module):
        return trainer
    count_parameters_once(model)
    train_mode_once(model)
    parameters_from_module_list(model)
    return trainer


def count_parameters_once(model: torch.nn.Module) -> None:
    """``model.num_parameters(...)`` counted once per ``exclude_embeddings``.

    A count of trainable parameters only is counted each time.
    """
    count = getattr(model, "num_parameters", None)
    if count is None or "_perfbot_count" in model.__dict__:
        return
    model.__dict__["_perfbot_count"] = count
    model.__dict__["_perfbot_counted"] = {}
    # torch types the value of Module.__setattr__ as a tensor or module; any object may be set.
    model.num_parameters = types.MethodType(_num_parameters, model)  # type: ignore[assignment]


def _num_parameters(
    self: torch.nn.Module, only_trainable: bool = False, exclude_embeddings: bool = False
) -> int:
    count = self.__dict__["_perfbot_count"]
    if only_trainable:
        return count(only_trainable=True, exclude_embeddings=exclude_embeddings)
    counted = self.__dict__["_perfbot_counted"]
    if exclude_embeddings not in counted:
        counted[exclude_embeddings] = count(exclude_embeddings=exclude_embeddings)
    return counted[exclude_embeddings]


def train_mode_once(model: torch.nn.Module) -> None:
    """Give ``model.train()`` a fast path.

    ``model.train()`` returns at once when every module is in training mode already; otherwise, and for
    ``train(False)``, it walks the model as ``nn.Module.train`` does. Left alone when a module's class has a
    ``train()`` of its own that may do more than set the flag.
    """
    if "train" in model.__dict__ or not _modules(model)[1]:
        return
    # The method shadowed by an instance attribute, which mypy forbids (method-assign).
    model.train = types.MethodType(_train, model)  # type: ignore[method-assign]


def _train(self: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
    modules, plain = _modules(self)
    if mode is True and plain and all(module.training for module in modules):
        return self
    return type(self).train(self, mode)


def parameters_from_module_list(model: torch.nn.Module) -> None:
    """Give ``model.parameters()`` a fast path.

    The parameters are read from the model's list of modules, made again only when a submodule was assigned,
    replaced or removed, in the order and without the repeats of ``nn.Module.parameters``.
    ``parameters(recurse=False)`` is the module's own. Left alone when the model's class has a ``parameters()``
    of its own.
    """
    if "parameters" in model.__dict__ or type(model).parameters is not torch.nn.Module.parameters:
        return
    # The method shadowed by an instance attribute, which mypy forbids (method-assign).
    model.parameters = types.MethodType(_parameters, model)  # type: ignore[method-assign]


def _parameters(self: torch.nn.Module, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
    if not recurse:
        return type(self).parameters(self, recurse)
    listed = (parameter for module in _modules(self)[0] for parameter in module._parameters.values())
    return iter(dict.fromkeys(parameter for parameter in listed if parameter is not None))


def _modules(model: torch.nn.Module) -> tuple[list[torch.nn.Module], bool]:
    """List ``model.modules()``, with whether every one's ``train()`` only sets flags.

    Listed again when a listed module's submodules are no longer the ones listed with it: one assigned,
    replaced or removed anywhere in the model.
    """
    listed = model.__dict__.get("_perfbot_modules")
    if listed is not None:
        modules, submodules, plain = listed
        if _submodules(modules) == submodules:
            return modules, plain
    modules = list(model.modules())
    plain = all(type(module).train.__qualname__ in MODE_CHANGE_ONLY for module in modules)
    model.__dict__["_perfbot_modules"] = (modules, _submodules(modules), plain)
    return modules, plain


def _submodules(modules: list[torch.nn.Module]) -> list[torch.nn.Module | None]:
    return [submodule for module in modules for submodule in module._modules.values()]
