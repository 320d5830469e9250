"""Flux's own controllers sync Git repositories of quotas; what Flux reports is what the brokers hold.

Each test commits manifests to a repository the Git server serves, points a GitRepository and
Kustomizations at it (as docs/gitops.md recommends: ``prune``, ``wait``, kquota's
``healthCheckExprs``) and reads back the Kustomizations' Ready condition, the quota resources and,
with Kafka's own kafka-configs, the broker.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from harness.flux import Flux, GitServer
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import client_quota, condition, get, wait_for
from harness.stack import Stack, start_stack, stop_stack

from kquota.domain.guard import APPROVAL_ANNOTATION
from tests.support.flux import (
    git_repository,
    ks,
    kustomization,
    manifests,
    ready,
    reconcile_now,
    users_on_broker,
    wait_ks,
)


@pytest.fixture(scope="module")
def stack(gkube: KubeAPIServer, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The operator as the chart runs it: the mass-removal guard on, removals settling 5 s."""
    env = {"KQUOTA_DELETION_GUARD": "true", "KQUOTA_REMOVAL_SETTLE": "5"}
    s = start_stack(gkube, kafka, tmp_path_factory.mktemp("operator-flux"), extra_env=env)
    try:
        yield s
    finally:
        stop_stack(s)


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def quota(ns: str, name: str, user: str, rate: int, cluster: str | None = None) -> dict[str, Any]:
    return client_quota(ns, name, {"user": {"name": user}}, {"producerByteRate": rate}, cluster=cluster)


def apply(kube: KubeAPIServer, *objects: dict[str, Any]) -> None:
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def test_quotas_wait_for_the_operator_and_apps_wait_for_their_quotas(
    stack: Stack, flux: Flux, git: GitServer, kafka: KafkaCluster
) -> None:
    kube = stack.kube
    ns, bare_ns, repo_name = uniq("quotas"), uniq("plain"), uniq("team")
    users = [uniq(f"u{i}") for i in range(4)]
    plain_users = [uniq("p0"), uniq("p1")]
    repo = git.create(repo_name)
    quotas = [quota(ns, f"q{i}", u, 1024 * (i + 1)) for i, u in enumerate(users)]
    plain = [quota(bare_ns, f"q{i}", u, 512) for i, u in enumerate(plain_users)]
    app = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": ns}, "data": {"x": "y"}}
    files = {
        "quotas/quotas.yaml": manifests(namespace(ns), *quotas),
        "plain/quotas.yaml": manifests(namespace(bare_ns), *plain),
        "app/app.yaml": manifests(app),
    }
    commit = repo.commit(files, "quotas and an app")
    stack.operator.stop()
    try:
        apply(
            kube,
            git_repository(repo_name, repo.url),
            kustomization(f"{repo_name}-quotas", repo_name, "./quotas", timeout="15s"),
            kustomization(f"{repo_name}-plain", repo_name, "./plain", exprs=False),
            kustomization(f"{repo_name}-app", repo_name, "./app", depends_on=(f"{repo_name}-quotas",)),
        )
        # Without kquota's healthCheckExprs, kstatus calls quotas nobody has handled Current.
        wait_ks(kube, flux, f"{repo_name}-plain", "True", commit)
        assert all((get(kube, "clientquota", bare_ns, f"q{i}") or {}).get("status") is None for i in range(2))
        assert not set(plain_users) & set(users_on_broker(kafka))
        # With them, the Kustomization waits, and says for which objects.
        failed = wait_ks(kube, flux, f"{repo_name}-quotas", "False", commit, reason="HealthCheckFailed")
        message = ready(failed)["message"]
        # At its timeout, naming the quotas Unknown (or, when a poll meets the deadline, saying so).
        if "timeout waiting for" in message:
            assert f"ClientQuota/{ns}/q0 status: 'Unknown'" in message, message
        else:
            assert "deadline" in message, message
        app = wait_ks(kube, flux, f"{repo_name}-app", "False", reason="DependencyNotReady")
        assert f"{repo_name}-quotas" in ready(app)["message"]
        assert kube.kubectl("get", "configmap", "app", "-n", ns, check=False).returncode != 0
    finally:
        stack.operator.start()

    reconcile_now(kube, "kustomization", f"{repo_name}-quotas")
    wait_ks(kube, flux, f"{repo_name}-quotas", "True", commit)
    live = users_on_broker(kafka)
    assert {u: live.get(u) for u in users} == {u: {"producer_byte_rate": 1024.0 * (i + 1)} for i, u in enumerate(users)}
    wait_ks(kube, flux, f"{repo_name}-app", "True", commit)
    kube.kubectl("get", "configmap", "app", "-n", ns)


