"""KafkaCluster: how to reach a Kafka cluster and which namespaces may manage which quotas on it.

Cluster-scoped and owned by the platform admins: teams own their quota
resources through namespace RBAC but cannot edit connection or tenancy
policy.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Final, Literal

from pydantic import Field

from kquota.api.base import NO_CRD_DEFAULT, SpecModel
from kquota.api.cel import Cel, Rule
from kquota.api.fields import (
    DNS1123_SUBDOMAIN,
    DURATION_PATTERN,
    HTTP_URL_PATTERN,
    MAX_NAME_LENGTH,
    is_cidr,
    is_ip,
)
from kquota.api.resource import AGE_COLUMN, READY_COLUMN, CrdInfo, PrinterColumn, Resource
from kquota.api.status import KafkaClusterStatus

_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}"
BOOTSTRAP_PATTERN: Final = rf"^{_HOST}(,{_HOST})*$"
DNS1123_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
SECRET_KEY_PATTERN: Final = r"^[-._a-zA-Z0-9]+$"  # noqa: S105 - a Secret key name pattern, not a secret

SASL_REQUIRED: Final = "protocol SASL_PLAINTEXT and SASL_SSL need sasl"
SASL_UNUSED: Final = "sasl is used only with protocol SASL_PLAINTEXT or SASL_SSL"
TLS_UNUSED: Final = "tls is used only with protocol SSL or SASL_SSL"
GRANT_EMPTY: Final = "a grant needs users, clientIds, ips or allowDefaults: true"
GRANT_IPS_INVALID: Final = "ips entries must be IP addresses or CIDR ranges such as 10.0.0.0/8"
WINDOW_NOT_POSITIVE: Final = "window must be a positive duration such as 60s or 5m"
BOOTSTRAP_OR_STRIMZI: Final = "set exactly one of bootstrapServers and strimzi"
STRIMZI_SECURITY: Final = "with strimzi, security comes from the Kafka's listener and the KafkaUser: leave security out"
LABELS_NOT_DISTINCT: Final = (
    "resourceLabel, userLabel, clientIdLabel and instanceLabel must be four different labels, and topicLabel "
    "must differ from instanceLabel: they are labels of one series"
)
PROMETHEUS_SELECTOR_INVALID: Final = (
    'prometheusSelector must be PromQL label matchers without braces, such as job="kafka-prod", namespace="kafka": '
    "each a label name, =, !=, =~ or !~, and a double-quoted value, separated by commas"
)
TOPIC_NAMES_NOT_DISTINCT: Final = (
    "bytesInTotal, bytesOutTotal, bytesInRate and bytesOutRate must be four different names"
)

#: A Prometheus metric name (the classic character set, which every exporter writes).
METRIC_NAME_PATTERN: Final = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
#: A Prometheus label name.
LABEL_NAME_PATTERN: Final = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
# PromQL label matchers as they go between the braces of a selector: name, operator, double-quoted
# value. The escapes are PromQL's (Go's) in a double-quoted string; a raw newline ends the string.
# Blanks are spelled [ \t], not \s, which is ASCII in RE2 (the API server) but Unicode in Python.
_BLANK = r"[ \t]*"
_PROMQL_STRING = r'"([^"\\\n]|\\([abfnrtv\\"]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2}))*"'
_MATCHER = rf"{_BLANK}[a-zA-Z_][a-zA-Z0-9_]*{_BLANK}(=|!=|=~|!~){_BLANK}{_PROMQL_STRING}{_BLANK}"
#: One or more label matchers separated by commas (a trailing comma allowed, as in PromQL), no braces.
PROMETHEUS_SELECTOR_PATTERN: Final = rf"^{_MATCHER}(,{_MATCHER})*(,{_BLANK})?$"

Namespace = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
SecretKey = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)]
Pattern = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]
HttpUrl = Annotated[str, Field(min_length=1, max_length=2048, pattern=HTTP_URL_PATTERN)]
IpOrCidr = Annotated[str, Field(min_length=1, max_length=64)]
Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


class CredentialsSecretRef(SpecModel):
    """A Secret with the SASL username and password.

    A Strimzi KafkaUser's Secret works as it is: it has ``password`` and
    ``sasl.jaas.config`` but no ``username``, and a key the Secret lacks is read
    from its ``sasl.jaas.config`` line.
    """

    namespace: Namespace = Field(description="Namespace of the Secret (the operator needs read access).")
    name: ObjectName = Field(description="Name of the Secret.")
    username_key: SecretKey = Field(
        "username",
        description="Key of the username in the Secret. When the Secret has no such key, the username is read "
        "from its sasl.jaas.config key (username=... in the JAAS line), as in a Strimzi KafkaUser's Secret.",
    )
    password_key: SecretKey = Field(
        "password",
        description="Key of the password in the Secret. When the Secret has no such key, the password is read "
        "from its sasl.jaas.config key.",
    )


class Sasl(SpecModel):
    """SASL authentication of the operator's admin client."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."
    )
    credentials_secret_ref: CredentialsSecretRef = Field(description="Where the username and password are.")


