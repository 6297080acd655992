"""Run-time helpers that several optimizations vendor into target repositories, and the names the edits call
in them. An optimization's own helper lives in its folder (``optimizations/<id>/helper.py``)."""

from optimizations.edits.vendoring import RuntimeHelper

COMPILE_RUNTIME = RuntimeHelper("compile", __name__, "compile.py")
GPU_FLAGS_RUNTIME = RuntimeHelper("gpu_flags", __name__, "gpu_flags.py")
PRECISION_RUNTIME = RuntimeHelper("precision", __name__, "precision.py")

# ``compile_repeated_layers(model)`` (regional_compile's edit), and the keyword that fixes a packed trainer's
# token budget on it (token_budget's, and packed_pairs' for DPO).
COMPILE_REPEATED_LAYERS = "compile_repeated_layers"
FIXED_BUDGET = "fixed_budget"
