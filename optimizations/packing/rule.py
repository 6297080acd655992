"""``packing``: several short SFT examples share one ``max_length`` row instead of being padded one per row.
What it changes, the TRL behaviour it relies on and when it refuses: README.md."""

from optimizations.program.repository import RepoContext, Site
from optimizations.program.requirements import excludes
from optimizations.registry import AllOf, Numerics, Optimization

from .edit import PackSamples, packed_dataset_sites
from .edit_rows import PackedByLengths, PaddedToMaxLength
from .examples import EXAMPLES

# The first TRL release that names its padding-free packing "bfd" (earlier releases call it "ffd").
BFD_SINCE = "0.20"


class Packing(Optimization):
    """Padding-free best-fit-decreasing packing of SFT examples, config-driven where the repository has a config."""

    id = "packing"
    title = "config-driven packing with the padding-free bfd strategy"
    tier = 1
    expected = "+15-20% SFT tokens/s"
    summary = (
        'SFTConfig packing=True, packing_strategy="bfd" (padding-free), read from the repository\'s config'
    )
    scope = "train"
    numerics = Numerics.DYNAMICS
    numerics_reason = (
        "several examples per packed row: fewer optimizer steps per epoch, each over other tokens"
    )
    keywords = (
        "packing=",
        "packing_strategy",
        "sequence packing",
        "config-driven packing",
        "packing config-driven",
        "packing with bfd",
        "enable packing",
    )
    codemods = (PackSamples,)
    proposers = (PaddedToMaxLength, PackedByLengths)
    done_by_settings = (("packing", "on"),)
    needs = (*PackSamples.needs(), AllOf(("padding", "max_length")), "from_seqlens")

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """``packed: false`` -> true in the torchtune dataset mappings of the YAML configs of a program that
        instantiates components (:func:`.edit.packed_dataset_sites`); and each recipe of a framework's console
        script that sets no packing, refused."""
        from optimizations.program.runs.every_run import unset_in_framework_recipes  # loads libcst

        framework = [
            Site(
                recipe,
                1,
                self.id,
                f"packing for the run of {run.entry}",
                False,
                f"the recipe, run by `{run.launch.launcher}` at {run.launch.where}, sets no packing key: packing "
                "changes which examples share a batch and how many steps an epoch takes, and the framework's "
                "schema has its own keys for it, so that is the recipe user's call",
            )
            for run, recipe in unset_in_framework_recipes(ctx, "packing")
            if run.launch is not None  # a console launch, always
        ]
        return packed_dataset_sites(ctx, self.id) + framework

    def run_refusal(self, ctx: RepoContext, path: str) -> str | None:
        """Refused where the requirements keep TRL below :data:`BFD_SINCE`, whose SFTConfig rejects
        ``packing_strategy="bfd"`` (huggingface/open-r1 pins trl 0.18.0), besides every optimization's refusals."""
        pinned = excludes(ctx, "trl", BFD_SINCE)
        if pinned is not None:
            return f'{pinned} keeps trl below {BFD_SINCE}, which rejects packing_strategy "bfd": upgrade trl first'
        return super().run_refusal(ctx, path)

    examples = EXAMPLES
