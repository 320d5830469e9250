"""The operator's garbage-collector policy: survivors are frozen, frozen cyclic garbage is reclaimed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kquota.handlers.gc_policy import FULL_COLLECTION_THRESHOLD, GcPolicy


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_tick_freezes_what_survived_so_full_collections_skip_it() -> None:
    policy = GcPolicy(freeze_seconds=10, reclaim_seconds=3600)
    before = gc.get_freeze_count()
    keep = [Node() for _ in range(1000)]
    policy.tick(now=policy._last_reclaim + 10)
    assert gc.get_freeze_count() >= before + 1000
    assert keep[0] not in gc.get_objects(generation=2), "frozen objects are in no generation a collection scans"


def test_a_tick_collects_young_cyclic_garbage_before_it_freezes() -> None:
    policy = GcPolicy(freeze_seconds=10, reclaim_seconds=3600)
    ref = _cycle()  # garbage already, not yet collected
    policy.tick(now=policy._last_reclaim + 10)
    assert ref() is None, "collected by the tick, not frozen with the survivors"


def test_a_cycle_that_dies_after_it_was_frozen_waits_for_the_reclaim() -> None:
    policy = GcPolicy(freeze_seconds=10, reclaim_seconds=3600)
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    policy.tick(now=policy._last_reclaim + 10)  # alive: frozen
    del a, b
    gc.collect()
    assert ref() is not None, "a full collection does not scan the permanent generation"
    policy.tick(now=policy._last_reclaim + 3601)  # the reclaim is due
    assert ref() is None, "the reclaim unfreezes and collects it"


def test_a_zero_interval_turns_the_policy_off() -> None:
    policy = GcPolicy(freeze_seconds=0, reclaim_seconds=3600)
    policy.start()
    assert policy._thread is None


def test_while_the_policy_runs_the_ticks_run_the_full_collections() -> None:
    """CPython's own full collections (each time the unfrozen heap grows by a quarter) are turned down."""
    before = gc.get_threshold()
    try:
        GcPolicy(freeze_seconds=3600, reclaim_seconds=3600).start()
        assert gc.get_threshold() == (before[0], before[1], FULL_COLLECTION_THRESHOLD)
        gc.set_threshold(*before)
        GcPolicy(freeze_seconds=0, reclaim_seconds=3600).start()
        assert gc.get_threshold() == before, "off: CPython's collector as it is"
    finally:
        gc.set_threshold(*before)