class CaSecretRef(SpecModel):
    """A Secret with the CA certificate (PEM) that signed the brokers' certificates."""

    namespace: Namespace = Field(description="Namespace of the Secret.")
    name: ObjectName = Field(description="Name of the Secret.")
    key: SecretKey = Field("ca.crt", description="Key of the PEM CA certificate in the Secret.")


class ClientCertSecretRef(SpecModel):
    """A Secret with the operator's client certificate and key (PEM), for mutual TLS."""

    namespace: Namespace = Field(description="Namespace of the Secret.")
    name: ObjectName = Field(description="Name of the Secret.")
    cert_key: SecretKey = Field("tls.crt", description="Key of the PEM certificate in the Secret.")
    key_key: SecretKey = Field("tls.key", description="Key of the PEM private key in the Secret.")


class Tls(SpecModel):
    """TLS settings of the operator's admin client."""

    ca_secret_ref: CaSecretRef = Field(description="The CA that signed the brokers' certificates.")
    client_cert_secret_ref: ClientCertSecretRef | None = Field(
        None, description="A client certificate, when the brokers require mutual TLS."
    )


def _is_sasl(protocol: str) -> bool:
    return protocol.startswith("SASL_")


class Security(SpecModel):
    """How the operator authenticates to the brokers."""

    protocol: Protocol = Field(
        "PLAINTEXT",
        description="The listener's security.protocol: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.",
    )
    sasl: Sasl | None = Field(None, description="SASL settings; required with SASL_PLAINTEXT and SASL_SSL.")
    tls: Tls | None = Field(
        None,
        description="TLS settings; allowed only with SSL and SASL_SSL. Without it, those protocols check the "
        "brokers' certificates against the operator's system trusted CAs and send no client certificate.",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!(has(self.protocol) && self.protocol.startsWith('SASL_')) || has(self.sasl)",
            SASL_REQUIRED,
            lambda s: not _is_sasl(s.protocol) or s.sasl is not None,
        ),
        Rule(
            "!has(self.sasl) || (has(self.protocol) && self.protocol.startsWith('SASL_'))",
            SASL_UNUSED,
            lambda s: s.sasl is None or _is_sasl(s.protocol),
        ),
        Rule(
            "!has(self.tls) || (has(self.protocol) && self.protocol.endsWith('SSL'))",
            TLS_UNUSED,
            lambda s: s.tls is None or s.protocol.endswith("SSL"),
        ),
    )


_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """Seconds in a Go duration matching DURATION_PATTERN (``1m30s`` -> 90)."""
    return sum(float(n) * _UNITS[u] for n, u in re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)", text))


MetricName = Annotated[str, Field(min_length=1, max_length=255, pattern=METRIC_NAME_PATTERN)]
LabelName = Annotated[str, Field(min_length=1, max_length=255, pattern=LABEL_NAME_PATTERN)]


