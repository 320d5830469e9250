"""Beside Strimzi: connect through a Strimzi Kafka and KafkaUser, and never fight its User Operator.

Strimzi's operators cannot run here (no image registry), so the module installs
stand-in CRDs for ``kafka.strimzi.io`` Kafka and KafkaUser (tests/e2e/strimzi/),
creates the objects with the statuses and Secrets Strimzi writes, pointing at a
real broker with TLS and SCRAM listeners, and runs a stand-in User Operator
(tests/support/strimzi.py) that does to quotas what Strimzi's does. Checked:

* a KafkaCluster with ``spec.strimzi`` connects over SASL_SSL with the
  KafkaUser's SCRAM Secret and the cluster CA, and over mutual TLS with a TLS
  KafkaUser's ``user.crt``/``user.key``;
* a ClientQuota for a KafkaUser's user, or for any user while the User
  Operator has no ignore pattern for it, is ``OwnedByStrimzi`` and nothing is
  applied; a ``{user, client-id}`` pair is kquota's;
* while the User Operator cycles, the values kquota owns and the values Strimzi
  owns are each sampled once a second and never change (no flapping);
* after the hand-over (``STRIMZI_IGNORED_USERS_PATTERN`` set on the Kafka), the
  user is kquota's: Applied, and the User Operator leaves it alone;
* Kafka's own kafka-configs agrees at the end.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import GROUP_VERSION, apply, client_quota, condition, get, wait_for
from harness.stack import Stack

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.strimzi import IGNORED_USERS_ENV
from tests.support.quotas import P
from tests.support.stacks import own_stack
from tests.support.strimzi import FakeUserOperator

pytestmark = pytest.mark.e2e

CRDS = Path(__file__).parent / "strimzi" / "crds.yaml"


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def own(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Stack]]:
    with own_stack(kube, tmp_path_factory, "strimzi", {}, tls=True) as pair:
        yield pair


@pytest.fixture(scope="module")
def stack(own: tuple[KafkaCluster, Stack]) -> Stack:
    return own[1]


def kubectl_apply(kube: KubeAPIServer, *objects: dict[str, Any]) -> None:
    kube.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


def set_status(kube: KubeAPIServer, resource: str, ns: str, name: str, status: dict[str, Any]) -> None:
    kube.kubectl(
        "patch", resource, name, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})
    )


def secret(kube: KubeAPIServer, ns: str, name: str, data: dict[str, str]) -> None:
    kube.kubectl("create", "secret", "generic", name, "-n", ns, *(f"--from-literal={k}={v}" for k, v in data.items()))


def kafka_user(
    kube: KubeAPIServer, ns: str, kafka: str, name: str, auth: str, quotas: dict[str, int] | None = None
) -> None:
    spec: dict[str, Any] = {"authentication": {"type": auth}}
    if quotas:
        spec["quotas"] = quotas
    kubectl_apply(
        kube,
        {
            "apiVersion": "kafka.strimzi.io/v1beta2",
            "kind": "KafkaUser",
            "metadata": {"namespace": ns, "name": name, "labels": {"strimzi.io/cluster": kafka}},
            "spec": spec,
        },
    )
    username = f"CN={name}" if auth == "tls" else name
    set_status(kube, "kafkausers.kafka.strimzi.io", ns, name, {"username": username, "secret": name})


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def cluster_conditions(kube: KubeAPIServer, name: str) -> dict[str, dict[str, Any]]:
    return conditions(json.loads(kube.kubectl("get", "kafkacluster", name, "-o", "json").stdout))


def reason(stack: Stack, ns: str, name: str) -> str:
    return str(condition(get(stack.kube, "clientquota", ns, name)).get("reason", ""))


def strimzi_kafka(
    stack: Stack,
    broker: KafkaCluster,
    listeners: dict[str, str],
    version: str,
    where: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """A Kafka as Strimzi writes it (spec, status, cluster CA Secret) whose TLS listeners are ``broker``'s.

    ``listeners`` maps each listener name to its authentication type; ``where`` is (namespace, name),
    else new ones. Returns (namespace, name).
    """
    kube = stack.kube
    kube.kubectl("apply", "-f", str(CRDS))
    wait_for(
        lambda: kube.kubectl("get", "kafkausers.kafka.strimzi.io", "-A", check=False).returncode == 0,
        30,
        "the stand-in Strimzi CRDs served",
    )
    kns, kafka = where or (stack.new_namespace(), uniq("my-cluster"))
    address = {"scram-sha-512": broker.sasl_ssl_bootstrap, "tls": broker.ssl_bootstrap}
    spec_listeners = [
        {"name": n, "port": 9093 + i, "type": "internal", "tls": True, "authentication": {"type": auth}}
        for i, (n, auth) in enumerate(listeners.items())
    ]
    kubectl_apply(
        kube,
        {
            "apiVersion": "kafka.strimzi.io/v1beta2",
            "kind": "Kafka",
            "metadata": {"namespace": kns, "name": kafka},
            "spec": {
                "kafka": {"listeners": spec_listeners},
                "entityOperator": {"topicOperator": {}, "userOperator": {}},
            },
        },
    )
    status = [{"name": n, "bootstrapServers": address[auth]} for n, auth in listeners.items()]
    set_status(
        kube,
        "kafkas.kafka.strimzi.io",
        kns,
        kafka,
        {"listeners": status, "operatorLastSuccessfulVersion": version},
    )
    secret(kube, kns, f"{kafka}-cluster-ca-cert", {"ca.crt": broker.ca_cert.read_text()})
    return kns, kafka


def test_kquota_connects_through_strimzi_and_never_fights_its_user_operator(
    stack: Stack, own: tuple[KafkaCluster, Stack]
) -> None:
    broker, kube = own[0], stack.kube
    kns, kafka = strimzi_kafka(stack, broker, {"scram": "scram-sha-512", "tls": "tls"}, "0.48.0")

    # kquota's own KafkaUser, as the User Operator writes its Secret (no username key).
    op_user, password = uniq("kquota"), f"S3cret-{secrets.token_hex(12)}"
    broker.create_scram_user(op_user, password)
    kafka_user(kube, kns, kafka, op_user, "scram-sha-512")
    jaas = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{op_user}" password="{password}";'
    )
    secret(kube, kns, op_user, {"password": password, "sasl.jaas.config": jaas})
    # An application user with its quota in its KafkaUser: Strimzi's.
    alice = uniq("alice")
    kafka_user(kube, kns, kafka, alice, "scram-sha-512", {"producerByteRate": 1000})

    name = uniq("strimzi")
    strimzi = {"kafka": {"namespace": kns, "name": kafka}, "listener": "scram", "kafkaUser": {"name": op_user}}
    kubectl_apply(
        kube,
        {"apiVersion": GROUP_VERSION, "kind": "KafkaCluster", "metadata": {"name": name}, "spec": {"strimzi": strimzi}},
    )
    ns = stack.new_namespace()
    batch = uniq("batch")
    pair = Entity.for_pair(alice, "reports")
    apply(
        kube,
        client_quota(
            ns,
            "pair",
            {"user": {"name": alice}, "clientId": {"name": "reports"}},
            {"producerByteRate": 5000},
            cluster=name,
        ),
        client_quota(ns, "alice", {"user": {"name": alice}}, {"producerByteRate": 9999}, cluster=name),
        client_quota(ns, "batch", {"user": {"name": batch}}, {"producerByteRate": 7000}, cluster=name),
    )

    with FakeUserOperator(kube, broker.bootstrap, kns, kafka, period=2.0) as uo:
        wait_for(lambda: reason(stack, ns, "pair") == "Applied", 60, "the pair applied over SASL_SSL via Strimzi")
        wait_for(lambda: reason(stack, ns, "alice") == "OwnedByStrimzi", 30, "alice is Strimzi's")
        wait_for(lambda: reason(stack, ns, "batch") == "OwnedByStrimzi", 30, "batch is Strimzi's until handed over")
        alice_msg = condition(get(kube, "clientquota", ns, "alice"))["message"]
        assert f"KafkaUser {kns}/{alice}" in alice_msg
        batch_msg = condition(get(kube, "clientquota", ns, "batch"))["message"]
        assert IGNORED_USERS_ENV in batch_msg and "userOperatorContainer.env" in batch_msg
        assert conditions(get(kube, "clientquota", ns, "alice"))["Stalled"]["status"] == "True"
        cluster = cluster_conditions(kube, name)
        assert cluster["Ready"]["reason"] == "Connected"
        assert "User Operator" in cluster["StrimziUsers"]["message"]

        # No fight: sampled once a second over many User Operator cycles and drift passes, each value is one value.
        seen: dict[Entity, set[float | None]] = {
            pair: set(),
            Entity.for_user(alice): set(),
            Entity.for_user(batch): set(),
        }
        cycles = uo.cycles
        end = time.monotonic() + 30
        while time.monotonic() < end:
            live = stack.broker_quotas()
            for entity, values in seen.items():
                values.add(live.get(entity, {}).get(P))
            time.sleep(1)
        assert uo.cycles - cycles >= 10, f"the User Operator kept cycling (errors: {uo.errors[-3:]})"
        assert seen == {pair: {5000.0}, Entity.for_user(alice): {1000.0}, Entity.for_user(batch): {None}}, seen

        # The hand-over: the Kafka's User Operator ignores batch users; kquota takes them.
        kube.kubectl(
            "patch",
            "kafkas.kafka.strimzi.io",
            kafka,
            "-n",
            kns,
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "spec": {
                        "entityOperator": {
                            "userOperator": {},
                            "template": {
                                "userOperatorContainer": {"env": [{"name": IGNORED_USERS_ENV, "value": "batch-.*"}]}
                            },
                        }
                    }
                }
            ),
        )
        wait_for(lambda: reason(stack, ns, "batch") == "Applied", 60, "batch Applied after the hand-over")
        writes = len(uo.writes)
        batch_seen: set[float | None] = set()
        end = time.monotonic() + 15
        while time.monotonic() < end:
            batch_seen.add(stack.broker_quotas().get(Entity.for_user(batch), {}).get(P))
            time.sleep(1)
        assert batch_seen == {7000.0}, batch_seen
        assert not [w for w in uo.writes[writes:] if w[0] == Entity.for_user(batch)], (
            "the User Operator left batch alone"
        )

    # Kafka's own tool agrees.
    described = broker.kafka_configs("--describe", "--entity-type", "users", "--entity-name", alice, check=True).stdout
    assert "producer_byte_rate=1000" in described
    described = broker.kafka_configs(
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        alice,
        "--entity-type",
        "clients",
        "--entity-name",
        "reports",
        check=True,
    ).stdout
    assert "producer_byte_rate=5000" in described
    kube.kubectl("delete", "clientquotas", "--all", "-n", ns, "--timeout=60s")
    kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_mutual_tls_with_a_tls_kafkausers_certificate(stack: Stack, own: tuple[KafkaCluster, Stack]) -> None:
    broker, kube = own[0], stack.kube
    kns, kafka = strimzi_kafka(stack, broker, {"tls": "tls"}, "1.2.0")
    op_user = uniq("kquota-tls")
    cert = broker.mint_client_cert(f"CN={op_user}", name=op_user)
    kafka_user(kube, kns, kafka, op_user, "tls")
    secret(
        kube,
        kns,
        op_user,
        {"ca.crt": broker.ca_cert.read_text(), "user.crt": cert.cert_pem(), "user.key": cert.key_pem()},
    )
    name = uniq("strimzi-tls")
    strimzi = {"kafka": {"namespace": kns, "name": kafka}, "listener": "tls", "kafkaUser": {"name": op_user}}
    kubectl_apply(
        kube,
        {"apiVersion": GROUP_VERSION, "kind": "KafkaCluster", "metadata": {"name": name}, "spec": {"strimzi": strimzi}},
    )
    ns = stack.new_namespace()
    app = uniq("app")
    apply(
        kube,
        client_quota(
            ns, "pair", {"user": {"name": app}, "clientId": {"name": "c"}}, {"consumerByteRate": 3000}, cluster=name
        ),
    )
    wait_for(lambda: reason(stack, ns, "pair") == "Applied", 60, "applied over mutual TLS via Strimzi")
    assert stack.broker_quotas()[Entity.for_pair(app, "c")] == {QuotaKey.CONSUMER_BYTE_RATE: 3000.0}
    # The KafkaUser's own principal (CN=...) is kquota's own: protected, as with any client certificate.
    assert "users/<default> is the Cluster Operator's" in cluster_conditions(kube, name)["StrimziUsers"]["message"]
    kube.kubectl("delete", "clientquotas", "--all", "-n", ns, "--timeout=60s")
    kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")
