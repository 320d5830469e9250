"""Never silently wrong (issue 19), on the real API server and broker.

Each test is one finding of the issue: a resource whose KafkaCluster does not
exist has a status GitOps tools read as failed; a key that leaves a spec
leaves ``status.applied`` too; a key removed from the brokers is an event that
names it, its old value and why; a resource refused by a new tenancy grant
keeps its clients' quotas instead of un-throttling them; events carry exact
integers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, get, kafka_cluster_manifest, wait_for
from harness.stack import Stack, start_stack, stop_stack

from kquota.domain.entities import Entity
from kquota.domain.guard import APPROVAL_ANNOTATION
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.support.names import uniq
from tests.support.quotas import P, R
from tests.unit.test_argocd_health import kstatus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(kube: KubeAPIServer, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """This module's operator runs as the chart runs it: with the mass-removal guard on."""
    s = start_stack(
        kube,
        kafka,
        tmp_path_factory.mktemp("operator-trust"),
        extra_env={"KQUOTA_DELETION_GUARD": "true", "KQUOTA_CONTESTED_RETRY": "8"},
        namespace_prefix="trust",
    )
    try:
        yield s
    finally:
        stop_stack(s)


def ready(stack: Stack, ns: str, name: str) -> dict[str, Any]:
    return condition(get(stack.kube, "clientquota", ns, name))


def wait_reason(stack: Stack, ns: str, name: str, reason: str, timeout: float = 30) -> dict[str, Any]:
    def current() -> dict[str, Any] | None:
        obj = get(stack.kube, "clientquota", ns, name)
        cond = condition(obj)
        if (
            obj
            and cond.get("reason") == reason
            and obj["status"].get("observedGeneration") == obj["metadata"].get("generation")
        ):
            return obj
        return None

    found: dict[str, Any] = wait_for(
        current,
        timeout,
        f"clientquota {ns}/{name} reason {reason}",
        on_timeout=lambda: json.dumps(get(stack.kube, "clientquota", ns, name)) + "\n" + stack.operator.log(),
    )
    return found


def events(stack: Stack, ns: str, reason: str, name: str | None = None) -> list[dict[str, Any]]:
    items = json.loads(stack.kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    return [
        e
        for e in items
        if e.get("reason") == reason and (name is None or e.get("involvedObject", {}).get("name") == name)
    ]


def wait_event(stack: Stack, ns: str, reason: str, name: str | None = None, contains: str = "") -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        return next((e for e in events(stack, ns, reason, name) if contains in e.get("message", "")), None)

    event: dict[str, Any] = wait_for(
        found,
        30,
        f"a {reason} event containing {contains!r}",
        on_timeout=lambda: stack.kube.kubectl("get", "events", "-n", ns).stdout,
    )
    return event


# First in the module: it needs the module's own KafkaCluster as it was created (a later test
# deletes and re-creates it), and a drift check every 3 s undisturbed by other tests' clusters.
def test_another_writer_undoing_a_key_makes_it_contested_instead_of_an_endless_fight(stack: Stack) -> None:
    ns, name, user = stack.new_namespace(), uniq("cq"), uniq("fought")
    entity = Entity.for_user(user)
    apply(stack.kube, client_quota(ns, name, {"user": {"name": user}}, {"producerByteRate": 1000}))
    wait_reason(stack, ns, name, "Applied")
    stop = threading.Event()

    def other_writer() -> None:
        admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=stack.kafka.bootstrap))
        try:
            while not stop.is_set():
                admin.alter([EntityChange(entity, (QuotaOp(P, 5.0),))])
                stop.wait(0.5)
        finally:
            admin.close()

    fighter = threading.Thread(target=other_writer, daemon=True)
    fighter.start()
    try:
        obj = wait_reason(stack, ns, name, "Contested", timeout=60)
        assert f"producer_byte_rate on users/{user}" in condition(obj)["message"]
        assert condition(obj, "Stalled").get("status") == "True"
        wait_event(stack, ns, "Contested", name, "changed back on the brokers 3 times")
    finally:
        stop.set()
        fighter.join(10)
    # The other writer stopped: after the retry time kquota restores the key once more, and it stays.
    wait_reason(stack, ns, name, "Applied", timeout=90)
    assert stack.broker_quotas()[entity] == {P: 1000.0}
    stack.kube.kubectl("delete", "clientquota", name, "-n", ns, "--timeout=30s")


