"""The reconciler survives its own death and the broker's absence, losing nothing.

Each scenario gets its own Kafka broker (so stopping it disturbs no other
test) and its own operator, on the session's API server.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kquota.domain.entities import Entity, QuotaKey
from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.harness.kafka_cluster import KafkaCluster
from tests.harness.kube_apiserver import KubeAPIServer
from tests.harness.operator_proc import apply, apply_many, client_quota, condition, get, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

P = QuotaKey.PRODUCER_BYTE_RATE


@pytest.fixture
def own_stack(kube: KubeAPIServer, tmp_path: Path) -> Iterator[Stack]:
    kafka = KafkaCluster.start(tmp_path / "kafka")
    stack = start_stack(kube, kafka, tmp_path / "operator", drift_interval=5.0)
    try:
        yield stack
    finally:
        stop_stack(stack)
        kafka.stop()


def owned_users(stack: Stack, prefix: str) -> dict[str, float]:
    return {
        e.user: v[P]
        for e, v in stack.broker_quotas().items()
        if e.has_user and not e.has_client_id and e.user and e.user.startswith(prefix) and P in v
    }


def test_operator_killed_mid_apply_converges_after_restart(own_stack: Stack) -> None:
    stack = own_stack
    ns = stack.new_namespace()
    prefix = f"k{uuid.uuid4().hex[:5]}-"
    quotas = [
        client_quota(ns, f"q{i}", {"user": {"name": f"{prefix}{i}"}}, {"producerByteRate": 1000 + i})
        for i in range(1000)
    ]
    # Resources keep arriving in small chunks while the operator applies them;
    # it is killed as soon as the first quotas land, so the kill is mid-apply
    # however fast this machine is, and the rest arrive while it is down.
    creator = threading.Thread(target=apply_many, args=(stack.kube, quotas, 50), daemon=True)
    creator.start()
    wait_for(lambda: len(owned_users(stack, prefix)) > 0, 60, "the first quotas on the broker", interval=0.05)
    stack.operator.kill()
    applied_at_kill = len(owned_users(stack, prefix))
    creator.join(300)
    assert not creator.is_alive()
    assert 0 < applied_at_kill < 1000, f"the kill did not land mid-apply ({applied_at_kill} applied)"

    # While it is down: delete 100 resources and change 100 others.
    for i in range(100):
        stack.kube.kubectl("delete", "clientquota", f"q{i}", "-n", ns, "--wait=false")
    apply_many(
        stack.kube,
        [
            client_quota(ns, f"q{i}", {"user": {"name": f"{prefix}{i}"}}, {"producerByteRate": 5000 + i})
            for i in range(100, 200)
        ],
    )

    stack.operator.start()
    expected = {f"{prefix}{i}": float(5000 + i if i < 200 else 1000 + i) for i in range(100, 1000)}
    wait_for(
        lambda: owned_users(stack, prefix) == expected,
        120,
        "exactly the desired 900 quotas",
        on_timeout=lambda: f"applied at kill: {applied_at_kill}; now {len(owned_users(stack, prefix))}",
    )
    # The deleted resources are really gone (their finalizers were released).
    wait_for(lambda: get(stack.kube, "clientquota", ns, "q0") is None, 60, "q0 deletion to complete")
    assert len(owned_users(stack, prefix)) == 900


def test_broker_down_reports_kafka_unavailable_then_converges(own_stack: Stack) -> None:
    stack = own_stack
    ns = stack.new_namespace()
    prefix = f"o{uuid.uuid4().hex[:5]}-"
    apply(
        stack.kube,
        client_quota(ns, "keep", {"user": {"name": f"{prefix}keep"}}, {"producerByteRate": 1000}),
        client_quota(ns, "change", {"user": {"name": f"{prefix}change"}}, {"producerByteRate": 1000}),
        client_quota(ns, "drop", {"user": {"name": f"{prefix}drop"}}, {"producerByteRate": 1000}),
    )
    wait_for(lambda: len(owned_users(stack, prefix)) == 3, 30, "three quotas")

    stack.kafka.stop_broker(0)
    down_at = time.monotonic()
    apply(
        stack.kube,
        client_quota(ns, "change", {"user": {"name": f"{prefix}change"}}, {"producerByteRate": 2000}),
        client_quota(ns, "new", {"user": {"name": f"{prefix}new"}}, {"producerByteRate": 3000}),
    )
    stack.kube.kubectl("delete", "clientquota", "drop", "-n", ns, "--wait=false")

    def unavailable() -> bool:
        return condition(get(stack.kube, "clientquota", ns, "new")).get("reason") == "KafkaUnavailable"

    wait_for(unavailable, 60, "status KafkaUnavailable")
    keep = condition(get(stack.kube, "clientquota", ns, "keep"))
    assert keep["status"] == "False" and keep["reason"] == "KafkaUnavailable"
    assert get(stack.kube, "clientquota", ns, "drop") is not None, "finalizer holds the deletion"
    cluster = json.loads(stack.kube.kubectl("get", "kafkacluster", stack.cluster, "-o", "json").stdout)
    assert condition(cluster)["status"] == "False" and condition(cluster)["reason"] == "KafkaUnavailable"

    time.sleep(max(0.0, 30 - (time.monotonic() - down_at)))
    stack.kafka.start_broker(0)
    expected = {f"{prefix}keep": 1000.0, f"{prefix}change": 2000.0, f"{prefix}new": 3000.0}
    wait_for(lambda: owned_users(stack, prefix) == expected, 90, "convergence after the outage")
    for name in ("keep", "change", "new"):
        wait_for(
            lambda n=name: condition(get(stack.kube, "clientquota", ns, n)).get("reason") == "Applied",
            30,
            f"{name} Ready again",
        )
    wait_for(lambda: get(stack.kube, "clientquota", ns, "drop") is None, 60, "the held deletion to complete")
    assert Entity.for_user(f"{prefix}drop") not in stack.broker_quotas()
