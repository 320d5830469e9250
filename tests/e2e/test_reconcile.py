"""ClientQuota resources reach the real broker: every entity form, drift, conflicts, ownership.

The unmanaged-policy and protection tests check exactly what the KafkaCluster's
field descriptions (``kubectl explain kafkacluster.spec.unmanaged.policy``,
``...protectedUsers``) promise.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster, running
from harness.operator_proc import (
    LEDGER_NAMESPACE,
    apply,
    client_quota,
    condition,
    get,
    kafka_cluster_manifest,
    wait_for,
)
from harness.stack import Stack

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.manifests import entity_spec
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.support.names import uniq
from tests.support.quotas import FORMS, C, N, P, R

pytestmark = pytest.mark.e2e


def kafka_configs_describe(stack: Stack, entity: Entity) -> str:
    """What Kafka's own kafka-configs tool says about one entity (an independent client)."""
    args = ["--describe"]
    for etype, flag in (("user", "users"), ("client-id", "clients"), ("ip", "ips")):
        if etype in entity.parts():
            name = entity.parts()[etype]
            args += ["--entity-type", flag]
            args += ["--entity-default"] if name is None else ["--entity-name", name]
    result = stack.kafka.kafka_configs(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def wait_broker(stack: Stack, entity: Entity, expected: dict[QuotaKey, float], timeout: float = 30) -> None:
    def matches() -> bool:
        return stack.broker_quotas().get(entity, {}) == expected

    wait_for(
        matches,
        timeout,
        f"broker quotas of {entity} == {expected}",
        on_timeout=lambda: f"broker has {stack.broker_quotas().get(entity)}\n{stack.operator.log()}",
    )


def wait_ready(
    stack: Stack,
    ns: str,
    name: str,
    status: str = "True",
    reason: str | None = None,
    kind: str = "clientquota",
    timeout: float = 30,
) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = get(stack.kube, kind, ns, name)
        cond = condition(obj)
        if (
            cond.get("status") == status
            and (reason is None or cond.get("reason") == reason)
            and obj
            and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        ):
            return obj
        return None

    result: dict[str, Any] = wait_for(
        ready,
        timeout,
        f"{kind} {ns}/{name} Ready={status} {reason or ''}",
        on_timeout=lambda: json.dumps(get(stack.kube, kind, ns, name)),
    )
    return result


@pytest.mark.k8s_floor
@pytest.mark.parametrize("form", list(FORMS))
def test_create_modify_delete_delete_again(stack: Stack, form: str) -> None:
    entity = FORMS[form]()
    ns = stack.new_namespace()
    name = uniq("cq")
    ip = entity.is_ip
    first = {"connectionCreationRate": 20} if ip else {"producerByteRate": "1Mi", "requestPercentage": 50}
    first_broker = {N: 20.0} if ip else {P: 1048576.0, R: 50.0}
    before = {e: v for e, v in stack.broker_quotas().items() if e != entity}

    apply(stack.kube, client_quota(ns, name, entity_spec(entity), first))
    wait_broker(stack, entity, first_broker)
    obj = wait_ready(stack, ns, name, reason="Applied")
    assert obj["status"]["applied"]["values"] == {k.value: v for k, v in first_broker.items()}
    assert obj["status"]["entity"] == entity.path()
    described = kafka_configs_describe(stack, entity)
    key, value = next(iter(first_broker.items()))
    assert f"{key.value}={value}" in described or f"{key.value}={int(value)}" in described, described

    second = {"connectionCreationRate": 40} if ip else {"producerByteRate": 2048, "consumerByteRate": "4Ki"}
    second_broker = {N: 40.0} if ip else {P: 2048.0, C: 4096.0}
    apply(stack.kube, client_quota(ns, name, entity_spec(entity), second))
    wait_broker(stack, entity, second_broker)
    changed = wait_ready(stack, ns, name, reason="Applied")
    # Kopf keeps no diff base (kquota.handlers.diffbase): neither the create nor the
    # change cost an annotation PATCH; the finalizer still holds the deletion below.
    assert "kquota.io/last-handled-configuration" not in (changed["metadata"].get("annotations") or {})
    assert "kquota.io/finalizer" in changed["metadata"].get("finalizers", [])

    stack.kube.kubectl("delete", "clientquota", name, "-n", ns, "--timeout=30s")
    wait_broker(stack, entity, {})
    assert get(stack.kube, "clientquota", ns, name) is None

    again = stack.kube.kubectl("delete", "clientquota", name, "-n", ns, "--ignore-not-found")
    assert again.returncode == 0
    after = {e: v for e, v in stack.broker_quotas().items() if e != entity}
    # Other tests' entities may come and go meanwhile; none of the ones that
    # existed before and are not ours may have been changed by this lifecycle.
    for e, values in before.items():
        if e in after:
            assert after[e] == values, f"{e} changed"


@pytest.mark.k8s_floor
def test_out_of_band_change_is_corrected_and_unmanaged_entries_are_untouched(stack: Stack) -> None:
    user = uniq("drift")
    other = uniq("handmade")
    ns = stack.new_namespace()
    # Set by hand, before and outside kquota: must survive everything below.
    assert (
        stack.kafka.kafka_configs(
            "--alter", "--entity-type", "users", "--entity-name", other, "--add-config", "producer_byte_rate=777"
        ).returncode
        == 0
    )
    apply(stack.kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 100000}))
    wait_broker(stack, Entity.for_user(user), {P: 100000.0})
    wait_ready(stack, ns, "q", reason="Applied")
    # A key kquota does not own, on the entity it manages.
    assert (
        stack.kafka.kafka_configs(
            "--alter", "--entity-type", "users", "--entity-name", user, "--add-config", "consumer_byte_rate=555"
        ).returncode
        == 0
    )
    drift_before = stack.operator.metric("kquota_drift_corrections_total")

    # Out of band: kafka-configs changes the owned key.
    assert (
        stack.kafka.kafka_configs(
            "--alter", "--entity-type", "users", "--entity-name", user, "--add-config", "producer_byte_rate=5"
        ).returncode
        == 0
    )
    interval = stack.operator.drift_interval
    wait_broker(stack, Entity.for_user(user), {P: 100000.0, C: 555.0}, timeout=interval + 10)
    assert stack.operator.metric("kquota_drift_corrections_total") > drift_before
    events = stack.kube.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    assert "DriftCorrected" in events

    assert stack.broker_quotas()[Entity.for_user(other)] == {P: 777.0}
    # Deleting the resource removes only what kquota set.
    stack.kube.kubectl("delete", "clientquota", "q", "-n", ns, "--timeout=30s")
    wait_broker(stack, Entity.for_user(user), {C: 555.0})
    assert stack.broker_quotas()[Entity.for_user(other)] == {P: 777.0}


