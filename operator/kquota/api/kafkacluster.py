"""KafkaCluster: how to reach a Kafka cluster and which namespaces may manage which quotas on it.

Cluster-scoped and owned by the platform admins: teams own their quota
resources through namespace RBAC but cannot edit connection or tenancy
policy. The spec's larger sections are models of their own: security
(:mod:`kquota.api.security`), metrics (:mod:`kquota.api.cluster_metrics`) and
tenancy (:mod:`kquota.api.tenancy`); this module holds the connection and
assembles them.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

from pydantic import Field

from kquota.api.base import SpecModel
from kquota.api.cel import Rule
from kquota.api.cluster_metrics import Metrics
from kquota.api.fields import DNS1123_LABEL, MAX_NAME_LENGTH, Namespace, ObjectName
from kquota.api.resource import AGE_COLUMN, READY_COLUMN, CrdInfo, PrinterColumn, Resource
from kquota.api.security import OAuth, Security
from kquota.api.status import KafkaClusterStatus
from kquota.api.tenancy import Tenancy

_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}"
BOOTSTRAP_PATTERN: Final = rf"^{_HOST}(,{_HOST})*$"

BOOTSTRAP_OR_STRIMZI: Final = "set exactly one of bootstrapServers and strimzi"
STRIMZI_SECURITY: Final = "with strimzi, security comes from the Kafka's listener and the KafkaUser: leave security out"


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
    """A Strimzi KafkaUser, in the namespace its User Operator watches unless namespace is set."""

    namespace: Namespace | None = Field(
        None,
        description="Namespace of the KafkaUser (default: the one its User Operator watches: "
        "spec.entityOperator.userOperator.watchedNamespace, else the Kafka's).",
    )
    name: ObjectName = Field(description="Name of the KafkaUser.")


class Strimzi(SpecModel):
    """Connect through a Kafka cluster run by Strimzi, and leave Strimzi's quotas to it."""

    kafka: StrimziObjectRef = Field(
        description="The Strimzi Kafka (kafka.strimzi.io, v1 or v1beta2). The bootstrap address is the "
        "listener's status.listeners[].bootstrapServers. With a TLS listener kquota trusts the certificates the "
        "listener's status lists (the cluster CA's, or the listener's custom certificate) and every CA "
        "certificate in the Secret <kafka>-cluster-ca-cert (ca.crt, and the old ca-<date>.crt during a CA key "
        "replacement); its binary ca.p12 is never read. Re-read on every pass, as Secrets are, with the Entity "
        "Operator Deployment <kafka>-entity-operator (where the User Operator looks for KafkaUsers and the "
        "STRIMZI_IGNORED_USERS_PATTERN it runs with)."
    )
    listener: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)] = Field(
        description="Name of the Kafka's listener to connect through (spec.kafka.listeners[].name). Its "
        "tls and authentication decide the protocol: scram-sha-512 uses the KafkaUser's SCRAM Secret "
        "(password, else sasl.jaas.config), tls its user.crt and user.key (else user.p12 with user.password), "
        "oauth (or custom with OAUTHBEARER) the OAuth client in oauth."
    )
    kafka_user: StrimziUserRef | None = Field(
        None,
        description="The KafkaUser kquota authenticates as (required when the listener has scram-sha-512 or tls "
        "authentication). Its Secret is status.secret (else the User Operator's secret prefix and the KafkaUser's "
        "name) in its namespace.",
    )
    oauth: OAuth | None = Field(
        None,
        description="The OAuth client kquota gets its tokens with, for a listener whose clients authenticate with "
        "OAUTHBEARER: Strimzi 0.x's authentication type oauth, or type custom with sasl: true and OAUTHBEARER in "
        "its listenerConfig's sasl.enabled.mechanisms (Strimzi 1.x). The token endpoint is your provider's "
        "(Keycloak, ...), which Strimzi's objects do not name.",
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
        "kquota then also leaves Strimzi's quotas alone: the users/<name> and users/CN=<name> entities its User "
        "Operator manages (every KafkaUser's, and every other user's unless STRIMZI_IGNORED_USERS_PATTERN, as "
        "the User Operator runs it, matches both forms), users/<default> (the Cluster Operator's since Strimzi "
        "0.42), and any entity whose user the User Operator would delete for it (a {user, client-id} pair of a "
        "user with neither a KafkaUser nor a pattern match) are refused with reason OwnedByStrimzi and never "
        "touched, Adopt included; the StrimziUsers condition says how to hand users to kquota.",
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
