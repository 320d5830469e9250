"""Never silently wrong, at the level of one pass: removals are events, refusals keep keys, statuses are exact.

In-memory broker and API server stand-ins (from test_engine_passes); the same
behaviours are checked on the real broker and API server in tests/e2e/test_trust.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from kquota.domain.claims import ResourceClaim, claim_from_body
from kquota.domain.entities import Entity
from kquota.domain.plan import EntityChange, Protection, UnmanagedPolicy
from kquota.domain.status import Reason
from kquota.domain.tenancy import Grant
from kquota.kafka.errors import EntityResult, KafkaUnavailable
from kquota.reconcile.engine import ClusterReconciler, DuplicateCluster
from kquota.reconcile.records import ClusterConfig
from tests.support.engine import Broker, Kube, client_quota, config, engine, reason
from tests.support.quotas import ALICE, C, P


def events(kube: Kube, reason_: str) -> list[tuple[str, str, str, str]]:
    return [e for e in kube.events if e[2] == reason_]


def test_a_key_removed_from_the_spec_leaves_status_applied_values() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=20971520, requestPercentage=50)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        assert kube.statuses["q"]["applied"]["values"] == {"producer_byte_rate": 20971520.0, "request_percentage": 50}
        records[0] = client_quota("q", "alice", generation=2, producerByteRate=20971520)
        await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 20971520.0}
        # A merge patch keeps keys it does not name: the removed key must be sent as null.
        assert kube.statuses["q"]["applied"]["values"] == {"producer_byte_rate": 20971520.0}

    asyncio.run(run())


def test_a_removed_key_is_an_event_naming_key_old_value_and_cause() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=20971520, consumerByteRate=1048576)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        records[0] = client_quota("q", "alice", generation=2, producerByteRate=20971520)
        await eng.reconcile_once()
        (removed,) = events(kube, "QuotaRemoved")
        assert removed[:2] == ("q", "Normal")
        assert "consumer_byte_rate on users/alice (was 1048576)" in removed[3]
        assert "ClientQuota ns/q no longer sets it" in removed[3]

    asyncio.run(run())


def test_a_deleted_resource_s_keys_are_one_event_on_that_resource() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=20971520, consumerByteRate=1048576)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        records[0] = client_quota("q", "alice", deleting=True, producerByteRate=20971520, consumerByteRate=1048576)
        await eng.reconcile_once()
        assert ALICE not in broker.live
        (removed,) = events(kube, "QuotaRemoved")
        assert removed[0] == "q"
        assert "producer_byte_rate on users/alice (was 20971520)" in removed[3]
        assert "consumer_byte_rate on users/alice (was 1048576)" in removed[3]
        assert "is being deleted" in removed[3]

    asyncio.run(run())


def test_a_key_no_resource_claims_any_more_is_a_warning_on_the_kafkacluster() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        records.clear()  # gone without being seen deleting (e.g. removed while the operator was down)
        await eng.reconcile_once()
        (removed,) = events(kube, "QuotaRemoved")
        assert removed[:2] == ("c", "Warning")
        assert "producer_byte_rate on users/alice (was 1000)" in removed[3]
        assert "no resource sets it any more" in removed[3]

    asyncio.run(run())


def test_adopt_removes_hand_set_keys_and_says_so_on_the_kafkacluster() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        broker.live[Entity.for_user("bob")] = {C: 2097152.0}
        eng = engine([], broker, kube, config(policy=UnmanagedPolicy.ADOPT))
        await eng.reconcile_once()
        assert Entity.for_user("bob") not in broker.live
        (removed,) = events(kube, "QuotaRemoved")
        assert removed[:2] == ("c", "Warning")
        assert "consumer_byte_rate on users/bob (was 2097152)" in removed[3]
        assert "unmanaged.policy Adopt" in removed[3]

    asyncio.run(run())


def test_a_resource_outside_a_new_tenancy_grant_keeps_its_keys_and_says_so() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=22020096)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 22020096.0}
        # Tenancy switched on with a grant that does not cover alice.
        cfg = config(grants=(Grant(frozenset({"ns"}), users=("team-*",)),))
        eng._cluster = _returning(cfg)
        await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 22020096.0}, "refusing a resource must not un-throttle its clients"
        assert reason(kube, "q") == Reason.NOT_PERMITTED.value
        ready = next(c for c in kube.statuses["q"]["conditions"] if c["type"] == "Ready")
        assert "producer_byte_rate=22020096 on users/alice stay on the brokers as they are" in ready["message"]
        assert not events(kube, "QuotaRemoved")
        # Deleting it is what removes the key.
        records.clear()
        await eng.reconcile_once()
        assert ALICE not in broker.live
        assert len(events(kube, "QuotaRemoved")) == 1

    asyncio.run(run())


def test_a_resource_whose_spec_becomes_invalid_keeps_its_keys() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        records[0] = client_quota("q", "alice", generation=2, producerByteRate=-1)
        assert records[0].error is not None
        for _ in range(2):  # a full pass forgets what claimers named; the refused one is remembered
            await eng.reconcile_once()
        assert broker.live[ALICE] == {P: 1000.0}
        assert reason(kube, "q") == Reason.INVALID_SPEC.value
        assert not events(kube, "QuotaRemoved")

    asyncio.run(run())


def test_an_edit_that_changes_the_broker_is_an_event_with_exact_values() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=20971520)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        assert [e[3] for e in events(kube, "Applied")] == ["set producer_byte_rate=20971520 on users/alice (was unset)"]
        records[0] = client_quota("q", "alice", generation=2, producerByteRate=31457280, requestPercentage=12.5)
        await eng.reconcile_once()
        last = events(kube, "Applied")[-1]
        assert last[:2] == ("q", "Normal")
        assert "producer_byte_rate=31457280 on users/alice (was 20971520)" in last[3]
        assert "request_percentage=12.5 on users/alice (was unset)" in last[3]
        assert len(events(kube, "Applied")) == 2, "the Ready transition must not repeat the change event"
        assert not any("e+" in e[3] for e in kube.events), "values are exact, never %g-rounded"

    asyncio.run(run())


def test_drift_events_carry_exact_integers() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        eng = engine([client_quota("q", "alice", producerByteRate=20971520)], broker, kube)
        await eng.reconcile_once()
        broker.live[ALICE] = {P: 10485760.0}
        await eng.reconcile_once()
        (drift,) = events(kube, "DriftCorrected")
        assert drift[3] == "producer_byte_rate on users/alice was 10485760 on the brokers; restored to 20971520"

    asyncio.run(run())


def _returning(cfg: ClusterConfig) -> Any:
    async def get() -> ClusterConfig:
        return cfg

    return get


async def _released_by_the_next_pass(eng: ClusterReconciler, uid: str) -> None:
    """The finalizer of ``uid`` (deleting) is let go by the next pass, not held until a timeout."""
    waiting = asyncio.create_task(eng.wait_released(uid, timeout=5))
    await asyncio.sleep(0)
    await eng.reconcile_once()
    await asyncio.wait_for(waiting, 1)


def test_deleting_a_resource_whose_user_became_protected_does_not_wait_forever() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000)]
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update={"coalesce_seconds": 0})
        await eng.reconcile_once()
        eng._cluster = _returning(config(protection=Protection(frozenset({"alice"}))))
        records[0] = client_quota("q", "alice", deleting=True, producerByteRate=1000)
        await _released_by_the_next_pass(eng, "q")
        assert broker.live[ALICE] == {P: 1000.0}, "a protected entity is never changed"

    asyncio.run(run())


def test_deleting_a_resource_whose_key_a_refused_resource_keeps_does_not_wait_forever() -> None:
    """Found by the soak (tenancy-revoked, seed 11 step 2): the finalizer waited for a removal the
    plan never makes, so the deletion hung until the grant came back."""

    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [client_quota("young", "alice", producerByteRate=2000)]
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update={"coalesce_seconds": 0})
        await eng.reconcile_once()
        # Another namespace names the same key, and has no grant: refused, it keeps alice's key.
        records.append(_in_team_b("refused", "alice", producerByteRate=1000))
        eng._cluster = _returning(config(grants=(Grant(frozenset({"ns"}), users=("*",)),)))
        await eng.reconcile_once()
        assert reason(kube, "refused") == Reason.NOT_PERMITTED.value
        records[0] = client_quota("young", "alice", deleting=True, producerByteRate=2000)
        await _released_by_the_next_pass(eng, "young")
        assert broker.live[ALICE] == {P: 2000.0}, "refusing a resource must not un-throttle its clients"
        assert not events(kube, "QuotaRemoved")

    asyncio.run(run())


def _in_team_b(name: str, user: str, **quota_spec: Any) -> ResourceClaim:
    body = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": name, "namespace": "team-b", "uid": name, "generation": 1},
        "spec": {"entity": {"user": {"name": user}}, "quota": quota_spec},
    }
    return claim_from_body("ClientQuota", body, "c")


def test_a_younger_kafkacluster_for_the_same_kafka_cluster_changes_nothing() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        eng = engine([client_quota("q", "alice", producerByteRate=1000)], broker, kube)
        eng.settings = eng.settings.model_copy(update={"allow_shared_kafka_clusters": False})
        eng._cluster_object = {"metadata": {"name": "c", "creationTimestamp": "2026-02-01T00:00:00Z"}}
        eng._peers = {"older": ("2026-01-01T00:00:00Z", "fake-cluster-id")}
        with pytest.raises(
            DuplicateCluster, match="KafkaCluster 'older' already manages Kafka cluster fake-cluster-id"
        ):
            await eng.reconcile_once()
        assert broker.live == {}
        # Another Kafka cluster's KafkaCluster, or a younger one, is no reason to refuse.
        eng._peers = {
            "older": ("2026-01-01T00:00:00Z", "other-id"),
            "young": ("2026-03-01T00:00:00Z", "fake-cluster-id"),
        }
        await eng.reconcile_once()
        assert broker.live == {ALICE: {P: 1000.0}}

    asyncio.run(run())


def test_another_writer_undoing_a_key_makes_it_contested_instead_of_a_fight() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        eng = engine([client_quota("q", "alice", producerByteRate=1000)], broker, kube)
        await eng.reconcile_once()
        for _ in range(3):
            broker.live[ALICE] = {P: 5.0}  # the other writer
            await eng.reconcile_once()
        assert len(events(kube, "Contested")) == 1
        assert reason(kube, "q") == "Contested"
        broker.live[ALICE] = {P: 5.0}
        report = await eng.reconcile_once()
        assert report.changes == 0 and broker.live[ALICE] == {P: 5.0}, "no more fighting"
        ready = next(c for c in kube.statuses["q"]["conditions"] if c["type"] == "Ready")
        assert "producer_byte_rate on users/alice (now 5" in ready["message"]

    asyncio.run(run())


def test_a_contest_ends_after_the_retry_time_when_the_other_writer_stopped() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        eng = engine([client_quota("q", "alice", producerByteRate=1000)], broker, kube)
        eng._contest.retry = 0.2
        await eng.reconcile_once()
        for _ in range(3):
            broker.live[ALICE] = {P: 5.0}
            await eng.reconcile_once()
        assert reason(kube, "q") == "Contested" and broker.live[ALICE] == {P: 1000.0}
        await asyncio.sleep(0.25)
        await eng.reconcile_once()
        assert reason(kube, "q") == "Applied"

    asyncio.run(run())


class _FailsAfterAlter(Broker):
    """Fails a pass after its AlterClientQuotas committed: the answer lost (the controller killed after it
    committed), or a read the pass makes after acting failing (DescribeConfigs on a broker just killed)."""

    lose_answer = False
    #: Brokers whose DescribeConfigs fails (a killed node still in the pass's broker list).
    down: frozenset[int] = frozenset()
    brokers = [1]

    def alter(self, changes: Sequence[EntityChange]) -> list[EntityResult]:
        out = super().alter(changes)
        if self.lose_answer:
            self.lose_answer = False
            raise KafkaUnavailable("the controller went away before answering")
        return out

    def cluster_info(self) -> tuple[str, list[int]]:
        return "fake-cluster-id", list(self.brokers)

    def broker_configs(self, broker_id: int, keys: Sequence[str]) -> dict[str, str]:
        if broker_id in self.down:
            raise KafkaUnavailable(f"DescribeConfigs failed: UnknownBrokerIdError: {broker_id}")
        return super().broker_configs(broker_id, keys)


@pytest.mark.parametrize("failure", ["answer lost", "a read after acting fails"])
def test_a_removal_in_a_pass_that_fails_after_acting_is_still_an_event(failure: str) -> None:
    """Found by the soak (controller-killed, BROKERS=3 seed 12 step 5): removal events are posted at
    the end of a pass, after its reads of broker configs; a pass that fails after its alter committed
    (and its ledger forgot the keys) posts none, and the next pass finds nothing left to remove."""

    async def run() -> None:
        broker, kube = _FailsAfterAlter(), Kube()
        records = [client_quota("q", "alice", producerByteRate=1000)]
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update={"coalesce_seconds": 0})
        await eng.reconcile_once()
        records[0] = client_quota("q", "alice", deleting=True, producerByteRate=1000)
        if failure == "answer lost":
            broker.lose_answer = True
        else:
            broker.brokers, broker.down = [1, 2], frozenset({2})
        with pytest.raises(KafkaUnavailable):
            await eng.reconcile_once()
        assert ALICE not in broker.live, "the removal was committed"
        broker.down = frozenset()
        await eng.reconcile_once()
        removed = [e[3] for e in events(kube, "QuotaRemoved")]
        assert any("producer_byte_rate on users/alice" in m for m in removed), kube.events

    asyncio.run(run())
