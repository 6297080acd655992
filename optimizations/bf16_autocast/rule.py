"""bf16 autocast in a hand-written training loop, or bf16 in the framework that drives training: the forward
pass and the loss run their matmuls in bfloat16 where the GPU has bf16 tensor cores. README.md says what it
changes, what it refuses and why."""

from __future__ import annotations

from optimizations.program.frameworks import FRAMEWORK_WORDS
from optimizations.program.repository import RepoContext, Site
from optimizations.program.runs.settings import Setting
from optimizations.program.shapes import ProgramShape
from optimizations.program.training_loops import BACKWARD
from optimizations.registry import Numerics, Optimization

from .edit import Bf16AutocastCodemod
from .edit_loop_precision import configured_bf16
from .examples import EXAMPLES


class Bf16Autocast(Optimization):
    """The forward pass and loss of a hand-written loop under bf16 autocast, where the GPU computes bf16."""

    id = "bf16_autocast"
    title = "bf16 autocast for the forward pass and loss"
    tier = 1
    expected = "~2x tokens/s on an fp32 loop (example GPT on an H100: x1.98, losses within 0.005)"
    summary = (
        "with torch.autocast('cuda', dtype=torch.bfloat16, enabled=<bf16 tensor cores>) around forward+loss"
    )
    scope = "train"
    numerics = Numerics.ROUNDING
    numerics_reason = "forward and loss matmuls in bf16; weights, gradients and optimizer stay float32"
    measured_on = (ProgramShape.LOOP,)
    keywords = (
        "bf16 autocast",
        "bfloat16 autocast",
        "autocast",
        "mixed precision",
    )
    codemods = (Bf16AutocastCodemod,)
    examples = EXAMPLES
    needs = (BACKWARD, *FRAMEWORK_WORDS)
    done_by_settings = (("mixed_precision", "bf16"),)
    chosen_by_launches = (
        (
            "mixed_precision",
            "fp16",
            "this run trains in fp16 on purpose: which precision a run uses is its user's choice",
        ),
    )
    # a Trainer's `fp16=True` in the script too: no codemod of this rule judges TrainingArguments' precision
    chosen_in_code = True

    def run_done(self, ctx: RepoContext, path: str) -> str | None:
        """Done where every run that loads ``path`` sets bf16 mixed precision, or loads the model it trains in
        bf16 (``torch_dtype`` from a recipe's ``policy_dtype: bfloat16``): its matmuls are bf16 already."""
        from optimizations.program.runs.every_run import done_in_every_run  # loads libcst: not for listing
        from optimizations.program.runs.settings import cite

        done = super().run_done(ctx, path)
        weights = done_in_every_run(ctx, path, (("weights_dtype", "bf16"),)) if done is None else []
        if weights:
            return f"the model is loaded in bf16 in every run that loads this file ({cite(weights)})"
        return done

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """Each ``dtype: bf16`` line of a program whose component configs all build it in bf16, and each line outside
        the code where a run loads its model in bf16 (a recipe's ``model_dtype: bf16``): already done; and each
        launch that sets no precision where the entry point's other launches pass bf16: refused there."""
        # loads libcst: not for listing
        from optimizations.program.runs.every_run import done_by_runs, unset_beside_launched

        fp32 = [
            Site(
                run.launch.path,
                run.launch.line,
                self.id,
                f"mixed precision fp32 for the run of {run.entry}",
                False,
                f"this launch sets no precision, so it trains in fp32, unlike {_first_of(bf16)}: which precision "
                "a launch uses is its user's flag",
            )
            for run, bf16 in unset_beside_launched(ctx, "mixed_precision", "bf16")
            if run.launch is not None
        ]
        weights: dict[str, Site] = {}  # once per line
        for entry, setting in done_by_runs(ctx, (("weights_dtype", "bf16"),)):
            path, _, line = setting.source.rpartition(":")
            message = f"the model in bf16 for the run of {entry} (`{setting.written}`)"
            weights.setdefault(setting.source, Site(path, int(line), self.id, message, False, already=True))
        return (
            fp32
            + list(weights.values())
            + [
                Site(
                    s.path,
                    s.line,
                    self.id,
                    f"dtype: {s.text}: the program builds its model in bf16",
                    False,
                    already=True,
                )
                for s in configured_bf16(ctx)
            ]
        )


def _first_of(settings: list[Setting]) -> str:
    """The first place that sets a value, and how many more do: ``run.sh:1 `--bf16 true` and 4 more``."""
    places = list(dict.fromkeys(setting.cited for setting in settings))
    return places[0] + (f" and {len(places) - 1} more" if len(places) > 1 else "")
