"""``torch.compile`` for the model a hand-written training loop trains, in place, or through the ``compile``
setting of a program built from component configs. What it changes and when it refuses: README.md."""

from __future__ import annotations

from itertools import groupby

from optimizations.edits.component_configs import switch_on
from optimizations.program.components import instantiates_components, reads_config_key, top_level_settings
from optimizations.program.repository import RepoContext, Site
from optimizations.program.shapes import ProgramShape
from optimizations.program.training_loops import BACKWARD
from optimizations.registry import Numerics, Optimization

from .edit import CompileLoopModel
from .examples import EXAMPLES


class CompileModel(Optimization):
    """The model of a hand-written training loop compiled in place with torch.compile, on CUDA."""

    id = "compile_model"
    title = "torch.compile the model of a hand-written loop"
    tier = 2
    expected = "+20-80% tokens/s after the first steps (example GPT, H100: x1.79); compiling takes a minute"
    summary = "compile_model(model) after it is built and moved: nn.Module.compile() on CUDA, PERFBOT_COMPILE=0 skips"
    scope = "model"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "Inductor fuses and reorders the model's kernels: the same math, rounded in another order"
    )
    measured_on = (ProgramShape.LOOP,)
    keywords = ("inductor",)
    capabilities = ("compile model", "torch.compile")
    codemods = (CompileLoopModel,)
    done_by_settings = (("compile", "on"),)
    compiles_model = True
    needs = (BACKWARD,)
    examples = EXAMPLES

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """``compile: false`` -> true at the top of the component configs of a program that instantiates
        components and reads a ``compile`` setting; none otherwise."""
        if not instantiates_components(ctx) or not reads_config_key(ctx, "compile"):
            return []
        sites: list[Site] = []
        for path, found in groupby(top_level_settings(ctx, "compile"), key=lambda setting: setting.path):
            text = original = ctx.read(path)
            for setting in reversed(list(found)):
                text, site = switch_on(text, setting, self.id, "the recipe compiles its model")
                sites.append(site)
            if text != original:
                ctx.edit(path, text)
        return sorted(sites, key=lambda site: (site.path, site.line))
