"""Deletion and lifecycle (issue #33), on the real API server and broker, with the shipped settings.

The module's operator runs with the defaults a user gets (a 60 s drift check, a 5 s removal
settle, the mass-removal guard on), not the suites' quick ones, so a behaviour that depends on a
timer is seen as a user sees it. Each test is one finding of the issue: nothing left behind,
nothing blamed on the wrong resource, nothing silent.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import (
    LEDGER_NAMESPACE,
    apply,
    client_quota,
    condition,
    get,
    kafka_cluster_manifest,
    scram_security,
    wait_for,
)
from harness.stack import Stack, start_stack, stop_stack

from kquota.cli.main import main
from kquota.domain.entities import Entity
from kquota.domain.guard import APPROVAL_ANNOTATION
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.support.names import uniq
from tests.support.quotas import C, P, R

pytestmark = pytest.mark.e2e

#: The operator's shipped defaults (reconcile/settings.py) where the suites' operator differs.
SHIPPED = {
    "KQUOTA_DELETION_GUARD": "true",
    "KQUOTA_REMOVAL_SETTLE": "5",
    "KQUOTA_RETRY_MAX_SECONDS": "30",
}


@pytest.fixture(scope="module")
def stack(kube: KubeAPIServer, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Shared Kafka clusters stay allowed: the session broker carries other modules' KafkaClusters.
    s = start_stack(
        kube,
        kafka,
        tmp_path_factory.mktemp("operator-lifecycle"),
        drift_interval=60.0,
        extra_env=SHIPPED,
        namespace_prefix="life",
    )
    try:
        yield s
    finally:
        stop_stack(s)


def obj(stack: Stack, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    return get(stack.kube, kind, ns, name)


def events(stack: Stack, ns: str, reason: str, name: str | None = None) -> list[dict[str, Any]]:
    items = json.loads(stack.kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    return [
        e
        for e in items
        if e.get("reason") == reason and (name is None or e.get("involvedObject", {}).get("name") == name)
    ]


def reason_of(stack: Stack, ns: str, name: str, kind: str = "clientquota") -> str:
    return str(condition(obj(stack, kind, ns, name)).get("reason", ""))


def test_deleting_a_running_kafkacluster_says_cluster_not_found_and_a_deletion_then_keeps_its_key(
    stack: Stack,
) -> None:
    """Finding 1: within seconds of `kubectl delete kafkacluster`, its resources say ClusterNotFound;
    deleting one of them then completes at once with a QuotaKept event, and its key stays."""
    ns, cluster = stack.new_namespace(), uniq("doomed")
    users = [uniq("kept"), uniq("stays")]
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap))
    apply(
        stack.kube,
        *(
            client_quota(ns, f"q{i}", {"user": {"name": u}}, {"producerByteRate": 3000 + i}, cluster=cluster)
            for i, u in enumerate(users)
        ),
    )
    wait_for(lambda: all(reason_of(stack, ns, f"q{i}") == "Applied" for i in range(2)), 60, "both Applied",
             on_timeout=stack.operator.log)  # fmt: skip

    started = time.monotonic()
    stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=60s")
    deleted = time.monotonic() - started
    wait_for(lambda: all(reason_of(stack, ns, f"q{i}") == "ClusterNotFound" for i in range(2)), 20,
             "ClusterNotFound on both", on_timeout=stack.operator.log)  # fmt: skip
    said = time.monotonic() - started
    print(f"\nKafkaCluster deleted in {deleted:.1f}s; ClusterNotFound {said:.1f}s after the delete")

    stack.kube.kubectl("delete", "clientquota", "q0", "-n", ns, "--wait=false")
    wait_for(lambda: obj(stack, "clientquota", ns, "q0") is None, 20, "the deletion done",
             on_timeout=stack.operator.log)  # fmt: skip
    (kept,) = events(stack, ns, "QuotaKept", "q0")
    assert f"KafkaCluster {cluster!r} does not exist" in kept["message"]
    assert kept["type"] == "Warning"
    # Kept on purpose, and said so: the ledger has it, the broker keeps it.
    live = stack.broker_quotas()
    assert live[Entity.for_user(users[0])] == {P: 3000.0}
    assert live[Entity.for_user(users[1])] == {P: 3001.0}
    log = stack.operator.log()
    assert "quota not yet removed from the brokers: \n" not in log and "brokers: \n" not in log


def new_cluster(stack: Stack, prefix: str) -> str:
    """A KafkaCluster of this test's own on the session broker: the guard's share counts its keys only."""
    cluster = uniq(prefix)
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap))
    return cluster


def cluster_obj(stack: Stack, cluster: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(stack.kube.kubectl("get", "kafkacluster", cluster, "-o", "json").stdout)
    return found


def test_a_key_dropped_from_a_spec_is_never_ready_before_it_is_gone_from_the_broker(stack: Stack) -> None:
    """Finding 9: an edit that drops a key made the resource Ready=True Applied at once, without the
    key in status.applied, while the removal settle kept the key on the broker for 5 s more."""
    ns, cluster, user = stack.new_namespace(), new_cluster(stack, "trim"), uniq("trim")
    entity = Entity.for_user(user)
    try:
        spec = {"producerByteRate": 1000, "requestPercentage": 40}
        apply(stack.kube, client_quota(ns, "q", {"user": {"name": user}}, spec, cluster=cluster))
        wait_for(lambda: reason_of(stack, ns, "q") == "Applied", 60, "Applied", on_timeout=stack.operator.log)
        apply(stack.kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 1000}, cluster=cluster))
        seen: list[tuple[str, dict[str, Any], bool]] = []

        def removed_and_ready() -> bool:
            # The status first, then the broker: a key live after a Ready status was live at it too.
            found = obj(stack, "clientquota", ns, "q") or {}
            status = found.get("status") or {}
            current = status.get("observedGeneration") == 2
            ready = condition(found)
            has_key = R in stack.broker_quotas().get(entity, {})
            if current:
                seen.append((str(ready.get("reason")), dict(status.get("applied", {}).get("values", {})), has_key))
            return current and ready.get("status") == "True" and not has_key

        wait_for(removed_and_ready, 60, "the key gone and the resource Ready", interval=0.2,
                 on_timeout=lambda: f"{seen[-5:]}\n{stack.operator.log()}")  # fmt: skip
        wrong = [s for s in seen if s[0] == "Applied" and s[2]]
        assert not wrong, f"Ready=True Applied while the broker still held request_percentage: {wrong[:3]}"
        pending = [s for s in seen if s[2]]
        assert pending, "the removal settle (5 s) was not seen at all"
        assert all(s[0] == "Pending" and s[1].get("request_percentage") == 40 for s in pending), pending[:3]
        assert seen[-1][1] == {"producer_byte_rate": 1000}
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=60s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)


def held_condition(found: dict[str, Any] | None) -> dict[str, Any]:
    return condition(found, "RemovalHeld")


def test_keys_dropped_from_twelve_specs_at_once_are_held_and_each_resource_says_how_to_approve(stack: Stack) -> None:
    """Finding 9 (held) and 4: requestPercentage dropped from 12 resources at once is a mass removal;
    all 12 said Ready=True Applied while the broker kept request_percentage=40."""
    ns, cluster = stack.new_namespace(), new_cluster(stack, "trim12")
    users = [uniq(f"r{i}") for i in range(12)]

    def quotas(**spec: Any) -> list[dict[str, Any]]:
        return [client_quota(ns, f"q{i}", {"user": {"name": u}}, spec, cluster=cluster) for i, u in enumerate(users)]

    try:
        apply(stack.kube, *quotas(producerByteRate=1000, requestPercentage=40))
        wait_for(lambda: all(reason_of(stack, ns, f"q{i}") == "Applied" for i in range(12)), 90, "12 Applied",
                 on_timeout=stack.operator.log)  # fmt: skip
        apply(stack.kube, *quotas(producerByteRate=1000))
        wait_for(lambda: all(reason_of(stack, ns, f"q{i}") == "RemovalHeld" for i in range(12)), 60,
                 "12 RemovalHeld", on_timeout=stack.operator.log)  # fmt: skip
        guard = condition(cluster_obj(stack, cluster), "DeletionGuard")
        hold = guard["message"].rsplit(f"{APPROVAL_ANNOTATION}=", 1)[1].split()[0]
        live = stack.broker_quotas()
        for i, u in enumerate(users):
            found = obj(stack, "clientquota", ns, f"q{i}")
            assert found is not None
            assert condition(found, "Stalled").get("status") == "True"
            command = f"kubectl annotate kafkacluster {cluster} {APPROVAL_ANNOTATION}={hold} --overwrite"
            assert command in held_condition(found)["message"]
            assert found["status"]["applied"]["values"] == {"producer_byte_rate": 1000, "request_percentage": 40}
            assert live[Entity.for_user(u)] == {P: 1000.0, R: 40.0}
        held_events = events(stack, ns, "RemovalHeld")
        assert sorted(e["involvedObject"]["name"] for e in held_events) == sorted(f"q{i}" for i in range(12))
        assert all(e["type"] == "Warning" and e.get("count", 1) == 1 for e in held_events)

        stack.kube.kubectl("annotate", "kafkacluster", cluster, f"{APPROVAL_ANNOTATION}={hold}", "--overwrite")
        wait_for(lambda: all(reason_of(stack, ns, f"q{i}") == "Applied" for i in range(12)), 60, "12 Applied again",
                 on_timeout=stack.operator.log)  # fmt: skip
        live = stack.broker_quotas()
        assert all(live[Entity.for_user(u)] == {P: 1000.0} for u in users)
        assert not any(held_condition(obj(stack, "clientquota", ns, f"q{i}")) for i in range(12))
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--wait=false", check=False)
        stack.kube.kubectl("annotate", "kafkacluster", cluster, f"{APPROVAL_ANNOTATION}-", check=False)
        _approve_until_gone(stack, ns, cluster)


def _approve_until_gone(stack: Stack, ns: str, cluster: str) -> None:
    """Clean up: approve whatever the guard holds until the namespace's resources are gone, then the cluster."""

    def gone() -> bool:
        items = json.loads(stack.kube.kubectl("get", "clientquotas", "-n", ns, "-o", "json").stdout)["items"]
        if items:
            guard = condition(cluster_obj(stack, cluster), "DeletionGuard")
            if guard.get("status") == "True":
                hold = guard["message"].rsplit(f"{APPROVAL_ANNOTATION}=", 1)[1].split()[0]
                stack.kube.kubectl("annotate", "kafkacluster", cluster, f"{APPROVAL_ANNOTATION}={hold}", "--overwrite")
        return not items

    try:
        wait_for(gone, 90, f"the resources of {ns} gone", interval=1.0)
    finally:
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)


