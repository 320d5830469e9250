"""A deleted resource's finalizer goes only once the brokers no longer hold its keys (issue #33).

Found by a full ``make test`` on a starved machine (load 9-13 on 2 cores): every quota resource of
``tests/node/test_node.py``'s documented uninstall was gone while some of their keys were still on
the broker. A removal the brokers did not apply (the KRaft controller, starved, answered
REQUEST_TIMED_OUT for the entities of a batch; or AlterConfigs refused) was "rolled back" in the
ledger as if it had been a write-ahead record: the entity was dropped from the ledger, so the key
was no longer kquota's, the finalizer went with the next pass and nothing ever removed the key.

The in-memory stand-ins make the slow step deterministic: the broker answers the removal the way a
starved controller does. The real broker and API server path is tests/e2e/test_acls.py's (a removal
refused by the broker's authorizer).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange
from kquota.handlers import operator as handlers
from kquota.kafka.errors import EntityResult, KafkaNotAuthorized, KafkaUnavailable
from kquota.reconcile import passes
from kquota.reconcile.claim_index import ClaimIndex
from kquota.reconcile.engine import ClusterReconciler
from tests.support.engine import Broker, Kube, client_quota, engine
from tests.support.quotas import ALICE, P


class StarvedController(Broker):
    """A broker whose controller cannot commit the next ``timeouts`` alters in time.

    KRaft answers a forwarded AlterClientQuotas the controller did not commit before the request's
    deadline with REQUEST_TIMED_OUT on every entity of it; nothing is applied.
    """

    timeouts = 0
    #: The next alter is refused whole (AlterConfigs not granted on the cluster).
    refuse = False
    #: The next alter is applied, then its answer is lost (KafkaUnavailable).
    lose_answer = False

    def alter(self, changes: Sequence[EntityChange]) -> list[EntityResult]:
        if self.refuse:
            self.refuse = False
            refused = "CLUSTER_AUTHORIZATION_FAILED"
            results = [EntityResult(c.entity, 31, "Cluster authorization failed.", refused) for c in changes]
            raise KafkaNotAuthorized("User:op", "ALTER_CONFIGS", "CLUSTER", [], "AlterClientQuotas", results=results)
        if self.timeouts:
            self.timeouts -= 1
            return [EntityResult(c.entity, 7, "timed out", "REQUEST_TIMED_OUT") for c in changes]
        out = super().alter(changes)
        if self.lose_answer:
            self.lose_answer = False
            raise KafkaUnavailable("the connection closed before the answer came")
        return out


def _body(name: str, user: str, rate: int, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": name, "generation": 1}
    meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
    if deleting:
        meta["deletionTimestamp"] = "2026-02-01T00:00:00Z"
        meta["finalizers"] = ["kquota.io/finalizer"]
    spec = {"clusterRef": "c", "entity": {"user": {"name": user}}, "quota": {"producerByteRate": rate}}
    return {"apiVersion": "kquota.io/v1alpha1", "kind": "ClientQuota", "metadata": meta, "spec": spec}


def _engine(broker: Broker, kube: Kube, records: list[object]) -> ClusterReconciler:
    eng = engine(records, broker, kube)  # type: ignore[arg-type]
    eng.settings = eng.settings.model_copy(update={"coalesce_seconds": 0, "removal_settle": 0})
    return eng


async def _pass_while_waiting(eng: ClusterReconciler, uid: str) -> asyncio.Task[None]:
    """A finalizer waiting for ``uid`` (as the delete handler does), then one pass."""
    waiting = asyncio.create_task(eng.wait_released(uid, timeout=30))
    await asyncio.sleep(0)
    with contextlib.suppress(KafkaNotAuthorized):
        await eng.reconcile_once()
    await asyncio.sleep(0.01)
    return waiting


@pytest.mark.parametrize("broker_says", ["REQUEST_TIMED_OUT", "AlterConfigs refused"])
def test_a_removal_the_brokers_did_not_apply_keeps_the_key_owned_and_the_finalizer(broker_says: str) -> None:
    async def run() -> None:
        broker, kube = StarvedController(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000)]
        eng = _engine(broker, kube, records)
        await eng.reconcile_once()
        records[0] = client_quota("q", "alice", deleting=True, producerByteRate=1000)
        if broker_says == "REQUEST_TIMED_OUT":
            broker.timeouts = 1
        else:
            broker.refuse = True
        waiting = await _pass_while_waiting(eng, "q")
        assert broker.live[ALICE] == {P: 1000.0}, "the removal was not applied"
        assert not waiting.done(), "the finalizer went while the broker still holds the key"
        assert eng._ledger is not None and eng._ledger[ALICE] == {P: 1000.0}, "the key is still kquota's"
        # The next pass removes it; only then does the finalizer go.
        await eng.reconcile_once()
        assert ALICE not in broker.live
        await asyncio.wait_for(waiting, 1)
        removed = [e for e in kube.events if e[2] == "QuotaRemoved"]
        assert any("producer_byte_rate on users/alice" in e[3] for e in removed), kube.events

    asyncio.run(run())


def test_a_key_set_by_an_alter_whose_answer_was_lost_is_removed_before_the_finalizer_goes() -> None:
    """The write-ahead record of an alter that raised (its answer lost, the change applied) is kept
    in memory too: deleting the resource before the next successful pass must still remove the key."""

    async def run() -> None:
        broker, kube = StarvedController(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000)]
        eng = _engine(broker, kube, records)
        broker.lose_answer = True
        with pytest.raises(KafkaUnavailable):
            await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 1000.0}
        records[0] = client_quota("q", "alice", deleting=True, producerByteRate=1000)
        waiting = await _pass_while_waiting(eng, "q")
        assert ALICE not in broker.live, "the key set by the lost alter stayed on the broker"
        await asyncio.wait_for(waiting, 1)

    asyncio.run(run())


def test_through_the_loop_the_delete_handler_returns_only_once_the_key_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconcile loop and the delete handler's wait, with the controller timing out the first
    two removals: the handler returns after the removal that landed, not before."""
    monkeypatch.setattr(passes, "TRANSIENT_RETRY_SECONDS", 0.05)

    async def run() -> None:
        broker, kube = StarvedController(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000)]
        eng = _engine(broker, kube, records)
        loop = asyncio.create_task(eng.run())
        try:
            for _ in range(200):
                if broker.live.get(ALICE):
                    break
                await asyncio.sleep(0.01)
            broker.timeouts = 2
            records[0] = client_quota("q", "alice", deleting=True, producerByteRate=1000)
            await asyncio.wait_for(handlers._released(eng, "q"), 10)
            assert ALICE not in broker.live, "the delete handler returned while the broker held the key"
            assert broker.timeouts == 0
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            eng.close()

    asyncio.run(run())


