"""TopicQuota on a real 3-broker cluster: budgets follow the leader layout; honest about KIP-1010."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, condition, get, wait_for
from harness.stack import Stack, start_stack, stop_stack
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from kquota.domain.entities import Entity, QuotaKey
from tests.support.quotas import C, P

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUDGET = 6 * 2**20


@pytest.fixture(scope="module")
def stack3(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Its own 3-broker cluster: the test stops a broker.
    kafka = KafkaCluster.start(tmp_path_factory.mktemp("kafka3"), brokers=3)
    stack = start_stack(kube, kafka, tmp_path_factory.mktemp("operator3"), drift_interval=3.0, namespace_prefix="tq")
    try:
        yield stack
    finally:
        stop_stack(stack)
        kafka.stop()


def topic_quota(
    ns: str, name: str, topic: str, enforcement: str, clients: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "topic": {"name": topic},
        "budget": {"producerByteRate": BUDGET, "consumerByteRate": 2 * BUDGET},
        "enforcement": enforcement,
    }
    if clients:
        spec["clients"] = clients
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "TopicQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def create_topic(stack: Stack, partitions: int) -> str:
    """A topic whose leaders are spread evenly over brokers 1-3 (explicit assignment, preferred leader first)."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    rotations = ([1, 2, 3], [2, 3, 1], [3, 1, 2])
    assignment = {p: rotations[p % 3] for p in range(partitions)}
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, replica_assignments=assignment)])
    finally:
        admin.close()
    return topic


def leaders(stack: Stack, topic: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka.bootstrap)
    try:
        [desc] = admin.describe_topics([topic])
        return {p["partition_index"]: p["leader_id"] for p in desc["partitions"]}
    finally:
        admin.close()


def settled_leaders(
    stack: Stack, topic: str, partitions: int, brokers: set[int], what: str, timeout: float = 30
) -> dict[int, int]:
    """The layout once every partition has a leader and the leaders are exactly ``brokers``.

    Taken from the same read the wait accepted: another metadata read may reach a broker
    that has not caught up yet and see no partitions, or a leader of -1, for a moment.
    """

    def layout() -> dict[int, int] | None:
        now = leaders(stack, topic)
        return now if len(now) == partitions and set(now.values()) == brokers else None

    found: dict[int, int] = wait_for(layout, timeout, what, on_timeout=lambda: str(leaders(stack, topic)))
    return found


def status_of(stack: Stack, ns: str, name: str) -> dict[str, Any]:
    return get(stack.kube, "topicquota", ns, name) or {}


def test_client_quotas_follow_leadership_and_other_modes_are_honest(stack3: Stack) -> None:
    stack = stack3
    ns = stack.new_namespace()
    topic = create_topic(stack, partitions=6)
    layout = settled_leaders(stack, topic, 6, {1, 2, 3}, "leaders on 3 brokers")
    max_leaders = max(list(layout.values()).count(b) for b in set(layout.values()))
    user, client = f"u-{uuid.uuid4().hex[:6]}", f"c-{uuid.uuid4().hex[:6]}"
    apply(
        stack.kube,
        topic_quota(
            ns,
            "enforced",
            topic,
            "ClientQuotas",
            [{"user": {"name": user}, "share": 50}, {"clientId": {"name": client}, "share": 25}],
        ),
    )

    def expect(max_on_one: int) -> dict[Entity, dict[QuotaKey, float]]:
        return {
            Entity.for_user(user): {
                P: float(BUDGET * 50 // 100 * max_on_one // 6),
                C: float(2 * BUDGET * 50 // 100 * max_on_one // 6),
            },
            Entity.for_client(client): {
                P: float(BUDGET * 25 // 100 * max_on_one // 6),
                C: float(2 * BUDGET * 25 // 100 * max_on_one // 6),
            },
        }

    def on_brokers(expected: dict[Entity, dict[QuotaKey, float]]) -> bool:
        live = stack.broker_quotas()
        return all(live.get(e) == v for e, v in expected.items())

    wait_for(
        lambda: on_brokers(expect(max_leaders)),
        30,
        "client quotas from the balanced layout",
        on_timeout=lambda: json.dumps(status_of(stack, ns, "enforced")),
    )
    # Status is written after the brokers are changed, in the same pass: wait for it.
    wait_for(
        lambda: condition(status_of(stack, ns, "enforced"), "Enforced").get("status") == "True",
        30,
        "Enforced=True in status",
    )
    obj = status_of(stack, ns, "enforced")
    assert obj["status"]["allowance"]["partitions"] == 6
    assert sum(b["leaders"] for b in obj["status"]["allowance"]["brokers"].values()) == 6
    # Each client's quota, as the operator wrote it (the API server pruned it while the
    # status schema had no clients field).
    assert obj["status"]["clients"] == [
        {"entity": e.path(), **{k.value: v for k, v in values.items()}} for e, values in expect(max_leaders).items()
    ]

    # Monitor mode: the KIP-1010 allowance per broker, nothing enforced.
    apply(stack.kube, topic_quota(ns, "watched", topic, "Monitor"))
    wait_for(lambda: condition(status_of(stack, ns, "watched")).get("reason") == "Monitoring", 30, "Monitoring")
    watched = status_of(stack, ns, "watched")["status"]
    assert watched["allowance"]["brokers"]["1"]["producerByteRate"] == BUDGET // 6 * layout_count(layout, 1)
    # Monitor is a mode the user chose: its event is Normal, not a Warning (issue 19, finding 8).
    events = json.loads(stack.kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    monitoring = [e for e in events if e.get("reason") == "Monitoring"]
    assert monitoring and {e["type"] for e in monitoring} == {"Normal"}, monitoring

    # TopicConfig mode on stock Kafka: said plainly, and no topic config touched.
    apply(stack.kube, topic_quota(ns, "native", topic, "TopicConfig"))
    wait_for(
        lambda: condition(status_of(stack, ns, "native")).get("reason") == "UnsupportedByBroker",
        30,
        "UnsupportedByBroker",
    )
    native = status_of(stack, ns, "native")
    assert condition(native, "Enforced") == {
        **condition(native, "Enforced"),
        "status": "False",
        "reason": "UnsupportedByBroker",
    }
    assert "KIP-1010" in condition(native)["message"]
    assert modified_topic_configs(stack, topic) == {}

    # Leadership moves when a broker goes away; the quotas follow within the drift interval.
    stack.kafka.stop_broker(2)
    moved = settled_leaders(stack, topic, 6, {1, 2}, "leaders to leave broker 3", timeout=60)
    new_max = max(list(moved.values()).count(b) for b in set(moved.values()))
    assert new_max > max_leaders
    wait_for(
        lambda: on_brokers(expect(new_max)),
        stack.operator.drift_interval + 30,
        "client quotas recomputed after the leadership change",
    )


def layout_count(layout: dict[int, int], broker: int) -> int:
    return list(layout.values()).count(broker)


def modified_topic_configs(stack: Stack, topic: str) -> dict[str, Any]:
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka.bootstrap)
    try:
        result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        return {
            k: v
            for k, v in result.get("topic", {}).get(topic, {}).items()
            if v.get("config_source") == "DYNAMIC_TOPIC_CONFIG"
        }
    finally:
        admin.close()