def plan_delete(stack: Stack, manifests: Path, cluster: str) -> tuple[int, str]:
    args = ["plan", "-f", str(manifests), "--delete", str(manifests), "--cluster", cluster]
    args += ["--kubeconfig", str(stack.kube.kubeconfig), "--ledger-namespace", LEDGER_NAMESPACE]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue() + err.getvalue()


def test_a_held_prune_says_so_on_each_resource_and_kquota_plan_foretells_it(stack: Stack, tmp_path: Path) -> None:
    """Finding 4: resources held by the guard sat Terminating with Ready=True and no event, and
    `kquota plan --delete` said "No changes" (exit 0). Finding 5: while removals are held, another
    change dropped the hold from the KafkaCluster's status for a settle time and announced it again."""
    ns, cluster = stack.new_namespace(), new_cluster(stack, "prune")
    users = [uniq(f"p{i}") for i in range(12)]
    docs = [
        client_quota(ns, f"q{i}", {"user": {"name": u}}, {"producerByteRate": 2000 + i}, cluster=cluster)
        for i, u in enumerate(users)
    ]
    manifests = tmp_path / "app"
    manifests.mkdir()
    for i, doc in enumerate(docs):
        (manifests / f"q{i}.yaml").write_text(json.dumps(doc))
    try:
        apply(stack.kube, *docs)
        wait_for(lambda: all(reason_of(stack, ns, f"q{i}") == "Applied" for i in range(12)), 90, "12 Applied",
                 on_timeout=stack.operator.log)  # fmt: skip
        code, text = plan_delete(stack, manifests, cluster)
        assert code == 3, text
        planned = text.rsplit(f"{APPROVAL_ANNOTATION}=", 1)[1].split()[0]
        assert f"To let the held removals go: kubectl annotate kafkacluster {cluster} " in text

        stack.kube.kubectl("delete", "-f", str(manifests), "--wait=false")
        wait_for(lambda: all(reason_of(stack, ns, f"q{i}") == "RemovalHeld" for i in range(12)), 60,
                 "12 RemovalHeld while Terminating", on_timeout=stack.operator.log)  # fmt: skip
        guard = condition(cluster_obj(stack, cluster), "DeletionGuard")
        assert f"{APPROVAL_ANNOTATION}={planned}" in guard["message"], "plan foretold the operator's id"
        for i in range(12):
            found = obj(stack, "clientquota", ns, f"q{i}")
            assert found is not None and found["metadata"].get("deletionTimestamp")
            assert f"{APPROVAL_ANNOTATION}={planned}" in held_condition(found)["message"]
        assert len(events(stack, ns, "RemovalHeld")) == 12

        # Another change while held: the hold stays on the KafkaCluster throughout, announced once.
        apply(stack.kube, client_quota(ns, "late", {"user": {"name": uniq("late")}}, {"producerByteRate": 7},
                                       cluster=cluster))  # fmt: skip
        lapses = []
        deadline = time.monotonic() + 12  # past the 5 s removal settle the change restarts
        while time.monotonic() < deadline:
            found = cluster_obj(stack, cluster)
            if condition(found, "DeletionGuard").get("status") != "True" or condition(found).get("reason") != (
                "RemovalsHeld"
            ):
                lapses.append(condition(found))
            held_metric = stack.operator.metric("kquota_removals_held", cluster=cluster)
            if held_metric != 12:
                lapses.append({"kquota_removals_held": held_metric})
            time.sleep(0.3)
        assert not lapses, f"the hold left the KafkaCluster's status: {lapses[:3]}"
        assert reason_of(stack, ns, "late") == "Applied"
        guard_events = [e for e in _cluster_events(stack, cluster) if e.get("reason") == "DeletionGuard"]
        assert len(guard_events) == 1 and guard_events[0].get("count", 1) == 1, guard_events

        stack.kube.kubectl("annotate", "kafkacluster", cluster, f"{APPROVAL_ANNOTATION}={planned}", "--overwrite")
        wait_for(lambda: all(obj(stack, "clientquota", ns, f"q{i}") is None for i in range(12)), 60,
                 "the prune done once approved", on_timeout=stack.operator.log)  # fmt: skip
        live = stack.broker_quotas()
        assert not any(Entity.for_user(u) in live for u in users)
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--wait=false", check=False)
        _approve_until_gone(stack, ns, cluster)