class LaggingImage(Broker):
    """A broker whose DescribeClientQuotas answers from a metadata image that has not caught up yet.

    In KRaft the controller commits an AlterClientQuotas before the answering broker's image has
    it (tests/e2e/test_acls.py waits for that too); on a starved machine the catch-up takes seconds.
    ``live`` is what the controller committed; ``image`` what a describe sees until ``catch_up``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.image: dict[Entity, dict[QuotaKey, float]] = {}

    def catch_up(self) -> None:
        self.image = {e: dict(v) for e, v in self.live.items()}

    def describe_all(self) -> dict[Entity, dict[QuotaKey, float]]:
        self.described_all += 1
        return {e: dict(v) for e, v in self.image.items()}

    def describe_entity(self, entity: Entity) -> dict[QuotaKey, float]:
        self.described.append(entity)
        return dict(self.image.get(entity, {}))


def test_a_deletion_read_before_the_brokers_image_caught_up_still_removes_the_key() -> None:
    """A resource deleted right after its key was set: the pass reads a broker that does not show the
    key yet. Forgetting it as already gone released the finalizer, and the key then appeared on the
    broker, owned by no one; the removal is sent anyway (removing an unset key changes nothing)."""

    async def run() -> None:
        broker, kube = LaggingImage(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000)]
        eng = _engine(broker, kube, records)
        await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 1000.0} and ALICE not in broker.image
        records[0] = client_quota("q", "alice", deleting=True, producerByteRate=1000)
        waiting = await _pass_while_waiting(eng, "q")
        broker.catch_up()
        assert ALICE not in broker.live, "the finalizer's pass left the key on the broker"
        await asyncio.wait_for(waiting, 1)
        removed = [e[3] for e in kube.events if e[2] == "QuotaRemoved"]
        assert len(removed) == 1 and "producer_byte_rate on users/alice" in removed[0], kube.events

    asyncio.run(run())


def test_a_narrow_pass_on_the_claim_index_keeps_the_finalizer_while_the_key_is_on_the_brokers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator's narrow pass finds a deleting resource by uid in the claim index, not in a list of every
    resource (issue #35): the resource it finds still holds the finalizer until its key is gone."""

    async def run() -> None:
        broker, kube = StarvedController(), Kube()
        idx = ClaimIndex("c", lambda c, u: None, lambda c, u: None)
        idx.upsert("ClientQuota", _body("q", "alice", 1000))
        idx.upsert("ClientQuota", _body("other", "bob", 2000))
        eng = _engine(broker, kube, [])
        eng._indexes = (idx,)
        await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 1000.0}

        def no_scan(self: ClusterReconciler) -> None:
            raise AssertionError("a narrow pass listed every resource")

        monkeypatch.setattr(ClusterReconciler, "_every_record", no_scan)
        idx.upsert("ClientQuota", _body("q", "alice", 1000, deleting=True))
        broker.timeouts = 1
        waiting = asyncio.create_task(eng.wait_released("q", timeout=30))
        await asyncio.sleep(0)
        await eng.reconcile_once(frozenset({"q"}))
        await asyncio.sleep(0.01)
        assert broker.live[ALICE] == {P: 1000.0}, "the removal was not applied"
        assert not waiting.done(), "the finalizer went while the broker still holds the key"
        await eng.reconcile_once(frozenset({"q"}))
        assert ALICE not in broker.live
        await asyncio.wait_for(waiting, 1)

    asyncio.run(run())
