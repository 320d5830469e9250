"""Resolve a KafkaCluster's ``spec.strimzi``: the connection from Strimzi's objects, and what Strimzi owns.

Read on every pass, like Secrets: the Kafka (listener address, TLS, authentication,
User Operator settings), its cluster CA Secret, the KafkaUser and its Secret,
and the KafkaUsers labelled ``strimzi.io/cluster=<kafka>`` in the Kafka's
namespace (the namespace Strimzi's User Operator watches by default). Anything
missing raises SecretNotFound with a message naming it (the KafkaCluster then
says ClusterNotReady), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.aio.client.exceptions import ApiException

from kquota.api.kafkacluster import Strimzi
from kquota.domain.strimzi import StrimziError, StrimziOwnership, listener, ownership
from kquota.k8s.api import Kube, SecretNotFound
from kquota.kafka.jaas import JaasError, jaas_options

GROUP = "kafka.strimzi.io"
#: Strimzi 1.0 serves only v1; 0.49-0.51 serve both; older ones v1beta2.
VERSIONS = ("v1", "v1beta2")
CLUSTER_LABEL = "strimzi.io/cluster"


@dataclass(frozen=True)
class StrimziTarget:
    """What ``spec.strimzi`` resolves to: ConnectionSettings fields (PEMs inline) and Strimzi's ownership."""

    connection: dict[str, Any]
    ca_pem: str | None
    cert_pem: str | None
    key_pem: str | None
    ownership: StrimziOwnership


async def _get(kube: Kube, namespace: str, plural: str, name: str, what: str) -> dict[str, Any]:
    try:
        return await kube.get_namespaced_object(GROUP, VERSIONS, namespace, plural, name)
    except ApiException as exc:
        if exc.status in (403, 404):
            raise SecretNotFound(f"{what} {namespace}/{name} is not readable (HTTP {exc.status})") from None
        raise


async def resolve(ref: Strimzi, kube: Kube) -> StrimziTarget:
    """The connection and ownership ``ref`` names (raises SecretNotFound naming what is missing)."""
    ns = ref.kafka.namespace
    kafka = await _get(kube, ns, "kafkas", ref.kafka.name, "Kafka")
    try:
        lst = listener(kafka, ref.listener)
    except StrimziError as exc:
        raise SecretNotFound(str(exc)) from None
    try:
        users = await kube.list_namespaced_objects(
            GROUP, VERSIONS, ns, "kafkausers", f"{CLUSTER_LABEL}={ref.kafka.name}"
        )
    except ApiException as exc:
        if exc.status not in (403, 404):
            raise
        # Without the KafkaUsers kquota cannot tell which users Strimzi manages: refuse to guess.
        raise SecretNotFound(f"KafkaUsers in namespace {ns} are not readable (HTTP {exc.status})") from None
    conn: dict[str, Any] = {"bootstrap_servers": lst.bootstrap_servers}
    ca = cert = key = None
    if lst.tls:
        ca = await kube.secret_value(ns, f"{ref.kafka.name}-cluster-ca-cert", "ca.crt")
    auth = lst.authentication
    if auth is not None and ref.kafka_user is None:
        raise SecretNotFound(
            f"listener {lst.name!r} of Kafka {ns}/{ref.kafka.name} needs {auth} authentication: set "
            "spec.strimzi.kafkaUser"
        )
    if auth is None:
        conn["security_protocol"] = "SSL" if lst.tls else "PLAINTEXT"
    else:
        assert ref.kafka_user is not None
        user_ns = ref.kafka_user.namespace or ns
        ku = await _get(kube, user_ns, "kafkausers", ref.kafka_user.name, "KafkaUser")
        status = ku.get("status") or {}
        secret = str(status.get("secret") or ref.kafka_user.name)
        where = f"Secret {user_ns}/{secret} of KafkaUser {user_ns}/{ref.kafka_user.name}"
        data = await kube.secret_data(user_ns, secret)
        if auth in ("scram-sha-512", "scram-sha-256"):
            conn["security_protocol"] = "SASL_SSL" if lst.tls else "SASL_PLAINTEXT"
            conn["sasl_mechanism"] = auth.upper()
            username = str(status.get("username") or ref.kafka_user.name)
            password = data.get("password")
            if password is None and "sasl.jaas.config" in data:
                try:
                    password = jaas_options(data["sasl.jaas.config"]).get("password")
                except JaasError as exc:
                    raise SecretNotFound(f"{where}: cannot read 'sasl.jaas.config': {exc}") from None
            if password is None:
                raise SecretNotFound(f"{where} has no key 'password'")
            conn["sasl_username"], conn["sasl_password"] = username, password
        elif auth == "tls":
            if not lst.tls:
                raise SecretNotFound(f"listener {lst.name!r} has tls authentication but no TLS")
            missing = [k for k in ("user.crt", "user.key") if k not in data]
            if missing:
                raise SecretNotFound(f"{where} has no key {' and '.join(repr(k) for k in missing)}")
            conn["security_protocol"] = "SSL"
            cert, key = data["user.crt"], data["user.key"]
        else:
            raise SecretNotFound(
                f"listener {lst.name!r} uses {auth} authentication; kquota connects with scram-sha-512 or tls"
            )
    return StrimziTarget(conn, ca, cert, key, ownership(kafka, users))