def _cluster_events(stack: Stack, cluster: str) -> list[dict[str, Any]]:
    items = json.loads(stack.kube.kubectl("get", "events", "-n", "default", "-o", "json").stdout)["items"]
    return [e for e in items if e.get("involvedObject", {}).get("name") == cluster]


def test_an_adopt_removal_is_blamed_on_adopt_not_on_the_clientquota_naming_the_entity(
    stack: Stack, tmp_path: Path
) -> None:
    """Finding 3: with users/zoe consumer_byte_rate set by hand and a ClientQuota setting only zoe's
    producerByteRate, switching to Adopt removed the hand-set key with a QuotaRemoved event on the
    ClientQuota saying it 'no longer sets it'. Adopt takes every unowned key of a broker, so this
    test has a broker of its own (the session broker carries other modules' keys)."""
    started = time.monotonic()
    own = KafkaCluster.start(tmp_path / "kafka")
    print(f"\nown broker started in {time.monotonic() - started:.1f}s")
    ns, cluster, zoe = stack.new_namespace(), uniq("adopt"), uniq("zoe")
    entity = Entity.for_user(zoe)
    admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=own.bootstrap))
    try:
        assert all(r.ok for r in admin.alter([EntityChange(entity, (QuotaOp(C, 2048.0),))]))
        stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, own.bootstrap))
        apply(stack.kube, client_quota(ns, "zoe", {"user": {"name": zoe}}, {"producerByteRate": 1000}, cluster=cluster))
        wait_for(lambda: reason_of(stack, ns, "zoe") == "Applied", 60, "Applied", on_timeout=stack.operator.log)
        wait_for(lambda: admin.describe_all().get(entity) == {P: 1000.0, C: 2048.0}, 30, "both keys on the broker")
        adopt = {"unmanaged": {"policy": "Adopt"}}
        stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, own.bootstrap, adopt))
        wait_for(lambda: admin.describe_all().get(entity) == {P: 1000.0}, 60, "the hand-set key adopted and removed",
                 on_timeout=stack.operator.log)  # fmt: skip

        def removal() -> dict[str, Any] | None:
            found = [
                e
                for e in _cluster_events(stack, cluster) + events(stack, ns, "QuotaRemoved")
                if e.get("reason") == "QuotaRemoved" and f"consumer_byte_rate on users/{zoe}" in e.get("message", "")
            ]
            return found[0] if found else None

        event = wait_for(removal, 30, "the QuotaRemoved event")
        assert event["involvedObject"]["kind"] == "KafkaCluster", event
        assert event["type"] == "Warning"
        assert "unmanaged.policy Adopt" in event["message"] and "no longer sets it" not in event["message"]
        assert not events(stack, ns, "QuotaRemoved", "zoe"), "nothing blamed on the ClientQuota"
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=60s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)
        admin.close()
        own.stop()


