"""KafkaCluster ``spec.metrics.names`` end to end: brokers whose exporter writes other names feed status.observed.

The module's broker runs harness/jmx-exporter.yaml with two changes a site's own rules might make: the
quota metrics are ``kafka_quota_<attribute>`` (not ``kafka_server_quota_<attribute>``) and the user label
is ``kafka_user`` (not ``user``). A producer goes over its ClientQuota and the broker throttles it. Read
with the default names, the operator reads the endpoint but finds none of its series: status.observed is
there, available, and empty (no broker, no usage) and Throttled stays False. Once the KafkaCluster maps
the names in ``spec.metrics.names`` (a new metrics source: the names are part of its configuration), the
same resource shows Throttled=True with the broker's usage and throttle time.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from harness.kafka_cluster import JMX_RULES, KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, get, wait_for
from harness.stack import Stack

from kquota.metrics.exposition import parse_text
from tests.support.load import ProducerLoad
from tests.support.stacks import own_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUOTA = 100_000
PREFIX = "kafka_quota_"
USER_LABEL = "kafka_user"
#: Reads of the metrics the operator makes per second, here (KQUOTA_METRICS_INTERVAL).
METRICS_INTERVAL = 1.0
#: How long the resource must stay without observations while the broker throttles its client.
UNMAPPED_FOR = 10.0


def renamed_rules(path: Path) -> Path:
    """harness/jmx-exporter.yaml with the quota metrics and the user label renamed."""
    config = yaml.safe_load(JMX_RULES.read_text(encoding="utf-8"))
    renamed = 0
    for rule in config["rules"]:
        if rule["name"].startswith("kafka_server_quota_"):
            rule["name"] = PREFIX + rule["name"].removeprefix("kafka_server_quota_")
            labels = rule["labels"]
            if "user" in labels:
                labels[USER_LABEL] = labels.pop("user")
            renamed += 1
    assert renamed == 3, "the harness rules changed shape: rename their quota rules here too"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def own(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Stack]]:
    rules = renamed_rules(tmp_path_factory.mktemp("renamed-rules") / "jmx-exporter.yaml")
    with own_stack(
        kube,
        tmp_path_factory,
        "metricnames",
        {"KQUOTA_METRICS_INTERVAL": str(METRICS_INTERVAL)},
        jmx_rules=rules,
    ) as pair:
        yield pair


def observed_of(stack: Stack, ns: str) -> dict[str, Any]:
    status = (get(stack.kube, "clientquota", ns, "producer") or {}).get("status") or {}
    return dict(status.get("observed") or {})


def throttle_on_the_page(broker: KafkaCluster, user: str) -> float:
    """The broker's own throttle time for ``user``'s produce bucket, read under the renamed names."""
    page = broker.brokers[0].metrics_text()
    values = [
        s.value
        for s in parse_text(page, [PREFIX])
        if s.name == PREFIX + "throttle_time" and s.labels.get(USER_LABEL) == user and s.labels["resource"] == "Produce"
    ]
    return max(values, default=0.0)


def patch_metrics(stack: Stack, metrics: dict[str, Any]) -> None:
    stack.kube.kubectl(
        "patch", "kafkacluster", stack.cluster, "--type=merge", "-p", json.dumps({"spec": {"metrics": metrics}})
    )


def test_observed_fills_only_once_the_names_are_mapped(own: tuple[KafkaCluster, Stack]) -> None:
    broker, stack = own
    user, password = f"renamed-{uuid.uuid4().hex[:6]}", secrets.token_hex(12)
    broker.create_scram_user(user, password)
    ns = stack.new_namespace()
    apply(stack.kube, client_quota(ns, "producer", {"user": {"name": user}}, {"producerByteRate": QUOTA}))
    wait_for(
        lambda: condition(get(stack.kube, "clientquota", ns, "producer")).get("reason") == "Applied", 30, "Applied"
    )
    topic = f"renamed-{uuid.uuid4().hex[:6]}"
    # The client must outlive the future: a collected client fails it (_DESTROY).
    topics = AdminClient(broker.client_config())
    topics.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    patch_metrics(stack, {"brokerEndpoints": [b.metrics_url for b in broker.brokers], "window": "20s"})

    load = ProducerLoad(broker.client_config(user, password), topic, rate=3 * QUOTA)
    load.start()
    try:
        # The broker throttles the producer, and says so under the renamed names.
        wait_for(lambda: throttle_on_the_page(broker, user) > 0, 30, f"{PREFIX}throttle_time > 0 for {user}")
        assert load.throttles, "the client saw throttling"

        # Without names: read, but nothing of it is the operator's to see.
        wait_for(lambda: observed_of(stack, ns).get("available"), 30, "status.observed written")
        deadline = time.monotonic() + UNMAPPED_FOR
        while time.monotonic() < deadline:
            obj = get(stack.kube, "clientquota", ns, "producer")
            observed = observed_of(stack, ns)
            assert observed["available"] is True and observed["source"] == "Scrape", observed
            assert observed["brokers"] == [] and observed["total"]["produceByteRate"] == 0, observed
            assert condition(obj, "Throttled").get("status") == "False", condition(obj, "Throttled")
            time.sleep(METRICS_INTERVAL)
        print(f"\nwithout spec.metrics.names, while the broker throttled: status.observed = {json.dumps(observed)}")

        patch_metrics(stack, {"names": {"quotaPrefix": PREFIX, "userLabel": USER_LABEL}})
        mapped = time.monotonic()

        def throttled() -> dict[str, Any] | None:
            obj = get(stack.kube, "clientquota", ns, "producer")
            return obj if condition(obj, "Throttled").get("status") == "True" else None

        obj = wait_for(
            throttled,
            30,
            "Throttled=True once the names are mapped",
            on_timeout=lambda: json.dumps(get(stack.kube, "clientquota", ns, "producer")),
        )
        print(f"Throttled=True {time.monotonic() - mapped:.1f}s after spec.metrics.names was set")
    finally:
        load.finish()
    observed = obj["status"]["observed"]
    assert observed["total"]["produceThrottleTimeMs"] > 0, observed
    assert observed["total"]["produceByteRate"] > 0, observed
    assert [b["broker"] for b in observed["brokers"]] == [f"127.0.0.1:{b.metrics_port}" for b in broker.brokers]

    # The metrics are no longer read (spec.metrics removed): the last reading leaves the status, and
    # Throttled with it, rather than stay as if current.
    stack.kube.kubectl(
        "patch", "kafkacluster", stack.cluster, "--type=json", "-p", '[{"op":"remove","path":"/spec/metrics"}]'
    )

    def unobserved() -> dict[str, Any] | None:
        status = get(stack.kube, "clientquota", ns, "producer")["status"]
        return status if "observed" not in status else None

    status = wait_for(unobserved, 30, "status.observed gone once spec.metrics is removed")
    types = {c["type"] for c in status["conditions"]}
    assert "Ready" in types and not types & {"Throttled", "NearLimit"}, status["conditions"]
