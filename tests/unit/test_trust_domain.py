"""Pure pieces of "never silently wrong": kept keys in the plan, exact values, merge patches, orphan statuses."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from kquota.domain.contest import ContestTracker
from kquota.domain.entities import Entity
from kquota.domain.plan import UnmanagedPolicy, plan
from kquota.domain.status import STALLED, Reason, merge_patch, needs_write, value_text
from kquota.reconcile.orphans import OrphanReporter, RecordStore
from kquota.reconcile.settings import OperatorSettings
from tests.support.engine import Kube, client_quota
from tests.support.quotas import C, P, R

ALICE, BOB = Entity.for_user("alice"), Entity.for_user("bob")


def test_kept_keys_are_neither_removed_nor_forgotten() -> None:
    live = {ALICE: {P: 10.0, C: 20.0}}
    ledger = {ALICE: {P: 10.0, C: 20.0}}
    out = plan({}, live, ledger, keep={ALICE: frozenset({P})})
    assert [(c.entity, [(o.key, o.value) for o in c.ops]) for c in out.changes] == [(ALICE, [(C, None)])]
    assert out.forget == {ALICE: {C}}
    assert out.kept == {ALICE: {P: 10.0}}


def test_keeping_every_key_of_an_entity_covers_only_owned_keys_and_adopt_still_spares_named_ones() -> None:
    live = {ALICE: {P: 10.0, C: 20.0}, BOB: {R: 30.0}}
    ledger = {ALICE: {P: 10.0}}
    out = plan({}, live, ledger, UnmanagedPolicy.ADOPT, keep={ALICE: None, BOB: frozenset({R})})
    # alice's hand-set consumer rate is not covered by "every owned key"; Adopt takes it.
    assert [(c.entity, [(o.key, o.value) for o in c.ops]) for c in out.changes] == [(ALICE, [(C, None)])]
    assert out.kept == {ALICE: {P: 10.0}, BOB: {R: 30.0}}


def test_a_claimed_key_is_set_even_when_kept() -> None:
    out = plan({ALICE: {P: 5.0}}, {ALICE: {P: 10.0}}, {ALICE: {P: 10.0}}, keep={ALICE: None})
    assert [(o.key, o.value) for c in out.changes for o in c.ops] == [(P, 5.0)]
    assert out.kept == {}


@pytest.mark.parametrize(
    ("value", "text"),
    [(20971520.0, "20971520"), (1e15, "1000000000000000"), (12.5, "12.5"), (0.1, "0.1"), (0.0, "0")],
)
def test_values_are_printed_exactly(value: float, text: str) -> None:
    assert value_text(value) == text


def test_a_merge_patch_nulls_keys_that_left_a_nested_map_and_leaves_other_writers_fields() -> None:
    prev = {
        "applied": {"cluster": "c", "values": {"producer_byte_rate": 1.0, "request_percentage": 5.0}},
        "someoneElses": {"note": 3},
        "conditions": [{"type": "Ready"}],
    }
    new = {"applied": {"cluster": "c", "values": {"producer_byte_rate": 1.0}}, "conditions": []}
    assert merge_patch(prev, new) == {
        "applied": {"cluster": "c", "values": {"producer_byte_rate": 1.0, "request_percentage": None}},
        "conditions": [],
    }
    assert not needs_write({**prev, **new}, new)


def test_a_metrics_reading_no_longer_rendered_leaves_the_status() -> None:
    # status.observed is kquota's own: once the KafkaCluster's metrics are not read, the last
    # reading must not stay as if current (a merge patch keeps what it does not name).
    prev = {"applied": {"cluster": "c", "values": {}}, "observed": {"total": {"produceByteRate": 3}}}
    new = {"applied": {"cluster": "c", "values": {}}}
    assert needs_write(prev, new)
    assert merge_patch(prev, new) == {"applied": {"cluster": "c", "values": {}}, "observed": None}


def test_cluster_not_found_is_stalled() -> None:
    # kstatus reads Stalled=True as Failed and Argo CD's health check as Degraded: never green.
    assert Reason.CLUSTER_NOT_FOUND in STALLED


def test_a_resource_whose_kafkacluster_is_missing_gets_cluster_not_found_after_the_settle_time() -> None:
    async def run() -> None:
        kube = Kube()
        rec = client_quota("q", "alice", producerByteRate=1000)
        records = {rec.ref.uid: rec}
        clusters: set[str] = set()
        reporter = OrphanReporter(kube, OperatorSettings(default_cluster="main"), records, clusters, settle=5)
        assert await reporter.check(now=100.0) == 0, "not before the settle time"
        assert await reporter.check(now=106.0) == 1
        status = kube.statuses["q"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "ClusterNotFound")
        assert "KafkaCluster 'c' does not exist" in ready["message"]
        assert any(c["type"] == "Stalled" and c["status"] == "True" for c in status["conditions"])
        assert [e[2] for e in kube.events] == ["ClusterNotFound"]
        assert await reporter.check(now=110.0) == 0, "written once per generation"
        # The KafkaCluster appears: nothing more from the reporter (its reconciler takes over),
        # even if it goes away again before the reporter's next look.
        clusters.add("c")
        reporter.cluster_seen("c")
        # It goes away again: the stale status is rewritten after the settle time.
        clusters.discard("c")
        assert await reporter.check(now=130.0) == 0
        kube.statuses["q"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "Applied"}]}
        records["q"] = client_quota("q", "alice", producerByteRate=1000)
        assert await reporter.check(now=136.0) == 1
        assert kube.statuses["q"]["conditions"][0]["reason"] == "ClusterNotFound"

    asyncio.run(run())


def test_the_message_names_the_default_cluster_setting_when_there_is_no_cluster_ref() -> None:
    async def run() -> None:
        kube = Kube()
        rec = client_quota("q", "alice", producerByteRate=1000)  # clusterRef "c" comes from the default here
        reporter = OrphanReporter(kube, OperatorSettings(default_cluster="c"), {"q": rec}, set(), settle=0)
        await reporter.check(now=1.0)
        ready = next(c for c in kube.statuses["q"]["conditions"] if c["type"] == "Ready")
        assert "operator's default cluster 'c' (operator.defaultCluster" in ready["message"]

    asyncio.run(run())


def test_a_key_restored_three_times_in_the_window_is_contested_until_its_retry() -> None:
    tracker = ContestTracker(restores=3, window=600, retry=300)
    key = (ALICE, P)
    assert not tracker.restored(key, 0) and not tracker.restored(key, 100)
    assert tracker.restored(key, 200), "the third restore within 600 s"
    assert tracker.contested(key, 201) and tracker.contested(key, 499)
    assert not tracker.contested(key, 500), "retry time: restore once more"
    assert not tracker.restored(key, 500), "the retry restore alone does not make it contested again"
    assert tracker.restored(key, 510), "the other writer still at it: contested again at once"


def test_restores_spread_over_more_than_the_window_are_only_drift() -> None:
    tracker = ContestTracker(restores=3, window=600, retry=300)
    for t in (0, 400, 800, 1200):
        assert not tracker.restored((ALICE, P), t)
    tracker.forget(lambda key: False)
    assert tracker.active(1300) == {}


def test_a_contest_ends_at_its_retry_time_even_when_nothing_drifts_again() -> None:
    """The other writer stopped with kquota's value in place: no restore comes to end the contest."""
    tracker = ContestTracker(restores=3, window=600, retry=300)
    for t in (0, 10, 20):
        tracker.restored((ALICE, P), t)
    assert set(tracker.active(100)) == {(ALICE, P)}
    assert tracker.active(320) == {}
    assert not tracker.restored((ALICE, P), 330), "one restore after the retry is not a contest"


