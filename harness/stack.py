"""A running kquota stack: real API server, real Kafka, the operator process, and one KafkaCluster.

Used by the e2e tests, the benchmarks and anything else that needs the whole thing up.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import (
    OperatorProcess,
    ensure_ledger_namespace,
    kafka_cluster_manifest,
)
from kquota.domain.entities import Entity, QuotaKey
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings


@dataclass
class Stack:
    kube: KubeAPIServer
    kafka: KafkaCluster
    operator: OperatorProcess
    cluster: str
    #: Prefix of the namespaces :meth:`new_namespace` creates (an operator
    #: scoped with ``KQUOTA_WATCH_NAMESPACES=["<prefix>-*"]`` sees only those).
    namespace_prefix: str = "team"

    def broker_quotas(self) -> dict[Entity, dict[QuotaKey, float]]:
        """The brokers' quotas, read through the integration-tested adapter."""
        admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=self.kafka.bootstrap))
        try:
            return admin.describe_all()
        finally:
            admin.close()

    def new_namespace(self, part: str = "") -> str:
        """A fresh namespace this stack's operator watches (``<prefix>[-part]-<random>``)."""
        return self.kube.create_namespace(f"{self.namespace_prefix}-{part}" if part else self.namespace_prefix)


def start_stack(
    kube: KubeAPIServer,
    kafka: KafkaCluster,
    workdir: Path,
    drift_interval: float = 3.0,
    extra_env: dict[str, str] | None = None,
    namespace_prefix: str | None = None,
) -> Stack:
    """Apply the CRDs and a KafkaCluster for ``kafka``, and start an operator whose default cluster it is.

    With ``namespace_prefix`` the operator watches only the namespaces named
    ``<prefix>-*`` (Kopf's namespace globs), so quota resources left by other
    test modules on the shared API server (a resource without clusterRef goes
    to every operator's default cluster) never reach this stack's brokers.
    """
    kube.apply_crds()
    ensure_ledger_namespace(kube)
    cluster = f"kc-{uuid.uuid4().hex[:6]}"
    kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, kafka.bootstrap))
    env = dict(extra_env or {})
    if namespace_prefix:
        env["KQUOTA_WATCH_NAMESPACES"] = json.dumps([f"{namespace_prefix}-*"])
    operator = OperatorProcess(
        kube, workdir, default_cluster=cluster, drift_interval=drift_interval, extra_env=env
    ).start()
    return Stack(kube, kafka, operator, cluster, namespace_prefix or "team")


def stop_stack(stack: Stack) -> None:
    # Delete the KafkaCluster while the operator still runs: Kopf holds a
    # finalizer on objects with daemons and releases it when the daemon stops.
    stack.kube.kubectl("delete", "kafkacluster", stack.cluster, "--timeout=30s", check=False)
    stack.operator.stop()
