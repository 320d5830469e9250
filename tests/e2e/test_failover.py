"""Failover of peered replicas is bounded by the peering lifetime (KQUOTA_PEERING_LIFETIME).

Three ``kquota operator`` processes against the real API server and broker, as
the soak's failover fault and the chart's replicas run them: the active one is
SIGKILLed (its record stays in the ClusterKopfPeering until its lifetime runs
out, then a standby resumes), and the next active one is SIGTERMed (it removes
its record on the way out: a standby resumes at once, whatever its lifetime).
Each time a change made right after the active replica went lands on the
broker within the bound.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import invariants
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import (
    OperatorProcess,
    apply,
    client_quota,
    ensure_ledger_namespace,
    kafka_cluster_manifest,
    wait_for,
)
from harness.soak.engine import PEERING_CRD

from kquota.domain.entities import Entity

pytestmark = pytest.mark.e2e

#: The killed replica's lifetime: the standby waits at most this long for its record to expire.
KILLED_LIFETIME = 10
#: The SIGTERMed replica's lifetime: long, so only the record's removal explains a quick takeover.
CLEAN_EXIT_LIFETIME = 60
#: Beyond the lifetime: the standby's own re-check (one PATCH and its watch event), resuming its
#: watches, one pass and the broker round trip, on two busy cores.
PASS_SECONDS = 10.0


class Replicas:
    def __init__(self, kube: KubeAPIServer, workdir: Path, cluster: str, peering: str) -> None:
        self.kube, self.workdir, self.cluster, self.peering = kube, workdir, cluster, peering
        self.started: list[OperatorProcess] = []
        self.namespace = ""

    def start(self, pod: str, priority: int, lifetime: int) -> OperatorProcess:
        op = OperatorProcess(
            self.kube,
            self.workdir / pod,
            default_cluster=self.cluster,
            extra_env={
                "KQUOTA_PEERING": self.peering,
                "KQUOTA_PEERING_PRIORITY": str(priority),
                "KQUOTA_PEERING_LIFETIME": str(lifetime),
                "POD_ID": pod,
            },
        )
        self.started.append(op)
        return op.start()

    def peers(self) -> dict[str, dict[str, object]]:
        obj = json.loads(self.kube.kubectl("get", "clusterkopfpeering", self.peering, "-o", "json").stdout)
        found: dict[str, dict[str, object]] = obj.get("status") or {}
        return found

    def standing_by(self, op: OperatorProcess, pod: str) -> None:
        wait_for(
            lambda: pod in self.peers() and "Pausing the watch-stream for clientquotas" in op.log(),
            60,
            f"{pod} standing by",
        )


@pytest.fixture
def replicas(kube: KubeAPIServer, kafka: KafkaCluster, tmp_path: Path) -> Iterator[Replicas]:
    kube.apply_crds()
    kube.kubectl("apply", "--server-side", "-f", str(PEERING_CRD))
    kube.kubectl("wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev", "--timeout=60s")
    peering = f"fo-{uuid.uuid4().hex[:6]}"
    kube.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": peering},
    }))  # fmt: skip
    ensure_ledger_namespace(kube)
    cluster = f"kc-{uuid.uuid4().hex[:6]}"
    kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, kafka.bootstrap))
    r = Replicas(kube, tmp_path, cluster, peering)
    try:
        yield r
    finally:
        live = [op for op in r.started if op.proc is not None and op.proc.alive()]
        if live:
            # Leave nothing for later modules' operators: delete while a replica still runs.
            kube.kubectl("delete", "clientquotas", "--all", "-n", r.namespace, "--timeout=60s", check=False)
            kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)
        for op in r.started:
            op.stop()
        kube.kubectl("delete", "clusterkopfpeering", peering, check=False)


def _lands(r: Replicas, kafka: KafkaCluster, entity: Entity, rate: float, bound: float, who: OperatorProcess) -> float:
    """Seconds from now until the broker holds ``rate`` for ``entity`` (fails beyond ``bound``)."""
    began = time.monotonic()
    wait_for(
        lambda: invariants.describe(kafka.bootstrap, timeout=10).get(entity, {}).get("producer_byte_rate") == rate,
        bound,
        f"producer_byte_rate {rate} on the broker",
        on_timeout=who.log,
    )
    return time.monotonic() - began


def test_a_standby_takes_over_within_the_lifetime_and_at_once_after_a_clean_exit(
    replicas: Replicas, kube: KubeAPIServer, kafka: KafkaCluster
) -> None:
    r = replicas
    r.namespace = ns = kube.create_namespace("failover")
    user = f"fo-{uuid.uuid4().hex[:6]}"
    entity = Entity.for_user(user)

    def change(rate: int) -> None:
        apply(kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": rate}, cluster=r.cluster))

    active = r.start("fo-a", 3, KILLED_LIFETIME)
    wait_for(lambda: "fo-a" in r.peers(), 30, "the first replica in the peering object")
    standby = r.start("fo-b", 2, CLEAN_EXIT_LIFETIME)
    r.standing_by(standby, "fo-b")
    change(1000)
    _lands(r, kafka, entity, 1000.0, 60, active)

    # SIGKILL: the record stays; the standby resumes when it expires (<= the killed one's lifetime).
    active.kill()
    change(2000)
    killed = _lands(r, kafka, entity, 2000.0, KILLED_LIFETIME + PASS_SECONDS, standby)
    assert "Resuming operations" in standby.log()

    # SIGTERM: the replica deletes its record on the way out; the next standby does not wait
    # out its 60 s lifetime.
    last = r.start("fo-c", 1, KILLED_LIFETIME)
    r.standing_by(last, "fo-c")
    standby.stop()
    assert "fo-b" not in r.peers(), "a clean exit left its peering record"
    change(3000)
    clean = _lands(r, kafka, entity, 3000.0, PASS_SECONDS, last)
    print(f"\nfailover: SIGKILL {killed:.1f} s (lifetime {KILLED_LIFETIME} s), SIGTERM {clean:.1f} s")


def test_a_standby_that_was_active_takes_over_without_restoring_a_deleted_resource(
    replicas: Replicas, kube: KubeAPIServer, kafka: KafkaCluster
) -> None:
    """A replica active first, then paused by a higher one, then taking over again: a resource deleted
    while it stood by is gone for it too. (Kopf's own index, which kquota's used to be, stops with the
    pause and keeps such a resource for ever: the replica taking over applied its quota again, and the
    node suite's uninstall found it on the broker once its KafkaCluster was gone, #33.)"""
    r = replicas
    r.namespace = ns = kube.create_namespace("failover")
    tag = uuid.uuid4().hex[:6]
    gone, kept = Entity.for_user(f"gone-{tag}"), Entity.for_user(f"kept-{tag}")

    def quota(name: str, entity: Entity, rate: int) -> dict[str, object]:
        return client_quota(ns, name, {"user": {"name": entity.user}}, {"producerByteRate": rate}, cluster=r.cluster)

    first = r.start("fo-first", 2, CLEAN_EXIT_LIFETIME)
    apply(kube, quota("gone", gone, 1000), quota("kept", kept, 1000))
    _lands(r, kafka, gone, 1000.0, 60, first)
    _lands(r, kafka, kept, 1000.0, 60, first)
    # A higher replica arrives: the first one stands by (Kopf pauses its watches).
    higher = r.start("fo-higher", 3, CLEAN_EXIT_LIFETIME)
    r.standing_by(first, "fo-first")
    kube.kubectl("delete", "clientquota", "gone", "-n", ns, "--timeout=60s")
    wait_for(lambda: gone not in invariants.describe(kafka.bootstrap, timeout=10), 30, "the deleted quota removed",
             on_timeout=higher.log)  # fmt: skip
    # The higher one exits cleanly: the first one takes over at once, and its first pass runs.
    higher.stop()
    apply(kube, quota("kept", kept, 2000))
    _lands(r, kafka, kept, 2000.0, 60, first)
    wait_for(lambda: "Resuming operations" in first.log(), 10, "the first replica resumed")
    # A full pass after the takeover (the drift check is woken by nothing here, so give it one).
    time.sleep(2)
    assert gone not in invariants.describe(kafka.bootstrap, timeout=10), (
        f"the replica taking over applied the deleted resource's quota again\n{first.log()[-4000:]}"
    )
