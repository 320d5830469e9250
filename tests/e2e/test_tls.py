"""TLS to Kafka, on the real API server and a broker with SSL and SASL_SSL listeners.

The operator reaches the brokers with TLS material read from Secrets only:

* SASL_SSL: the CA from one Secret, the SCRAM password from another.
* SSL with mutual TLS: CA, client certificate and key from one cert-manager
  style Secret (``ca.crt``, ``tls.crt``, ``tls.key``).
* A CA the brokers' certificates do not chain to is reported, on the
  KafkaCluster and on every quota of it, as a TLS certificate verification
  failure, and nothing is applied; putting the right CA into the Secret is
  enough to converge (Secrets are read on every reconcile pass).
* Neither the private key nor the SCRAM password appears in the operator's
  log, any status, any Event or the ledger, also while the CA is wrong; the
  operator's PEM files are private (0600 in a 0700 directory of its own), a
  replaced CA's file is removed, and the directory goes when the operator stops.
"""

from __future__ import annotations

import base64
import json
import secrets
import stat
import uuid
from collections.abc import Callable, Iterator
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
    wait_for,
)
from harness.stack import Stack, start_stack, stop_stack
from harness.tls import CertificateAuthority

from kquota.domain.entities import Entity, QuotaKey
from tests.support.leaks import exposed, found
from tests.support.quotas import P

pytestmark = pytest.mark.e2e

OPERATOR_DN = "CN=kquota-operator,OU=platform"


@pytest.fixture(scope="module")
def tls_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.start(tmp_path_factory.mktemp("kafka-tls"), brokers=1, tls=True)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def operator_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's TMPDIR, so the test can look at the TLS files it writes."""
    return tmp_path_factory.mktemp("operator-tmp")