def test_standing_still_the_orphan_reporter_examines_only_what_changed() -> None:
    async def run() -> None:
        kube = Kube()
        records = RecordStore()
        for i in range(1000):
            rec = client_quota(f"q{i}", f"user-{i}", producerByteRate=1000)
            records[rec.ref.uid] = rec
        clusters: set[str] = {"c"}
        reporter = OrphanReporter(kube, OperatorSettings(default_cluster="main"), records, clusters, settle=5)
        assert await reporter.check(now=100.0) == 0
        assert reporter.examined == 1000, "the first look reads everything"
        assert await reporter.check(now=102.0) == 0
        assert reporter.examined == 0, "nothing written since: nothing to read"
        # A resource moved to a cluster that does not exist: only it is read, and reported once settled.
        moved = replace(client_quota("q7", "user-7", producerByteRate=1000), cluster="gone")
        records[moved.ref.uid] = moved
        assert await reporter.check(now=104.0) == 0
        assert reporter.examined == 1
        assert await reporter.check(now=110.0) == 1, "still waiting, so still read, and reported after the settle"
        assert reporter.examined == 1
        assert kube.statuses["q7"]["conditions"][0]["reason"] == "ClusterNotFound"
        # The KafkaCluster of everything goes away: every resource is read again and reported.
        clusters.discard("c")
        assert await reporter.check(now=112.0) == 0
        assert reporter.examined == 1000
        assert await reporter.check(now=118.0) == 999

    asyncio.run(run())
