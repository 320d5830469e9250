"""A resource's stored status, kept compact: equal statuses compare equal by digest, any edit does not."""

from __future__ import annotations

import copy
import json
from typing import Any

from kquota.domain.claims import claim_from_body
from kquota.domain.stored_status import EMPTY_STATUS, StoredStatus

WRITTEN: dict[str, Any] = {
    "observedGeneration": 1,
    "entity": "users/alice",
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Applied",
            "message": "applied",
            "lastTransitionTime": "2026-11-26T03:00:05Z",
            "observedGeneration": 1,
        }
    ],
    "applied": {"cluster": "c", "values": {"producer_byte_rate": 1000.0}, "lastAppliedTime": "2026-11-26T03:00:05Z"},
    "clients": ["a", "b"],
}


def test_what_kquota_wrote_and_what_the_api_server_returns_compare_equal() -> None:
    # The API server returns 1000.0 as 1000, and lists as lists: the same status.
    read_back = json.loads(json.dumps(WRITTEN).replace("1000.0", "1000"))
    assert StoredStatus.of(WRITTEN) == StoredStatus.of(read_back)
    assert StoredStatus.of(WRITTEN).digest == StoredStatus.of(read_back).digest
    assert StoredStatus.of(WRITTEN).decoded() == WRITTEN


def test_any_edit_of_the_stored_status_changes_its_digest() -> None:
    edits = []
    for path, value in (
        (("conditions", 0, "status"), "False"),
        (("applied", "values", "producer_byte_rate"), 1.0),
        (("clients", 1), "c"),
        (("entity",), "users/bob"),
    ):
        edited = copy.deepcopy(WRITTEN)
        target: Any = edited
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        edits.append(edited)
    edits.append({k: v for k, v in WRITTEN.items() if k != "applied"})
    original = StoredStatus.of(WRITTEN)
    for edited in edits:
        assert StoredStatus.of(edited) != original, edited
        assert StoredStatus.of(edited).digest != original.digest, edited


def test_a_claim_keeps_its_status_as_read_and_no_status_is_empty() -> None:
    body = {
        "kind": "ClientQuota",
        "metadata": {"name": "q", "namespace": "ns", "uid": "u1", "generation": 1, "creationTimestamp": "t"},
        "spec": {"entity": {"user": {"name": "alice"}}, "quota": {"producerByteRate": 1000}},
        "status": WRITTEN,
    }
    rec = claim_from_body("ClientQuota", body, "c")
    assert isinstance(rec.status, StoredStatus) and rec.status.decoded() == WRITTEN
    assert rec.status["applied"]["values"] == {"producer_byte_rate": 1000.0}
    assert rec.status.decoded() is not rec.status.decoded(), "a decoded status is the caller's own"
    empty = claim_from_body("ClientQuota", {**body, "status": None}, "c").status
    assert empty is EMPTY_STATUS and not empty and empty.get("applied") is None


def test_a_stored_near_limit_is_found_without_decoding() -> None:
    # The NearLimit hysteresis reads it for every resource on every full reading.
    assert StoredStatus.of({"observed": {"available": True, "nearLimit": True}}).mentions(b'"nearLimit":true')
    assert not StoredStatus.of({"observed": {"available": True, "nearLimit": False}}).mentions(b'"nearLimit":true')


def test_claims_share_their_namespace_cluster_and_creation_time_strings() -> None:
    def body(name: str) -> dict[str, Any]:
        # Built at run time, as a decoded watch event's strings are: equal, not the same object.
        meta = {"name": name, "namespace": "".join(["n", "s"]), "uid": name, "creationTimestamp": "".join("t1")}
        spec = {"clusterRef": "".join(["c", "1"]), "entity": {"user": {"name": name}}, "quota": {"producerByteRate": 1}}
        return {"kind": "ClientQuota", "metadata": meta, "spec": spec}

    a, b = claim_from_body("ClientQuota", body("a"), "c"), claim_from_body("ClientQuota", body("b"), "c")
    assert a.ref.namespace is b.ref.namespace and a.cluster is b.cluster and a.created is b.created


def test_a_status_read_back_as_written_is_the_written_copy_itself() -> None:
    # The API server returns maps with sorted keys and 1000.0 as 1000 (checked against a real
    # kube-apiserver's JSON): kquota's copy of what it wrote is then the one both hold.
    written = StoredStatus.written(WRITTEN)
    read_back = json.loads(json.dumps(WRITTEN, sort_keys=True).replace("1000.0", "1000"))
    assert StoredStatus.of(read_back, same=written) is written
    assert written == StoredStatus.of(WRITTEN) and written.digest == StoredStatus.of(WRITTEN).digest
    assert written.decoded() == WRITTEN
    edited = {**read_back, "entity": "users/bob"}
    other = StoredStatus.of(edited, same=written)
    assert other is not written and other != written and other.decoded() == edited
    assert StoredStatus.of(None, same=written) is EMPTY_STATUS
    assert StoredStatus.written({}) is EMPTY_STATUS
