"""Attention picked at run time (FlashAttention 4/3/2, FlexAttention or SDPA) instead of a fixed ``"sdpa"``, through
a vendored helper. What it changes and when it refuses: README.md."""

from __future__ import annotations

from optimizations.program.hf import HF_CONFIGS, MODEL_LOADERS
from optimizations.program.repository import RepoContext, Site
from optimizations.program.requirements import excludes
from optimizations.program.shapes import ProgramShape
from optimizations.registry import Numerics, Optimization

from .edit import PickAttention
from .examples import EXAMPLES

# The transformers release whose from_pretrained takes attn_implementation.
ATTN_IMPLEMENTATION_SINCE = "4.36.0"
# transformers runs SDPA from torch 2.1.1, and the flash-attn 2 wheels need torch 2: below that only eager is left.
TORCH_FUSED_ATTENTION_SINCE = "2.1.1"


class FlashAttention(Optimization):
    """FlashAttention 4/3/2, FlexAttention or SDPA picked at run time; the call's own choice without a GPU."""

    id = "fa2"
    title = "attention picked at run time: FlashAttention 4/3/2, FlexAttention or SDPA"
    tier = 1
    expected = "+5-50% SFT tokens/s, most on packed batches"
    summary = "attn_implementation picked at run time: FlashAttention 4/3/2, else FlexAttention, else SDPA"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "another attention kernel (Flash, Flex or SDPA): the same softmax(QK^T)V summed in another order"
    )
    measured_on = (ProgramShape.TRL_TRAINER,)
    keywords = (
        "flash_attention_2",
        "flash-attn",
        "fa2",
        "attn_implementation",
        "flex attention",
        "flexattention",
    )
    capabilities = ("fused attention", "flash attention", "flashattention", "efficient attention")
    codemods = (PickAttention,)
    done_by_settings = (("attention", "flash"),)
    needs = (*HF_CONFIGS, *MODEL_LOADERS, "model_init_kwargs", "_with_flash_attn")

    examples = EXAMPLES

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """Each recipe of a framework's console script that leaves attention to the framework: refused, since
        asking it for FlashAttention needs the optional flash-attn package, the recipe user's call."""
        from optimizations.program.runs.every_run import unset_in_framework_recipes  # loads libcst

        return [
            Site(
                recipe,
                1,
                self.id,
                f"FlashAttention for the run of {run.entry}",
                False,
                f"the recipe sets no attention key, so `{run.launch.launcher}` (at {run.launch.where}) keeps its "
                "schema's default; FlashAttention there needs the optional flash-attn package, and which kernel "
                "to ask for is the recipe user's choice",
            )
            for run, recipe in unset_in_framework_recipes(ctx, "attention")
            if run.launch is not None  # a console launch, always
        ]

    def run_refusal(self, ctx: RepoContext, path: str) -> str | None:
        """Refused where the repository's requirements keep transformers below ``attn_implementation``
        (jiaweizzhao/GaLore pins 4.31.0), or torch below SDPA in transformers (databrickslabs/dolly: ``<2``),
        besides the refusals every optimization has; a lower bound alone (``>=4.28.1``) installs the newest
        release."""
        pinned = excludes(ctx, "transformers", ATTN_IMPLEMENTATION_SINCE)
        if pinned is not None:
            return (
                f"{pinned} keeps transformers below {ATTN_IMPLEMENTATION_SINCE}, which has no "
                "attn_implementation: upgrade transformers first"
            )
        torch = excludes(ctx, "torch", TORCH_FUSED_ATTENTION_SINCE)
        if torch is not None:
            return (
                f"{torch} keeps torch below {TORCH_FUSED_ATTENTION_SINCE}, where transformers has neither SDPA nor "
                "FlashAttention 2 to pick: lifting that pin is a dependency change for a person"
            )
        return super().run_refusal(ctx, path)