@pytest.mark.k8s_floor
def test_status_writes_wake_no_pass_and_a_users_annotation_does(stack: Stack) -> None:
    # The operator's own status write comes back as a watch event, as does Kopf
    # adding its finalizer: neither may start another pass (at 10,000 resources
    # those echoes were passes over everything). The creation itself wakes one
    # narrow pass, or none when a drift pass happens to take it.
    user = uniq("echo")
    ns = stack.new_namespace()

    def narrow() -> float:
        return stack.operator.metric("kquota_reconcile_narrow_passes_total")

    # The reconciler has made its first pass and other tests' work has settled.
    wait_for(lambda: stack.operator.metric("kquota_reconcile_passes_total") >= 1, 30, "a first pass")
    counts = [narrow()]

    def quiet() -> bool:
        counts.append(narrow())
        return counts[-1] == counts[-2]

    wait_for(quiet, 30, "no narrow pass for a moment", interval=2)
    before = counts[-1]
    apply(stack.kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 4242}))
    ready = wait_ready(stack, ns, "q", reason="Applied")
    assert "kquota.io/finalizer" in ready["metadata"].get("finalizers", [])
    time.sleep(2.0)  # the echo of the Ready write has arrived and been handled by now
    assert narrow() - before <= 1, f"{narrow() - before:.0f} narrow passes for one creation"

    # A user's annotation is a change a user made: it asks for a pass.
    settled = narrow()
    stack.kube.kubectl("annotate", "clientquota", "q", "-n", ns, "poke=1")
    wait_for(lambda: narrow() > settled, 20, "a narrow pass after kubectl annotate")
    wait_broker(stack, Entity.for_user(user), {P: 4242.0})


