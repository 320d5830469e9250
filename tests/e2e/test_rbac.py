"""The chart's RBAC is sufficient and minimal: the operator runs as the chart's ServiceAccount.

The chart is installed with helm into the real API server, with a KafkaCluster
from values that reaches the test broker over SASL with credentials in a
Secret. The operator then runs outside the cluster (no kubelet here) with a
token of the chart's ServiceAccount, with Kopf peering through the chart's
ClusterKopfPeering, and must pass the reconcile scenarios of test_reconcile.py
(sufficient); requests outside the chart's rules must be refused (minimal).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import OperatorProcess, apply, client_quota, wait_for
from harness.stack import Stack, stop_stack

from kquota import __version__
from kquota.domain.entities import Entity, QuotaKey
from tests.e2e import test_reconcile as scenarios
from tests.e2e.test_helm import CHART, Helm
from tests.plugins.kafka import unique_name

pytestmark = pytest.mark.e2e


@dataclass
class Release:
    name: str
    namespace: str
    secret_namespace: str
    service_account: str
    peering: str
    cluster: str
    kubeconfig: Path
    token: str


@pytest.fixture(scope="module")
def release(kube: KubeAPIServer, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The chart, installed as users install it, with a SASL KafkaCluster from values."""
    workdir = tmp_path_factory.mktemp("rbac")
    name = f"rb-{uuid.uuid4().hex[:6]}"
    ns, secret_ns = kube.create_namespace("kquota"), kube.create_namespace("kafka")
    # The operator's credentials, and a neighbour it must not read.
    kube.kubectl(
        "create", "secret", "generic", "kquota-kafka-admin", "-n", secret_ns,
        f"--from-literal=username={kafka.admin_user}", f"--from-literal=password={kafka.admin_password}",
    )  # fmt: skip
    kube.kubectl("create", "secret", "generic", "unrelated", "-n", secret_ns, "--from-literal=password=nope")
    cluster = f"kc-{uuid.uuid4().hex[:6]}"
    values = {
        "kafka": {
            "clusters": [
                {
                    "name": cluster,
                    "spec": {
                        "bootstrapServers": kafka.sasl_bootstrap,
                        "security": {
                            "protocol": "SASL_PLAINTEXT",
                            "sasl": {
                                "mechanism": "PLAIN",
                                "credentialsSecretRef": {"namespace": secret_ns, "name": "kquota-kafka-admin"},
                            },
                        },
                    },
                }
            ]
        }
    }
    helm = Helm(workdir / "helm", kube)
    helm("install", name, str(CHART), "--namespace", ns, "--values", "-", input=json.dumps(values))
    sa = f"{name}-kquota"
    token = kube.service_account_token(ns, sa)
    kubeconfig = kube.write_kubeconfig_for(token, workdir / "sa.kubeconfig")
    return Release(name, ns, secret_ns, sa, f"{name}-kquota", cluster, kubeconfig, token)


def operator_as_service_account(
    kube: KubeAPIServer, release: Release, workdir: Path, priority: int, pod: str
) -> OperatorProcess:
    """``kquota operator`` as the chart's Deployment runs it, but outside the cluster."""
    return OperatorProcess(
        kube,
        workdir,
        default_cluster=release.cluster,
        drift_interval=3.0,
        extra_env={
            "KUBECONFIG": str(release.kubeconfig),
            "KQUOTA_NAMESPACE": release.namespace,
            "KQUOTA_PEERING": release.peering,
            "KQUOTA_PEERING_PRIORITY": str(priority),
            "POD_ID": pod,
        },
    )


@dataclass
class TrackingStack(Stack):
    """A Stack that remembers its namespaces, to clean them up while the operator still runs."""

    namespaces: list[str] = field(default_factory=list)

    def new_namespace(self) -> str:
        ns = super().new_namespace()
        self.namespaces.append(ns)
        return ns


@pytest.fixture(scope="module")
def sa_stack(
    kube: KubeAPIServer, kafka: KafkaCluster, release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TrackingStack]:
    operator = operator_as_service_account(kube, release, tmp_path_factory.mktemp("operator-sa"), 100, "kquota-0")
    s = TrackingStack(kube, kafka, operator.start(), release.cluster)
    try:
        yield s
    finally:
        # Leave no quota resources (without clusterRef) for later modules' operators to adopt.
        for ns in s.namespaces:
            kube.kubectl(
                "delete", "clientquotas,controllermutationquotas", "--all", "-n", ns, "--timeout=60s", check=False
            )
        stop_stack(s)


