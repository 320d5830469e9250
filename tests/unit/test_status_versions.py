"""Status format versions (issue 23): a 0.1.0 status is read exactly, a newer one is never guessed at.

The 0.1.0 statuses are test data made by that release's code (tests/data/status-0.1.0/).
Every read of a stored status goes through kquota.domain.status_format; these tests
hold the reader, the renderers and the paths that report applied values from the
status alone (unavailable, ClusterNotFound, NotAuthorized) to it.
tests/e2e/test_status_versions.py does the same on the real API server and broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota.domain import status as st
from kquota.domain import status_format as fmt
from kquota.domain.claims import ResourceClaim, claim_from_body
from kquota.domain.outcomes import unavailable
from kquota.domain.plan import ResourceRef
from kquota.domain.status import Outcome, Reason
from kquota.domain.stored_status import StoredStatus
from kquota.domain.topic_outcomes import TopicFacts, topic_outcomes
from kquota.reconcile.orphans import orphan_outcome
from tests.support.engine import Broker, Kube, engine, merge, quota
from tests.support.quotas import ALICE, P

DATA = Path(__file__).resolve().parents[1] / "data" / "status-0.1.0" / "statuses.yaml"
T9 = "2026-11-26T09:00:00Z"


def _statuses() -> dict[str, dict[str, Any]]:
    doc: Any = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return {item["name"]: item["status"] for item in doc["statuses"]}


STATUSES = _statuses()

#: What each 0.1.0 status says, written out by hand (not read from the script that made them):
#: (applied cluster, applied values, lastAppliedTime, Ready reason).
EXPECTED_010: dict[str, tuple[str | None, dict[str, float], str | None, str]] = {
    "alice": (
        "main",
        {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0},
        "2026-11-20T10:00:00Z",
        "Applied",
    ),
    "alice-unavailable": (
        "main",
        {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0},
        "2026-11-20T10:00:00Z",
        "KafkaUnavailable",
    ),
    "orders": ("main", {"producer_byte_rate": 1048576.0}, "2026-11-20T10:00:00Z", "Applied"),
    "ci": ("main", {"controller_mutation_rate": 5.0}, "2026-11-20T10:00:00Z", "Applied"),
    "reporting-orphan": ("gone", {"consumer_byte_rate": 4096.0}, "2026-11-20T10:00:00Z", "ClusterNotFound"),
    "main": (None, {}, None, "Connected"),
}


def newer(status: dict[str, Any], version: object = 2) -> dict[str, Any]:
    """``status`` as a newer kquota might write it: a format this code does not know, a field it never wrote."""
    return {**status, "formatVersion": version, "futureField": {"meaning": "unknown to format 1"}}


def claim(status: dict[str, Any], cluster: str = "main", kind: str = "ClientQuota") -> ResourceClaim:
    return ResourceClaim(
        ref=ResourceRef(kind, "ns", "r", "r"),
        created="2026-01-01T00:00:00Z",
        cluster=cluster,
        generation=1,
        status=StoredStatus.of(status),
    )


# -- the 0.1.0 statuses ---------------------------------------------------------------------------


def test_the_data_holds_every_kind_and_no_format_version() -> None:
    doc: Any = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    kinds = {item["kind"] for item in doc["statuses"]}
    assert kinds == {"ClientQuota", "TopicQuota", "ControllerMutationQuota", "KafkaCluster"}
    assert set(STATUSES) == set(EXPECTED_010)
    assert not any("formatVersion" in s for s in STATUSES.values()), "0.1.0 wrote no formatVersion"


@pytest.mark.parametrize("name", sorted(EXPECTED_010))
def test_a_010_status_reads_to_the_same_typed_fields(name: str) -> None:
    stored = STATUSES[name]
    read = fmt.read_status(StoredStatus.of(stored))
    assert not read.unreadable
    assert read.current == {**stored, "formatVersion": 1}, "read as it is, format 1"
    ready = next(c for c in read.current["conditions"] if c["type"] == "Ready")
    assert (read.applied_cluster, read.applied_values, read.last_applied_time, ready["reason"]) == EXPECTED_010[name]


def test_a_status_without_format_version_is_format_1() -> None:
    assert fmt.status_version({"observedGeneration": 1}) == 1
    assert fmt.status_version({"formatVersion": 1}) == 1
    assert fmt.read_status({"applied": {"cluster": "c", "values": {"producer_byte_rate": 5}}}).applied_values == {
        "producer_byte_rate": 5
    }
    assert fmt.read_status(None) == fmt.read_status({}) == fmt.NO_STATUS


def test_the_kafkacluster_010_status_keeps_its_cluster_id_and_broker_count() -> None:
    prev = STATUSES["main"]
    new = st.render_cluster_status(prev, 4, Reason.APPLIED, "connected", None, T9)
    assert (new["clusterId"], new["brokers"], new["formatVersion"]) == ("q1Sh-9_ISia_zwGINzRvyQ", 3, 1)
    assert new["conditions"][0]["lastTransitionTime"] == "2026-11-20T10:00:00Z"


@pytest.mark.parametrize("name", ["alice", "alice-unavailable", "orders", "ci", "reporting-orphan"])
def test_an_upgrade_renders_a_010_status_again_keeping_its_times_and_writing_nothing_for_the_stamp(
    name: str,
) -> None:
    prev = STATUSES[name]
    read = fmt.read_status(prev)
    outcome = Outcome(Reason.APPLIED, "ok", read.applied_values, True)
    new = st.render_status(prev, 9, outcome, "x", read.applied_cluster or "", T9)
    assert new["formatVersion"] == 1
    assert new["applied"]["lastAppliedTime"] == "2026-11-20T10:00:00Z", "values unchanged: their time is kept"
    # A status that differs only by the stamp is not written again (CRDs still 0.1.0's prune the field).
    pruned = {k: v for k, v in new.items() if k != "formatVersion"}
    assert not st.needs_write(pruned, new)
    assert st.needs_write({**pruned, "formatVersion": 2}, new)


# -- rendered statuses carry the format ------------------------------------------------------------


def test_every_rendered_status_carries_the_format_version() -> None:
    quota_status = st.render_status(None, 1, Outcome(Reason.PENDING, "p"), "users/a", "c", T9)
    cluster_status = st.render_cluster_status(None, 1, Reason.APPLIED, "connected", 1, T9)
    assert quota_status["formatVersion"] == cluster_status["formatVersion"] == fmt.FORMAT_VERSION == 1
    assert fmt.read_status(quota_status).current == quota_status


# -- a newer format is never guessed at ------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 99, "2", True, 0, 1.5, None])
def test_a_status_of_an_unknown_format_reads_as_nothing(version: object) -> None:
    read = fmt.read_status(StoredStatus.of(newer(STATUSES["alice"], version)))
    assert read.unreadable
    assert read.current == {}
    assert (read.applied_values, read.applied_cluster, read.last_applied_time) == ({}, None, None)


@pytest.mark.parametrize(
    ("version", "origin"),
    [
        (2, "written by a newer kquota (format 2)"),
        ("2", "in no format kquota writes (formatVersion '2')"),
        (0, "in no format kquota writes (formatVersion 0)"),
        (True, "in no format kquota writes (formatVersion True)"),
    ],
)
def test_the_note_blames_a_newer_kquota_only_for_a_newer_format(version: object, origin: str) -> None:
    read = fmt.read_status({"formatVersion": version, "applied": {"cluster": "c", "values": {"x": 1}}})
    assert read.note().startswith(f"status {origin}; rewritten in format 1")
    assert f"its status was {origin};" in read.unknown_applied()


def test_render_on_a_newer_status_takes_nothing_from_it_and_says_so() -> None:
    prev = newer(STATUSES["alice"])
    outcome = Outcome(Reason.APPLIED, "ok", {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0}, True)
    new = st.render_status(prev, 4, outcome, "users/alice", "main", T9)
    assert new["formatVersion"] == 1
    # The same values, but their time in a format it does not know is not kept.
    assert new["applied"]["lastAppliedTime"] == T9
    assert all(c["lastTransitionTime"] == T9 for c in new["conditions"])
    note = next(c for c in new["conditions"] if c["type"] == "StatusFormat")
    assert (note["status"], note["reason"]) == ("True", "StatusFromNewerOperator")
    assert "status written by a newer kquota (format 2); rewritten in format 1" in note["message"]
    assert st.needs_write(prev, new)
    # What the API server holds after the patch: nothing of the newer format is left under format 1.
    stored = merge(prev, st.merge_patch(prev, new))
    assert "futureField" not in stored and "observed" not in stored
    assert stored == new


def test_a_010_status_is_patched_as_before_other_writers_fields_kept() -> None:
    prev = {**STATUSES["alice"], "someoneElse": 1}
    new = st.render_status(prev, 3, Outcome(Reason.APPLIED, "ok", {}, True), "users/alice", "main", T9)
    assert "someoneElse" not in st.merge_patch(prev, new), "a readable status keeps the merge patch's rule"
    assert not any(c["type"] == "StatusFormat" for c in new["conditions"])


def test_unavailable_reports_no_applied_values_from_a_newer_status() -> None:
    old = claim(STATUSES["alice"])
    new_ = dataclasses.replace(claim(newer(STATUSES["alice"])), ref=ResourceRef("ClientQuota", "ns", "n", "n"))
    got = unavailable([old, new_], Reason.KAFKA_UNAVAILABLE, "down")
    assert dict(got["r"].applied) == EXPECTED_010["alice"][1] and got["r"].message == "down"
    assert dict(got["n"].applied) == {}, "values of a format it does not know are not reported as applied"
    assert got["n"].message.startswith("down; what it applied before is unknown to this operator")
    assert "format 2" in got["n"].message


def test_cluster_not_found_reports_no_applied_values_from_a_newer_status() -> None:
    old = orphan_outcome(claim(STATUSES["reporting-orphan"], cluster="gone"), "default")
    assert dict(old.applied) == {"consumer_byte_rate": 4096.0}
    assert "quotas it applied before stay on the brokers" in old.message
    got = orphan_outcome(claim(newer(STATUSES["reporting-orphan"]), cluster="gone"), "default")
    assert (got.reason, dict(got.applied)) == (Reason.CLUSTER_NOT_FOUND, {})
    assert "stay on the brokers" not in got.message and "written by a newer kquota (format 2" in got.message


def topic(status: dict[str, Any]) -> ResourceClaim:
    spec = {
        "topic": {"name": "orders"},
        "budget": {"producerByteRate": "3Mi"},
        "enforcement": "ClientQuotas",
        "clients": [{"user": {"name": "ingest"}, "share": 100}],
    }
    meta = {"name": "t", "namespace": "ns", "uid": "t", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"}
    doc = {"apiVersion": "kquota.io/v1alpha1", "kind": "TopicQuota", "metadata": meta, "spec": spec}
    return dataclasses.replace(claim_from_body("TopicQuota", doc, "main"), status=StoredStatus.of(status))


def test_a_refused_topic_reports_no_applied_values_from_a_newer_status() -> None:
    facts = TopicFacts(refused={"orders": "not authorized to describe topic orders"})
    _, outs, _ = topic_outcomes([topic(STATUSES["orders"])], facts)
    assert (outs["t"].reason, dict(outs["t"].applied)) == (Reason.NOT_AUTHORIZED, {"producer_byte_rate": 1048576.0})
    _, outs, _ = topic_outcomes([topic(newer(STATUSES["orders"]))], facts)
    assert (outs["t"].reason, dict(outs["t"].applied)) == (Reason.NOT_AUTHORIZED, {})
    assert "format 2" in outs["t"].message


def test_a_newer_kafkacluster_status_gives_no_cluster_id_or_brokers() -> None:
    prev = newer(STATUSES["main"])
    new = st.render_cluster_status(prev, 4, Reason.APPLIED, "connected", None, T9)
    assert (new["clusterId"], new["brokers"], new["formatVersion"]) == (None, None, 1)
    assert any(c["type"] == "StatusFormat" and c["reason"] == "StatusFromNewerOperator" for c in new["conditions"])


# -- migrations -------------------------------------------------------------------------------------


def test_migrations_run_in_order_from_the_version_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def one_to_two(doc: dict[str, Any]) -> dict[str, Any]:
        return {**doc, "formatVersion": 2, "applied2": doc.get("applied")}

    def two_to_three(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if k != "applied2"} | {"formatVersion": 3, "applied": doc["applied2"]}

    monkeypatch.setattr(fmt, "FORMAT_VERSION", 3)
    monkeypatch.setattr(fmt, "MIGRATIONS", {1: one_to_two, 2: two_to_three})
    applied = {"cluster": "c", "values": {"producer_byte_rate": 5}}
    assert fmt.migrate({"applied": applied}) == {"formatVersion": 3, "applied": applied}
    assert fmt.migrate({"formatVersion": 2, "applied2": applied}) == {"formatVersion": 3, "applied": applied}
    assert fmt.migrate({"formatVersion": 4, "applied": applied}) is None, "newer: never guessed"
    monkeypatch.setattr(fmt, "MIGRATIONS", {1: lambda doc: {**doc, "formatVersion": 3}})
    assert fmt.migrate({"formatVersion": 1}) is None, "a step that skips a version is no migration"
    assert fmt.migrate({"formatVersion": 2}) is None, "nor is a missing step"


# -- the engine meets a newer status ------------------------------------------------------------------


def test_the_engine_rewrites_a_newer_status_from_the_live_brokers_and_says_so() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        stored = newer(
            {
                "applied": {
                    "cluster": "c",
                    "values": {"producer_byte_rate": 999.0},
                    "lastAppliedTime": "2030-01-01T00:00:00Z",
                },
                "conditions": [],
            }
        )
        rec = dataclasses.replace(quota("qa", "alice", 2000), status=StoredStatus.of(stored))
        kube.statuses["qa"] = stored
        eng = engine([rec], broker, kube)
        await eng.reconcile_once()
        got = kube.statuses["qa"]
        assert broker.live == {ALICE: {P: 2000.0}}
        assert got["formatVersion"] == 1 and "futureField" not in got
        assert got["applied"]["values"] == {"producer_byte_rate": 2000.0}, "live values, not the newer status's"
        assert got["applied"]["lastAppliedTime"] != "2030-01-01T00:00:00Z"
        assert any(c["type"] == "StatusFormat" for c in got["conditions"])
        said = [e for e in kube.events if e[2] == "StatusFromNewerOperator"]
        assert said == [("qa", "Warning", "StatusFromNewerOperator", fmt.read_status(stored).note())]

    asyncio.run(run())