def test_the_operators_writes_name_kquota_as_their_field_manager(stack: Stack) -> None:
    # managedFields, audit logs and `kubectl get --show-managed-fields` say who wrote what: the
    # API server names a write's manager after the client's User-Agent (the client library's
    # default said "OpenAPI-Generator").
    ns = stack.new_namespace()
    apply(stack.kube, client_quota(ns, "q", {"user": {"name": uniq("fm")}}, {"producerByteRate": 4343}))
    wait_ready(stack, ns, "q", reason="Applied")
    shown = stack.kube.kubectl("get", "clientquota", "q", "-n", ns, "-o", "json", "--show-managed-fields")
    managers = {(m.get("subresource"), m["manager"]) for m in json.loads(shown.stdout)["metadata"]["managedFields"]}
    assert ("status", "kquota") in managers, managers
    assert not any(name == "OpenAPI-Generator" for _, name in managers), managers
    ledgers = json.loads(
        stack.kube.kubectl(
            "get", "configmaps", "-n", LEDGER_NAMESPACE, "-l", "kquota.io/ledger", "-o", "json", "--show-managed-fields"
        ).stdout
    )["items"]
    assert ledgers, "no ledger ConfigMap"
    assert {m["manager"] for cm in ledgers for m in cm["metadata"]["managedFields"]} == {"kquota"}


@pytest.mark.k8s_floor
def test_a_drift_check_rewrites_a_status_edited_by_hand_and_leaves_the_others(stack: Stack) -> None:
    # A status edited by hand (a false green or red for kstatus and Argo CD) is put back by the
    # next drift check (every 3 s here); statuses nobody touched are not written again.
    ns = stack.new_namespace()
    user = uniq("edited")
    for i in range(4):
        apply(stack.kube, client_quota(ns, f"q{i}", {"user": {"name": f"{user}-{i}"}}, {"producerByteRate": 1000 + i}))
    for i in range(4):
        wait_ready(stack, ns, f"q{i}", reason="Applied")
    time.sleep(4.0)  # a drift check has passed since every Ready write
    versions = {i: get(stack.kube, "clientquota", ns, f"q{i}")["metadata"]["resourceVersion"] for i in range(1, 4)}
    edited = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "EditedByHand",
                    "message": "not what kquota wrote",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
    }
    # The patch's answer is the object as stored: a separate read could come after the next drift
    # check had already put the status back (seen on a loaded machine), failing for the wrong reason.
    patched = stack.kube.kubectl(
        "patch", "clientquota", "q0", "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(edited),
        "--output=json",
    )  # fmt: skip
    assert condition(json.loads(patched.stdout)).get("reason") == "EditedByHand"
    wait_ready(stack, ns, "q0", reason="Applied", timeout=20)
    time.sleep(4.0)  # at least one more drift check
    after = {i: get(stack.kube, "clientquota", ns, f"q{i}")["metadata"]["resourceVersion"] for i in range(1, 4)}
    assert after == versions, "a drift check wrote statuses nobody had edited"