@pytest.fixture(scope="module")
def stack(sa_stack: TrackingStack) -> Stack:
    """The reconcile scenarios below take ``stack``: here it is the ServiceAccount's."""
    return sa_stack


# -- sufficient: the reconcile scenarios, run by the ServiceAccount's operator ------------------

test_kafka_cluster_status_shows_it_is_connected = scenarios.test_kafka_cluster_status_shows_it_is_connected
test_create_modify_delete_delete_again = scenarios.test_create_modify_delete_delete_again
test_out_of_band_change_is_corrected_and_unmanaged_entries_are_untouched = (
    scenarios.test_out_of_band_change_is_corrected_and_unmanaged_entries_are_untouched
)
test_conflicting_resources_older_wins_and_newer_reports_conflict = (
    scenarios.test_conflicting_resources_older_wins_and_newer_reports_conflict
)


def test_ledger_is_kept_in_the_release_namespace(sa_stack: Stack, release: Release) -> None:
    ledger = sa_stack.kube.kubectl(
        "get", "configmaps", "-n", release.namespace, "-l", f"kquota.io/ledger={release.cluster}", "-o", "name"
    ).stdout
    assert f"kquota-ledger-{release.cluster}-" in ledger


def test_the_operator_publishes_its_default_cluster(sa_stack: Stack, release: Release) -> None:
    """The chart's Role lets the operator write ConfigMap kquota-operator, where kquota plan reads the default."""
    cm = json.loads(
        sa_stack.kube.kubectl("get", "configmap", "kquota-operator", "-n", release.namespace, "-o", "json").stdout
    )
    published = json.loads(cm["data"]["settings.json"])
    assert {k: published[k] for k in ("defaultCluster", "version")} == {
        "defaultCluster": release.cluster,
        "version": __version__,
    }
    # What plan needs to agree with this operator: its protected principals and guard limits (the harness
    # runs with the guard off).
    assert published["protectedUsers"] == [] and published["deletionGuard"]["enabled"] is False


def test_exactly_one_replica_is_active_and_a_standby_takes_over(
    kube: KubeAPIServer, sa_stack: TrackingStack, release: Release, tmp_path: Path
) -> None:
    standby = operator_as_service_account(kube, release, tmp_path, 50, "kquota-1").start()
    try:
        # Both replicas announce themselves in the chart's ClusterKopfPeering.
        def peers() -> set[str]:
            obj = json.loads(kube.kubectl("get", "clusterkopfpeering", release.peering, "-o", "json").stdout)
            return set(obj.get("status") or {})

        wait_for(lambda: {"kquota-0", "kquota-1"} <= peers(), 30, "both replicas in the peering object")
        ns, user = sa_stack.new_namespace(), unique_name("standby")
        apply(kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 4096}))
        scenarios.wait_ready(sa_stack, ns, "q", reason="Applied")
        # Kopf starts a peered operator paused and keeps it so while a peer with
        # a higher priority is alive: the standby never reconciled.
        assert "Resuming operations" not in standby.log()
        assert standby.metric("kquota_reconcile_passes_total") == 0, "the standby reconciled"

        # The active replica goes away (a rolling update, a node drain): the standby takes over.
        sa_stack.operator.stop()
        wait_for(lambda: "Resuming operations" in standby.log(), 60, "the standby replica to resume")
        apply(kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 8192}))
        scenarios.wait_broker(sa_stack, Entity.for_user(user), {QuotaKey.PRODUCER_BYTE_RATE: 8192.0}, timeout=60)
        assert standby.metric("kquota_reconcile_passes_total") > 0
    finally:
        # Back to one active operator (the module's) before the standby stops.
        if not (sa_stack.operator.proc and sa_stack.operator.proc.alive()):
            sa_stack.operator.start()
        standby.stop()


# -- minimal: what the ServiceAccount may not do -------------------------------------------------


