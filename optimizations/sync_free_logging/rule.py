"""``sync_free_logging``: stop reading the loss on the host every step of a hand-written training loop.
What it changes and when it refuses: README.md."""

from optimizations.program.training_loops import BACKWARD
from optimizations.registry import AllOf, Numerics, Optimization

from .edit import SyncFreeLosses
from .edit_metrics import STEP_METHODS, HostReadsPerStep
from .examples import EXAMPLES


class SyncFreeLogging(Optimization):
    """The loss stays on the device; the host reads it only when the loop logs, so steps queue back to back."""

    id = "sync_free_logging"
    title = "sync-free loss logging in hand-written loops"
    tier = 2
    expected = "-5-30% step time where the GPU waits on the host"
    summary = "per-step loss.item()/float(loss) → device-side value, read only at the logging condition"
    scope = "train"
    numerics = Numerics.EXACT
    numerics_reason = "the logged and returned losses are the numbers the loop printed before"
    keywords = ("sync-free", "sync free", "loss.item()", ".item()", "host sync", "host-sync")
    codemods = (SyncFreeLosses,)
    # Other values a step reads on the host every step: proposed to a person, never an edit.
    proposers = (HostReadsPerStep,)
    needs = (BACKWARD, *STEP_METHODS, AllOf(("callback", ".item()")))  # a step callback's reads

    examples = EXAMPLES
