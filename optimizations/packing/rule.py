"""``packing``: several short SFT examples share one ``max_length`` row instead of being padded one per row.
What it changes, the TRL behaviour it relies on and when it refuses: README.md."""

from optimizations.program.repository import RepoContext, Site
from optimizations.registry import Numerics, Optimization

from .edit import PackSamples, packed_dataset_sites
from .examples import EXAMPLES


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
    done_by_settings = (("packing", "on"),)
    needs = PackSamples.needs()

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """``packed: false`` -> true in the torchtune dataset mappings of the YAML configs of a program that
        instantiates components (:func:`.edit.packed_dataset_sites`); none otherwise."""
        return packed_dataset_sites(ctx, self.id)

    examples = EXAMPLES
