"""``prefetcher``: copy the next batch to the GPU on a side stream while the current one trains.
What it changes and when it refuses: README.md."""

from optimizations.program.hf import HF_CONFIGS
from optimizations.program.repository import Site
from optimizations.program.training_loops import BACKWARD
from optimizations.registry import Numerics, Optimization

from .edit import NON_BLOCKING, PrefetchBatches
from .edit_ahead import FetchedAhead
from .examples import EXAMPLES


class Prefetcher(Optimization):
    """The next batch's host-to-device copy overlaps the current step instead of blocking before it."""

    id = "prefetcher"
    title = "CUDA prefetcher: pinned batches copied one step ahead on a side stream"

    def subject(self, changed: list[Site]) -> str:
        """The title, unless every site is a Trainer config, which gets non-blocking copies and no prefetcher."""
        if changed and all(NON_BLOCKING in site.message for site in changed):
            return "Trainer batches copied to the GPU without blocking"
        return self.title

    tier = 2
    expected = "-10-40% step time where host-to-device copies are exposed"
    summary = "for batch in CudaPrefetcher(loader, device) + pinned memory; Trainer: non_blocking copies"
    scope = "data"
    numerics = Numerics.EXACT
    numerics_reason = "the same batches, copied to the GPU one step ahead"
    keywords = ("prefetch", "cuda prefetcher", "non_blocking", "non-blocking", "h2d", "host-to-device")
    codemods = (PrefetchBatches,)
    proposers = (FetchedAhead,)
    needs = (BACKWARD, *HF_CONFIGS)

    examples = EXAMPLES