def cli(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue() + err.getvalue()


def test_explain_agrees_with_plan_and_the_operator_on_a_kept_key(stack: Stack, tmp_path: Path) -> None:
    """Finding 6: a key a refused resource keeps (tenancy) was "to be removed" in `kquota explain`
    while `kquota plan` said keep and the operator kept it."""
    ns, cluster, user = stack.new_namespace(), new_cluster(stack, "kept"), uniq("legacy")
    doc = client_quota(ns, "legacy", {"user": {"name": user}}, {"producerByteRate": 5000}, cluster=cluster)
    manifest = tmp_path / "legacy.yaml"
    manifest.write_text(json.dumps(doc))
    try:
        apply(stack.kube, doc)
        wait_for(lambda: reason_of(stack, ns, "legacy") == "Applied", 60, "Applied", on_timeout=stack.operator.log)
        grants = {"tenancy": {"grants": [{"namespaces": [ns], "users": ["team-*"]}]}}
        stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap, grants))
        wait_for(lambda: reason_of(stack, ns, "legacy") == "NotPermitted", 60, "NotPermitted",
                 on_timeout=stack.operator.log)  # fmt: skip
        assert stack.broker_quotas()[Entity.for_user(user)] == {P: 5000.0}, "the operator keeps it"
        where = [
            "--cluster",
            cluster,
            "--kubeconfig",
            str(stack.kube.kubeconfig),
            "--ledger-namespace",
            LEDGER_NAMESPACE,
        ]
        code, text = cli("plan", "-f", str(manifest), *where, "-o", "json")
        assert code == 0, text
        rows = [(r["action"], r["key"]) for r in json.loads(text)["rows"] if r["entity"]["path"] == f"users/{user}"]
        assert rows == [("keep", "producer_byte_rate")], rows
        code, text = cli("explain", "--user", user, *where, "-o", "json")
        assert code == 0, text
        (key,) = [k for k in json.loads(text)["keys"] if k["key"] == "producer_byte_rate"]
        assert key["owner"]["state"] == "kept", key
        assert "to be removed" not in text
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=60s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)


