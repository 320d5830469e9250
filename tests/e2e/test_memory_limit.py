"""An operator whose memory limit cannot hold its resources says so and waits, instead of an OOM-kill loop.

The operator runs as the chart runs it in a container: under a memory limit, here
a memory cgroup of the test's own (harness/cgroup.py, root). With more quota
resources than the limit can hold at start-up (kquota.reconcile.sizing's measured
need), it must not read them all and be OOM-killed, restarted and killed again:
it counts them (one list of one object per kind), reconciles nothing, and every
KafkaCluster says ``Ready=False``, reason ``InsufficientMemory``, with the limit
to set, and one Warning event; the process stays up and the kernel kills nothing.
Given the memory, it starts as usual.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.cgroup import MemoryCgroup
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import (
    OperatorProcess,
    apply_many,
    client_quota,
    condition,
    ensure_ledger_namespace,
    kafka_cluster_manifest,
    wait_for,
)

from kquota.domain.entities import Entity
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from kquota.reconcile import sizing
from tests.support.chart import chart_liveness_probe

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: A limit the operator's own start fits in comfortably, but not the need of RESOURCES.
LIMIT_MIB = sizing.BASE_MIB + 30
RESOURCES = math.ceil((LIMIT_MIB - sizing.BASE_MIB) * 1024 / sizing.KIB_PER_RESOURCE) + 200


@pytest.fixture
def cgroup() -> Iterator[MemoryCgroup]:
    if os.geteuid() != 0:
        pytest.fail("a memory cgroup needs root (as the node suite does)")
    group = MemoryCgroup(LIMIT_MIB * 2**20)
    try:
        yield group
    finally:
        group.remove()


def kafkacluster(kube: KubeAPIServer, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(kube.kubectl("get", "kafkacluster", name, "-o", "json").stdout)
    return doc


def test_a_limit_below_the_need_is_said_on_every_kafkacluster_and_nothing_is_oom_killed(
    own_kube: KubeAPIServer, kafka: KafkaCluster, cgroup: MemoryCgroup, tmp_path: Path
) -> None:
    kube = own_kube
    kube.apply_crds()
    ensure_ledger_namespace(kube)
    clusters = [f"kc-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for name in clusters:
        kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(name, kafka.bootstrap))
    ns = kube.create_namespace()
    prefix = f"mem-{uuid.uuid4().hex[:6]}"
    apply_many(
        kube,
        [
            client_quota(
                ns, f"q{i}", {"user": {"name": f"{prefix}-{i}"}}, {"producerByteRate": 1000}, cluster=clusters[0]
            )
            for i in range(RESOURCES)
        ],
    )
    operator = OperatorProcess(kube, tmp_path / "operator", default_cluster=clusters[0], wrapper=cgroup.wrap)
    operator.start(timeout=120)
    try:
        for name in clusters:
            wait_for(
                lambda name=name: condition(kafkacluster(kube, name)).get("reason") == "InsufficientMemory",
                120,
                f"KafkaCluster {name} says InsufficientMemory",
                on_timeout=lambda: operator.log()[-3000:],
            )
            ready = condition(kafkacluster(kube, name))
            assert ready["status"] == "False"
            assert f"{LIMIT_MIB} MiB" in ready["message"] and f"{RESOURCES} quota resources" in ready["message"]
            assert f"{sizing.limit_mib(RESOURCES)}Mi" in ready["message"], ready["message"]
            stalled = condition(kafkacluster(kube, name), "Stalled")
            assert stalled.get("status") == "True", stalled
        events = json.loads(kube.kubectl("get", "events", "-A", "-o", "json").stdout)["items"]
        warnings = [e for e in events if e["reason"] == "InsufficientMemory" and e["type"] == "Warning"]
        assert sorted(e["involvedObject"]["name"] for e in warnings) == sorted(clusters), warnings
        # It stays up, reconciles nothing, and the kernel killed nothing.
        time.sleep(10)
        assert operator.proc is not None and operator.proc.alive(), operator.log()[-3000:]
        assert operator.healthy(timeout=chart_liveness_probe()[0])
        assert cgroup.oom_kills() == 0
        admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=kafka.bootstrap))
        try:
            assert not [e for e in admin.describe_all() if e.path().startswith(f"users/{prefix}-")]
        finally:
            admin.close()
    finally:
        operator.stop()
    # With the memory it needs, the same operator starts and applies.
    operator.wrapper = None
    operator.start(timeout=120)
    try:
        admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=kafka.bootstrap))
        try:
            wait_for(lambda: Entity.for_user(f"{prefix}-0") in admin.describe_all(), 180, "applied with enough memory")
        finally:
            admin.close()
        wait_for(lambda: condition(kafkacluster(kube, clusters[0])).get("reason") == "Connected", 120, "Connected")
    finally:
        operator.stop()
