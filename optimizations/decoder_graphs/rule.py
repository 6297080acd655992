"""The decoder's training steps replayed as CUDA graphs: ``cuda_graphs=True`` on the compile helper's call that
has a token budget. What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.program.shapes import ProgramShape
from optimizations.registry import Numerics, Optimization
from optimizations.runtime import FIXED_BUDGET

from .edit import ReplayGraphs
from .examples import EXAMPLES


class DecoderGraphs(Optimization):
    """The whole-compiled decoder's training forward and backward replayed as CUDA graphs, guarded."""

    id = "decoder_graphs"
    title = "The decoder's training steps replayed as CUDA graphs"
    tier = 2
    expected = (
        "a host-bound LoRA SFT step from 0.88x to 0.97x the hand-written compiled step's tokens/s (H100)"
    )
    summary = (
        "compile_repeated_layers(model, fixed_budget=args, cuda_graphs=True): the decoder compiled whole replays "
        "its training forward and backward as CUDA graphs (no trees), eager under no_grad; the logged loss "
        "unfiltered"
    )
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "the decoder compiled whole (another kernel order than eager), replayed from graphs; a non-finite loss is "
        "logged as it is instead of being left out of the logged mean"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = ("cuda graphs", "cudagraphs", "graph replay", "replayed as graphs")
    capabilities = ("cuda graphs",)
    codemods = (ReplayGraphs,)
    compiles_model = True
    needs = (FIXED_BUDGET,)
    examples = EXAMPLES