def test_stalled_quotas_fail_their_kustomization_at_once(
    stack: Stack, flux: Flux, git: GitServer, kafka: KafkaCluster
) -> None:
    kube = stack.kube
    repo_name, ns, tenancy_cluster = uniq("stalled"), uniq("stalled"), uniq("tenancy")
    shared = uniq("shared")
    files = {
        "missing/q.yaml": manifests(quota(ns, "missing", uniq("m"), 1000, cluster="no-such-cluster")),
        "conflict/q.yaml": manifests(quota(ns, "claim-1", shared, 1000), quota(ns, "claim-2", shared, 2000)),
        "refused/q.yaml": manifests(
            {
                "apiVersion": "kquota.io/v1alpha1",
                "kind": "KafkaCluster",
                "metadata": {"name": tenancy_cluster},
                "spec": {
                    "bootstrapServers": kafka.bootstrap,
                    "tenancy": {"grants": [{"namespaces": ["somebody-else"], "users": ["*"]}]},
                },
            },
            quota(ns, "refused", uniq("r"), 1000, cluster=tenancy_cluster),
        ),
    }
    repo = git.create(repo_name)
    commit = repo.commit(files, "three quotas kquota will not apply")
    kube.kubectl("create", "namespace", ns)
    apply(
        kube,
        git_repository(repo_name, repo.url),
        *(kustomization(f"{repo_name}-{path}", repo_name, f"./{path}") for path in ("missing", "conflict", "refused")),
    )
    try:
        for path, name, reason, says in (
            ("missing", "missing", "ClusterNotFound", "does not exist"),
            ("conflict", "claim-2", "Conflict", "claim-1"),
            ("refused", "refused", "NotPermitted", "grant"),
        ):
            failed = wait_ks(kube, flux, f"{repo_name}-{path}", "False", commit, reason="HealthCheckFailed")
            message = ready(failed)["message"]
            # Flux names the failed quota (its own message never carries the object's); the quota says why.
            assert "failed early due to stalled resources" in message, message
            assert f"ClientQuota/{ns}/{name} status: 'Failed'" in message, message
            cond = condition(get(kube, "clientquota", ns, name))
            assert cond["reason"] == reason and says in cond["message"], cond
    finally:
        for path in ("conflict", "refused", "missing"):
            kube.kubectl("delete", "kustomization", f"{repo_name}-{path}", "-n", "flux-system", "--timeout=60s")


