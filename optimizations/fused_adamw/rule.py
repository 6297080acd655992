"""Fused Adam/AdamW: one kernel for the whole optimizer step instead of a chain of foreach kernels, in Python
code and in the optimizer mappings of YAML component configs. README.md says what it changes, what it refuses and
why."""

from __future__ import annotations

from typing import cast

from optimizations.edits.component_configs import add_keyword
from optimizations.program.components import components, instantiates_components, readable_configs
from optimizations.program.repository import RepoContext, Site
from optimizations.program.shapes import ProgramShape
from optimizations.registry import AllOf, Numerics, Optimization

from .edit import CONFIG_CLASSES, FACTORIES, OPTIMIZERS, FuseAdamW, config_refusal
from .edit_trainer_optim import UNFUSED, recipe_and_flag_sites
from .examples import EXAMPLES


class FusedAdamW(Optimization):
    """Adam/AdamW take one fused CUDA kernel per step; gradient clipping reuses a cached parameter list."""

    id = "fused_adamw"
    title = "fused AdamW in hand-written loops"
    tier = 2
    expected = "-2-10% step time (optimizer step), more on many small parameters"
    summary = (
        "torch.optim.AdamW/Adam(..., fused=<all params on a fused-kernel device>), cached parameter list"
    )
    scope = "optim"
    numerics = Numerics.ROUNDING
    numerics_reason = "the same AdamW update in one fused kernel: the weights differ in their last bits"
    measured_on = (ProgramShape.LOOP,)
    keywords = ("fused adamw", "fused adam", "fused=true", "fused optimizer", "fused-cuda adamw")
    codemods = (FuseAdamW,)
    done_by_settings = (("optimizer", "fused"),)
    chosen_by_launches = (
        (
            "optimizer",
            "memory_saving",
            "kept: an optimizer the launch chose to save memory, which fused AdamW gives up",
        ),
    )
    examples = EXAMPLES
    # "adam": a compiled Adam update of the program's own (``adamw_step_fused``); getattr: an optimizer class
    # named by the config (``getattr(torch.optim, config.optimizer)``)
    needs = (
        *OPTIMIZERS,
        *(function for _, function in FACTORIES),
        *UNFUSED,
        "FusedAdam",
        "CPUAdam",
        "adam",
        AllOf(("getattr", "torch.optim")),
    )

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """``fused: True`` in each Adam/AdamW mapping the repository's YAML configs build by class name, where
        its Python code instantiates components; none otherwise."""
        sites = recipe_and_flag_sites(ctx, self.id)
        if not instantiates_components(ctx):
            return sites
        for path, original in readable_configs(ctx):
            text = original
            for component in reversed(components(path, text, CONFIG_CLASSES)):
                if component.keywords.get("fused") is True:
                    sites.append(
                        Site(path, component.lines["fused"], self.id, "fused: True", False, already=True)
                    )
                    continue
                message = f"`{component.cls}` built from the config: fused: True"
                reason = config_refusal(component)
                if reason is not None:
                    sites.append(Site(path, component.line, self.id, message, False, reason))
                else:
                    # add_keyword returns None only for a flow mapping, which config_refusal refused.
                    text = cast(str, add_keyword(text, component, "fused", "True"))
                    sites.append(Site(path, component.line + 1, self.id, message))
            if text != original:
                ctx.edit(path, text)
        return sorted(sites, key=lambda site: (site.path, site.line))
