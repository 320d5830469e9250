"""The mass-removal guard: the pure rule, and one reconciler's passes with in-memory stand-ins.

The same behaviour on the real API server and broker: tests/e2e/test_trust.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import APPROVAL_ANNOTATION, GuardLimits, guard, hold_id, removals, without
from kquota.domain.plan import EntityChange, QuotaOp, UnmanagedPolicy
from kquota.kafka.settings import ConnectionSettings
from kquota.reconcile.records import ClusterConfig
from tests.support.engine import Broker, Kube, engine, quota
from tests.support.quotas import C, P

LIMITS = GuardLimits(enabled=True, percent=30, max_count=500, min_count=10)


def keys(n: int, prefix: str = "u") -> frozenset[tuple[Entity, QuotaKey]]:
    return frozenset((Entity.for_user(f"{prefix}{i}"), P) for i in range(n))


def test_few_removals_are_never_held_whatever_their_share() -> None:
    assert guard(keys(9), owned=9, limits=LIMITS) is None


def test_a_share_above_the_limit_is_held() -> None:
    assert guard(keys(31), owned=100, limits=LIMITS) is not None
    assert guard(keys(30), owned=100, limits=LIMITS) is None


def test_a_count_above_the_limit_is_held_whatever_the_share() -> None:
    assert guard(keys(501), owned=100_000, limits=LIMITS) is not None
    assert guard(keys(500), owned=100_000, limits=LIMITS) is None


def test_a_disabled_guard_holds_nothing() -> None:
    assert guard(keys(1000), owned=1000, limits=GuardLimits(enabled=False)) is None


def test_the_id_names_exactly_the_set() -> None:
    assert hold_id(keys(12)) == hold_id(sorted(keys(12), key=str))
    assert hold_id(keys(12)) != hold_id(keys(13))


def test_held_removals_leave_the_rest_of_the_plan() -> None:
    a, b = Entity.for_user("a"), Entity.for_user("b")
    changes = [EntityChange(a, (QuotaOp(P, 5.0), QuotaOp(C, None))), EntityChange(b, (QuotaOp(P, None),))]
    held = removals(changes)
    assert held == {(a, C), (b, P)}
    out, record, forget = without(changes, {a: {P: 5.0}, b: {P: 1.0}}, {a: {C}, b: {P}}, held)
    assert out == [EntityChange(a, (QuotaOp(P, 5.0),))]
    assert record == {a: {P: 5.0}}, "an adopted key whose removal is held is not recorded either"
    assert forget == {}


def _cluster(annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "c", "uid": "c-uid", "generation": 1, "annotations": annotations}}


def test_pruning_every_resource_holds_every_removal_until_the_kafkacluster_approves_the_id() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 1000 + i) for i in range(12)]
        eng = engine(records, broker, kube)
        annotations: dict[str, str] = {}
        eng._cluster_object = _cluster(annotations)  # the dict stays live: the approval is added below
        await eng.reconcile_once()
        assert len(broker.live) == 12
        # Argo CD prunes the whole application; one new resource arrives in the same sync.
        records[:] = [quota("new", "newcomer", 7)]
        await eng.reconcile_once()
        assert len(broker.live) == 13, "nothing removed"
        assert broker.live[Entity.for_user("newcomer")] == {P: 7.0}, "the rest of the pass is applied"
        conditions = {c["type"]: c for c in kube.statuses["c"]["conditions"]}
        assert conditions["Ready"]["reason"] == "RemovalsHeld" and conditions["Stalled"]["status"] == "True"
        message = conditions["DeletionGuard"]["message"]
        assert message.startswith("12 quota key removals held (100% of the 12 keys kquota owns or would adopt")
        hold = message.rsplit(f"{APPROVAL_ANNOTATION}=", 1)[1].split()[0]
        assert [e[2] for e in kube.events if e[0] == "c"].count("DeletionGuard") == 1
        await eng.reconcile_once()
        assert [e[2] for e in kube.events if e[0] == "c"].count("DeletionGuard") == 1, "one event per hold"
        # A wrong id approves nothing.
        annotations[APPROVAL_ANNOTATION] = "0123456789ab"
        await eng.reconcile_once()
        assert len(broker.live) == 13
        annotations[APPROVAL_ANNOTATION] = hold
        await eng.reconcile_once()
        assert broker.live == {Entity.for_user("newcomer"): {P: 7.0}}
        conditions = {c["type"]: c for c in kube.statuses["c"]["conditions"]}
        assert conditions["Ready"]["status"] == "True" and "DeletionGuard" not in conditions
        assert "Stalled" not in conditions

    asyncio.run(run())


def test_adopt_over_many_hand_made_quotas_is_held() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        for i in range(40):
            broker.live[Entity.for_user(f"hand{i}")] = {C: 100.0}
        cfg = ClusterConfig("c", ConnectionSettings(bootstrap_servers="unused:9092"), policy=UnmanagedPolicy.ADOPT)
        eng = engine([quota("q", "mine", 5)], broker, kube, cfg)
        eng._cluster_object = _cluster({})
        await eng.reconcile_once()
        assert sum(1 for e in broker.live if e.user and e.user.startswith("hand")) == 40
        assert broker.live[Entity.for_user("mine")] == {P: 5.0}
        conditions = {c["type"]: c for c in kube.statuses["c"]["conditions"]}
        assert conditions["DeletionGuard"]["message"].startswith("40 quota key removals held")

    asyncio.run(run())


def test_removals_wait_until_changes_stop_so_a_streamed_prune_is_guarded_whole() -> None:
    """A prune arrives as one deletion after another: removals wait for a quiet removal_settle."""

    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 1000 + i) for i in range(20)]
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update={"removal_settle": 0.3})
        eng._cluster_object = _cluster({})
        await eng.reconcile_once()
        for i in range(20):
            records.pop()
            eng.trigger(f"q{19 - i}")  # the deletion's watch event
            await eng.reconcile_once()
        assert len(broker.live) == 20, "nothing removed while deletions keep arriving"
        await asyncio.sleep(0.35)
        await eng.reconcile_once()
        assert len(broker.live) == 20, "the whole set is held"
        conditions = {c["type"]: c for c in kube.statuses["c"]["conditions"]}
        assert conditions["DeletionGuard"]["message"].startswith("20 quota key removals held")

    asyncio.run(run())


def test_a_few_removals_go_once_changes_stop() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 1000 + i) for i in range(20)]
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update={"removal_settle": 0.3})
        await eng.reconcile_once()
        del records[:2]
        eng.trigger("q0")
        await eng.reconcile_once()
        assert len(broker.live) == 20
        await asyncio.sleep(0.35)
        await eng.reconcile_once()
        assert len(broker.live) == 18
        assert "DeletionGuard" not in {c["type"] for c in kube.statuses["c"]["conditions"]}

    asyncio.run(run())