@pytest.fixture
def own_kafka(tmp_path: Path) -> Iterator[KafkaCluster]:
    """A broker of this test's own, which it stops and starts (the session's is shared)."""
    cluster = KafkaCluster.start(tmp_path / "kafka")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_broker_gone_while_idle_is_said_within_seconds_and_its_return_too(
    stack: Stack, own_kafka: KafkaCluster
) -> None:
    """Finding 8: the KafkaCluster stayed Ready=True Connected for about 31 s after its only broker stopped
    (nothing looked before the next pass, whose DescribeCluster then waited out its 30 s timeout). The
    brokers are now checked while idle (every 5 s, shipped default): within about two intervals the
    KafkaCluster and its resources say KafkaUnavailable, and Ready again once the broker is back."""
    ns, cluster, user = stack.new_namespace(), uniq("gone"), uniq("idle")
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, own_kafka.bootstrap))
    try:
        apply(stack.kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 4000}, cluster=cluster))
        wait_for(lambda: reason_of(stack, ns, "q") == "Applied", 60, "Applied", on_timeout=stack.operator.log)
        wait_for(lambda: condition(cluster_obj(stack, cluster)).get("reason") == "Connected", 30, "Connected")
        time.sleep(2)  # idle: the pass that applied it (and wrote Connected) is over

        stopped = time.monotonic()
        own_kafka.stop_broker(0)

        def unavailable() -> bool:
            found = condition(cluster_obj(stack, cluster))
            return found.get("status") == "False" and found.get("reason") == "KafkaUnavailable"

        # Two intervals (10 s) and room for a busy machine; the code before this took 30 s at best.
        wait_for(unavailable, 25, "the KafkaCluster KafkaUnavailable", interval=0.2, on_timeout=stack.operator.log)
        said = time.monotonic() - stopped
        wait_for(lambda: reason_of(stack, ns, "q") == "KafkaUnavailable", 10, "the resource KafkaUnavailable",
                 on_timeout=stack.operator.log)  # fmt: skip
        assert condition(cluster_obj(stack, cluster), "Reconciling").get("status") == "True"

        started = time.monotonic()
        own_kafka.start_broker(0)
        up = time.monotonic()
        wait_for(lambda: condition(cluster_obj(stack, cluster)).get("reason") == "Connected", 30,
                 "Connected again", interval=0.2, on_timeout=stack.operator.log)  # fmt: skip
        back = time.monotonic() - up
        wait_for(lambda: reason_of(stack, ns, "q") == "Applied", 15, "Applied again", on_timeout=stack.operator.log)
        print(
            f"\nbroker stopped: KafkaUnavailable {said:.1f}s later; started in {up - started:.1f}s, "
            f"Connected {back:.1f}s after"
        )
        # One event for the outage, not one per check.
        warned = [e for e in _cluster_events(stack, cluster) if e.get("reason") == "KafkaUnavailable"]
        assert len(warned) == 1, [e.get("message") for e in warned]
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=60s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)


