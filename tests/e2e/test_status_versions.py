"""Operator upgrade and downgrade (issue 23): the status's format version, on the real API server and a broker.

A status a newer kquota wrote (``status.formatVersion`` 2, written here by hand
through the status subresource, as such an operator would before a downgrade)
is never read: the operator does not report its applied values (not even where
the status is its only source, a resource whose KafkaCluster does not exist),
keeps ownership (the ledger's, not the status's: deleting the resource still
removes its key), rewrites the status in its own format, and says so in a
StatusFormat condition and a StatusFromNewerOperator event. The 0.1.0 statuses
themselves are read in tests/unit/test_status_versions.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness.operator_proc import apply, client_quota, condition, get, wait_for
from harness.stack import Stack

from kquota.domain.entities import Entity
from tests.support.names import uniq
from tests.support.quotas import P

pytestmark = pytest.mark.e2e

NEWER_TIME = "2030-01-01T00:00:00Z"


def newer_status(cluster: str, generation: int) -> dict[str, Any]:
    """What a newer kquota might have written: format 2, applied values and times this operator must not take."""
    return {
        "formatVersion": 2,
        "observedGeneration": generation,
        "applied": {"cluster": cluster, "values": {"producer_byte_rate": 999999}, "lastAppliedTime": NEWER_TIME},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AppliedInFormat2",
                "message": "written by a newer kquota",
                "lastTransitionTime": NEWER_TIME,
            }
        ],
    }


def write_status(stack: Stack, ns: str, name: str, status: dict[str, Any]) -> None:
    stack.kube.kubectl(
        "patch",
        "clientquota",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def events(stack: Stack, ns: str, name: str, reason: str) -> list[tuple[str, str]]:
    found = json.loads(
        stack.kube.kubectl(
            "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
        ).stdout
    )["items"]
    return [(e["type"], e["message"]) for e in found if e["reason"] == reason]


def status_of(stack: Stack, ns: str, name: str) -> dict[str, Any]:
    obj = get(stack.kube, "clientquota", ns, name)
    return dict((obj or {}).get("status") or {})


def test_a_status_from_a_newer_operator_is_rewritten_from_the_brokers_and_ownership_kept(stack: Stack) -> None:
    ns, user = stack.new_namespace(), uniq("fmtnewer")
    entity = Entity.for_user(user)
    apply(stack.kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 4242}))
    wait_for(lambda: condition(get(stack.kube, "clientquota", ns, "q")).get("reason") == "Applied", 30, "Applied")
    first = status_of(stack, ns, "q")
    assert first["formatVersion"] == 1, "every status kquota writes carries its format (kept by the CRD schema)"
    assert stack.broker_quotas()[entity] == {P: 4242.0}

    write_status(stack, ns, "q", newer_status(stack.operator.default_cluster, first["observedGeneration"]))
    assert status_of(stack, ns, "q")["formatVersion"] == 2

    # The next drift check (every 3 s here) sees a status it did not write and renders it again.
    def rewritten() -> dict[str, Any] | None:
        status = status_of(stack, ns, "q")
        return status if status.get("formatVersion") == 1 else None

    status = wait_for(rewritten, 30, "the status rewritten in format 1", on_timeout=stack.operator.log)
    assert status["applied"]["values"] == {"producer_byte_rate": 4242}, "the live value, not the newer status's"
    assert status["applied"]["lastAppliedTime"] != NEWER_TIME
    ready = condition({"status": status})
    assert (ready["status"], ready["reason"]) == ("True", "Applied")
    assert ready["lastTransitionTime"] != NEWER_TIME, "no time of a format it does not know is kept"
    note = condition({"status": status}, "StatusFormat")
    assert (note["status"], note["reason"]) == ("True", "StatusFromNewerOperator")
    assert "status written by a newer kquota (format 2); rewritten in format 1" in note["message"]
    said = wait_for(lambda: events(stack, ns, "q", "StatusFromNewerOperator"), 15, "the rewrite's event")
    assert said == [("Warning", note["message"])], said
    assert stack.broker_quotas()[entity] == {P: 4242.0}, "nothing on the brokers changed"

    # Ownership is the ledger's: deleting the resource removes its key.
    stack.kube.kubectl("delete", "clientquota", "q", "-n", ns, "--timeout=30s")
    wait_for(lambda: entity not in stack.broker_quotas(), 30, "the deleted resource's key removed")


def test_a_resource_without_its_kafkacluster_reports_no_applied_values_from_a_newer_status(stack: Stack) -> None:
    # Here the status is the only source of what was applied (the KafkaCluster does not exist).
    ns, user, gone = stack.new_namespace(), uniq("fmtorphan"), uniq("gone")
    quota = client_quota(ns, "o", {"user": {"name": user}}, {"producerByteRate": 1000}, cluster=gone)
    apply(stack.kube, quota)
    wait_for(lambda: condition(get(stack.kube, "clientquota", ns, "o")).get("reason") == "ClusterNotFound", 30, "CNF")
    write_status(stack, ns, "o", newer_status(gone, 1))
    # A spec change: the orphan reporter writes the status again, on the newer one.
    quota["spec"]["quota"] = {"producerByteRate": 2000}
    apply(stack.kube, quota)

    def reported() -> dict[str, Any] | None:
        status = status_of(stack, ns, "o")
        return status if status.get("formatVersion") == 1 and status.get("observedGeneration") == 2 else None

    status = wait_for(reported, 30, "ClusterNotFound rewritten in format 1", on_timeout=stack.operator.log)
    ready = condition({"status": status})
    assert ready["reason"] == "ClusterNotFound"
    assert status["applied"]["values"] == {}, "values of a format it does not know are not reported as applied"
    assert "stay on the brokers" not in ready["message"]
    assert "its status was written by a newer kquota (format 2" in ready["message"]
    assert condition({"status": status}, "StatusFormat").get("reason") == "StatusFromNewerOperator"
    said = wait_for(lambda: events(stack, ns, "o", "StatusFromNewerOperator"), 15, "the rewrite's event")
    assert [t for t, _ in said] == ["Warning"] and "(format 2)" in said[0][1]
