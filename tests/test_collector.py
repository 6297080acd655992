"""The cyclic collector is paused while a run analyses parses, resumes as it was, and loses nothing: a cycle
made during the pause is still collected afterwards."""

from __future__ import annotations

import gc
import weakref

from optimizations.program.collector import collector_paused


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_the_collector_is_paused_in_the_block_and_resumes_as_it_was():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner block leaves the outer one's pause alone
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # paused before, paused after
    finally:
        gc.enable()


def test_a_cycle_made_during_the_pause_is_collected_after_it():
    with collector_paused():
        first, second = _Node(), _Node()
        first.other, second.other = second, first
        alive = weakref.ref(first)
        del first, second
        gc.collect()  # an explicit collection still runs; the cycle is garbage but the test holds no reference
        cycle = _Node()
        cycle.other = cycle
        kept = weakref.ref(cycle)
        del cycle
    assert alive() is None
    assert kept() is not None  # nothing walked it on the way out: it went to the oldest generation
    gc.collect()
    assert kept() is None


def test_someone_elses_frozen_objects_stay_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            pass
        # An unfreeze would leave none of them (or only what the pause froze); a frozen object that some other
        # thread of the process frees meanwhile leaves the count a few short, which is no unfreeze.
        assert gc.get_freeze_count() > frozen // 2 and gc.isenabled()
    finally:
        gc.unfreeze()
