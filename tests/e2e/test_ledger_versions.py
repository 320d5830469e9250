"""Operator upgrade and downgrade (issue 23): the ledger's format version, on the real API server and a broker.

An operator upgraded from 0.1.0 meets that release's ledger (tests/data/ledger-0.1.0/,
made by the 0.1.0 code) and keeps ownership: the keys in it that no resource wants
are removed, keys it never recorded are left alone. An operator meeting a ledger
in a format a newer kquota wrote (a downgrade) refuses the cluster: nothing on the
brokers changes, a deletion waits, the KafkaCluster says LedgerFromNewerOperator;
restoring a readable ledger lets it carry on.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
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

from kquota.domain import ledger as fmt
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.manifests import entity_spec
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.k8s.ledger import DATA_KEY, LABEL, SHARDS_LABEL, label_value, shard_name
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.support.quotas import C, P, R
from tests.support.stacks import own_stack

pytestmark = pytest.mark.e2e

DATA = Path(__file__).resolve().parents[1] / "data" / "ledger-0.1.0" / "configmaps.yaml"


@pytest.fixture(scope="module")
def stack(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A broker of its own: the 0.1.0 ledger names fixed entities, default ones among them.
    with own_stack(kube, tmp_path_factory, "ledgerver", {}) as (_, s):
        yield s


def set_quotas(broker: KafkaCluster, quotas: dict[Entity, dict[QuotaKey, float]]) -> None:
    admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=broker.bootstrap))
    try:
        results = admin.alter(
            [EntityChange(e, tuple(QuotaOp(k, v) for k, v in sorted(vals.items()))) for e, vals in quotas.items()]
        )
        assert all(r.ok for r in results), [r for r in results if not r.ok]
    finally:
        admin.close()


def ledger_010(cluster: str) -> tuple[list[dict[str, Any]], dict[Entity, dict[QuotaKey, float]]]:
    """The 0.1.0 ledger's ConfigMaps, moved from KafkaCluster ``legacy`` to ``cluster``, and their entries.

    Only the cluster's name changes (the ConfigMap names and the ledger label); each
    shard's text is the file's, byte for byte.
    """
    items: list[dict[str, Any]] = yaml.safe_load(DATA.read_text(encoding="utf-8"))["items"]
    entries: dict[Entity, dict[QuotaKey, float]] = {}
    for cm in items:
        meta = cm["metadata"]
        shard = int(meta["name"].rsplit("-", 1)[1])
        assert meta["name"] == shard_name("legacy", shard) and meta["labels"][LABEL] == "legacy"
        meta["name"], meta["labels"][LABEL] = shard_name(cluster, shard), label_value(cluster)
        assert meta["namespace"] == LEDGER_NAMESPACE
        entries.update(fmt.decode_shard(cm["data"][DATA_KEY]))
    return items, entries


def apply_configmaps(stack: Stack, items: list[dict[str, Any]]) -> None:
    stack.kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def cluster_obj(stack: Stack, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(stack.kube.kubectl("get", "kafkacluster", name, "-o", "json").stdout)
    return found


def reason_of(stack: Stack, ns: str, name: str) -> str:
    return str(condition(get(stack.kube, "clientquota", ns, name)).get("reason", ""))


def cleanup(stack: Stack, ns: str, cluster: str) -> None:
    # Resources first, while the operator runs (their finalizers), then the KafkaCluster and its ledger.
    stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=30s", check=False)
    stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)
    stack.kube.kubectl(
        "delete", "configmap", "-n", LEDGER_NAMESPACE, "-l", f"{LABEL}={label_value(cluster)}", check=False
    )


def test_an_operator_upgraded_from_010_keeps_the_ownership_its_ledger_records(stack: Stack) -> None:
    cluster, ns = f"legacy-{uuid.uuid4().hex[:6]}", stack.new_namespace()
    items, owned = ledger_010(cluster)
    alice, dave = Entity.for_user("alice"), Entity.for_user("dave")
    unicode_user, bob_ingest = Entity.for_user("ünïcødé-用户"), Entity.for_pair("bob", "ingest")
    # The brokers hold what 0.1.0 set, and two keys it never recorded (set by hand).
    by_hand = {alice: {R: 33.0}, dave: {P: 7777.0}}
    set_quotas(stack.kafka, owned)
    set_quotas(stack.kafka, by_hand)
    assert stack.broker_quotas() == {e: {**owned.get(e, {}), **by_hand.get(e, {})} for e in {*owned, *by_hand}}
    try:
        apply_configmaps(stack, items)
        # Resources claim a few of the owned keys: one with a new value, two as they are.
        apply(
            stack.kube,
            client_quota(ns, "alice", entity_spec(alice), {"producerByteRate": 3145728}, cluster=cluster),
            client_quota(ns, "unicode", entity_spec(unicode_user), {"consumerByteRate": 4096}, cluster=cluster),
            client_quota(ns, "bob-ingest", entity_spec(bob_ingest), {"producerByteRate": 65536}, cluster=cluster),
        )
        # The upgraded operator starts this cluster's reconciler, which reads the 0.1.0 ledger.
        stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap))
        expected = {
            alice: {P: 3145728.0, R: 33.0},  # claimed key set; the owned consumer rate removed; R never owned
            unicode_user: {C: 4096.0},
            bob_ingest: {P: 65536.0},  # its owned request_percentage is wanted by nobody: removed
            dave: {P: 7777.0},  # never in the ledger: left alone
        }
        # Every other owned key (default user, client-id and IP, <default> by name, ...) is removed.
        wait_for(
            lambda: stack.broker_quotas() == expected, 30, "the 0.1.0 ownership applied", on_timeout=stack.operator.log
        )
        for name in ("alice", "unicode", "bob-ingest"):
            wait_for(lambda n=name: reason_of(stack, ns, n) == "Applied", 15, f"{name} Applied")
        assert condition(cluster_obj(stack, cluster)).get("reason") == "Connected"
        # The ledger is rewritten in the current format (still version 1): this operator's record now.
        live = json.loads(
            stack.kube.kubectl(
                "get", "configmaps", "-n", LEDGER_NAMESPACE, "-l", f"{LABEL}={cluster}", "-o", "json"
            ).stdout
        )["items"]
        assert {json.loads(cm["data"][DATA_KEY])["version"] for cm in live if cm.get("data")} == {1}
    finally:
        cleanup(stack, ns, cluster)


def test_an_operator_meeting_a_ledger_from_a_newer_one_changes_nothing_and_says_so(stack: Stack) -> None:
    cluster, ns = f"newer-{uuid.uuid4().hex[:6]}", stack.new_namespace()
    erin, frank = Entity.for_user("erin"), Entity.for_user("frank")
    # A newer kquota recorded erin's and frank's keys in a format this one does not know.
    newer_text = json.dumps({"version": 99, "entries": [{"who": "erin"}, {"who": "frank"}], "epoch": 3})
    newer = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": shard_name(cluster, fmt.shard_of(erin)),
            "namespace": LEDGER_NAMESPACE,
            "labels": {LABEL: label_value(cluster), SHARDS_LABEL: str(fmt.SHARDS)},
        },
        "data": {DATA_KEY: newer_text},
    }
    set_quotas(stack.kafka, {erin: {P: 1000.0}, frank: {P: 3000.0}})
    try:
        apply_configmaps(stack, [newer])
        apply(
            stack.kube,
            client_quota(ns, "erin", entity_spec(erin), {"producerByteRate": 2000}, cluster=cluster),
            client_quota(ns, "frank", entity_spec(frank), {"producerByteRate": 3000}, cluster=cluster),
        )
        before = stack.broker_quotas()
        assert before[erin] == {P: 1000.0} and before[frank] == {P: 3000.0}
        stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, stack.kafka.bootstrap))

        def refused() -> dict[str, Any] | None:
            obj = cluster_obj(stack, cluster)
            return obj if condition(obj).get("reason") == "LedgerFromNewerOperator" else None

        obj = wait_for(refused, 30, "the KafkaCluster refused", on_timeout=stack.operator.log)
        ready, stalled = condition(obj), condition(obj, "Stalled")
        assert ready["status"] == "False" and stalled.get("status") == "True"
        message = ready["message"]
        assert "format version 99" in message and "reads format version 1 only" in message, message
        assert f"ConfigMap {LEDGER_NAMESPACE}/{newer['metadata']['name']}" in message
        assert "upgrade the operator" in message and "restore the ledger" in message
        wait_for(lambda: reason_of(stack, ns, "erin") == "LedgerFromNewerOperator", 15, "erin refused too")
        assert condition(get(stack.kube, "clientquota", ns, "erin"), "Ready")["status"] == "False"

        # Deleting a resource while refused: its key stays on the brokers, the deletion waits.
        stack.kube.kubectl("delete", "clientquota", "frank", "-n", ns, "--wait=false")
        time.sleep(5)  # a few retries of the refused cluster, and the finalizer's first attempt
        assert stack.broker_quotas() == before
        frank_obj = get(stack.kube, "clientquota", ns, "frank")
        assert frank_obj is not None and frank_obj["metadata"].get("deletionTimestamp")
        events = json.loads(
            stack.kube.kubectl(
                "get", "events", "-A", "--field-selector", f"involvedObject.name={cluster}", "-o", "json"
            ).stdout
        )["items"]
        said = [(e["type"], e["message"]) for e in events if e["reason"] == "LedgerFromNewerOperator"]
        assert said == [("Warning", message)], said
        assert f"cluster {cluster}: {message}" in stack.operator.log()
        # The unreadable shard is left as the newer operator wrote it.
        kept = get(stack.kube, "configmap", LEDGER_NAMESPACE, newer["metadata"]["name"])
        assert kept is not None and kept["data"][DATA_KEY] == newer_text

        # The ledger saved before that upgrade is restored: the next retry reads it and carries on.
        newer["data"] = {DATA_KEY: fmt.encode_shard({erin: {P: 1000.0}, frank: {P: 3000.0}})}
        apply_configmaps(stack, [newer])
        after = {**{e: v for e, v in before.items() if e != frank}, erin: {P: 2000.0}}
        wait_for(lambda: stack.broker_quotas() == after, 30, "applied once readable", on_timeout=stack.operator.log)
        wait_for(lambda: reason_of(stack, ns, "erin") == "Applied", 15, "erin Applied")
        wait_for(lambda: get(stack.kube, "clientquota", ns, "frank") is None, 30, "frank's deletion completed")
        assert condition(cluster_obj(stack, cluster)).get("reason") == "Connected"
    finally:
        cleanup(stack, ns, cluster)
