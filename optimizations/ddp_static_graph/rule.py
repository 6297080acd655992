"""DDP without the per-step unused-parameter search: a static graph, once a real batch shows it is safe.

The sites, the vendored check and the refusals are described in README.md.
"""

from __future__ import annotations

from optimizations.program.hf import HF_CONFIGS
from optimizations.program.repository import RepoContext
from optimizations.registry import Numerics, Optimization

from .edit import GuardStaticGraph
from .examples import EXAMPLES


class DdpStaticGraph(Optimization):
    """DDP's static graph instead of the per-step unused-parameter search, checked on the first real batch."""

    id = "ddp_static_graph"
    title = "skip DDP's per-step unused-parameter search once a real batch shows every parameter is used"
    tier = 2
    expected = "+0-10% multi-GPU step time"
    summary = (
        "find_unused_parameters=True -> static_graph, only when one forward+backward on the first batch "
        "leaves no trainable parameter without a gradient"
    )
    scope = "ddp"
    numerics = Numerics.EXACT
    numerics_reason = (
        "static only once a real batch gives every trainable parameter a gradient: the same all-reduce"
    )
    keywords = ("find_unused_parameters", "static_graph", "static graph")
    codemods = (GuardStaticGraph,)
    needs = (*HF_CONFIGS, "DistributedDataParallel", "Accelerator")

    examples = EXAMPLES

    def run_refusal(self, ctx: RepoContext, path: str) -> str | None:
        """Refused where every run that loads ``path`` shards the model (FSDP, ZeRO-3), or is launched as one
        process: no DDP wrapper is built, so its unused-parameter search never runs (ContextualAI/HALOs'
        accelerate FSDP configs; the seed repository's `python scripts/train.py`), besides the refusals every
        optimization has."""
        # loads libcst: not for listing
        from optimizations.program.runs.every_run import one_process_in_every_run, sharding_of_every_run

        places = sharding_of_every_run(ctx, path)
        if places is not None:
            return f"every run shards the model ({places}): no DDP wrapper runs its unused-parameter search"
        launches = one_process_in_every_run(ctx, path)
        if launches is not None:
            return f"every run is one process ({launches}): no DDP wrapper is built, so nothing searches"
        return super().run_refusal(ctx, path)
