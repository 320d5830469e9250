"""Resolve a KafkaCluster's ``spec.strimzi``: the connection from Strimzi's objects, and what Strimzi owns.

Read on every pass, like Secrets:

* the Kafka: the listener's address, TLS, authentication and the certificates its status
  says the brokers present;
* the cluster CA Secret ``<kafka>-cluster-ca-cert``: every CA certificate in it (``ca.crt``,
  and during a CA key replacement the old one, ``ca-<date>.crt``), never its binary
  ``ca.p12``;
* the Entity Operator Deployment ``<kafka>-entity-operator``: the User Operator's watched
  namespace, Secret prefix and ignore pattern as it runs them (a pattern given by
  ``valueFrom`` is read from its ConfigMap or Secret; one not rolled out yet does not count);
* the KafkaUsers labelled ``strimzi.io/cluster=<kafka>`` in the watched namespace, and the
  KafkaUser kquota authenticates as with its Secret (SCRAM password, or ``user.crt`` and
  ``user.key``, else the ``user.p12`` store with ``user.password``).

Anything missing raises SecretNotFound with a message naming it (the KafkaCluster then says
ClusterNotReady), never a guess; what only weakens ownership (an unreadable Deployment or
pattern) is counted as "no pattern", the safe side, and said in the StrimziUsers condition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.aio.client.exceptions import ApiException

from kquota.api.kafkacluster import Strimzi
from kquota.domain.strimzi import (
    IGNORED_USERS_ENV,
    NAMESPACE_ENV,
    SECRET_PREFIX_ENV,
    USER_OPERATOR_CONTAINER,
    StrimziError,
    StrimziOwnership,
    UserOperatorView,
    container_env,
    entity_operator_deployment,
    listener,
    ownership,
    rollout_problem,
    user_operator_spec,
)
from kquota.k8s.api import Kube, SecretData, SecretNotFound
from kquota.kafka.jaas import JaasError, jaas_options
from kquota.kafka.keystores import KeystoreError, bundle, pem_certificates, pkcs12_store

GROUP = "kafka.strimzi.io"
#: Strimzi 1.0 serves only v1; 0.49-0.51 serve both; older ones v1beta2.
VERSIONS = ("v1", "v1beta2")
CLUSTER_LABEL = "strimzi.io/cluster"
#: The cluster CA Secret's certificates: ``ca.crt``, and the old one kept during a key replacement.
CA_CERT_KEY = re.compile(r"^ca(-.+)?\.crt$")


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


def _tls_material(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except KeystoreError as exc:
        raise SecretNotFound(str(exc)) from None


async def _env_value(kube: Kube, namespace: str, env: Mapping[str, Any]) -> str:
    """One env entry's value as the container sees it (``value``, or ``valueFrom`` a ConfigMap or Secret key)."""
    if env.get("value") is not None:
        return str(env["value"])
    source = env.get("valueFrom") or {}
    ref = source.get("configMapKeyRef")
    if isinstance(ref, Mapping):
        return await kube.config_map_value(namespace, str(ref.get("name")), str(ref.get("key")))
    ref = source.get("secretKeyRef")
    if isinstance(ref, Mapping):
        return (await kube.secret(namespace, str(ref.get("name")))).text(str(ref.get("key")))
    raise SecretNotFound(f"env {env.get('name')} has neither a value nor a ConfigMap or Secret key to read")


async def user_operator_view(kube: Kube, kafka: Mapping[str, Any]) -> UserOperatorView | None:
    """The User Operator as its Deployment runs it (None: the Kafka has none).

    Its watched namespace and Secret prefix come from the Deployment's env (else the
    Kafka's spec); its ignore pattern counts only once every pod runs the template that
    sets it, since the User Operator reads it once at start.
    """
    uo = user_operator_spec(kafka)
    if uo is None:
        return None
    meta = kafka.get("metadata") or {}
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    watched = str(uo.get("watchedNamespace") or ns)
    prefix = str(uo.get("secretPrefix") or "")
    deployment_name = entity_operator_deployment(name)
    where = f"Deployment {ns}/{deployment_name}"
    why_not = f"kquota counts {IGNORED_USERS_ENV} only once it sees the User Operator run with it"
    try:
        deployment = await kube.get_namespaced_object("apps", ("v1",), ns, "deployments", deployment_name)
    except ApiException as exc:
        if exc.status not in (403, 404):
            raise
        return UserOperatorView(watched, prefix, None, f"{where} is not readable (HTTP {exc.status}): {why_not}")
    env = container_env(deployment, USER_OPERATOR_CONTAINER)
    if env is None:
        return UserOperatorView(watched, prefix, None, f"{where} has no {USER_OPERATOR_CONTAINER} container")
    by_name = {str(e.get("name")): e for e in env}
    if (v := by_name.get(NAMESPACE_ENV, {}).get("value")) is not None:
        watched = str(v)
    if (v := by_name.get(SECRET_PREFIX_ENV, {}).get("value")) is not None:
        prefix = str(v)
    entry = by_name.get(IGNORED_USERS_ENV)
    if entry is None:
        return UserOperatorView(watched, prefix, None)
    rolling = rollout_problem(deployment)
    if rolling is not None:
        return UserOperatorView(watched, prefix, None, f"{where} is rolling out ({rolling}): {why_not}")
    try:
        pattern = await _env_value(kube, ns, entry)
    except SecretNotFound as exc:
        return UserOperatorView(watched, prefix, None, f"{IGNORED_USERS_ENV} comes from {exc}: {why_not}")
    return UserOperatorView(watched, prefix, pattern or None)


