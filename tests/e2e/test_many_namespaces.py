"""An operator watching a glob of namespaces (`KQUOTA_WATCH_NAMESPACES`) that grows to many, on the real API server.

kquota's informers hold one watch per quota kind and watched namespace. In the API
client's shared connection pool (32) the watches of 11 namespaces took every
connection: the next namespace's informers never listed, a new KafkaCluster's
reconciler waited for them for ever, and status writes queued behind them (#35).
Watches now have a pool of their own. 40 namespaces are 120 watches.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import LEDGER_NAMESPACE, apply, client_quota, condition, get, wait_for
from harness.stack import Stack

from kquota.domain.entities import Entity
from tests.support.stacks import own_stack

pytestmark = pytest.mark.e2e

#: Namespaces created while the operator runs, each with one ClientQuota.
NAMESPACES = 40


@pytest.fixture(scope="module")
def own(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Stack]]:
    with own_stack(kube, tmp_path_factory, "many", {}) as pair:
        yield pair


def test_the_kafkacluster_has_its_status_before_any_namespace_the_glob_matches_exists(
    own: tuple[KafkaCluster, Stack],
) -> None:
    """Kopf watches a cluster-scoped kind once per watched namespace: with none matched it watched no KafkaCluster.

    The operator's own namespace is always among Kopf's (the KafkaClusters are watched from the start), and a
    quota resource there, outside the glob, is not served: no finalizer, no key on the brokers.
    """
    _, stack = own
    names = stack.kube.kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert not [n for n in names if n.startswith(f"namespace/{stack.namespace_prefix}-")]
    wait_for(
        lambda: condition(get(stack.kube, "kafkacluster", "default", stack.cluster)).get("reason") == "Connected",
        30,
        "the KafkaCluster Connected",
        on_timeout=stack.operator.log,
    )
    user = f"outside-{uuid.uuid4().hex[:6]}"
    apply(stack.kube, client_quota(LEDGER_NAMESPACE, "outside", {"user": {"name": user}}, {"producerByteRate": 5}))
    try:
        # A resource served would be Applied within a pass: wait longer than several.
        time.sleep(3 * stack.operator.drift_interval)
        obj = get(stack.kube, "clientquota", LEDGER_NAMESPACE, "outside")
        assert obj is not None and not obj["metadata"].get("finalizers") and not obj.get("status")
        assert Entity.for_user(user) not in stack.broker_quotas()
    finally:
        stack.kube.kubectl("delete", "clientquota", "outside", "-n", LEDGER_NAMESPACE, "--timeout=30s")


def test_every_namespace_a_glob_matches_is_served_however_many(own: tuple[KafkaCluster, Stack]) -> None:
    _, stack = own
    tag = uuid.uuid4().hex[:6]
    placed: dict[str, Entity] = {}
    for i in range(NAMESPACES):
        ns = stack.new_namespace()
        entity = Entity.for_user(f"many-{tag}-{i}")
        apply(stack.kube, client_quota(ns, "q", {"user": {"name": entity.user}}, {"producerByteRate": 1000 + i}))
        placed[ns] = entity

    def missing() -> list[str]:
        live = stack.broker_quotas()
        return [e.path() for e in placed.values() if e not in live]

    wait_for(lambda: not missing(), 180, f"{NAMESPACES} quotas on the broker",
             on_timeout=lambda: f"missing: {missing()}\n{stack.operator.log()[-3000:]}")  # fmt: skip
    live = stack.broker_quotas()
    assert [sum(live[e].values()) for e in placed.values()] == [1000 + i for i in range(NAMESPACES)]

    def not_ready() -> list[str]:
        return [ns for ns in placed if condition(get(stack.kube, "clientquota", ns, "q")).get("status") != "True"]

    wait_for(lambda: not not_ready(), 120, "every resource Ready", on_timeout=lambda: f"not Ready: {not_ready()}")
    # One more namespace still gets its informers, its quota and its status with all those watches open.
    ns = stack.new_namespace()
    apply(stack.kube, client_quota(ns, "late", {"user": {"name": f"many-{tag}-late"}}, {"producerByteRate": 7}))
    wait_for(lambda: Entity.for_user(f"many-{tag}-late") in stack.broker_quotas(), 60, "the last one applied")
