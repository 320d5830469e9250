"""A KafkaCluster whose brokers answer is served while its neighbours' brokers never do (real API server and broker).

One operator serves every KafkaCluster. Brokers behind a firewall that drops
packets hold each connection attempt for its whole timeout, on every retry.
Those calls ran on the event loop's shared default executor (six threads on
two cores): two dozen such KafkaClusters took every thread, and a healthy
KafkaCluster's first pass waited behind them (its clusterId came after 30 s
with twelve, in CI after more). Each KafkaCluster now runs its blocking calls
on threads of its own (``kquota.reconcile.blocking``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, get, kafka_cluster_manifest, wait_for

from kquota.domain.entities import Entity
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.support.quotas import P
from tests.support.stacks import own_stack

pytestmark = pytest.mark.e2e

#: Unreachable KafkaClusters: on the shared executor they queued (six at a time, each attempt
#: about 5 s, retried) well over a minute of calls ahead of the healthy cluster's first.
HOLES = 24


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """An address whose connections are never answered: a listener that never accepts.

    Its backlog fills with the first connection; later SYNs are dropped (the
    kernel's answer to a full backlog), as a firewall that drops packets does.
    """
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(0)
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_a_healthy_kafkacluster_is_served_while_many_others_are_unreachable(
    kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    kube.apply_crds()
    holes = [f"hole-{uuid.uuid4().hex[:6]}-{i}" for i in range(HOLES)]
    with black_hole() as address:
        # Before the operator starts: at its start every hole's first pass is queued with the healthy one's.
        for name in holes:
            kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(name, address))
        try:
            with own_stack(kube, tmp_path_factory, "neighbours", {}) as (broker, stack):
                ns, user = stack.new_namespace(), f"served-{uuid.uuid4().hex[:6]}"
                apply(stack.kube, client_quota(ns, "served", {"user": {"name": user}}, {"producerByteRate": 4096}))
                started = time.monotonic()

                def applied() -> bool:
                    return condition(get(stack.kube, "clientquota", ns, "served")).get("reason") == "Applied"

                # A bound far above a served cluster's pass (a second or two on a busy machine) and far below
                # the queue the holes made on shared threads.
                wait_for(applied, 30, "the healthy cluster's resource applied", on_timeout=stack.operator.log)
                admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=broker.bootstrap))
                try:
                    assert admin.describe_all()[Entity.for_user(user)] == {P: 4096.0}
                finally:
                    admin.close()
                # And every hole says why it does nothing: no KafkaCluster without a status.
                remaining = max(10.0, 60 - (time.monotonic() - started))

                def not_unavailable() -> list[str]:
                    found = json.loads(kube.kubectl("get", "kafkacluster", "-o", "json").stdout)["items"]
                    ready = {o["metadata"]["name"]: condition(o) for o in found}
                    return [
                        n
                        for n in holes
                        if (ready.get(n, {}).get("status"), ready[n].get("reason")) != ("False", "KafkaUnavailable")
                    ]

                wait_for(lambda: not not_unavailable(), remaining, "every hole KafkaUnavailable")
                # Deleted while the operator runs: its finalizers go with it.
                kube.kubectl("delete", "kafkacluster", *holes, "--timeout=60s")
        finally:
            kube.kubectl("delete", "kafkacluster", *holes, "--timeout=5s", "--ignore-not-found", check=False)
            for name in holes:
                # An operator gone before the deletion leaves Kopf's finalizer: the name must not stay.
                kube.kubectl(
                    "patch", "kafkacluster", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False
                )
