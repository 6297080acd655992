"""Update fidelity: whether a change to a training program still trains the weights the unmodified one trains.

A loss curve hides an optimizer step that rounds away (bf16 weights given an update below half their ulp barely
move the loss in a few steps), so both programs run the same optimizer steps from the same seed and weights,
and the trainable weights are compared by name: how many elements each moved, how many of those the baseline
moved the modified program moved too, and the relative error of the modified update against the baseline's
(``||Δ_mod - Δ_base|| / ||Δ_base||``), beside the loss gap at each step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class TrainingStep:
    """One optimizer step of a program: the model it trains, its optimizer, and the loss of a batch."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss: Callable[[nn.Module, Any], torch.Tensor]

    def run(self, batch: Any) -> float:
        """Zero the gradients, back-propagate the loss of ``batch``, step; the loss as a float."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.model, batch)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())


@dataclass(frozen=True)
class UpdateFidelity:
    """The modified program's optimizer updates against the baseline's, over the same steps."""

    elements: int  # trainable elements compared
    baseline_moved: float  # fraction of them the baseline moved
    moved: float  # fraction the modified program moved
    moved_as_before: float  # of the elements the baseline moved, the fraction the modified program moved too
    update_error: float  # ||Δ_mod - Δ_base|| / ||Δ_base||
    baseline_losses: tuple[float, ...]
    losses: tuple[float, ...]

    @property
    def loss_gap(self) -> float:
        """The largest relative gap between the two programs' losses at the same step."""
        return max(
            abs(mod - base) / max(abs(base), 1e-12)
            for base, mod in zip(self.baseline_losses, self.losses, strict=True)
        )

    def describe(self) -> str:
        """One line: moved fractions, update error and loss gap."""
        return (
            f"{self.moved_as_before:.2%} of the {self.baseline_moved:.2%} of {self.elements:,} trainable elements "
            f"the baseline moved moved too ({self.moved:.2%} moved in all); update error "
            f"{self.update_error:.2e}, loss gap {self.loss_gap:.2e}"
        )


def _covers(modified: torch.Size, baseline: torch.Size) -> bool:
    """The modified weight is the baseline's, or the baseline's padded (an embedding with rows added): the
    baseline's part of it is what is compared."""
    return len(modified) == len(baseline) and all(m >= b for m, b in zip(modified, baseline, strict=True))


def _trainable(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trainable weights by name, as float64 copies (a bf16 step and an fp32 one compare exactly)."""
    return {
        name: p.detach().to(device="cpu", dtype=torch.float64, copy=True)
        for name, p in model.named_parameters()
        if p.requires_grad
    }


def _train(build: Callable[[], TrainingStep], batches: Sequence[Any], seed: int):
    torch.manual_seed(seed)
    step = build()
    before = _trainable(step.model)
    losses = tuple(step.run(batch) for batch in batches)
    after = _trainable(step.model)
    return {name: after[name] - before[name] for name in before}, losses


def update_fidelity(
    baseline: Callable[[], TrainingStep],
    modified: Callable[[], TrainingStep],
    batches: Iterable[Any],
    seed: int = 0,
) -> UpdateFidelity:
    """Train ``baseline()`` and ``modified()`` on ``batches`` from the same seed and compare their updates.

    Each builder is called right after ``torch.manual_seed(seed)``, so builders that make their model from a
    config start from the same weights. The two models must name their trainable weights alike, with the same
    shapes or the modified one padded (vocabulary padding): its part that the baseline has is compared.
    """
    batches = list(batches)
    base, base_losses = _train(baseline, batches, seed)
    mod, losses = _train(modified, batches, seed)
    if base.keys() != mod.keys() or not all(_covers(mod[n].shape, base[n].shape) for n in base):
        raise ValueError(
            "the modified program's trainable weights differ from the baseline's in name or shape"
        )
    mod = {n: mod[n][tuple(slice(0, size) for size in base[n].shape)] for n in base}
    base_flat = torch.cat([d.flatten() for d in base.values()])
    mod_flat = torch.cat([mod[name].flatten() for name in base])
    base_moved, mod_moved = base_flat != 0, mod_flat != 0
    reference = float(base_flat.norm())
    error = float((mod_flat - base_flat).norm())
    return UpdateFidelity(
        elements=base_flat.numel(),
        baseline_moved=float(base_moved.double().mean()),
        moved=float(mod_moved.double().mean()),
        moved_as_before=float((base_moved & mod_moved).sum() / max(int(base_moved.sum()), 1)),
        update_error=error / reference if reference else (0.0 if error == 0 else math.inf),
        baseline_losses=base_losses,
        losses=losses,
    )
