"""The cyclic garbage collector, paused while a run analyses parsed files.

A parsed module is hundreds of thousands of small libcst objects that live for the whole run, and an analysis
allocates many more; Python's cyclic collector walks every live container object on each full collection,
and allocation that heavy sets one off again and again: on the seed repository's scan, 30% of the CPU time.
libcst trees hold no reference cycles (a node refers only to its children), so reference counting frees them
alone; the collector is paused for the analysis and runs again, as before, once it ends. What the analysis
allocated then goes straight to the oldest generation (``gc.freeze`` then ``gc.unfreeze``, which move the
generations' lists without walking them), so resuming does not start with a walk over all of it; the next
full collection still finds any cycle among it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block (nested blocks are fine); it resumes as it was at the end."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:  # no one else's frozen objects to let go of
                gc.freeze()
                gc.unfreeze()
            gc.enable()
