"""One Kafka cluster, one KafkaCluster (issue 19, finding 6), on the real API server and a broker of its own.

Two KafkaClusters pointing at the same brokers (one from the chart's values,
one from Git) kept two ledgers and fought over every key both claimed: the
value flipped on every drift check and both said Ready. The operator reads
the Kafka cluster's id and refuses the younger KafkaCluster.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, get, kafka_cluster_manifest, wait_for
from harness.stack import Stack

from kquota.domain.entities import Entity
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.support.quotas import P
from tests.support.stacks import own_stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def own(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Stack]]:
    with own_stack(kube, tmp_path_factory, "duplicate", {"KQUOTA_ALLOW_SHARED_KAFKA_CLUSTERS": "false"}) as pair:
        yield pair


@pytest.fixture(scope="module")
def broker(own: tuple[KafkaCluster, Stack]) -> KafkaCluster:
    return own[0]


@pytest.fixture(scope="module")
def stack(own: tuple[KafkaCluster, Stack]) -> Stack:
    return own[1]


def cluster_obj(stack: Stack, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(stack.kube.kubectl("get", "kafkacluster", name, "-o", "json").stdout)
    return found


def live(broker: KafkaCluster) -> dict[Entity, Any]:
    admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=broker.bootstrap))
    try:
        return admin.describe_all()
    finally:
        admin.close()


def test_a_second_kafkacluster_for_the_same_brokers_is_refused_instead_of_fighting(
    stack: Stack, broker: KafkaCluster
) -> None:
    ns, user = stack.new_namespace(), f"shared-{uuid.uuid4().hex[:6]}"
    entity = Entity.for_user(user)
    first = stack.cluster
    wait_for(lambda: cluster_obj(stack, first).get("status", {}).get("clusterId"), 30, "the first's clusterId")
    second = f"from-git-{uuid.uuid4().hex[:6]}"
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(second, broker.bootstrap))
    try:
        # The same key claimed through both, with different values.
        apply(
            stack.kube,
            client_quota(ns, "via-first", {"user": {"name": user}}, {"producerByteRate": 1000}, cluster=first),
            client_quota(ns, "via-second", {"user": {"name": user}}, {"producerByteRate": 2000}, cluster=second),
        )

        def refused() -> dict[str, Any] | None:
            obj = cluster_obj(stack, second)
            return obj if condition(obj).get("reason") == "DuplicateCluster" else None

        obj = wait_for(refused, 30, "the second KafkaCluster refused", on_timeout=stack.operator.log)
        message = condition(obj)["message"]
        assert first in message and obj["status"].get("clusterId") in (
            None,
            cluster_obj(stack, first)["status"]["clusterId"],
        )
        assert condition(obj, "Stalled").get("status") == "True"

        def resource_reason(name: str) -> str:
            return str(condition(get(stack.kube, "clientquota", ns, name)).get("reason", ""))

        wait_for(lambda: resource_reason("via-second") == "DuplicateCluster", 30, "the second's resource refused")
        wait_for(lambda: resource_reason("via-first") == "Applied", 30, "the first's resource applied")
        # No fight: two drift checks later the value is the first's, with no drift corrected.
        time.sleep(2 * stack.operator.drift_interval + 1)
        assert live(broker)[entity] == {P: 1000.0}
        events = stack.kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout
        assert "DriftCorrected" not in events

        # The first goes away: the second manages the Kafka cluster from its next retry.
        stack.kube.kubectl("delete", "clientquota", "via-first", "-n", ns, "--timeout=30s")
        stack.kube.kubectl("delete", "kafkacluster", first, "--timeout=30s")
        wait_for(lambda: resource_reason("via-second") == "Applied", 60, "the second takes over")
        assert live(broker)[entity] == {P: 2000.0}
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=30s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", second, "--timeout=30s", check=False)
        stack.kube.kubectl(
            "apply", "-f", "-", input=kafka_cluster_manifest(first, broker.bootstrap)
        )  # stop_stack deletes it