@pytest.mark.k8s_floor
def test_conflicting_resources_older_wins_and_newer_reports_conflict(stack: Stack) -> None:
    user = uniq("contested")
    ns = stack.new_namespace()
    apply(stack.kube, client_quota(ns, "first", {"user": {"name": user}}, {"producerByteRate": 1000}))
    wait_ready(stack, ns, "first", reason="Applied")
    apply(
        stack.kube,
        client_quota(ns, "second", {"user": {"name": user}}, {"producerByteRate": 9999, "consumerByteRate": 2000}),
    )
    second = wait_ready(stack, ns, "second", status="False", reason="Conflict")
    assert f"ClientQuota {ns}/first" in condition(second)["message"]
    # The non-contested key of the loser is applied; the contested one is the winner's.
    wait_broker(stack, Entity.for_user(user), {P: 1000.0, C: 2000.0})
    first = wait_ready(stack, ns, "first", reason="Applied")
    # No flapping: repeated passes leave both statuses where they are.
    transition = condition(second)["lastTransitionTime"]
    # The poke wakes a narrow pass (just this entity and both claimants); the
    # drift timer adds full ones. Neither kind may flip the outcome.
    passes = stack.operator.metric("kquota_reconcile_passes_total")
    narrow = stack.operator.metric("kquota_reconcile_narrow_passes_total")
    stack.kube.kubectl("annotate", "clientquota", "first", "-n", ns, "poke=1")
    wait_for(lambda: stack.operator.metric("kquota_reconcile_passes_total") >= passes + 2, 20, "two more passes")
    assert stack.operator.metric("kquota_reconcile_narrow_passes_total") > narrow
    assert condition(get(stack.kube, "clientquota", ns, "second"))["lastTransitionTime"] == transition
    assert condition(first)["status"] == "True"

    # The winner goes away: the other resource takes the key over.
    stack.kube.kubectl("delete", "clientquota", "first", "-n", ns, "--timeout=30s")
    wait_broker(stack, Entity.for_user(user), {P: 9999.0, C: 2000.0})
    wait_ready(stack, ns, "second", reason="Applied")


def test_many_resources_are_applied_in_few_passes(stack: Stack) -> None:
    from harness.operator_proc import apply_many

    ns = stack.new_namespace()
    users = [uniq("bulk") for _ in range(300)]
    passes_before = stack.operator.metric("kquota_reconcile_passes_total")
    apply_many(
        stack.kube,
        [client_quota(ns, f"q{i}", {"user": {"name": u}}, {"producerByteRate": 1000 + i}) for i, u in enumerate(users)],
    )

    def all_applied() -> bool:
        live = stack.broker_quotas()
        return all(live.get(Entity.for_user(u), {}).get(P) == 1000.0 + i for i, u in enumerate(users))

    wait_for(all_applied, 60, "300 quotas on the broker")
    passes = stack.operator.metric("kquota_reconcile_passes_total") - passes_before
    assert passes < 100, f"{passes} passes for 300 resources: changes are not being coalesced"


@pytest.mark.k8s_floor
def test_kafka_cluster_status_shows_it_is_connected(stack: Stack) -> None:
    def connected() -> dict[str, Any] | None:
        obj = json.loads(stack.kube.kubectl("get", "kafkacluster", stack.cluster, "-o", "json").stdout)
        return obj if condition(obj).get("reason") == "Connected" else None

    obj = wait_for(connected, 30, "KafkaCluster Ready=True, reason Connected")
    assert condition(obj)["status"] == "True"
    assert obj["status"]["brokers"] == 1
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]


def test_controller_mutation_quota_throttles_create_topics_and_reports_the_burst(stack: Stack) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError

    ns = stack.new_namespace()
    client_id = uniq("mutator")
    body = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ControllerMutationQuota",
        "metadata": {"name": "m", "namespace": ns},
        "spec": {"entity": {"clientId": {"name": client_id}}, "rate": 2, "expectedBurst": 100},
    }
    apply(stack.kube, body)
    wait_broker(stack, Entity.for_client(client_id), {QuotaKey.CONTROLLER_MUTATION_RATE: 2.0})
    obj = wait_ready(stack, ns, "m", kind="controllermutationquota", reason="Applied")
    assert obj["status"]["burst"] == {"windowNum": 11, "windowSizeSeconds": 1, "effective": 22.0, "expected": 100}
    burst = condition(obj, "BurstSufficient")
    assert burst["status"] == "False" and "controller.quota.window.num=50" in burst["message"]

    # kafka-python speaks CreateTopics v7; librdkafka's older version is throttled
    # silently (KIP-599), without the error this test looks for.
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka.bootstrap, client_id=client_id)
    errors = []
    try:
        for i in range(3):
            try:
                admin.create_topics([NewTopic(f"{client_id}-{i}", 30, 1)])
            except KafkaError as exc:
                errors.append(type(exc).__name__)
    finally:
        admin.close()
    assert "ThrottlingQuotaExceededError" in errors, errors


def hand_set(kafka: KafkaCluster, entity_type: str, name: str, config: str) -> None:
    """A quota set outside kquota, with Kafka's own tool."""
    result = kafka.kafka_configs("--alter", "--entity-type", entity_type, "--entity-name", name, "--add-config", config)
    assert result.returncode == 0, result.stderr


