"""The edits of ``packing``: ``packing=True`` with the padding-free bfd strategy on SFT configs, through the
repository's config where it has one (:class:`PackSamples`), and ``packed: true`` in torchtune's dataset mappings
(:func:`packed_dataset_sites`). See README.md."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.component_configs import switch_on
from optimizations.edits.config_switch import SettingSwitch
from optimizations.edits.expressions import expr
from optimizations.program.components import components, instantiates_components, readable_configs
from optimizations.program.repository import RepoContext, Site
from optimizations.program.syntax import code_of, keyword, literal_value
from optimizations.program.yaml_settings import settings

PADDING_FREE_STRATEGIES = ("bfd", "bfd_split")


class PackSamples(SettingSwitch):
    """``packing=True, packing_strategy="bfd"`` on SFTConfig calls, where their settings come from; refused beside
    a custom collator, a vision-language model, a strategy that is not padding-free or ``max_length=None``."""

    default_as_found = True  # packing changes the steps per epoch: the repository's config decides
    setting = "packing"
    configs = ("SFTConfig",)
    field_comment = "# perfbot: pack examples into max_length rows (TRL's padding-free bfd packing)."
    flag_hint = "--packing true --packing_strategy bfd"
    recipe_companions = {"packing_strategy": "bfd"}

    def companions(self, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
        return [] if keyword(call, "packing_strategy") is not None else [("packing_strategy", expr('"bfd"'))]

    def blocked(self, call: cst.Call | None, function: cst.FunctionDef | None) -> str | None:
        if call is not None:
            strategy = keyword(call, "packing_strategy")
            if strategy is not None and literal_value(strategy.value) not in (*PADDING_FREE_STRATEGIES, ...):
                return (
                    f'packing_strategy={code_of(strategy.value)} is not padding-free; switch it to "bfd" by hand '
                    "if examples may be cut and mixed"
                )
            max_length = keyword(call, "max_length")
            if max_length is not None and literal_value(max_length.value) is None:
                return "max_length=None: packing needs a row length; set max_length, then enable packing"
        trainers = self.scope.calls_to(("SFTTrainer",))
        for site in self.scope.near(trainers, function) if call is not None else trainers:
            collator = keyword(site.call, "data_collator")
            if collator is not None and literal_value(collator.value) is not None:
                return (
                    f"the SFTTrainer gets a custom data_collator (`{code_of(collator.value)}`): TRL packs only "
                    "with its own padding-free collator and raises otherwise; drop the collator to pack"
                )
        if self.scope.vision_model is not None:
            return (
                f"`{self.scope.vision_model}` may load a vision-language model or processor: TRL does not pack "
                "image batches; leave packing off"
            )
        return None

    def yaml_blocked(self, siblings: dict[str, object]) -> str | None:
        strategy = siblings.get("packing_strategy", "bfd")
        if strategy not in PADDING_FREE_STRATEGIES:
            return f"packing_strategy: {strategy} is not padding-free; set packing_strategy: bfd by hand"
        return None


# The modules whose dataset builders take ``packed`` (torchtune's), as :func:`components` matches them.
DATASET_BUILDERS = ("torchtune.datasets.",)
MULTIMODAL_BUILDERS = "torchtune.datasets.multimodal."


def _of_tokenizer(siblings: dict[str, object]) -> bool:
    """A mapping that builds a tokenizer (``_component_: torchtune.models.llama3.llama3_tokenizer``)."""
    return "tokenizer" in str(siblings.get("_component_", ""))


def packed_dataset_sites(ctx: RepoContext, optimization_id: str) -> list[Site]:
    """``packed: false`` -> true in the torchtune dataset mappings of the YAML configs of a program that
    instantiates components; none otherwise."""
    if not instantiates_components(ctx):
        return []
    sites: list[Site] = []
    for path, original in readable_configs(ctx):
        text = original
        datasets = components(path, text, DATASET_BUILDERS)
        builders = {c.lines["packed"]: c.cls for c in datasets if "packed" in c.keywords}
        if not builders:
            continue
        lengths = [s.value for s in settings(path, text, "max_seq_len") if _of_tokenizer(s.siblings)]
        unset = not any(isinstance(length, int) and length > 0 for length in lengths)
        for setting in reversed(settings(path, text, "packed")):
            if setting.line not in builders:
                continue
            blocked = None
            if builders[setting.line].startswith(MULTIMODAL_BUILDERS):
                blocked = "torchtune does not pack multimodal datasets"
            elif unset:
                blocked = (
                    "torchtune packs into rows of the tokenizer's max_seq_len, which this config does not set "
                    f"for the dataset at {path}:{setting.line}"
                )
            text, site = switch_on(
                text, setting, optimization_id, "examples packed into max_seq_len rows", blocked
            )
            sites.append(site)
        if text != original:
            ctx.edit(path, text)
    return sorted(sites, key=lambda site: (site.path, site.line))
