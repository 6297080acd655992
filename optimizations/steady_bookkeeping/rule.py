"""A trainer's per-step bookkeeping paid once: ``SFTTrainer(...)`` becomes ``steady_bookkeeping(SFTTrainer(...))``.
What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.program.shapes import ProgramShape
from optimizations.registry import Numerics, Optimization

from .edit import WrapTrainer
from .examples import EXAMPLES


class SteadyBookkeeping(Optimization):
    """The Trainer's per-step parameter count, ``model.train()`` and ``parameters()`` walks paid once per run."""

    id = "steady_bookkeeping"
    title = "The trainer's per-step bookkeeping paid once"
    tier = 2
    expected = (
        "~3 ms less GPU idle before each step of a host-bound LoRA step (~3%); throughput change unresolved"
    )
    summary = (
        "steady_bookkeeping(Trainer(...)): the FLOP count's parameter count cached, model.train() skipped while "
        "every module is in training mode, clipping's parameters() read from a list of the modules"
    )
    scope = "train"
    numerics = Numerics.EXACT
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = (
        "per-step bookkeeping",
        "bookkeeping paid once",
        "trainer bookkeeping",
        "parameter count once",
    )
    codemods = (WrapTrainer,)
    needs = ("Trainer",)
    examples = EXAMPLES
