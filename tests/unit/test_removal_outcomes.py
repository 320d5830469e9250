"""What a resource says while a removal it caused is not done yet, and who a removal is blamed on (issue #33).

Ready means the brokers hold exactly the spec: a key dropped from a spec stays in
``status.applied`` and keeps the resource from Applied until it is gone (Pending while the
removal settle waits, RemovalHeld while the mass-removal guard holds it); a deleting
resource whose removal is held says so too; a hold stays in force, and on the KafkaCluster,
while more changes arrive; an Adopt removal is blamed on Adopt. In-memory stand-ins; the
same on the real API server and broker is tests/e2e/test_lifecycle.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kquota.domain.entities import Entity
from kquota.domain.guard import APPROVAL_ANNOTATION
from kquota.domain.plan import UnmanagedPolicy
from kquota.domain.status import Reason
from kquota.reconcile.engine import ClusterReconciler
from tests.support.engine import Broker, Kube, client_quota, config, engine, reason
from tests.support.quotas import ALICE, C, P, R

GUARD = {"deletion_guard": True, "deletion_guard_percent": 30.0, "deletion_guard_min": 10, "coalesce_seconds": 0}


def conditions(kube: Kube, name: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in kube.statuses[name]["conditions"]}


def applied(kube: Kube, name: str) -> dict[str, float]:
    return dict(kube.statuses[name]["applied"]["values"])


def _settling(eng: ClusterReconciler) -> None:
    """A change just arrived: removals wait for the removal settle."""
    eng.settings = eng.settings.model_copy(update={"removal_settle": 5.0, "coalesce_seconds": 0})
    eng.trigger("unrelated")


def test_a_key_dropped_from_the_spec_keeps_the_resource_pending_until_it_is_gone() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000, requestPercentage=40)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        assert reason(kube, "q") == "Applied"
        records[0] = client_quota("q", "alice", generation=2, producerByteRate=1000)
        _settling(eng)
        await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 1000.0, R: 40.0}, "the removal waits for the settle"
        assert reason(kube, "q") == "Pending"
        assert conditions(kube, "q")["Reconciling"]["status"] == "True"
        assert "request_percentage on users/alice" in conditions(kube, "q")["Ready"]["message"]
        assert applied(kube, "q") == {"producer_byte_rate": 1000.0, "request_percentage": 40.0}
        eng.settings = eng.settings.model_copy(update={"removal_settle": 0.0})
        await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 1000.0}
        assert reason(kube, "q") == "Applied"
        assert applied(kube, "q") == {"producer_byte_rate": 1000.0}

    asyncio.run(run())


def _twelve(**quota: Any) -> list[Any]:
    return [client_quota(f"q{i}", f"u{i}", **quota) for i in range(12)]


def test_keys_dropped_from_many_specs_at_once_are_held_and_each_resource_says_how_to_approve() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = _twelve(producerByteRate=1000, requestPercentage=40)
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update=GUARD)
        await eng.reconcile_once()
        records[:] = [client_quota(f"q{i}", f"u{i}", generation=2, producerByteRate=1000) for i in range(12)]
        await eng.reconcile_once()
        assert eng._hold is not None and eng._hold.count == 12
        hold_id = eng._hold.id
        for i in range(12):
            assert broker.live[Entity.for_user(f"u{i}")] == {P: 1000.0, R: 40.0}
            name = f"q{i}"
            assert reason(kube, name) == "RemovalHeld"
            conds = conditions(kube, name)
            assert conds["Stalled"]["status"] == "True"
            assert (
                f"kubectl annotate kafkacluster c {APPROVAL_ANNOTATION}={hold_id} --overwrite"
                in (conds["RemovalHeld"]["message"])
            )
            assert applied(kube, name) == {"producer_byte_rate": 1000.0, "request_percentage": 40.0}
        held_events = [e for e in kube.events if e[2] == "RemovalHeld"]
        assert sorted(e[0] for e in held_events) == sorted(f"q{i}" for i in range(12)), "one event each"
        await eng.reconcile_once()
        assert len([e for e in kube.events if e[2] == "RemovalHeld"]) == 12, "not again while the hold stays"
        # Approved: the keys go, and each resource is Applied again.
        eng._cluster_object = {"metadata": {"name": "c", "annotations": {APPROVAL_ANNOTATION: hold_id}}}
        await eng.reconcile_once()
        for i in range(12):
            assert broker.live[Entity.for_user(f"u{i}")] == {P: 1000.0}
            assert reason(kube, f"q{i}") == "Applied"
            assert "RemovalHeld" not in conditions(kube, f"q{i}")

    asyncio.run(run())


def test_resources_being_deleted_whose_removal_is_held_say_so_with_one_event() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = _twelve(producerByteRate=1000)
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update=GUARD)
        await eng.reconcile_once()
        records[:] = [client_quota(f"q{i}", f"u{i}", deleting=True, producerByteRate=1000) for i in range(12)]
        await eng.reconcile_once()
        await eng.reconcile_once()
        assert eng._hold is not None
        for i in range(12):
            assert reason(kube, f"q{i}") == "RemovalHeld"
            assert (
                f"producer_byte_rate on users/u{i} stays on the brokers"
                in (conditions(kube, f"q{i}")["Ready"]["message"])
            )
        assert len([e for e in kube.events if e[2] == "RemovalHeld"]) == 12

    asyncio.run(run())


def test_a_change_while_removals_are_held_keeps_the_hold_in_force_and_on_the_kafkacluster() -> None:
    """Finding 5: the settle deferred every removal, the guard saw none, and the KafkaCluster said
    Connected until the next pass after the settle, which announced the hold again."""

    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = _twelve(producerByteRate=1000)
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update=GUARD)
        await eng.reconcile_once()
        records[:] = [client_quota(f"q{i}", f"u{i}", deleting=True, producerByteRate=1000) for i in range(12)]
        await eng.reconcile_once()
        hold = eng._hold
        assert hold is not None
        assert conditions(kube, "c")["DeletionGuard"]["status"] == "True"
        records.append(client_quota("other", "someone", producerByteRate=5))
        _settling(eng)
        await eng.reconcile_once()
        assert broker.live[Entity.for_user("someone")] == {P: 5.0}, "the rest of the pass goes ahead"
        assert eng._hold == hold
        cluster = conditions(kube, "c")
        assert cluster["Ready"]["reason"] == "RemovalsHeld" and cluster["DeletionGuard"]["status"] == "True"
        assert hold.id in cluster["DeletionGuard"]["message"]
        assert len([e for e in kube.events if e[2] == "DeletionGuard"]) == 1
        assert reason(kube, "q0") == "RemovalHeld"

    asyncio.run(run())


def test_an_adopt_removal_is_blamed_on_adopt_not_on_the_resource_naming_the_entity() -> None:
    """Finding 3: zoe's hand-set consumer_byte_rate, removed by Adopt, was said to be removed because
    the ClientQuota naming users/zoe 'no longer sets it'."""

    async def run() -> None:
        broker, kube = Broker(), Kube()
        zoe = Entity.for_user("zoe")
        broker.live[zoe] = {C: 2048.0}
        records = [client_quota("zoe", "zoe", producerByteRate=1000)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        assert broker.live[zoe] == {P: 1000.0, C: 2048.0}
        eng._cluster = _returning(config(policy=UnmanagedPolicy.ADOPT))
        await eng.reconcile_once()
        assert broker.live[zoe] == {P: 1000.0}
        (removed,) = [e for e in kube.events if e[2] == "QuotaRemoved"]
        assert removed[:2] == ("c", "Warning"), "on the KafkaCluster, not on the ClientQuota"
        assert "consumer_byte_rate on users/zoe (was 2048)" in removed[3]
        assert "unmanaged.policy Adopt" in removed[3] and "no longer sets it" not in removed[3]

    asyncio.run(run())


def _returning(cfg: Any) -> Any:
    async def get() -> Any:
        return cfg

    return get


def test_a_hold_is_reported_as_removals_held() -> None:
    assert Reason.REMOVAL_HELD.value == "RemovalHeld"