async def _trust(kube: Kube, ns: str, kafka_name: str, certificates: tuple[str, ...]) -> str:
    """Every certificate to trust on a TLS listener: what its status lists, and every cluster CA certificate."""
    secret = await kube.secret(ns, f"{kafka_name}-cluster-ca-cert")
    pems: list[str] = []
    for i, text in enumerate(certificates):
        pems += _tls_material(pem_certificates, text, f"Kafka {ns}/{kafka_name} status.listeners certificate {i + 1}")
    keys = [k for k in secret.names() if CA_CERT_KEY.match(k)]
    if not keys:
        raise SecretNotFound(f"{secret.where} has no key 'ca.crt'")
    for key in keys:
        pems += _tls_material(pem_certificates, secret.text(key), f"{secret.where} key {key!r}")
    return bundle(pems)


def _client_certificate(data: SecretData) -> tuple[str, str]:
    """A TLS KafkaUser's certificate and key: ``user.crt``/``user.key``, else ``user.p12`` with ``user.password``."""
    if "user.crt" in data and "user.key" in data:
        return data.text("user.crt"), data.text("user.key")
    if "user.p12" in data:
        store = _tls_material(
            pkcs12_store, data.binary("user.p12"), data.get_text("user.password"), f"{data.where} key 'user.p12'"
        )
        if store.key is None or not store.certificates:
            raise SecretNotFound(f"{data.where} key 'user.p12' holds no private key with its certificate")
        return "".join(store.certificates), store.key
    missing = [k for k in ("user.crt", "user.key") if k not in data]
    raise SecretNotFound(f"{data.where} has no key {' and '.join(repr(k) for k in missing)} (nor 'user.p12')")


async def resolve(ref: Strimzi, kube: Kube) -> StrimziTarget:
    """The connection and ownership ``ref`` names (raises SecretNotFound naming what is missing)."""
    ns = ref.kafka.namespace
    kafka = await _get(kube, ns, "kafkas", ref.kafka.name, "Kafka")
    try:
        lst = listener(kafka, ref.listener)
    except StrimziError as exc:
        raise SecretNotFound(str(exc)) from None
    view = await user_operator_view(kube, kafka)
    users_ns = view.namespace if view is not None else ns
    try:
        users = await kube.list_namespaced_objects(
            GROUP, VERSIONS, users_ns, "kafkausers", f"{CLUSTER_LABEL}={ref.kafka.name}"
        )
    except ApiException as exc:
        if exc.status not in (403, 404):
            raise
        # Without the KafkaUsers kquota cannot tell which users Strimzi manages: refuse to guess.
        raise SecretNotFound(
            f"KafkaUsers in namespace {users_ns} (the User Operator's) are not readable (HTTP {exc.status})"
        ) from None
    conn: dict[str, Any] = {"bootstrap_servers": lst.bootstrap_servers}
    ca = cert = key = None
    if lst.tls:
        ca = await _trust(kube, ns, ref.kafka.name, lst.certificates)
    auth = lst.authentication
    if lst.oauthbearer:
        # The client is the provider's, not a KafkaUser's: cluster_config adds spec.strimzi.oauth.
        if ref.oauth is None:
            raise SecretNotFound(
                f"listener {lst.name!r} of Kafka {ns}/{ref.kafka.name} authenticates clients with OAUTHBEARER "
                f"({auth}): set spec.strimzi.oauth (the token endpoint and kquota's client)"
            )
        conn["security_protocol"] = "SASL_SSL" if lst.tls else "SASL_PLAINTEXT"
        conn["sasl_mechanism"] = "OAUTHBEARER"
        return StrimziTarget(conn, ca, cert, key, ownership(kafka, users, view))
    if auth is not None and ref.kafka_user is None:
        raise SecretNotFound(
            f"listener {lst.name!r} of Kafka {ns}/{ref.kafka.name} needs {auth} authentication: set "
            "spec.strimzi.kafkaUser"
        )
    if auth is None:
        conn["security_protocol"] = "SSL" if lst.tls else "PLAINTEXT"
    else:
        assert ref.kafka_user is not None
        user_ns = ref.kafka_user.namespace or users_ns
        ku = await _get(kube, user_ns, "kafkausers", ref.kafka_user.name, "KafkaUser")
        status = ku.get("status") or {}
        prefix = view.secret_prefix if view is not None else ""
        secret_name = str(status.get("secret") or f"{prefix}{ref.kafka_user.name}")
        data = await kube.secret(user_ns, secret_name)
        where = f"{data.where} of KafkaUser {user_ns}/{ref.kafka_user.name}"
        if auth in ("scram-sha-512", "scram-sha-256"):
            conn["security_protocol"] = "SASL_SSL" if lst.tls else "SASL_PLAINTEXT"
            conn["sasl_mechanism"] = auth.upper()
            username = str(status.get("username") or ref.kafka_user.name)
            password = data.get_text("password")
            if password is None and "sasl.jaas.config" in data:
                try:
                    password = jaas_options(data.text("sasl.jaas.config")).get("password")
                except JaasError as exc:
                    raise SecretNotFound(f"{where}: cannot read 'sasl.jaas.config': {exc}") from None
            if password is None:
                raise SecretNotFound(f"{where} has no key 'password'")
            conn["sasl_username"], conn["sasl_password"] = username, password
        elif auth == "tls":
            if not lst.tls:
                raise SecretNotFound(f"listener {lst.name!r} has tls authentication but no TLS")
            conn["security_protocol"] = "SSL"
            cert, key = _client_certificate(data)
        else:
            raise SecretNotFound(
                f"listener {lst.name!r} uses {auth} authentication; kquota connects with scram-sha-512, tls or "
                "OAUTHBEARER (type oauth, or custom with OAUTHBEARER)"
            )
    return StrimziTarget(conn, ca, cert, key, ownership(kafka, users, view))
