"""Observed throttling in status, end to end: real over-quota traffic -> broker metrics -> operator -> status."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.conftest import Stack
from tests.harness.operator_proc import apply, client_quota, condition, get, wait_for
from tests.integration.test_throttle_metrics import ProducerLoad

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUOTA = 100_000
WINDOW = "20s"


def test_producer_over_its_quota_shows_throttled_then_clears(stack: Stack, scram_user: tuple[str, str]) -> None:
    user, password = scram_user
    name = f"observed-{uuid.uuid4().hex[:6]}"
    endpoints = [b.metrics_url for b in stack.kafka.brokers]
    stack.kube.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "kquota.io/v1alpha1",
                "kind": "KafkaCluster",
                "metadata": {"name": name},
                "spec": {
                    "bootstrapServers": stack.kafka.bootstrap,
                    "metrics": {"brokerEndpoints": endpoints, "window": WINDOW, "nearLimitPercent": 80},
                },
            }
        ),
    )
    ns = stack.new_namespace()
    apply(stack.kube, client_quota(ns, "producer", {"user": {"name": user}}, {"producerByteRate": QUOTA}, cluster=name))
    wait_for(
        lambda: condition(get(stack.kube, "clientquota", ns, "producer")).get("reason") == "Applied",
        30,
        "quota applied",
    )
    topic = f"observed-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(stack.kafka.client_config())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    def throttled() -> dict[str, Any] | None:
        obj = get(stack.kube, "clientquota", ns, "producer")
        return obj if condition(obj, "Throttled").get("status") == "True" else None

    load = ProducerLoad(stack.kafka.client_config(user, password), topic, rate=3 * QUOTA)
    load.start()
    started = time.monotonic()
    try:
        obj = wait_for(
            throttled,
            30,
            "Throttled=True in status",
            on_timeout=lambda: json.dumps(get(stack.kube, "clientquota", ns, "producer")),
        )
        print(f"Throttled=True in status after {time.monotonic() - started:.1f}s")
        observed = obj["status"]["observed"]
        assert observed["total"]["produceThrottleTimeMs"] > 0, observed
        assert load.throttles and max(load.throttles) > 0, "the client itself saw throttling"
        assert condition(obj, "Ready")["status"] == "True", "throttling is not a failure of the resource"
        events = stack.kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout
        assert '"reason": "Throttled"' in events
    finally:
        load.finish()
    stopped = time.monotonic()
    wait_for(
        lambda: condition(get(stack.kube, "clientquota", ns, "producer"), "Throttled").get("status") == "False",
        20 + 45,
        "Throttled=False after the producer stopped",
    )
    print(f"Throttled=False {time.monotonic() - stopped:.1f}s after the producer stopped")
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")
