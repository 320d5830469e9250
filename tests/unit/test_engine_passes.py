"""The reconciler's pass logic with in-memory stand-ins for the broker and the API server.

What is checked here is the engine's own bookkeeping (which entities a narrow
pass covers, what a transient broker error does); the real broker and API
server paths are the e2e tests'.
"""

from __future__ import annotations

import asyncio

from kquota.domain.entities import Entity
from kquota.domain.status import Reason
from tests.support.engine import Broker, Kube, engine, quota, reason
from tests.support.quotas import P


def test_a_narrow_pass_reads_and_changes_only_the_touched_entities() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 100 + i) for i in range(50)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        assert broker.described_all == 1 and len(broker.live) == 50
        # Someone changes u7 out of band; a narrow pass for q3 neither sees nor fixes it.
        broker.live[Entity.for_user("u7")] = {P: 1.0}
        records[3] = quota("q3", "u3", 999, generation=2)
        report = await eng.reconcile_once(frozenset({"q3"}))
        assert broker.described_all == 1, "a narrow pass must not describe everything"
        assert broker.described == [Entity.for_user("u3")]
        assert report.changes == 1 and broker.live[Entity.for_user("u3")] == {P: 999.0}
        assert broker.live[Entity.for_user("u7")] == {P: 1.0}
        # The next full pass restores it.
        await eng.reconcile_once()
        assert broker.live[Entity.for_user("u7")] == {P: 107.0}

    asyncio.run(run())


def test_a_narrow_pass_includes_every_claimant_of_a_touched_entity() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        older = quota("older", "shared", 100, created="2026-01-01T00:00:00Z")
        newer = quota("newer", "shared", 200, created="2026-02-01T00:00:00Z")
        records = [older]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        records.append(newer)
        await eng.reconcile_once(frozenset({"newer"}))
        # The older resource is not in scope but claims the entity: it still wins.
        assert broker.live[Entity.for_user("shared")] == {P: 100.0}
        assert reason(kube, "newer") == Reason.CONFLICT.value
        # The winner is deleted (its record gone from the index): a narrow pass for
        # its uid hands the key to the other claimant.
        records.remove(older)
        await eng.reconcile_once(frozenset({"older"}))
        assert broker.live[Entity.for_user("shared")] == {P: 200.0}
        assert reason(kube, "newer") == Reason.APPLIED.value

    asyncio.run(run())


def test_a_deleted_resource_not_seen_again_loses_its_keys_in_a_narrow_pass() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota("gone", "u-gone", 5), quota("stays", "u-stays", 6)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        del records[0]
        await eng.reconcile_once(frozenset({"gone"}))
        assert broker.live == {Entity.for_user("u-stays"): {P: 6.0}}

    asyncio.run(run())


def test_a_transient_broker_error_is_retried_soon_and_not_reported_as_rejected() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota("q", "u", 42)]
        eng = engine(records, broker, kube)
        broker.fail_once[Entity.for_user("u")] = "UNKNOWN_SERVER_ERROR"
        await eng.reconcile_once()
        assert reason(kube, "q") == Reason.KAFKA_UNAVAILABLE.value
        assert Entity.for_user("u") not in broker.live
        # Not held back: the very next pass sends it again.
        await eng.reconcile_once()
        assert broker.live[Entity.for_user("u")] == {P: 42.0}
        assert reason(kube, "q") == Reason.APPLIED.value

    asyncio.run(run())


def test_a_value_the_broker_refuses_is_held_back() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota("q", "u", 42)]
        eng = engine(records, broker, kube)
        broker.fail_once[Entity.for_user("u")] = "INVALID_REQUEST"
        await eng.reconcile_once()
        assert reason(kube, "q") == Reason.REJECTED.value
        report = await eng.reconcile_once()
        assert report.changes == 0, "a rejected value must not be retried in a hot loop"
        assert reason(kube, "q") == Reason.REJECTED.value

    asyncio.run(run())