def kubectl_as(kube: KubeAPIServer, release: Release, *args: str) -> subprocess.CompletedProcess[str]:
    return kube.kubectl(*args, token=release.token, check=False)


def can_i(kube: KubeAPIServer, release: Release, *args: str) -> bool:
    return kubectl_as(kube, release, "auth", "can-i", *args).stdout.strip() == "yes"


def test_reads_only_the_secrets_it_is_pointed_at(kube: KubeAPIServer, release: Release) -> None:
    ok = kubectl_as(kube, release, "get", "secret", "kquota-kafka-admin", "-n", release.secret_namespace)
    assert ok.returncode == 0, ok.stderr
    for args in (
        ("get", "secret", "unrelated", "-n", release.secret_namespace),
        ("get", "secrets", "-n", release.secret_namespace),
        ("get", "secrets", "-n", release.namespace),
        ("get", "secrets", "--all-namespaces"),
    ):
        refused = kubectl_as(kube, release, *args)
        assert refused.returncode != 0 and "Forbidden" in refused.stderr, (args, refused.stdout, refused.stderr)
    assert not can_i(kube, release, "watch", "secrets", "-n", release.secret_namespace)
    assert not can_i(kube, release, "update", "secret/kquota-kafka-admin", "-n", release.secret_namespace)


def test_requests_outside_its_role_are_refused(kube: KubeAPIServer, release: Release) -> None:
    other_ns = kube.create_namespace("other")
    quota = json.dumps(client_quota(other_ns, "mine", {"user": {"name": "x"}}, {"producerByteRate": 1}))
    refused = kube.kubectl("create", "-f", "-", input=quota, token=release.token, check=False)
    assert refused.returncode != 0 and "Forbidden" in refused.stderr, refused.stderr
    for args in (
        ("get", "pods", "--all-namespaces"),
        ("get", "configmaps", "-n", other_ns),
        ("get", "namespaces"),
        ("get", "deployments", "-n", release.namespace),
        ("delete", "kafkacluster", release.cluster),
        ("patch", "clusterkopfpeering", "someone-elses", "--type=merge", "-p", '{"status": {}}'),
    ):
        refused = kubectl_as(kube, release, *args)
        assert refused.returncode != 0 and "Forbidden" in refused.stderr, (args, refused.stdout, refused.stderr)
    # Verbs the operator never uses, on the objects it does use.
    for verb, resource, *where in (
        ("create", "clientquotas", "-n", other_ns),
        ("update", "clientquotas", "-n", other_ns),
        ("delete", "clientquotas", "-n", other_ns),
        ("get", "clientquotas", "-n", other_ns),
        ("create", "kafkaclusters"),
        ("delete", "configmaps", "-n", release.namespace),
        ("get", "configmaps", "-n", release.namespace),
        ("list", "configmaps", "-n", other_ns),
        ("create", "configmaps", "-n", other_ns),
        ("patch", "events", "-n", other_ns),
        ("create", "customresourcedefinitions"),
        ("create", "clusterkopfpeerings.kopf.dev"),
        ("delete", "clusterkopfpeerings.kopf.dev", release.peering),
        ("create", "roles", "-n", release.namespace),
        ("impersonate", "serviceaccounts", "-n", release.namespace),
    ):
        assert not can_i(kube, release, verb, resource, *where), f"may {verb} {resource} {where}"
    # ... and the ones it needs, as a cross-check of the above being meaningful.
    for verb, resource, *where in (
        ("list", "clientquotas", "--all-namespaces"),
        ("patch", "clientquotas", "-n", other_ns, "--subresource=status"),
        ("patch", "kafkaclusters", "--subresource=status"),
        ("create", "events", "-n", other_ns),
        ("update", "configmaps", "-n", release.namespace),
        ("patch", f"clusterkopfpeerings.kopf.dev/{release.peering}"),
        ("watch", "customresourcedefinitions"),
    ):
        assert can_i(kube, release, verb, resource, *where), f"may not {verb} {resource} {where}"


def test_operator_met_no_permission_error(sa_stack: Stack) -> None:
    """Runs last: everything above happened without a refused request or a degraded Kopf."""
    log = sa_stack.operator.log()
    for needle in ("Forbidden", "Not enough permissions", "is not readable"):
        assert needle not in log, f"{needle!r} in the operator's log"
