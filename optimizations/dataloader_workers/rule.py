"""``dataloader_workers``: load and collate batches in worker processes, into pinned memory, ahead of the GPU.
What it changes and when it refuses: README.md."""

from optimizations.edits.recipe_switch import RecipeSetting, switch_recipe
from optimizations.program.hf import ARGUMENT_PARSERS, HF_CONFIGS
from optimizations.program.repository import RepoContext, Site
from optimizations.program.training_loops import BACKWARD
from optimizations.registry import Numerics, Optimization

from .edit import KEPT_WORKERS, LEFT_OUT, AddWorkers
from .edit_inline import GeneratedInline
from .examples import EXAMPLES

# The worker count a framework's recipe gets: the cap the run-time count (``min(4, cpus - 1)``) has in code.
RECIPE_WORKERS = RecipeSetting(
    "dataloader_num_workers", "4", lambda value: isinstance(value, int) and value > 0
)


class DataloaderWorkers(Optimization):
    """Batches prepared by worker processes into pinned memory while the GPU trains on the previous one."""

    id = "dataloader_workers"
    title = "dataloader workers with pinned memory and persistent workers"

    def subject(self, changed: list[Site]) -> str:
        """The title where every site got persistent workers; else what the sites did: workers and pinned memory
        (a transformers the repository allows lacks the rest), or only pinned memory (the program sets the
        worker count)."""
        if changed and all(KEPT_WORKERS in site.message for site in changed):
            return "pinned memory for data loaders whose worker count the program sets"
        if any("persistent" not in site.message.partition(LEFT_OUT)[0] for site in changed):
            return "dataloader workers with pinned memory"
        return self.title

    tier = 1
    expected = "+10-30% GPU util"
    summary = "dataloader_num_workers / num_workers with pin memory, persistent workers and prefetch"
    scope = "data"
    numerics = Numerics.EXACT
    numerics_reason = (
        "the same batches, loaded in worker processes (random augmentation draws from each worker's seed)"
    )
    keywords = (
        "dataloader_num_workers",
        "dataloader workers",
        "num_workers",
        "dataloader_pin_memory",
        "pin memory",
    )
    codemods = (AddWorkers,)
    proposers = (GeneratedInline,)
    done_by_settings = (("loader_workers", "positive"), ("pin_memory", "on"))
    # backward: a training loop over batches a generator builds in the training process (GeneratedInline)
    needs = (*HF_CONFIGS, "DataLoader", *(parser for _, parser in ARGUMENT_PARSERS), BACKWARD)

    examples = EXAMPLES

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """``dataloader_num_workers: 4`` in each recipe of a framework's console script that leaves the Trainer's
        0 workers, where the framework's code names that key (its recipe schema takes it)."""
        # loads libcst: not for listing
        from optimizations.program.runs.every_run import entry_package, unset_in_framework_recipes

        sites: list[Site] = []
        for run, recipe in unset_in_framework_recipes(ctx, "loader_workers"):
            package = entry_package(run.entry) + "/"
            schema = [
                path
                for path in ctx.python_files()
                if path.startswith(package) and RECIPE_WORKERS.key in ctx.text(path)
            ]
            if schema:
                sites += switch_recipe(ctx, recipe, RECIPE_WORKERS, self.id)
        return sites