def test_a_wrong_scram_password_is_stalled_after_three_refusals_and_a_fixed_secret_recovers(stack: Stack) -> None:
    """Finding 8: a wrong SCRAM password stayed KafkaUnavailable (Reconciling) for ever, so a Flux `wait`
    ended only at its timeout. Refused the same way 3 times in a row (shipped default) it is Stalled,
    reason AuthenticationFailed, with the brokers' refusal; not at the first refusal (a rotation may
    refuse the old password for a moment); still retried, so the corrected Secret recovers by itself."""
    ns, cluster, target = stack.new_namespace(), uniq("refused"), uniq("app")
    user, password = stack.kafka.admin_user, stack.kafka.admin_password
    secret = uniq("creds")
    sasl = scram_security(stack.kube, secret, user, f"Wr0ng-{secrets.token_hex(12)}")
    stack.kube.kubectl(
        "apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.sasl_bootstrap, {"security": sasl})
    )
    try:
        quota = client_quota(ns, "q", {"user": {"name": target}}, {"producerByteRate": 5000}, cluster=cluster)
        apply(stack.kube, quota)
        seen: list[str] = []

        def stalled() -> bool:
            found = condition(cluster_obj(stack, cluster))
            if found.get("reason") and (not seen or seen[-1] != found["reason"]):
                seen.append(str(found["reason"]))
            return found.get("reason") == "AuthenticationFailed"

        # Each refused login takes the 10 s connect timeout (kafka-python retries until then), plus backoff.
        wait_for(stalled, 120, "AuthenticationFailed", interval=0.5, on_timeout=stack.operator.log)
        assert seen[0] == "KafkaUnavailable", f"Stalled at the first refusal: {seen}"
        found = cluster_obj(stack, cluster)
        for obj_ in (found, obj(stack, "clientquota", ns, "q")):
            assert condition(obj_, "Stalled").get("status") == "True", obj_
            message = condition(obj_, "Stalled")["message"]
            assert "authentication" in message.lower() and user in message and "3 times in a row" in message
        wait_for(lambda: reason_of(stack, ns, "q") == "AuthenticationFailed", 15, "the resource AuthenticationFailed")
        warned = [e for e in _cluster_events(stack, cluster) if e.get("reason") == "AuthenticationFailed"]
        assert len(warned) == 1 and warned[0]["type"] == "Warning"

        stack.kube.kubectl(
            "patch", "secret", secret, "-n", LEDGER_NAMESPACE, "--type=merge", "-p",
            json.dumps({"stringData": {"password": password}}),
        )  # fmt: skip
        wait_for(lambda: reason_of(stack, ns, "q") == "Applied", 90, "Applied with the corrected Secret",
                 on_timeout=stack.operator.log)  # fmt: skip
        assert stack.broker_quotas()[Entity.for_user(target)] == {P: 5000.0}
        assert condition(cluster_obj(stack, cluster)).get("reason") == "Connected"
        assert not condition(cluster_obj(stack, cluster), "Stalled")
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=60s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)
