"""A resource deleted while the operator's watch is down leaves no keys behind (soak seed 6, #23).

The soak found a ClientQuota whose finalizer Kopf could not write (the API
server went down) and that was deleted while the API server was down: the
object vanished without kquota ever seeing a DELETED event. After an API server
restart the watch cannot resume (410 Gone); Kopf lists again but never drops
from its indexes an object that vanished in the gap, so the operator kept the
resource's claim and its keys stayed on the broker for ever.

Here the same state is made deterministically, against a real API server,
broker and ``kquota operator`` process: a resource applied on the broker loses
its finalizer and is deleted while the operator is SIGSTOPped (exactly the
soak's state: keys applied, no finalizer, object gone, no event seen), the API
server is restarted so the watch breaks, and the operator continues. Its keys
must leave the broker within a bound, with a ``QuotaRemoved`` event naming
each key and the resource that is gone; a resource that still exists, and one
created while the operator was stopped, keep theirs.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

from kquota.domain.entities import Entity

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Short, so the bound below is short: a ghost is dropped after two listings one interval apart.
DRIFT_INTERVAL = 2.0
#: Two listings (one drift interval apart, each up to an interval after the last), the pass that
#: removes the keys (after the 1 s removal settle) and the broker round trip, on two busy cores.
BOUND_SECONDS = 3 * DRIFT_INTERVAL + 20


@pytest.fixture
def operator(own_kube: KubeAPIServer, kafka: KafkaCluster, tmp_path: Path) -> Iterator[OperatorProcess]:
    own_kube.apply_crds()
    ensure_ledger_namespace(own_kube)
    cluster = f"kc-{uuid.uuid4().hex[:6]}"
    own_kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, kafka.bootstrap))
    op = OperatorProcess(own_kube, tmp_path / "operator", default_cluster=cluster, drift_interval=DRIFT_INTERVAL)
    op.start()
    try:
        yield op
    finally:
        if op.proc is not None and op.proc.alive():
            op.proc.signal(signal.SIGCONT)
        op.stop()


def _events(kube: KubeAPIServer, reason: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "events", "-A", "-o", "json", check=False)
    if out.returncode != 0:
        return []
    return [e for e in json.loads(out.stdout)["items"] if e.get("reason") == reason]


def test_a_resource_deleted_while_the_watch_was_down_releases_its_keys(
    own_kube: KubeAPIServer, kafka: KafkaCluster, operator: OperatorProcess
) -> None:
    kube, op = own_kube, operator
    assert op.proc is not None
    ns = kube.create_namespace("ghost")
    tag = uuid.uuid4().hex[:6]
    gone, kept, late = (Entity.for_user(f"{tag}-{n}") for n in ("gone", "kept", "late"))
    gone_quota = {"producerByteRate": 1111, "consumerByteRate": 2222, "requestPercentage": 33}
    apply(
        kube,
        client_quota(ns, "gone", {"user": {"name": gone.user or ""}}, gone_quota),
        client_quota(ns, "kept", {"user": {"name": kept.user or ""}}, {"producerByteRate": 4444}),
    )

    def on_broker() -> dict[Entity, dict[str, float]]:
        return invariants.describe(kafka.bootstrap, timeout=10)

    wait_for(
        lambda: len(on_broker().get(gone, {})) == 3 and kept in on_broker(),
        60,
        "both resources on the broker",
        on_timeout=op.log,
    )
    wait_for(
        lambda: "kquota.io/finalizer" in (_meta(kube, ns, "gone").get("finalizers") or []),
        30,
        "kquota's finalizer on the resource",
    )

    # The soak's state: the operator saw the resource and applied it, but holds no finalizer on it,
    # and the object vanishes while the operator sees nothing. The operator is stopped and the API
    # server restarted first: events sent on the old watch connections would still be read from the
    # socket after SIGCONT; the new server has none for the operator, and its watch cache starts
    # after the operator's last resourceVersion, so the watch cannot resume (410) and Kopf lists again.
    op.proc.signal(signal.SIGSTOP)
    try:
        kube.restart(down_seconds=1)
        kube.kubectl("patch", "clientquota", "gone", "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
        kube.kubectl("delete", "clientquota", "gone", "-n", ns, "--timeout=30s")
        apply(kube, client_quota(ns, "late", {"user": {"name": late.user or ""}}, {"producerByteRate": 5555}))
    finally:
        op.proc.signal(signal.SIGCONT)
    resumed = time.monotonic()

    wait_for(lambda: gone not in on_broker(), BOUND_SECONDS, "the deleted resource's keys to leave", on_timeout=op.log)
    took = time.monotonic() - resumed
    have = on_broker()
    assert have.get(kept) == {"producer_byte_rate": 4444.0}, "a live resource lost its key"
    wait_for(lambda: have.get(late) or late in on_broker(), 60, "the resource created while stopped to land")

    def removal_event() -> dict[str, Any] | None:
        return next((e for e in _events(kube, "QuotaRemoved") if f"users/{gone.user}" in e["message"]), None)

    event = wait_for(removal_event, 30, "a QuotaRemoved event for the deleted resource's keys")
    message = event["message"]
    for key in ("producer_byte_rate", "consumer_byte_rate", "request_percentage"):
        assert key in message, message
    assert f"{ns}/gone" in message and "gone from the API server" in message, message
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "KafkaCluster", event
    print(f"\nghost released {took:.1f} s after the operator continued (bound {BOUND_SECONDS:.0f} s): {message}")


def _meta(kube: KubeAPIServer, ns: str, name: str) -> dict[str, Any]:
    out = kube.kubectl("get", "clientquota", name, "-n", ns, "-o", "json", check=False)
    meta: dict[str, Any] = json.loads(out.stdout)["metadata"] if out.returncode == 0 else {}
    return meta
