"""From a KafkaCluster object to what the reconciler works with.

(Quota resources become records through :func:`kquota.domain.claims.claim_from_body`,
which the CLI shares.) ``cluster_config`` resolves a
KafkaCluster, reading credentials from Secrets; they go into the connection
settings only, which never print them. It runs on every reconcile pass, so a
changed Secret takes effect on the next pass without touching the KafkaCluster.

TLS material from Secrets (CA, client certificate and key) becomes files
through ``kquota.kafka.settings.tls_file``; so do a Kerberos keytab (binary) and
krb5.conf (``private_file``). The SASL mechanism's section decides what is read:
``credentialsSecretRef`` (PLAIN, SCRAM), ``oauth`` (its client secret, and the
CA of its token endpoint), ``kerberos`` (keytab, krb5.conf ConfigMap) or
``awsMskIam`` (nothing: the AWS credentials come from the pod).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kquota.api.cluster_metrics import ExporterNames, duration_seconds
from kquota.api.kafkacluster import KafkaCluster
from kquota.api.security import (
    DEFAULT_CA_PASSWORD_KEY,
    DEFAULT_KEYSTORE_KEY,
    DEFAULT_TRUSTSTORE_KEY,
    DEFAULT_USER_PASSWORD_KEY,
    CaSecretRef,
    ClientCertSecretRef,
    Sasl,
)
from kquota.domain.plan import Protection, UnmanagedPolicy
from kquota.domain.strimzi import StrimziOwnership
from kquota.domain.tenancy import Grant
from kquota.k8s.api import Kube, SecretData, SecretNotFound
from kquota.kafka.jaas import JaasError, jaas_options
from kquota.kafka.keystores import KeystoreError, bundle, pem_certificates, pkcs12_store
from kquota.kafka.principal import CertificateError, subject_principal
from kquota.kafka.settings import (
    ConnectionSettings,
    KerberosSettings,
    MskIamSettings,
    OAuthSettings,
    private_file,
    tls_file,
)
from kquota.metrics.names import MetricNames
from kquota.reconcile.records import ClusterConfig, MetricsConfig
from kquota.reconcile.settings import OperatorSettings
from kquota.reconcile.strimzi import resolve as resolve_strimzi

#: The Secret key Kafka clients (and Strimzi's KafkaUser Secrets) keep a JAAS login line in.
JAAS_KEY = "sasl.jaas.config"

log = logging.getLogger(__name__)


def sasl_credentials(data: SecretData, username_key: str, password_key: str) -> tuple[str, str]:
    """The SASL username and password in a Secret.

    Each comes from its key; a key that is missing is read from
    ``sasl.jaas.config`` instead (a Strimzi KafkaUser's Secret has ``password``
    and ``sasl.jaas.config``, no ``username``). Raises SecretNotFound naming
    what is missing.
    """
    values = {username_key: data.get_text(username_key), password_key: data.get_text(password_key)}
    missing = [k for k, v in values.items() if v is None]
    if missing:
        jaas = data.get_text(JAAS_KEY)
        if jaas is None:
            keys = " and ".join(repr(k) for k in missing)
            raise SecretNotFound(f"{data.where} has no key {keys} (and no {JAAS_KEY!r} to read it from)")
        try:
            options = jaas_options(jaas)
        except JaasError as exc:
            raise SecretNotFound(f"{data.where}: cannot read {JAAS_KEY!r}: {exc}") from None
        for key, option in ((username_key, "username"), (password_key, "password")):
            if values[key] is None:
                if option not in options:
                    raise SecretNotFound(f"{data.where} has no key {key!r} and its {JAAS_KEY!r} sets no {option}")
                values[key] = options[option]
    return str(values[username_key]), str(values[password_key])


def _keystore_error(exc: KeystoreError) -> SecretNotFound:
    return SecretNotFound(str(exc))


async def trusted_certificates(ref: CaSecretRef, kube: Kube) -> str:
    """The PEM text of every certificate a ``caSecretRef`` names (raises SecretNotFound saying what is wrong)."""
    data = await kube.secret(ref.namespace, ref.name)
    try:
        if ref.type == "PKCS12":
            key = ref.truststore_key or DEFAULT_TRUSTSTORE_KEY
            password = data.get_text(ref.password_key or DEFAULT_CA_PASSWORD_KEY)
            store = pkcs12_store(data.binary(key), password, f"{data.where} key {key!r}")
            if not store.certificates:
                raise SecretNotFound(f"{data.where} key {key!r} is a PKCS#12 store without certificates")
            return bundle(store.certificates)
        return bundle(pem_certificates(data.text(ref.key), f"{data.where} key {ref.key!r}"))
    except KeystoreError as exc:
        raise _keystore_error(exc) from None


async def client_certificate(ref: ClientCertSecretRef, kube: Kube) -> tuple[str, str]:
    """The PEM certificate (chain) and private key a ``clientCertSecretRef`` names."""
    data = await kube.secret(ref.namespace, ref.name)
    if ref.type == "PEM":
        return data.text(ref.cert_key), data.text(ref.key_key)
    key = ref.keystore_key or DEFAULT_KEYSTORE_KEY
    password = data.get_text(ref.password_key or DEFAULT_USER_PASSWORD_KEY)
    try:
        store = pkcs12_store(data.binary(key), password, f"{data.where} key {key!r}")
    except KeystoreError as exc:
        raise _keystore_error(exc) from None
    if store.key is None or not store.certificates:
        raise SecretNotFound(f"{data.where} key {key!r} holds no private key with its certificate")
    return "".join(store.certificates), store.key


async def sasl_settings(sasl: Sasl, kube: Kube, cluster: str) -> dict[str, Any]:
    """The connection settings a ``spec.security.sasl`` section makes, its Secrets and ConfigMap read."""
    conn: dict[str, Any] = {"sasl_mechanism": sasl.mechanism}
    if sasl.credentials_secret_ref is not None:
        ref = sasl.credentials_secret_ref
        data = await kube.secret(ref.namespace, ref.name)
        conn["sasl_username"], conn["sasl_password"] = sasl_credentials(data, ref.username_key, ref.password_key)
    if sasl.oauth is not None:
        oauth = sasl.oauth
        secret = await kube.secret(oauth.client_secret_ref.namespace, oauth.client_secret_ref.name)
        client_secret = secret.text(oauth.client_secret_ref.key).strip()
        if not client_secret:
            raise SecretNotFound(f"{secret.where} key {oauth.client_secret_ref.key!r} is empty")
        ca_file = None
        if oauth.ca_secret_ref is not None:
            ca_file = tls_file(await trusted_certificates(oauth.ca_secret_ref, kube), cluster, "oauth-ca")
        conn["oauth"] = OAuthSettings(
            token_endpoint_url=oauth.token_endpoint_url,
            client_id=oauth.client_id,
            client_secret=client_secret,
            scope=oauth.scope,
            audience=oauth.audience,
            extensions=tuple((e.name, e.value) for e in oauth.extensions or ()),
            ca_file=ca_file,
        )
    if sasl.kerberos is not None:
        krb = sasl.kerberos
        keytab = await kube.secret(krb.keytab_secret_ref.namespace, krb.keytab_secret_ref.name)
        content = keytab.binary(krb.keytab_secret_ref.key)
        if not content:
            raise SecretNotFound(f"{keytab.where} key {krb.keytab_secret_ref.key!r} is empty")
        krb5_conf = None
        if krb.krb5_config_map_ref is not None:
            cm = krb.krb5_config_map_ref
            text = await kube.config_map_value(cm.namespace, cm.name, cm.key)
            krb5_conf = private_file(text.encode(), cluster, "krb5", ".conf")
        conn["kerberos"] = KerberosSettings(
            principal=krb.principal,
            keytab_file=private_file(content, cluster, "keytab", ".keytab"),
            krb5_conf_file=krb5_conf,
            service_name=krb.service_name,
        )
    if sasl.aws_msk_iam is not None:
        msk = sasl.aws_msk_iam
        conn["msk_iam"] = MskIamSettings(
            region=msk.region, role_arn=msk.role_arn, role_session_name=msk.role_session_name, profile=msk.profile
        )
    return conn


async def cluster_config(body: Mapping[str, Any], kube: Kube, settings: OperatorSettings) -> ClusterConfig | None:
    """Resolve a KafkaCluster; raises SecretNotFound when a referenced Secret is unreadable."""
    try:
        cluster = KafkaCluster.model_validate(dict(body))
    except ValidationError:
        return None
    spec = cluster.spec
    security = spec.security
    name = cluster.metadata.name or ""
    strimzi = None
    cert: str | None = None
    if spec.strimzi is not None:
        # Everything about the connection comes from Strimzi's objects (security is left out).
        strimzi = await resolve_strimzi(spec.strimzi, kube)
        conn: dict[str, Any] = dict(strimzi.connection)
        if strimzi.ca_pem is not None:
            conn["ssl_cafile"] = tls_file(strimzi.ca_pem, name, "ca")
        if strimzi.cert_pem is not None and strimzi.key_pem is not None:
            cert = strimzi.cert_pem
            conn["ssl_certfile"] = tls_file(strimzi.cert_pem, name, "cert")
            conn["ssl_keyfile"] = tls_file(strimzi.key_pem, name, "key")
        if conn.get("sasl_mechanism") == "OAUTHBEARER" and spec.strimzi.oauth is not None:
            conn |= await sasl_settings(Sasl(mechanism="OAUTHBEARER", oauth=spec.strimzi.oauth), kube, name)
    else:
        conn = {
            "bootstrap_servers": spec.bootstrap_servers,
            "security_protocol": security.protocol if security else "PLAINTEXT",
        }
    if strimzi is None and security and security.sasl:
        conn |= await sasl_settings(security.sasl, kube, name)
    if strimzi is None and security and security.tls:
        conn["ssl_cafile"] = tls_file(await trusted_certificates(security.tls.ca_secret_ref, kube), name, "ca")
        client = security.tls.client_cert_secret_ref
        if client is not None:
            cert, key = await client_certificate(client, kube)
            conn["ssl_certfile"] = tls_file(cert, name, "cert")
            conn["ssl_keyfile"] = tls_file(key, name, "key")
    # The operator's own principal: its SASL user, else (mutual TLS) its certificate's subject
    # as the brokers name it under the default mapping rules.
    own: set[str] = set()
    if conn.get("sasl_username"):
        own.add(conn["sasl_username"])
    elif conn.get("oauth") is not None:
        # Kafka names an OAUTHBEARER client by the token's sub claim, which many providers set to the
        # client id (Keycloak's service accounts do not: protect that one with spec.protectedUsers).
        own.add(conn["oauth"].client_id)
    elif conn.get("kerberos") is not None and conn["kerberos"].principal:
        # The DEFAULT sasl.kerberos.principal.to.local rule: the principal's primary.
        own.add(conn["kerberos"].principal.split("@", 1)[0].split("/", 1)[0])
    elif cert is not None:
        try:
            own.add(subject_principal(cert))
        except CertificateError as exc:
            log.warning("KafkaCluster %s: cannot read the client certificate's subject (%s)", name, exc)
    grants, protection, policy = cluster_policy(
        cluster, settings, frozenset(own), strimzi.ownership if strimzi is not None else None
    )
    metrics = None
    if spec.metrics and (spec.metrics.prometheus_url or spec.metrics.broker_endpoints):
        metrics = MetricsConfig(
            prometheus_url=str(spec.metrics.prometheus_url) if spec.metrics.prometheus_url else None,
            broker_endpoints=tuple(str(u) for u in spec.metrics.broker_endpoints or ()),
            window_seconds=duration_seconds(spec.metrics.window),
            near_limit_percent=spec.metrics.near_limit_percent,
            prometheus_selector=spec.metrics.prometheus_selector,
            names=metric_names(spec.metrics.names),
        )
    return ClusterConfig(
        metrics=metrics,
        name=cluster.metadata.name or "",
        connection=ConnectionSettings(**conn),
        grants=grants,
        protection=protection,
        policy=policy,
        principals=frozenset(own),
        callback_honoured=spec.quota_callback.honours_entity_quotas,
    )


def metric_names(names: ExporterNames | None) -> MetricNames:
    """The readers' names for a KafkaCluster's ``spec.metrics.names`` (absent: the defaults)."""
    if names is None:
        return MetricNames()
    return MetricNames(
        quota_prefix=names.quota_prefix,
        resource_label=names.resource_label,
        user_label=names.user_label,
        client_label=names.client_id_label,
        topic_label=names.topic_label,
        instance_label=names.instance_label,
        bytes_in_total=names.bytes_in_total,
        bytes_out_total=names.bytes_out_total,
        bytes_in_rate=names.bytes_in_rate,
        bytes_out_rate=names.bytes_out_rate,
    )


def cluster_policy(
    cluster: KafkaCluster,
    settings: OperatorSettings,
    own_principals: frozenset[str] = frozenset(),
    strimzi: StrimziOwnership | None = None,
) -> tuple[tuple[Grant, ...] | None, Protection, UnmanagedPolicy]:
    """What a KafkaCluster's spec decides about ownership: tenancy grants, protection, unmanaged policy.

    Pure, and shared by the operator and ``kquota plan -f`` (which lays a
    KafkaCluster from the manifests over the live one), so both decide alike.
    ``strimzi`` is what Strimzi owns on the cluster (read by cluster_config).
    """
    spec = cluster.spec
    grants = (
        None
        if spec.tenancy is None
        else tuple(
            Grant(
                frozenset(g.namespaces),
                tuple(g.users or ()),
                tuple(g.client_ids or ()),
                tuple(g.ips or ()),
                bool(g.allow_defaults),
            )
            for g in spec.tenancy.grants or []
        )
    )
    protection = Protection(
        frozenset(settings.protected_users) | frozenset(spec.protected_users or []) | own_principals,
        frozenset(settings.protected_client_ids) | frozenset(spec.protected_client_ids or []),
        strimzi,
    )
    policy = UnmanagedPolicy(spec.unmanaged.policy) if spec.unmanaged else UnmanagedPolicy.IGNORE
    return grants, protection, policy


__all__ = ["SecretNotFound", "cluster_config", "cluster_policy"]


@dataclass(frozen=True, slots=True)
class ClusterResolver:
    """A KafkaCluster (a live body) resolved to its :class:`ClusterConfig` on each call, Secrets read again."""

    body: Mapping[str, Any]
    kube: Kube
    settings: OperatorSettings

    async def __call__(self) -> ClusterConfig | None:
        return await cluster_config(self.body, self.kube, self.settings)