def test_ignore_a_resource_takes_over_a_hand_set_key_and_its_deletion_removes_it(stack: Stack) -> None:
    # Policy Ignore (the stack's KafkaCluster sets none): a key a resource sets is
    # taken over, not reported as a Conflict; keys no resource sets are left alone.
    user = uniq("takeover")
    ns = stack.new_namespace()
    hand_set(stack.kafka, "users", user, "producer_byte_rate=777,consumer_byte_rate=555")
    wait_broker(stack, Entity.for_user(user), {P: 777.0, C: 555.0})

    apply(stack.kube, client_quota(ns, "q", {"user": {"name": user}}, {"producerByteRate": 1000}))
    wait_broker(stack, Entity.for_user(user), {P: 1000.0, C: 555.0})
    wait_ready(stack, ns, "q", reason="Applied")

    # The key is kquota's now: deleting the resource removes it, the hand-set 777 is not restored.
    stack.kube.kubectl("delete", "clientquota", "q", "-n", ns, "--timeout=30s")
    wait_broker(stack, Entity.for_user(user), {C: 555.0})
    time.sleep(stack.operator.drift_interval + 1)  # a full pass too leaves the unclaimed key alone
    assert stack.broker_quotas()[Entity.for_user(user)] == {C: 555.0}


@pytest.fixture
def own_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A broker of this test's own: Adopt removes every unclaimed quota on the brokers it points at."""
    with running(tmp_path_factory.mktemp("kafka-adopt")) as cluster:
        yield cluster


def test_adopt_removes_every_unclaimed_quota_and_never_touches_protected_users(
    stack: Stack, own_kafka: KafkaCluster
) -> None:
    ns = stack.new_namespace()
    admin_user, claimed, handmade, tool = uniq("admin"), uniq("claimed"), uniq("handmade"), uniq("tool")
    hand_set(own_kafka, "users", admin_user, "producer_byte_rate=1")
    hand_set(own_kafka, "users", claimed, "producer_byte_rate=777")
    hand_set(own_kafka, "users", handmade, "producer_byte_rate=777")
    hand_set(own_kafka, "clients", tool, "consumer_byte_rate=555")
    hand_set(own_kafka, "users", admin_user, "consumer_byte_rate=2")

    def broker() -> dict[Entity, dict[QuotaKey, float]]:
        admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=own_kafka.bootstrap))
        try:
            return admin.describe_all()
        finally:
            admin.close()

    expected_before = {
        Entity.for_user(admin_user): {P: 1.0, C: 2.0},
        Entity.for_user(claimed): {P: 777.0},
        Entity.for_user(handmade): {P: 777.0},
        Entity.for_client(tool): {C: 555.0},
    }
    wait_for(lambda: broker() == expected_before, 30, "the hand-set quotas on the broker")

    name = uniq("adopt")
    spec = {"unmanaged": {"policy": "Adopt"}, "protectedUsers": [admin_user]}
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(name, own_kafka.bootstrap, spec))
    try:
        apply(
            stack.kube,
            client_quota(ns, "claimed", {"user": {"name": claimed}}, {"producerByteRate": 2000}, cluster=name),
            client_quota(ns, "admin", {"user": {"name": admin_user}}, {"producerByteRate": 5}, cluster=name),
        )
        # Everything no resource sets is gone, except the protected user's quotas, which no
        # resource and no policy changes: exactly this is left on the broker.
        expected = {Entity.for_user(admin_user): {P: 1.0, C: 2.0}, Entity.for_user(claimed): {P: 2000.0}}
        wait_for(
            lambda: broker() == expected,
            30,
            f"only {expected} on the broker",
            on_timeout=lambda: f"broker has {broker()}\n{stack.operator.log()}",
        )
        wait_ready(stack, ns, "claimed", reason="Applied")
        protected = wait_ready(stack, ns, "admin", status="False", reason="Protected")
        assert admin_user in condition(protected)["message"]
        time.sleep(stack.operator.drift_interval + 1)  # more full passes change nothing
        assert broker() == expected
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=30s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s", check=False)
