"""Regional compilation of the model a transformers or TRL trainer trains: its repeated decoder layers compiled
in place, on CUDA. What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.program.choices import FLASH_PATCH
from optimizations.program.repository import RepoContext
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

    def run_refusal(self, ctx: RepoContext, path: str) -> str | None:
        """Refused where a run that loads ``path`` patches the model's attention to FlashAttention's varlen kernels
        first (FastChat's ``train_mem.py`` calls ``replace_llama_attn_with_flash_attn()``): their unpad and pad
        give every batch data-dependent shapes, which compiled layers break on and recompile for; besides every
        compiling optimization's refusals."""
        from optimizations.program.runs.every_run import runs_of  # loads libcst: not for listing

        for run in runs_of(ctx, path):
            # a call at the entry's top level, as every run makes it (not one under an `if` of a flag)
            lines = ctx.text(run.entry).splitlines()
            patched = next(
                (n for n, line in enumerate(lines, 1) if FLASH_PATCH.match(line.partition("(")[0])), None
            )
            if patched is not None:
                return (
                    f"the runs of {run.entry} patch attention to FlashAttention's varlen kernels first "
                    f"({run.entry}:{patched}), whose unpad and pad give every batch data-dependent shapes: compiled "
                    "layers would break on them and recompile"
                )
        return super().run_refusal(ctx, path)