class ExporterNames(SpecModel):
    """Metric and label names as the brokers' metrics exporter writes them.

    The defaults are the names of kquota's own JMX exporter rules
    (deploy/strimzi/kafka-metrics-kquota.yaml, harness/jmx-exporter.yaml);
    ``kquota.metrics.names.MetricNames`` holds the same defaults for the
    readers, and a unit test keeps the two equal.
    """

    quota_prefix: MetricName = Field(
        "kafka_server_quota_",
        description="Prefix of the client quota metrics. kquota reads <prefix>byte_rate, <prefix>throttle_time, "
        "<prefix>request_time, <prefix>tokens and <prefix>mutation_rate: the attributes byte-rate, "
        "throttle-time, request-time, tokens and mutation-rate of the MBeans "
        "kafka.server:type=Produce|Fetch|Request|ControllerMutation,user=...,client-id=..., with '-' written "
        "as '_'. Other metrics with this prefix are ignored.",
    )
    resource_label: LabelName = Field(
        "resource",
        description="Label of a quota metric that holds its MBean's type, exactly as Kafka spells it: Produce, "
        "Fetch, Request or ControllerMutation. Series with another value are ignored.",
    )
    user_label: LabelName = Field(
        "user",
        description="Label of a quota metric that holds its MBean's user tag: the quota user as Kafka writes it, "
        "URL-encoded (CN%3Dapp for the principal CN=app). Absent or empty when the quota bucket has no user "
        "(a client-id quota).",
    )
    client_id_label: LabelName = Field(
        "clientId",
        description="Label of a quota metric that holds its MBean's client-id tag, as Kafka writes it: JMX-quoted "
        "when the client-id has characters outside [A-Za-z0-9_%. -]. Absent or empty when the quota bucket has "
        "no client-id (a user quota).",
    )
    topic_label: LabelName = Field(
        "topic",
        description="Label of the per-topic byte metrics (bytesInTotal, bytesOutTotal, bytesInRate, bytesOutRate) "
        "that holds the topic name. Series without it (the all-topics totals) are ignored.",
    )
    instance_label: LabelName = Field(
        "instance",
        description="Label that names the broker of a series read through prometheusURL: Prometheus' scrape "
        "target label (host:port), which status.observed reports per broker. Not used with brokerEndpoints, "
        "where a broker is the host:port of its endpoint.",
    )
    bytes_in_total: MetricName = Field(
        "kafka_server_brokertopicmetrics_bytesinpersec_total",
        description="Counter of the bytes produced to a topic, with topicLabel: the Count of "
        "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=... Its rate over the window is a "
        "TopicQuota's observed bytesInPerSec.",
    )
    bytes_out_total: MetricName = Field(
        "kafka_server_brokertopicmetrics_bytesoutpersec_total",
        description="Counter of the bytes consumers fetched from a topic, with topicLabel: the Count of "
        "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=... Its rate over the window is a "
        "TopicQuota's observed bytesOutPerSec.",
    )
    bytes_in_rate: MetricName = Field(
        "kafka_server_brokertopicmetrics_bytesinpersec_oneminuterate",
        description="Gauge of the bytes produced to a topic per second, with topicLabel: the OneMinuteRate of "
        "BytesInPerSec. Used for bytesInPerSec only while fewer than two readings of bytesInTotal exist (or "
        "when the exporter writes no bytesInTotal); without it, bytesInPerSec appears from the second reading.",
    )
    bytes_out_rate: MetricName = Field(
        "kafka_server_brokertopicmetrics_bytesoutpersec_oneminuterate",
        description="Gauge of the bytes consumers fetched from a topic per second, with topicLabel: the "
        "OneMinuteRate of BytesOutPerSec. Used for bytesOutPerSec only while fewer than two readings of "
        "bytesOutTotal exist (or when the exporter writes no bytesOutTotal).",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "[self.resourceLabel, self.userLabel, self.clientIdLabel, self.instanceLabel].all(x, "
            "[self.resourceLabel, self.userLabel, self.clientIdLabel, self.instanceLabel].exists_one(y, y == x))"
            " && self.topicLabel != self.instanceLabel",
            LABELS_NOT_DISTINCT,
            lambda s: (
                len({s.resource_label, s.user_label, s.client_id_label, s.instance_label}) == 4
                and s.topic_label != s.instance_label
            ),
        ),
        Rule(
            "[self.bytesInTotal, self.bytesOutTotal, self.bytesInRate, self.bytesOutRate].all(x, "
            "[self.bytesInTotal, self.bytesOutTotal, self.bytesInRate, self.bytesOutRate].exists_one(y, y == x))",
            TOPIC_NAMES_NOT_DISTINCT,
            lambda s: len({s.bytes_in_total, s.bytes_out_total, s.bytes_in_rate, s.bytes_out_rate}) == 4,
        ),
    )


