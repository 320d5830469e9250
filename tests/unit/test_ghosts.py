"""Ghosts (#23): a resource whose deletion went unseen is dropped only when two listings prove it gone.

The rule and the sweeper are pure (a listing is a function here); the engine part
runs one pass on the in-memory broker and API server stand-ins. The whole path,
with a real API server restart, broker and operator process, is
tests/e2e/test_ghost.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Set

import pytest

from kquota.domain.claims import ResourceClaim
from kquota.reconcile import ghosts as ghosts_module
from kquota.reconcile.ghosts import MOST_TIME_SHARE, GhostRule, GhostSweeper, pause_after
from tests.support.engine import Broker, Kube, client_quota, engine
from tests.support.quotas import ALICE, BOB, P

INTERVAL = 60.0


def test_a_uid_missing_from_one_listing_is_only_a_suspect() -> None:
    rule = GhostRule(INTERVAL)
    assert rule.listed(["a", "b"], {"a"}, requested_at=0.0) == []
    assert set(rule.suspects) == {"b"}


def test_a_uid_missing_from_two_listings_an_interval_apart_is_gone() -> None:
    rule = GhostRule(INTERVAL)
    rule.listed(["a", "b"], {"a"}, requested_at=0.0)
    assert rule.listed(["a", "b"], {"a"}, requested_at=INTERVAL) == ["b"]
    assert not rule.suspects


def test_two_listings_closer_than_the_interval_prove_nothing_yet() -> None:
    rule = GhostRule(INTERVAL)
    rule.listed(["b"], set(), requested_at=0.0)
    assert rule.listed(["b"], set(), requested_at=INTERVAL - 1) == []
    # The wait counts from the first listing that missed it, not from the last one.
    assert rule.listed(["b"], set(), requested_at=INTERVAL) == ["b"]


def test_a_uid_listed_again_is_cleared_and_starts_over() -> None:
    # A listing that missed an object that exists (a stale read) must not count towards dropping it.
    rule = GhostRule(INTERVAL)
    rule.listed(["b"], set(), requested_at=0.0)
    rule.listed(["b"], {"b"}, requested_at=INTERVAL)
    assert rule.listed(["b"], set(), requested_at=2 * INTERVAL) == []
    assert rule.listed(["b"], set(), requested_at=3 * INTERVAL) == ["b"]


def test_a_uid_no_longer_known_is_forgotten() -> None:
    # Its deletion was seen meanwhile (the finalizer handler dropped it): nothing to judge.
    rule = GhostRule(INTERVAL)
    rule.listed(["b"], set(), requested_at=0.0)
    assert rule.listed([], set(), requested_at=INTERVAL) == []
    assert not rule.suspects


def _sweeper(
    records: dict[str, ResourceClaim], listings: list[Set[str]], gone: list[ResourceClaim], interval: float = 0.0
) -> GhostSweeper:
    async def list_uids(plural: str) -> Set[str]:
        # One kind holds everything here; the others list nothing.
        return listings.pop(0) if plural == "clientquotas" else set()

    return GhostSweeper(list_uids, ["clientquotas", "topicquotas"], records, gone.append, interval)


def test_the_sweeper_drops_a_ghost_from_the_records_and_hands_it_on() -> None:
    async def run() -> None:
        q = client_quota("q", "alice", producerByteRate=1000)
        kept = client_quota("k", "bob", producerByteRate=2000)
        records = {q.ref.uid: q, kept.ref.uid: kept}
        gone: list[ResourceClaim] = []
        sweeper = _sweeper(records, [{kept.ref.uid}, {kept.ref.uid}], gone)
        assert await sweeper.sweep() == []
        assert await sweeper.sweep() == [q]
        assert gone == [q]
        assert set(records) == {kept.ref.uid}

    asyncio.run(run())


def test_a_record_added_while_a_listing_runs_is_not_judged_by_it() -> None:
    # The create's watch event arrived after the listing was requested: the listing may predate it.
    async def run() -> None:
        records: dict[str, ResourceClaim] = {}
        late = client_quota("late", "alice", producerByteRate=1000)

        async def list_uids(plural: str) -> Set[str]:
            records[late.ref.uid] = late
            return set()

        gone: list[ResourceClaim] = []
        sweeper = GhostSweeper(list_uids, ["clientquotas"], records, gone.append, 0.0)
        await sweeper.sweep()
        assert not sweeper.rule.suspects
        assert gone == []

    asyncio.run(run())


def test_a_failed_listing_counts_for_nothing() -> None:
    async def run() -> None:
        q = client_quota("q", "alice", producerByteRate=1000)
        records = {q.ref.uid: q}
        calls = 0

        async def list_uids(plural: str) -> Set[str]:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise ConnectionError("API server down")
            return set()

        gone: list[ResourceClaim] = []
        sweeper = GhostSweeper(list_uids, ["clientquotas"], records, gone.append, 0.0)
        await sweeper.sweep()
        with pytest.raises(ConnectionError):
            await sweeper.sweep()
        assert gone == [] and set(sweeper.rule.suspects) == {q.ref.uid}
        await sweeper.sweep()
        assert gone == [q]

    asyncio.run(run())


def test_a_ghost_s_keys_are_removed_with_an_event_naming_it() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        ghost = client_quota("q", "alice", producerByteRate=1000)
        live = client_quota("k", "bob", producerByteRate=2000)
        # Kopf's index keeps the ghost: only ``gone`` says it is not there any more.
        records = [ghost, live]
        gone: dict[str, ResourceClaim] = {}
        eng = engine(records, broker, kube, gone=gone)
        await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 1000.0}
        gone[ghost.ref.uid] = ghost
        await eng.reconcile_once()
        assert ALICE not in broker.live
        assert broker.live[BOB] == {P: 2000.0}
        (removed,) = [e for e in kube.events if e[2] == "QuotaRemoved"]
        assert removed[:2] == ("c", "Warning")
        assert "producer_byte_rate on users/alice (was 1000)" in removed[3]
        assert "ClientQuota ns/q was deleted while the operator could not see it" in removed[3]

    asyncio.run(run())


def test_the_check_waits_the_drift_interval_while_listings_are_quick() -> None:
    assert pause_after(INTERVAL, took=0.01) == INTERVAL


def test_a_long_listing_spaces_the_next_one_out_so_the_check_takes_at_most_its_share() -> None:
    # 50,000 resources: a listing of seconds; the check then takes 2% of the time, not 13%.
    took = 2.5
    pause = pause_after(10.0, took)
    assert pause > 10.0
    assert took / (took + pause) == pytest.approx(MOST_TIME_SHARE)


def test_the_sweeper_sleeps_what_its_last_listing_asks() -> None:
    async def run() -> None:
        slept: list[float] = []
        real_sleep = asyncio.sleep

        async def listing(plural: str) -> Set[str]:
            ghosts_module.time.sleep(0.05)  # a listing that takes long: the test's "seconds"
            return set()

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            if len(slept) == 3:
                raise asyncio.CancelledError
            await real_sleep(0)

        sweeper = GhostSweeper(listing, ["clientquotas"], {}, lambda rec: None, 0.001)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ghosts_module.asyncio, "sleep", sleep)
            with pytest.raises(asyncio.CancelledError):
                await sweeper._run()
        assert slept[0] == 0.001
        # Each later pause is the listing's length times 49, at least 0.05 * 49.
        assert all(pause >= 0.05 * (1 / MOST_TIME_SHARE - 1) for pause in slept[1:]), slept

    asyncio.run(run())
