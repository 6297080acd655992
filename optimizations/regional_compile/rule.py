"""Regional compilation of the model a transformers or TRL trainer trains: its repeated decoder layers compiled
in place, on CUDA. What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.program.shapes import ProgramShape
from optimizations.registry import Numerics, Optimization

from .edit import CompileLayers
from .examples import EXAMPLES


class RegionalCompile(Optimization):
    """The repeated layers of a trainer's model compiled (regional compilation), on CUDA."""

    id = "regional_compile"
    title = "Regional compilation of the trained model's repeated layers"
    tier = 2
    expected = "fewer kernel launches in a host-bound step; compiling takes seconds"
    summary = "model=compile_repeated_layers(model) at the trainer: each decoder layer nn.Module.compile()-d on CUDA"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "each compiled decoder layer fuses and reorders its kernels: the same math, rounded in another order"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = (
        "regional compilation",
        "regional compile",
        "compile the decoder layers",
        "compile the repeated layers",
        "compile each layer",
    )
    capabilities = ("compile model", "torch.compile")
    codemods = (CompileLayers,)
    compiles_model = True
    needs = ("Trainer",)
    examples = EXAMPLES