def test_a_cluster_ref_to_a_missing_kafkacluster_is_failed_until_it_exists_and_again_after_it_is_deleted(
    stack: Stack,
) -> None:
    ns, name, cluster, user = stack.new_namespace(), uniq("cq"), uniq("missing"), uniq("orphan")
    entity = Entity.for_user(user)
    apply(stack.kube, client_quota(ns, name, {"user": {"name": user}}, {"producerByteRate": 4096}, cluster=cluster))
    obj = wait_reason(stack, ns, name, "ClusterNotFound")
    cond = condition(obj)
    assert cond["status"] == "False" and f"KafkaCluster {cluster!r} does not exist" in cond["message"]
    assert condition(obj, "Stalled").get("status") == "True"
    # What Flux's wait sees (the real kstatus library): not Current, so a Kustomization never goes green.
    assert kstatus([obj]) == ["Failed"]
    wait_event(stack, ns, "ClusterNotFound", name)
    assert entity not in stack.broker_quotas()

    # The KafkaCluster arrives: the quota is applied.
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap))
    wait_reason(stack, ns, name, "Applied")
    assert stack.broker_quotas()[entity] == {P: 4096.0}

    # It is deleted: the stale Applied status is rewritten, and says the key stays on the brokers.
    stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s")
    obj = wait_reason(stack, ns, name, "ClusterNotFound")
    assert "stay on the brokers" in condition(obj)["message"]
    assert stack.broker_quotas()[entity] == {P: 4096.0}


def test_a_resource_without_cluster_ref_says_when_the_default_cluster_is_missing(stack: Stack) -> None:
    # The module's operator has a default cluster; a resource naming nothing goes there. Here
    # the default is checked by name: the status must name the setting a user would change.
    ns, name = stack.new_namespace(), uniq("cq")
    apply(stack.kube, client_quota(ns, name, {"user": {"name": uniq("u")}}, {"producerByteRate": 1024}))
    wait_reason(stack, ns, name, "Applied")
    stack.kube.kubectl("delete", "kafkacluster", stack.cluster, "--timeout=30s")
    try:
        obj = wait_reason(stack, ns, name, "ClusterNotFound")
        assert "operator.defaultCluster" in condition(obj)["message"]
    finally:
        stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(stack.cluster, stack.kafka.bootstrap))
    wait_reason(stack, ns, name, "Applied")


@pytest.mark.k8s_floor
def test_a_key_removed_from_the_spec_leaves_status_and_broker_and_is_an_event(stack: Stack) -> None:
    ns, name, user = stack.new_namespace(), uniq("cq"), uniq("trim")
    entity = Entity.for_user(user)
    apply(
        stack.kube,
        client_quota(ns, name, {"user": {"name": user}}, {"producerByteRate": "20Mi", "requestPercentage": 50}),
    )
    obj = wait_reason(stack, ns, name, "Applied")
    assert obj["status"]["applied"]["values"] == {"producer_byte_rate": 20971520, "request_percentage": 50}
    applied = wait_event(stack, ns, "Applied", name)
    assert "producer_byte_rate=20971520" in applied["message"], "values are exact integers, never 2.09715e+07"

    # An edit that changes a value is an event with the exact old and new values.
    apply(
        stack.kube,
        client_quota(ns, name, {"user": {"name": user}}, {"producerByteRate": "30Mi", "requestPercentage": 50}),
    )
    wait_event(stack, ns, "Applied", name, f"producer_byte_rate=31457280 on users/{user} (was 20971520)")
    apply(
        stack.kube,
        client_quota(ns, name, {"user": {"name": user}}, {"producerByteRate": "20Mi", "requestPercentage": 50}),
    )
    wait_event(stack, ns, "Applied", name, f"producer_byte_rate=20971520 on users/{user} (was 31457280)")

    apply(stack.kube, client_quota(ns, name, {"user": {"name": user}}, {"producerByteRate": "20Mi"}))
    wait_for(lambda: stack.broker_quotas().get(entity) == {P: 20971520.0}, 30, "request_percentage removed")

    def applied_values() -> dict[str, Any] | None:
        found = get(stack.kube, "clientquota", ns, name)
        values: dict[str, Any] = ((found or {}).get("status") or {}).get("applied", {}).get("values", {})
        return values if "request_percentage" not in values else None

    assert wait_for(applied_values, 30, "status.applied.values without request_percentage") == {
        "producer_byte_rate": 20971520
    }
    removed = wait_event(stack, ns, "QuotaRemoved", name, "request_percentage")
    assert f"request_percentage on users/{user} (was 50)" in removed["message"]
    assert "no longer sets it" in removed["message"]

    stack.kube.kubectl("delete", "clientquota", name, "-n", ns, "--timeout=30s")
    assert entity not in stack.broker_quotas()
    removed = wait_event(stack, ns, "QuotaRemoved", name, "being deleted")
    assert f"producer_byte_rate on users/{user} (was 20971520)" in removed["message"]