class Metrics(SpecModel):
    """Where the operator reads quota metrics (throttling, usage) for the resources' status."""

    prometheus_url: HttpUrl | None = Field(
        None,
        alias="prometheusURL",
        description="Base URL of a Prometheus server that scrapes the brokers' quota metrics, e.g. "
        "http://prometheus.monitoring:9090. When set, brokerEndpoints are not read.",
    )
    broker_endpoints: list[HttpUrl] | None = Field(
        None,
        max_length=256,
        description="Metrics endpoints of the brokers' Prometheus JMX exporters, e.g. "
        "http://kafka-0.kafka:7071/metrics, scraped directly by the operator when prometheusURL is not set.",
    )
    prometheus_selector: Annotated[
        str | None,
        Cel(
            # A rule rather than a pattern: the API server quotes a failed pattern whole, and this
            # one is unreadable; the message says what is expected instead.
            Rule(
                f"self.matches(r'{PROMETHEUS_SELECTOR_PATTERN}')",
                PROMETHEUS_SELECTOR_INVALID,
                lambda v: v is None or re.fullmatch(PROMETHEUS_SELECTOR_PATTERN, v) is not None,
            )
        ),
    ] = Field(
        None,
        min_length=1,
        max_length=1024,
        description="PromQL label matchers added to every query sent to prometheusURL, as written between the "
        'braces of a selector but without them, e.g. job="kafka-prod", namespace="kafka". Set it when one '
        "Prometheus scrapes several Kafka clusters: without it, the quota series of every cluster it scrapes "
        "are read, so the same user's clients on another cluster count here. Each matcher is a label name, "
        "one of =, !=, =~ and !~, and a double-quoted value; Prometheus checks the regular expressions of =~ "
        "and !~ and reports one it rejects in status.observed. Used with prometheusURL only, not with "
        "brokerEndpoints.",
    )
    names: ExporterNames | None = Field(
        None,
        description="Metric and label names as the brokers' metrics exporter writes them, for exporter rules "
        "other than kquota's (deploy/strimzi/kafka-metrics-kquota.yaml, whose names are the defaults). A field "
        "left out keeps its default. Used with prometheusURL and brokerEndpoints alike.",
    )
    window: Annotated[
        str,
        Cel(
            # Guarded by the pattern so a malformed value reports only the pattern, not a CEL error.
            Rule(
                f"!self.matches(r'{DURATION_PATTERN}') || duration(self) > duration('0s')",
                WINDOW_NOT_POSITIVE,
                lambda v: re.fullmatch(DURATION_PATTERN, v) is None or duration_seconds(v) > 0,
            )
        ),
    ] = Field(
        "60s",
        max_length=64,
        pattern=DURATION_PATTERN,
        description="Time over which throttling is looked for, as a duration (60s, 5m, 1h). Usage (rates, "
        "usedPercent, NearLimit) is the latest reading in it: the broker's own rate over its quota window, "
        "so status agrees with the broker's metric of the moment.",
    )
    near_limit_percent: int = Field(
        80,
        ge=1,
        le=100,
        description="Usage at or above this percent of a quota sets the NearLimit condition (for a "
        "TopicQuota: of its budget) in the resources' status.",
    )


class TenancyGrant(SpecModel):
    """Namespaces and the entities their quota resources may manage."""

    namespaces: list[Namespace] = Field(min_length=1, max_length=1024, description="Namespaces this grant applies to.")
    users: list[Pattern] | None = Field(
        None,
        max_length=1024,
        description="User names these namespaces may manage, as case-sensitive glob patterns: '*' matches "
        "any run of characters (also none), '?' exactly one character, and every other character only "
        "itself, including '[', ']', '\\' and '.' (e.g. 'team-a-*', 'CN=*,OU=team-a', 'legacy[1]').",
    )
    client_ids: list[Pattern] | None = Field(
        None,
        max_length=1024,
        description="client.ids these namespaces may manage, as glob patterns like users ('*' and '?' "
        "are the only special characters). Needed for client-id entities and for (default user, "
        "client-id) pairs; a pair with a named user needs only users.",
    )
    ips: Annotated[
        list[IpOrCidr] | None,
        Cel(
            Rule(
                "self.all(x, isIP(x) || isCIDR(x))",
                GRANT_IPS_INVALID,
                lambda v: v is None or all(is_ip(x) or is_cidr(x) for x in v),
            )
        ),
    ] = Field(
        None,
        max_length=256,
        description="IP addresses or CIDR ranges (10.0.0.0/8) whose connection quotas these namespaces may "
        "manage: an ip entity is granted when its address lies in one of them.",
    )
    allow_defaults: bool = Field(
        False,
        description="Whether these namespaces may also manage entities with a default part (default user, "
        "client-id or ip, alone or in a pair); a named part of such an entity still needs its pattern. "
        "A default quota applies to every tenant's clients, so absent means false.",
        json_schema_extra=NO_CRD_DEFAULT,
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.users) || has(self.clientIds) || has(self.ips)"
            " || (has(self.allowDefaults) && self.allowDefaults)",
            GRANT_EMPTY,
            lambda s: s.users is not None or s.client_ids is not None or s.ips is not None or s.allow_defaults,
        ),
    )