@pytest.fixture(scope="module")
def stack(
    kube: KubeAPIServer, tls_kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory, operator_tmp: Path
) -> Iterator[Stack]:
    # The shared stack's, plus TMPDIR for the operator; its namespaces only (another module's leftovers stay
    # off this broker).
    s = start_stack(
        kube,
        tls_kafka,
        tmp_path_factory.mktemp("operator"),
        extra_env={"TMPDIR": str(operator_tmp)},
        namespace_prefix="tls",
    )
    try:
        yield s
    finally:
        stop_stack(s)


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def put_secret(stack: Stack, name: str, data: dict[str, str], kind: str = "Opaque") -> dict[str, str]:
    """Create or replace a Secret in the operator's namespace; returns its reference."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": LEDGER_NAMESPACE},
        "type": kind,
        "stringData": data,
    }
    # Server-side apply: a client-side apply would copy the key into the
    # last-applied-configuration annotation.
    stack.kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(body))
    return {"namespace": LEDGER_NAMESPACE, "name": name}


def kafka_cluster(stack: Stack, name: str, bootstrap: str, security: dict[str, Any]) -> None:
    stack.kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(name, bootstrap, {"security": security}))


def ready(stack: Stack, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
    return condition(get(stack.kube, kind, namespace, name))


def operator_log(stack: Stack) -> str:
    return stack.operator.log()[-4000:]


def unavailable(stack: Stack, cluster: str, ns: str) -> Callable[[], bool]:
    """The KafkaCluster not Ready and its quota (named like it) KafkaUnavailable."""
    return lambda: (
        ready(stack, "kafkacluster", cluster).get("status") == "False"
        and ready(stack, "clientquota", cluster, ns).get("reason") == "KafkaUnavailable"
    )


def applied(stack: Stack, user: str, values: dict[QuotaKey, float]) -> Callable[[], bool]:
    return lambda: stack.broker_quotas().get(Entity.for_user(user)) == values


def ready_true(stack: Stack, name: str, ns: str) -> Callable[[], bool]:
    return lambda: ready(stack, "clientquota", name, ns).get("status") == "True"


def tls_files(operator_tmp: Path) -> list[Path]:
    return sorted(operator_tmp.glob("kquota-tls-*/*"))


def test_sasl_ssl_with_the_ca_and_password_from_secrets(stack: Stack, tls_kafka: KafkaCluster) -> None:
    op_user, password = uniq("kquota-op"), f"S3cret-{secrets.token_hex(12)}"
    tls_kafka.create_scram_user(op_user, password)
    creds = put_secret(stack, uniq("creds"), {"username": op_user, "password": password})
    ca = put_secret(stack, uniq("kafka-ca"), {"ca.crt": tls_kafka.ca_cert.read_text()})
    name = uniq("sasl-ssl")
    kafka_cluster(
        stack,
        name,
        tls_kafka.sasl_ssl_bootstrap,
        {
            "protocol": "SASL_SSL",
            "sasl": {"mechanism": "SCRAM-SHA-512", "credentialsSecretRef": creds},
            "tls": {"caSecretRef": ca},
        },
    )
    ns = stack.new_namespace()
    target = uniq("app")
    apply(stack.kube, client_quota(ns, "app", {"user": {"name": target}}, {"producerByteRate": 4096}, cluster=name))

    wait_for(
        lambda: ready(stack, "clientquota", "app", ns).get("status") == "True",
        120,
        "Ready=True over SASL_SSL",
        on_timeout=lambda: json.dumps(ready(stack, "clientquota", "app", ns)) + operator_log(stack),
    )
    assert ready(stack, "clientquota", "app", ns)["reason"] == "Applied"
    assert stack.broker_quotas()[Entity.for_user(target)] == {P: 4096.0}
    cluster_ready = ready(stack, "kafkacluster", name)
    assert (cluster_ready["status"], cluster_ready["reason"]) == ("True", "Connected")

    assert found({"the SCRAM password": password}, exposed(stack.kube, stack.operator)) == []
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_mutual_tls_with_certificate_and_key_from_one_secret(
    stack: Stack, tls_kafka: KafkaCluster, operator_tmp: Path
) -> None:
    cert = tls_kafka.mint_client_cert(OPERATOR_DN, name=uniq("operator"))
    # One Secret as cert-manager writes it: the CA, the certificate and the key.
    ref = put_secret(
        stack,
        uniq("kquota-tls"),
        {"ca.crt": tls_kafka.ca_cert.read_text(), "tls.crt": cert.cert_pem(), "tls.key": cert.key_pem()},
        kind="kubernetes.io/tls",
    )
    name = uniq("mtls")
    kafka_cluster(
        stack,
        name,
        tls_kafka.ssl_bootstrap,
        {"protocol": "SSL", "tls": {"caSecretRef": ref, "clientCertSecretRef": ref}},
    )
    ns = stack.new_namespace()
    target = uniq("app")
    apply(stack.kube, client_quota(ns, "app", {"user": {"name": target}}, {"producerByteRate": 2048}, cluster=name))

    wait_for(
        lambda: ready(stack, "clientquota", "app", ns).get("status") == "True",
        120,
        "Ready=True over SSL with a client certificate",
        on_timeout=lambda: json.dumps(ready(stack, "clientquota", "app", ns)) + operator_log(stack),
    )
    assert stack.broker_quotas()[Entity.for_user(target)] == {P: 2048.0}
    assert ready(stack, "kafkacluster", name)["status"] == "True"

    # The operator's own principal, as the brokers name it (the certificate's subject), is
    # protected without being listed: a quota on it could throttle the operator.
    apply(stack.kube, client_quota(ns, "self", {"user": {"name": OPERATOR_DN}}, {"requestPercentage": 1}, cluster=name))
    wait_for(
        lambda: ready(stack, "clientquota", "self", ns).get("reason") == "Protected",
        60,
        "a quota on the operator's certificate subject refused as Protected",
        on_timeout=lambda: json.dumps(ready(stack, "clientquota", "self", ns)),
    )
    assert OPERATOR_DN in ready(stack, "clientquota", "self", ns)["message"]
    assert Entity.for_user(OPERATOR_DN) not in stack.broker_quotas()

    # The key the operator wrote for the Kafka client: private, in a private directory.
    keys = [p for p in tls_files(operator_tmp) if p.read_text() == cert.key_pem()]
    assert len(keys) == 1, tls_files(operator_tmp)
    assert stat.S_IMODE(keys[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(keys[0].parent.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in tls_files(operator_tmp))

    assert (
        found(
            {f"private key line {i}": line for i, line in enumerate(cert.secret_lines())},
            exposed(stack.kube, stack.operator),
        )
        == []
    )

    # A stopped operator leaves no key behind.
    stack.operator.stop()
    try:
        assert not keys[0].parent.exists()
        assert tls_files(operator_tmp) == []
    finally:
        stack.operator.start()
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_a_wrong_ca_is_reported_applies_nothing_leaks_nothing_and_a_fixed_secret_converges(
    stack: Stack, tls_kafka: KafkaCluster, operator_tmp: Path, tmp_path: Path
) -> None:
    wrong_ca = CertificateAuthority.create(tmp_path / "wrong-ca", cn="not the brokers' CA")
    cert = tls_kafka.mint_client_cert(OPERATOR_DN, name=uniq("operator"))
    op_user, password = uniq("kquota-op"), f"S3cret-{secrets.token_hex(12)}"
    tls_kafka.create_scram_user(op_user, password, mechanism="SCRAM-SHA-256")
    # Both clusters trust the same (wrong) CA Secret: one over SSL with a client
    # key in play, one over SASL_SSL with a password in play.
    ca = put_secret(stack, uniq("kafka-ca"), {"ca.crt": wrong_ca.cert_pem()})
    client = put_secret(
        stack, uniq("client-tls"), {"tls.crt": cert.cert_pem(), "tls.key": cert.key_pem()}, kind="kubernetes.io/tls"
    )
    creds = put_secret(stack, uniq("creds"), {"username": op_user, "password": password})
    mtls, sasl = uniq("mtls-wrong-ca"), uniq("sasl-wrong-ca")
    kafka_cluster(
        stack,
        mtls,
        tls_kafka.ssl_bootstrap,
        {"protocol": "SSL", "tls": {"caSecretRef": ca, "clientCertSecretRef": client}},
    )
    kafka_cluster(
        stack,
        sasl,
        tls_kafka.sasl_ssl_bootstrap,
        {
            "protocol": "SASL_SSL",
            "sasl": {"mechanism": "SCRAM-SHA-256", "credentialsSecretRef": creds},
            "tls": {"caSecretRef": ca},
        },
    )
    ns = stack.new_namespace()
    targets = {mtls: uniq("app"), sasl: uniq("app")}
    apply(
        stack.kube,
        *(
            client_quota(ns, cluster, {"user": {"name": target}}, {"producerByteRate": 1024}, cluster=cluster)
            for cluster, target in targets.items()
        ),
    )

    for cluster in targets:
        wait_for(
            unavailable(stack, cluster, ns),
            120,
            f"{cluster}: a TLS failure reported",
            on_timeout=lambda: operator_log(stack),
        )
        for kind, namespace in (("kafkacluster", ""), ("clientquota", ns)):
            cond = ready(stack, kind, cluster, namespace)
            assert cond["status"] == "False", cond
            assert "TLS" in cond["message"] and "certificate verify failed" in cond["message"], cond
            assert "CA certificate" in cond["message"], cond
    live = stack.broker_quotas()
    assert all(Entity.for_user(t) not in live for t in targets.values()), live

    needles = {"the SCRAM password": password} | {f"key line {i}": s for i, s in enumerate(cert.secret_lines())}
    assert found(needles, exposed(stack.kube, stack.operator)) == [], "a secret leaked while the CA was wrong"

    # The right CA in the same Secret: both converge, the KafkaClusters untouched.
    put_secret(stack, ca["name"], {"ca.crt": tls_kafka.ca_cert.read_text()})
    for cluster, target in targets.items():
        wait_for(
            applied(stack, target, {P: 1024.0}),
            120,
            f"{cluster}: the quota applied after the CA Secret was fixed",
            on_timeout=lambda: operator_log(stack),
        )
        wait_for(ready_true(stack, cluster, ns), 60, f"{cluster}: Ready=True")
        assert ready(stack, "kafkacluster", cluster)["status"] == "True"

    # The wrong CA's file is gone, not kept next to the right one.
    assert not [p for p in tls_files(operator_tmp) if p.read_text() == wrong_ca.cert_pem()]
    places = exposed(stack.kube, stack.operator)
    assert "certificate verify failed" in places["operator log"]  # the search covers the failure's log lines
    assert found(needles, places) == [], "a secret leaked"
    for cluster in targets:
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s")


def test_mutual_tls_with_pkcs12_stores_from_a_strimzi_shaped_secret(
    stack: Stack, tls_kafka: KafkaCluster, tmp_path: Path
) -> None:
    """PKCS#12 truststore and keystore (Java's own KeyStore wrote them, as Strimzi's code does), with passwords."""
    from harness import strimzi

    cert = tls_kafka.mint_client_cert(OPERATOR_DN, name=uniq("operator-p12"))
    trust_pw, key_pw = secrets.token_urlsafe(12), secrets.token_urlsafe(12)
    truststore = strimzi.truststore(tls_kafka.ca_cert, tmp_path / "ca.p12", trust_pw)
    keystore = strimzi.keystore(cert.key, cert.cert, tmp_path / "user.p12", key_pw, "kquota")
    name = uniq("p12")
    data = {
        "ca.p12": truststore,
        "ca.password": trust_pw.encode(),
        "user.p12": keystore,
        "user.password": key_pw.encode(),
        "user.crt": b"-----BEGIN CERTIFICATE-----\nnot read: type PKCS12 reads user.p12\n",
    }
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": LEDGER_NAMESPACE},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    stack.kube.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(body))
    ref = {"namespace": LEDGER_NAMESPACE, "name": name, "type": "PKCS12"}
    kafka_cluster(
        stack,
        name,
        tls_kafka.ssl_bootstrap,
        {"protocol": "SSL", "tls": {"caSecretRef": ref, "clientCertSecretRef": ref}},
    )
    ns = stack.new_namespace()
    target = uniq("app")
    apply(stack.kube, client_quota(ns, "app", {"user": {"name": target}}, {"producerByteRate": 3072}, cluster=name))
    wait_for(
        ready_true(stack, "app", ns),
        120,
        "Ready=True over mutual TLS with PKCS#12 stores",
        on_timeout=lambda: json.dumps(ready(stack, "clientquota", "app", ns)) + operator_log(stack),
    )
    assert stack.broker_quotas()[Entity.for_user(target)] == {P: 3072.0}
    assert ready(stack, "kafkacluster", name)["reason"] == "Connected"

    # A wrong store password: ClusterNotReady naming the key, never the password.
    wrong = secrets.token_urlsafe(12)
    body["data"]["user.password"] = base64.b64encode(wrong.encode()).decode()
    stack.kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(body))
    wait_for(
        lambda: ready(stack, "kafkacluster", name).get("reason") == "ClusterNotReady",
        120,
        "a keystore that does not open",
        on_timeout=lambda: json.dumps(ready(stack, "kafkacluster", name)),
    )
    assert "'user.p12' is not a PKCS#12 store that opens" in ready(stack, "kafkacluster", name)["message"]
    needles = {"store password": key_pw, "wrong password": wrong, "truststore password": trust_pw}
    needles |= {f"key line {i}": s for i, s in enumerate(cert.secret_lines())}
    assert found(needles, exposed(stack.kube, stack.operator)) == []
    body["data"]["user.password"] = base64.b64encode(key_pw.encode()).decode()
    stack.kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(body))
    wait_for(ready_true(stack, "app", ns), 120, "Ready=True again with the right password")
    stack.kube.kubectl("delete", "clientquota", "app", "-n", ns, "--timeout=60s")
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")