def test_a_commit_pruning_most_quotas_is_held_until_approved(
    stack: Stack, flux: Flux, git: GitServer, kafka: KafkaCluster
) -> None:
    kube = stack.kube
    repo_name, ns, cluster = uniq("guarded"), uniq("guarded"), uniq("guarded")
    users = [uniq(f"g{i}") for i in range(30)]
    kafka_cluster = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": cluster},
        "spec": {"bootstrapServers": kafka.bootstrap},
    }

    def files(keep: list[str], approval: str | None = None) -> dict[str, str]:
        quotas = (quota(ns, u, u, 2000 + i, cluster=cluster) for i, u in enumerate(users) if u in keep)
        annotations = (
            {"metadata": {"name": cluster, "annotations": {APPROVAL_ANNOTATION: approval}}} if approval else {}
        )
        return {"cluster/all.yaml": manifests({**kafka_cluster, **annotations}, namespace(ns), *quotas)}

    repo = git.create(repo_name)
    first = repo.commit(files(users), "30 quotas")
    apply(kube, git_repository(repo_name, repo.url), kustomization(repo_name, repo_name, "./cluster"))
    wait_ks(kube, flux, repo_name, "True", first)
    assert set(users) <= set(users_on_broker(kafka))

    kept, pruned = users[:5], users[5:]
    second = repo.commit(files(kept), "prune 25 of 30")
    reconcile_now(kube, "gitrepository", repo_name)
    reconcile_now(kube, "kustomization", repo_name)

    def hold() -> str | None:
        guard = condition(
            json.loads(kube.kubectl("get", "kafkacluster", cluster, "-o", "json").stdout), "DeletionGuard"
        )
        return guard.get("message") if guard.get("status") == "True" else None

    held = wait_for(hold, 90, "the guard holding the prune", on_timeout=stack.operator.log)
    # Flux reports the hold on its next health check: the KafkaCluster in its inventory is Failed.
    reconcile_now(kube, "kustomization", repo_name)
    failed = wait_ks(kube, flux, repo_name, "False", second, reason="HealthCheckFailed")
    assert f"KafkaCluster/{cluster} status: 'Failed'" in ready(failed)["message"]
    assert set(users) <= set(users_on_broker(kafka)), "nothing leaves the broker while the prune is held"
    terminating = json.loads(kube.kubectl("get", "clientquotas", "-n", ns, "-o", "json").stdout)["items"]
    assert sorted(q["metadata"]["name"] for q in terminating if q["metadata"].get("deletionTimestamp")) == sorted(
        pruned
    )

    # The approval goes through Git too: a `kubectl annotate` of an object Flux applies is undone by
    # Flux's next reconcile (below), so the annotation is committed to the KafkaCluster's manifest.
    approval = held.rsplit(f"{APPROVAL_ANNOTATION}=", 1)[1].split()[0]
    third = repo.commit(files(kept, approval), "approve the prune")
    reconcile_now(kube, "gitrepository", repo_name)
    wait_for(lambda: not set(pruned) & set(users_on_broker(kafka)), 60, "the approved removals")
    live = users_on_broker(kafka)
    assert {u: live.get(u) for u in kept} == {u: {"producer_byte_rate": 2000.0 + i} for i, u in enumerate(kept)}
    wait_for(
        lambda: len(json.loads(kube.kubectl("get", "clientquotas", "-n", ns, "-o", "json").stdout)["items"]) == 5,
        60,
        "the pruned resources released",
    )
    reconcile_now(kube, "kustomization", repo_name)
    wait_ks(kube, flux, repo_name, "True", third)


def test_flux_undoes_kubectl_annotate_but_not_another_field_manager(
    stack: Stack, flux: Flux, git: GitServer, kafka: KafkaCluster
) -> None:
    """Why docs/gitops.md approves a held prune in Git, or with `kubectl annotate --field-manager`: Flux
    takes over and drops fields whose manager's name starts with `kubectl`."""
    kube = stack.kube
    repo_name, cluster = uniq("annotated"), uniq("annotated")
    kafka_cluster = {"apiVersion": "kquota.io/v1alpha1", "kind": "KafkaCluster", "metadata": {"name": cluster},
                     "spec": {"bootstrapServers": kafka.bootstrap}}  # fmt: skip
    repo = git.create(repo_name)
    commit = repo.commit({"c.yaml": manifests(kafka_cluster)}, "a KafkaCluster")
    apply(kube, git_repository(repo_name, repo.url), kustomization(repo_name, repo_name, "./"))
    wait_ks(kube, flux, repo_name, "True", commit)
    kube.kubectl("annotate", "kafkacluster", cluster, "example.com/by-kubectl=1")
    kube.kubectl("annotate", "kafkacluster", cluster, "example.com/by-hand=1", "--field-manager=kquota-approval")
    before = ks(kube, repo_name)["status"].get("lastHandledReconcileAt")
    reconcile_now(kube, "kustomization", repo_name)
    wait_for(lambda: ks(kube, repo_name)["status"].get("lastHandledReconcileAt") != before, 60, "a reconcile")
    wait_ks(kube, flux, repo_name, "True", commit)
    obj = json.loads(kube.kubectl("get", "kafkacluster", cluster, "-o", "json").stdout)
    annotations = obj["metadata"].get("annotations", {})
    assert "example.com/by-kubectl" not in annotations and annotations.get("example.com/by-hand") == "1"
    kube.kubectl("delete", "kustomization", repo_name, "-n", "flux-system", "--timeout=60s")