class Tenancy(SpecModel):
    """Which namespaces may manage which quota entities on this cluster."""

    grants: list[TenancyGrant] = Field(
        max_length=100,
        description="A quota resource is acted on only if, for every entity it sets quotas on, one grant "
        "lists the resource's namespace and covers the entity: a user by users, a client-id by clientIds, "
        "an ip by ips, and a default part only with allowDefaults: true. A (user, client-id) pair with a "
        "named user needs only the user granted: the client-id part only narrows that user's own traffic. "
        "Otherwise the resource reports Ready=False with reason NotPermitted and kquota sets nothing for it; "
        "keys it already applied are kept as they are on the brokers, and the status says so. An empty "
        "list denies everything.",
    )


class Unmanaged(SpecModel):
    """What to do with quota keys on the brokers that kquota did not set."""

    policy: Literal["Ignore", "Adopt"] = Field(
        "Ignore",
        description="What happens to quota keys on the brokers that kquota did not set (set by hand, by "
        "another tool or by another KafkaCluster on the same brokers). Either way, a key a quota resource "
        "sets is taken over: the resource's value replaces the existing one, the key is recorded as "
        "kquota's, and deleting the resource removes it (the old value is not restored). Ignore (default): "
        "keys no resource sets are left alone. Adopt: every key on the brokers that no resource sets is "
        "removed, on every entity (run `kquota export` first to keep them as resources); only protected "
        "principals are spared. Removal happens on the next full pass (at start and at least every drift "
        "interval).",
    )


class QuotaCallback(SpecModel):
    """What the brokers' client quota callback (client.quota.callback.class) does with entity quotas."""

    honours_entity_quotas: bool = Field(
        False,
        description="Whether the brokers' client.quota.callback.class enforces the users/clients entity "
        "quotas kquota writes. kquota reads client.quota.callback.class from every broker; while one sets it "
        "and this is false, every quota resource on this cluster (except IP connection rates) reports "
        "Ready=False with reason QuotaCallback instead of Applied, because the callback, not Kafka's own "
        "logic, decides whether they are enforced (Strimzi's quota plugin, for one, ignores them). Set "
        "true only for a callback known to enforce them; the resources then report Applied with a "
        "QuotaCallback condition naming the class.",
    )


class StrimziObjectRef(SpecModel):
    """A Strimzi object by namespace and name."""

    namespace: Namespace = Field(description="Namespace of the object.")
    name: ObjectName = Field(description="Name of the object.")


class StrimziUserRef(SpecModel):
    """A Strimzi KafkaUser, in the Kafka's namespace unless namespace is set."""

    namespace: Namespace | None = Field(None, description="Namespace of the KafkaUser (default: the Kafka's).")
    name: ObjectName = Field(description="Name of the KafkaUser.")


class Strimzi(SpecModel):
    """Connect through a Kafka cluster run by Strimzi, and leave Strimzi's quotas to it."""

    kafka: StrimziObjectRef = Field(
        description="The Strimzi Kafka (kafka.strimzi.io, v1 or v1beta2). The bootstrap address is the "
        "listener's status.listeners[].bootstrapServers; with a TLS listener the CA is the Secret "
        "<kafka>-cluster-ca-cert (key ca.crt) in the Kafka's namespace. Re-read on every pass, as Secrets are."
    )
    listener: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)] = Field(
        description="Name of the Kafka's listener to connect through (spec.kafka.listeners[].name). Its "
        "tls and authentication decide the protocol: scram-sha-512 uses the KafkaUser's SCRAM Secret "
        "(password and sasl.jaas.config), tls its user.crt and user.key."
    )
    kafka_user: StrimziUserRef | None = Field(
        None,
        description="The KafkaUser kquota authenticates as (required when the listener has authentication). "
        "Its Secret is status.secret (else the KafkaUser's name) in its namespace.",
    )