def test_turning_on_tenancy_with_an_incomplete_grant_keeps_live_quotas_and_says_so(stack: Stack) -> None:
    ns, cluster = stack.new_namespace(), uniq("tenancy")
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap))
    try:
        granted, ungranted = uniq("team-app"), uniq("legacy")
        apply(
            stack.kube,
            client_quota(ns, "granted", {"user": {"name": granted}}, {"producerByteRate": 2048}, cluster=cluster),
            client_quota(ns, "ungranted", {"user": {"name": ungranted}}, {"producerByteRate": "21Mi"}, cluster=cluster),
            client_quota(ns, "conn", {"ip": {"name": "10.9.8.7"}}, {"connectionCreationRate": 50}, cluster=cluster),
        )
        for name in ("granted", "ungranted", "conn"):
            wait_reason(stack, ns, name, "Applied")

        # Tenancy on, with a grant that covers only team-* users (no IPs, not legacy), and one
        # user whose name has brackets: only * and ? are special (issue 19, finding 11).
        bracketed = f"{uniq('legacy')}[1]"
        tenancy = {"tenancy": {"grants": [{"namespaces": [ns], "users": ["team-*", bracketed]}]}}
        stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap, tenancy))
        for name, what in (("ungranted", f"producer_byte_rate=22020096 on users/{ungranted}"), ("conn", "")):
            obj = wait_reason(stack, ns, name, "NotPermitted")
            message = condition(obj)["message"]
            assert "stay on the brokers as they are" in message and what in message, message
        live = stack.broker_quotas()
        assert live[Entity.for_user(ungranted)] == {P: 22020096.0}, "a refused resource must not un-throttle"
        assert live[Entity.for_ip("10.9.8.7")].get(R) is None
        assert live[Entity.for_ip("10.9.8.7")] != {}, "the connection rate stays as it was"
        assert not events(stack, ns, "QuotaRemoved")
        wait_reason(stack, ns, "granted", "Applied")
        apply(
            stack.kube,
            client_quota(ns, "bracketed", {"user": {"name": bracketed}}, {"producerByteRate": 4096}, cluster=cluster),
        )
        wait_reason(stack, ns, "bracketed", "Applied")
        assert stack.broker_quotas()[Entity.for_user(bracketed)] == {P: 4096.0}

        # Deleting the refused resource is what removes its key, with an event saying so.
        stack.kube.kubectl("delete", "clientquota", "ungranted", "-n", ns, "--timeout=30s")
        wait_for(lambda: Entity.for_user(ungranted) not in stack.broker_quotas(), 30, "key removed on delete")
        wait_event(stack, ns, "QuotaRemoved", "ungranted", "(was 22020096)")
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=30s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)


def test_pruning_a_whole_application_is_held_until_the_kafkacluster_approves_it(stack: Stack) -> None:
    ns, cluster = stack.new_namespace(), uniq("guarded")
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap))
    users = [uniq(f"app{i}") for i in range(30)]
    try:
        apply(
            stack.kube,
            *(
                client_quota(ns, f"q{i}", {"user": {"name": u}}, {"producerByteRate": 1000 + i}, cluster=cluster)
                for i, u in enumerate(users)
            ),
        )
        wait_for(lambda: all(stack.broker_quotas().get(Entity.for_user(u)) for u in users), 60, "all 30 applied")
        # Argo CD prunes the application: every resource deleted in one go.
        stack.kube.kubectl("delete", "clientquotas", "--all", "-n", ns, "--wait=false")

        def held() -> dict[str, Any] | None:
            guard = condition(_cluster_obj(stack, cluster), "DeletionGuard")
            return guard if guard.get("status") == "True" else None

        guard = wait_for(held, 60, "the KafkaCluster's DeletionGuard condition", on_timeout=stack.operator.log)
        hold = guard["message"].rsplit(f"{APPROVAL_ANNOTATION}=", 1)[1].split()[0]
        live = stack.broker_quotas()
        left = [u for u in users if Entity.for_user(u) in live]
        # A prune reaches the operator as a stream; at most the first 9 (under the minimum) can go.
        assert len(left) >= 21, f"only {len(left)} of 30 keys left"
        cluster_obj = _cluster_obj(stack, cluster)
        assert condition(cluster_obj)["reason"] == "RemovalsHeld"
        assert condition(cluster_obj, "Stalled").get("status") == "True"
        assert f'kquota_removals_held{{cluster="{cluster}"}}' in stack.operator.metrics()
        assert any(e.get("reason") == "DeletionGuard" for e in _events_of(stack, cluster))
        # Still held a drift check later (3 s here): the resources wait on their finalizers.
        time.sleep(4)
        assert len([u for u in users if Entity.for_user(u) in stack.broker_quotas()]) == len(left)

        stack.kube.kubectl("annotate", "kafkacluster", cluster, f"{APPROVAL_ANNOTATION}={hold}", "--overwrite")
        wait_for(
            lambda: not any(Entity.for_user(u) in stack.broker_quotas() for u in users), 60, "approved removals done"
        )
        wait_for(
            lambda: not json.loads(stack.kube.kubectl("get", "clientquotas", "-n", ns, "-o", "json").stdout)["items"],
            60,
            "finalizers released",
        )
        wait_for(lambda: condition(_cluster_obj(stack, cluster)).get("status") == "True", 30, "Ready")
    finally:
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)


def _cluster_obj(stack: Stack, cluster: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(stack.kube.kubectl("get", "kafkacluster", cluster, "-o", "json").stdout)
    return found


def _events_of(stack: Stack, cluster: str) -> list[dict[str, Any]]:
    items = json.loads(stack.kube.kubectl("get", "events", "-n", "default", "-o", "json").stdout)["items"]
    return [e for e in items if e.get("involvedObject", {}).get("name") == cluster]
