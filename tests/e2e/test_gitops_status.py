"""What Ready and Failed mean for a GitOps tool, where docs/gitops.md states more than other tests check.

- Ready is not re-checked between drift checks: a hand change on the brokers is put back at the next
  drift check and the resource stays Ready throughout (Ready never goes False for it).
- Failed (Stalled) says kquota does not apply the resource as its spec asks; it does not say the
  spec's values are absent: the newer of two claims with the same value, and a protected user whose
  hand-set value equals the spec, are Failed with exactly the spec on the brokers.
(Ready only once every key is on the brokers: tests/gitops/ with Flux, and the soak's invariants.
ClusterNotFound after the KafkaCluster is deleted and NotPermitted after a grant is narrowed, with
the keys kept: tests/e2e/test_trust.py.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, get, kafka_cluster_manifest, wait_for
from harness.stack import Stack, start_stack, stop_stack

from kquota.domain.entities import Entity
from tests.support.names import uniq
from tests.support.quotas import P
from tests.unit.test_argocd_health import flux, health

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(kube: KubeAPIServer, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = start_stack(kube, kafka, tmp_path_factory.mktemp("operator-gitops-status"), namespace_prefix="gst")
    try:
        yield s
    finally:
        stop_stack(s)


def wait_reason(stack: Stack, ns: str, name: str, reason: str) -> dict[str, Any]:
    def current() -> dict[str, Any] | None:
        obj = get(stack.kube, "clientquota", ns, name)
        reached = obj and condition(obj).get("reason") == reason
        return obj if reached and obj["status"].get("observedGeneration") == obj["metadata"]["generation"] else None

    found: dict[str, Any] = wait_for(
        current, 60, f"{ns}/{name} {reason}", on_timeout=lambda: json.dumps(get(stack.kube, "clientquota", ns, name))
    )
    return found


def event_messages(stack: Stack, ns: str, reason: str) -> list[str]:
    items = json.loads(stack.kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    return [e.get("message", "") for e in items if e.get("reason") == reason]


def test_ready_stays_true_while_a_hand_change_waits_for_the_drift_check(stack: Stack) -> None:
    ns, user = stack.new_namespace(), uniq("drift")
    apply(stack.kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 1024}))
    before = condition(wait_reason(stack, ns, "q", "Applied"))
    stack.kafka.kafka_configs(
        "--alter", "--entity-type", "users", "--entity-name", user, "--add-config", "producer_byte_rate=5", check=True
    )
    wait_for(
        lambda: any(f"users/{user}" in m for m in event_messages(stack, ns, "DriftCorrected")),
        60,
        "the drift check putting the key back",
    )
    assert stack.broker_quotas()[Entity.for_user(user)] == {P: 1024.0}
    after = condition(get(stack.kube, "clientquota", ns, "q"))
    # Ready never left True: its transition time is the one from before the hand change.
    assert (after["status"], after["lastTransitionTime"]) == ("True", before["lastTransitionTime"])


def test_failed_resources_may_have_exactly_their_spec_on_the_brokers(stack: Stack) -> None:
    ns = stack.new_namespace()
    # The newer of two claims on one key (same second: the name decides), both with the same value:
    # Conflict, and the value is live.
    shared = uniq("shared")
    apply(stack.kube, client_quota(ns, "claim-1", {"user": {"name": shared}}, {"producerByteRate": 2048}))
    wait_reason(stack, ns, "claim-1", "Applied")
    apply(stack.kube, client_quota(ns, "claim-2", {"user": {"name": shared}}, {"producerByteRate": 2048}))
    newer = wait_reason(stack, ns, "claim-2", "Conflict")

    # A protected user whose hand-set value equals the spec: Protected, the value is live.
    protected, cluster = uniq("protected"), uniq("kc")
    stack.kafka.kafka_configs(
        "--alter", "--entity-type", "users", "--entity-name", protected, "--add-config", "producer_byte_rate=3072",
        check=True,
    )  # fmt: skip
    spec = {"protectedUsers": [protected]}
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap, spec))
    try:
        apply(
            stack.kube,
            client_quota(ns, "prot", {"user": {"name": protected}}, {"producerByteRate": 3072}, cluster=cluster),
        )
        prot = wait_reason(stack, ns, "prot", "Protected")
        live = stack.broker_quotas()
        assert live[Entity.for_user(shared)] == {P: 2048.0}
        assert live[Entity.for_user(protected)] == {P: 3072.0}
        for obj in (newer, prot):
            assert condition(obj, "Stalled")["status"] == "True"
            assert health(obj)[0] == "Degraded"
        assert [status for status, _ in flux([newer, prot], exprs=True)] == ["Failed", "Failed"]
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=60s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)