class KafkaClusterSpec(SpecModel):
    """How to reach the cluster and who may manage what on it."""

    bootstrap_servers: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        pattern=BOOTSTRAP_PATTERN,
        description="Comma-separated host:port list of brokers to bootstrap from, e.g. "
        "'kafka-0.kafka:9092,kafka-1.kafka:9092' (IPv6 as [::1]:9092). Exactly one of bootstrapServers "
        "and strimzi is set.",
    )
    strimzi: Strimzi | None = Field(
        None,
        description="Connect through a Strimzi Kafka and KafkaUser instead of bootstrapServers and security. "
        "kquota then also leaves Strimzi's quotas alone: the users/<name> entities its User Operator manages "
        "(every KafkaUser's, and every other user's unless STRIMZI_IGNORED_USERS_PATTERN matches it) and "
        "users/<default> (the Cluster Operator's since Strimzi 0.42) are refused with reason OwnedByStrimzi "
        "and never touched, Adopt included; the StrimziUsers condition says how to hand users to kquota.",
    )
    security: Security = Field(
        default_factory=Security,
        description="How the operator authenticates to the brokers (default PLAINTEXT).",
        json_schema_extra={"default": {}},
    )
    metrics: Metrics = Field(
        default_factory=Metrics,
        description="Where to read quota metrics for the resources' status (status.observed and the "
        "Throttled, NearLimit and OverBudget conditions). Nothing is read unless prometheusURL or "
        "brokerEndpoints is set.",
        json_schema_extra={"default": {}},
    )
    tenancy: Tenancy | None = Field(
        None,
        description="Which namespaces may manage which entities. Without tenancy any namespace may manage "
        "any entity on this cluster (single-team mode); set it whenever several teams share the cluster.",
    )
    protected_users: list[Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]] | None = Field(
        None,
        max_length=1024,
        description="User names whose quotas kquota never sets, changes or removes, whatever the resources "
        "say and whatever the unmanaged policy (e.g. the inter-broker user, admin users); this covers "
        "every entity with that user, (user, client-id) pairs included. Exact, case-sensitive names, not "
        "patterns. A resource naming one reports Ready=False with reason Protected and contributes "
        "nothing; quotas already on the brokers for it stay exactly as they are. The operator's own "
        "principal and the operator setting KQUOTA_PROTECTED_USERS (Helm value operator.protectedUsers) "
        "are protected too.",
    )
    protected_client_ids: list[Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]] | None = Field(
        None,
        max_length=1024,
        description="client.ids whose quotas kquota never sets, changes or removes, like protectedUsers "
        "(pairs included; exact names; reason Protected). KQUOTA_PROTECTED_CLIENT_IDS (Helm value "
        "operator.protectedClientIds) adds to it.",
    )
    unmanaged: Unmanaged = Field(
        default_factory=Unmanaged,
        description="What to do with quota keys on the brokers that kquota did not set.",
        json_schema_extra={"default": {}},
    )
    quota_callback: QuotaCallback = Field(
        default_factory=QuotaCallback,
        description="Brokers that run a client quota callback (client.quota.callback.class, KIP-257) decide "
        "client quotas themselves; this says whether theirs enforces the entity quotas kquota writes. The "
        "KafkaCluster's QuotaCallback condition shows what the brokers run.",
        json_schema_extra={"default": {}},
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.bootstrapServers) != has(self.strimzi)",
            BOOTSTRAP_OR_STRIMZI,
            lambda s: (s.bootstrap_servers is None) != (s.strimzi is None),
        ),
        Rule(
            "!has(self.strimzi) || !has(self.security) || ((!has(self.security.protocol) || "
            "self.security.protocol == 'PLAINTEXT') && !has(self.security.sasl) && !has(self.security.tls))",
            STRIMZI_SECURITY,
            lambda s: (
                s.strimzi is None
                or (s.security.protocol == "PLAINTEXT" and s.security.sasl is None and s.security.tls is None)
            ),
        ),
    )


class KafkaCluster(Resource):
    """A Kafka cluster kquota manages quotas on: connection settings and tenancy policy.

    Cluster-scoped and meant for platform admins. Quota resources reference it by name in
    spec.clusterRef.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="KafkaCluster",
        plural="kafkaclusters",
        scope="Cluster",
        short_names=("kqc",),
        printer_columns=(
            PrinterColumn("Bootstrap", ".spec.bootstrapServers", description="Bootstrap servers."),
            PrinterColumn("Protocol", ".spec.security.protocol"),
            PrinterColumn("Brokers", ".status.brokers", type="integer", description="Brokers seen."),
            READY_COLUMN,
            AGE_COLUMN,
        ),
    )

    kind: Literal["KafkaCluster"] = "KafkaCluster"
    spec: KafkaClusterSpec
    status: KafkaClusterStatus | None = None
