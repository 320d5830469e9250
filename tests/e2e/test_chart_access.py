"""Who may do what with the chart's values, on the real API server.

- ``rbac.aggregateToDefaultRoles``: the real kube-controller-manager's ClusterRole aggregation
  controller gives Kubernetes' ``edit``/``admin`` and ``view`` roles the quota kinds, and a team
  bound to ``edit`` in its namespace creates a ClientQuota there.
- ``operator.watchNamespaces``: the operator run with exactly the Deployment's environment and the
  chart's ServiceAccount, with peering through the chart's ClusterKopfPeering, handles the quotas
  of the watched namespace and leaves the others without a status.
- ``kafka.extraStrimzi``: the chart's ServiceAccount may read exactly the Strimzi objects and
  Secrets a Git-kept ``spec.strimzi`` KafkaCluster needs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import node, procs
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, get, wait_for

from tests.e2e.test_helm import CHART, Helm
from tests.support.chart import deployment_env, operator_as_deployment
from tests.support.strimzi import RELEASES as STRIMZI_RELEASES
from tests.support.strimzi import install_crds

pytestmark = pytest.mark.e2e


@pytest.fixture
def aggregation(kube: KubeAPIServer, tmp_path: Path) -> Iterator[None]:
    """kube-controller-manager with only its ClusterRole aggregation controller."""
    kubeconfig = str(kube.kubeconfig)
    proc = procs.Process(
        "kube-controller-manager",
        [
            str(node.ensure_go_binary("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={procs.free_port()}",
            "--leader-elect=false",
            "--controllers=clusterrole-aggregation",
        ],
        tmp_path / "kube-controller-manager.log",
    )
    proc.start()
    try:
        yield
    finally:
        proc.stop()


def rules_of(kube: KubeAPIServer, role: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = json.loads(kube.kubectl("get", "clusterrole", role, "-o", "json").stdout)["rules"]
    return rules


def grants(rules: list[dict[str, Any]], resource: str, verb: str) -> bool:
    return any(
        "kquota.io" in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
        for r in rules
    )


def can_i(kube: KubeAPIServer, token: str, verb: str, resource: str, namespace: str) -> bool:
    result = kube.kubectl("auth", "can-i", verb, resource, "-n", namespace, token=token, check=False)
    return result.stdout.strip() == "yes"


def test_teams_get_quota_rights_through_their_edit_and_view_roles(
    kube: KubeAPIServer, aggregation: None, tmp_path: Path
) -> None:
    helm = Helm(tmp_path / "helm", kube)
    release, ns = f"agg-{uuid.uuid4().hex[:6]}", kube.create_namespace("kquota")
    # Releases other modules installed on this API server (and left: a test's releases are not
    # uninstalled) aggregate their quota rights into `edit` too, and would keep them there after
    # this release stops: only this release's roles may aggregate here.
    for role in ("admin", "edit", "view"):
        kube.kubectl("label", "clusterrole", "-l", f"rbac.authorization.k8s.io/aggregate-to-{role}=true,"
                     "app.kubernetes.io/name=kquota", f"rbac.authorization.k8s.io/aggregate-to-{role}-")  # fmt: skip
    helm("install", release, str(CHART), "--namespace", ns)
    for role in ("admin", "edit"):
        wait_for(lambda role=role: grants(rules_of(kube, role), "clientquotas", "create"), 60, f"{role} aggregated")
    wait_for(lambda: grants(rules_of(kube, "view"), "topicquotas", "list"), 60, "view aggregated")
    assert not grants(rules_of(kube, "view"), "clientquotas", "create")
    assert not grants(rules_of(kube, "edit"), "kafkaclusters", "create"), "KafkaClusters stay with cluster admins"

    team = kube.create_namespace("team")
    kube.kubectl("create", "rolebinding", "a-edit", "--clusterrole=edit", "--user=team-a", "-n", team)
    kube.kubectl("create", "rolebinding", "b-view", "--clusterrole=view", "--user=team-b", "-n", team)
    editor, viewer = kube.token_for("team-a"), kube.token_for("team-b")
    for kind in ("clientquotas", "controllermutationquotas", "topicquotas"):
        assert can_i(kube, editor, "create", f"{kind}.kquota.io", team), kind
        assert can_i(kube, editor, "delete", f"{kind}.kquota.io", team), kind
        assert can_i(kube, viewer, "list", f"{kind}.kquota.io", team), kind
        assert not can_i(kube, viewer, "create", f"{kind}.kquota.io", team), kind
    assert not can_i(kube, editor, "create", "clientquotas.kquota.io", kube.create_namespace("other"))
    quota = client_quota(team, "mine", {"user": {"name": "alice"}}, {"producerByteRate": 1024})
    kube.kubectl("apply", "-f", "-", input=json.dumps(quota), token=editor)
    # Not for a broker: no operator of this test serves it, and another module's must not either.
    kube.kubectl("delete", "clientquota", "mine", "-n", team, "--wait=false")

    helm("upgrade", release, str(CHART), "--namespace", ns, "--set", "rbac.aggregateToDefaultRoles=false")
    wait_for(lambda: not grants(rules_of(kube, "edit"), "clientquotas", "create"), 60, "edit without quota rights")
    assert not can_i(kube, editor, "create", "clientquotas.kquota.io", team)
    helm("uninstall", release, "--namespace", ns)


def broker_value(kafka: KafkaCluster, user: str, key: str) -> str | None:
    out = kafka.kafka_configs("--describe", "--entity-type", "users", "--entity-name", user, check=True).stdout
    for part in out.replace(",", " ").split():
        if part.startswith(f"{key}="):
            return part.split("=", 1)[1]
    return None


def test_the_operator_watches_the_charts_namespaces_with_peering(
    kube: KubeAPIServer, kafka: KafkaCluster, tmp_path: Path
) -> None:
    watched, other = kube.create_namespace("watched"), kube.create_namespace("other")
    release, ns = f"wn-{uuid.uuid4().hex[:6]}", kube.create_namespace("kquota")
    cluster = f"kc-{uuid.uuid4().hex[:6]}"
    values = {
        "operator": {"watchNamespaces": [watched]},
        "kafka": {"clusters": [{"name": cluster, "spec": {"bootstrapServers": kafka.bootstrap}}]},
    }
    Helm(tmp_path / "helm", kube)(
        "install", release, str(CHART), "--namespace", ns, "--values", "-", input=json.dumps(values)
    )
    env = deployment_env(kube, ns, f"{release}-kquota")
    assert json.loads(env["KQUOTA_WATCH_NAMESPACES"]) == [watched]
    operator = operator_as_deployment(kube, ns, f"{release}-kquota", tmp_path)
    user_in, user_out = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    apply(kube, client_quota(other, "q", {"user": {"name": user_out}}, {"producerByteRate": 2048}))
    operator.start()
    try:
        apply(kube, client_quota(watched, "q", {"user": {"name": user_in}}, {"producerByteRate": 1024}))
        wait_for(
            lambda: condition(get(kube, "clientquota", watched, "q")).get("status") == "True",
            60,
            "the watched namespace's quota Ready",
            on_timeout=operator.log,
        )
        assert broker_value(kafka, user_in, "producer_byte_rate") in ("1024", "1024.0")
        # The other namespace's quota existed before the operator started: watched, it would have been
        # in Kopf's first listing and handled before the one created afterwards.
        assert (get(kube, "clientquota", other, "q") or {}).get("status") is None
        assert broker_value(kafka, user_out, "producer_byte_rate") is None
        peering = json.loads(kube.kubectl("get", "clusterkopfpeering", f"{release}-kquota", "-o", "json").stdout)
        assert peering.get("status"), "the replica keeps its record in the chart's ClusterKopfPeering"
    finally:
        operator.stop()
        kube.kubectl("delete", "clientquota", "q", "-n", watched, "--wait=false", check=False)
        # Never served (outside the watched namespaces): no finalizer holds it; gone before another module's
        # operator, watching every namespace, could put it on the shared broker.
        kube.kubectl("delete", "clientquota", "q", "-n", other, "--wait=false", check=False)


def test_git_kept_strimzi_clusters_get_their_reads_from_extra_strimzi(kube: KubeAPIServer, tmp_path: Path) -> None:
    release, ns = f"xs-{uuid.uuid4().hex[:6]}", kube.create_namespace("kquota")
    kafka_ns, users_ns = kube.create_namespace("kafka"), kube.create_namespace("users")
    strimzi = {"kafka": {"namespace": kafka_ns, "name": "my-cluster"}, "listener": "tls",
               "kafkaUser": {"namespace": users_ns, "name": "kquota"}}  # fmt: skip
    values = {"kafka": {"extraStrimzi": [strimzi]}}
    Helm(tmp_path / "helm", kube)(
        "install", release, str(CHART), "--namespace", ns, "--values", "-", input=json.dumps(values)
    )
    token = kube.service_account_token(ns, f"{release}-kquota")
    # Strimzi's own CRDs, so that kubectl can name its kinds.
    install_crds(kube, STRIMZI_RELEASES[0])
    allowed = [
        ("get", "kafkas.kafka.strimzi.io/my-cluster", kafka_ns),
        ("get", "deployments.apps/my-cluster-entity-operator", kafka_ns),
        ("get", "secrets/my-cluster-cluster-ca-cert", kafka_ns),
        ("get", "secrets/kquota", users_ns),
        ("list", "kafkausers.kafka.strimzi.io", users_ns),
    ]
    refused = [
        ("get", "kafkas.kafka.strimzi.io/another", kafka_ns),
        ("get", "secrets/another", kafka_ns),
        ("list", "secrets", users_ns),
        ("list", "kafkausers.kafka.strimzi.io", kube.create_namespace("elsewhere")),
    ]
    for verb, resource, namespace in allowed:
        assert can_i(kube, token, verb, resource, namespace), (verb, resource, namespace)
    for verb, resource, namespace in refused:
        assert not can_i(kube, token, verb, resource, namespace), (verb, resource, namespace)
