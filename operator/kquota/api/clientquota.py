"""ClientQuota: a Kafka client quota (user, client-id, user+client-id or IP) owned by a namespace."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

from pydantic import ConfigDict, Field

from kquota.api.base import SpecModel
from kquota.api.cel import Cel, Rule, TransitionRule
from kquota.api.fields import (
    BYTE_RATE_DOC,
    CLUSTER_REF_DOC,
    ByteRate,
    ClusterName,
    ConnectionRate,
    EntityName,
    IpEntityName,
    RequestPercentage,
)
from kquota.api.resource import AGE_COLUMN, READY_COLUMN, CrdInfo, PrinterColumn, Resource
from kquota.api.status import ClientQuotaStatus

ENTITY_EMPTY: Final = "entity needs user, clientId or ip"
ENTITY_IP_ALONE: Final = "ip cannot be combined with user or clientId: Kafka quotas an IP address on its own"
ENTITY_IMMUTABLE: Final = "spec.entity is immutable: delete this ClientQuota and create a new one to move the quota"
QUOTA_EMPTY: Final = (
    "quota needs at least one of producerByteRate, consumerByteRate, requestPercentage or connectionCreationRate"
)
CONNECTION_RATE_NEEDS_IP: Final = "connectionCreationRate applies only to ip entities"
IP_ONLY_CONNECTION_RATE: Final = (
    "an ip entity supports only connectionCreationRate: producerByteRate, consumerByteRate and "
    "requestPercentage need user or clientId"
)

PRECEDENCE_DOC: Final = (
    "When several quotas match a connection, Kafka takes each quota key from the most specific "
    "entity that sets it, in this order: users/<user>/clients/<client-id>, "
    "users/<user>/clients/<default>, users/<user>, users/<default>/clients/<client-id>, "
    "users/<default>/clients/<default>, users/<default>, clients/<client-id>, clients/<default>."
)


class ClientQuotaEntity(SpecModel):
    """Who the quota applies to: user, clientId, user and clientId, or ip alone."""

    user: EntityName | None = Field(
        None,
        description="The Kafka user principal name: a SASL username, or a TLS principal such as "
        "'CN=app,OU=payments' (after ssl.principal.mapping.rules). {name: ...} for one user, "
        "{default: true} for every user without a more specific quota, each user getting its own "
        "bucket. With clientId, the quota applies to that (user, client-id) pair.",
    )
    client_id: EntityName | None = Field(
        None,
        description="The client.id an application sets. {name: ...} for one client-id, "
        "{default: true} for every client-id without a more specific quota.",
    )
    ip: IpEntityName | None = Field(
        None,
        description="A client IP address, for connectionCreationRate: {name: 192.0.2.10} (one address in "
        "canonical form) or {default: true} for every IP without its own quota. Cannot be combined with "
        "user or clientId.",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.user) || has(self.clientId) || has(self.ip)",
            ENTITY_EMPTY,
            lambda s: s.user is not None or s.client_id is not None or s.ip is not None,
        ),
        Rule(
            "!has(self.ip) || !(has(self.user) || has(self.clientId))",
            ENTITY_IP_ALONE,
            lambda s: s.ip is None or (s.user is None and s.client_id is None),
        ),
    )


class ClientQuotaLimits(SpecModel):
    """The quota values; set at least one. Each is enforced by every broker separately."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    producer_byte_rate: ByteRate | None = Field(
        None,
        description="Produce bandwidth in bytes per second, per broker (Kafka's producer_byte_rate): "
        "a client writing to 3 brokers can reach 3x this in total. " + BYTE_RATE_DOC,
    )
    consumer_byte_rate: ByteRate | None = Field(
        None,
        description="Fetch bandwidth in bytes per second, per broker (Kafka's consumer_byte_rate). " + BYTE_RATE_DOC,
    )
    request_percentage: RequestPercentage | None = Field(
        None,
        description="Request handling time, in percent of one broker thread per quota window (Kafka's "
        "request_percentage): 100 is one whole I/O or network thread. A broker's capacity is "
        "(num.io.threads + num.network.threads) x 100, so values above 100 are valid. Greater than 0 "
        "and at most 1000000 (ten thousand threads, beyond any broker): a larger number is a typo.",
    )
    connection_creation_rate: ConnectionRate | None = Field(
        None,
        description="New connections per second each broker accepts from the IP (Kafka's "
        "connection_creation_rate). Only for ip entities. An integer from 1 to 2147483647.",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.producerByteRate) || has(self.consumerByteRate) || has(self.requestPercentage)"
            " || has(self.connectionCreationRate)",
            QUOTA_EMPTY,
            lambda s: any(
                v is not None
                for v in (s.producer_byte_rate, s.consumer_byte_rate, s.request_percentage, s.connection_creation_rate)
            ),
        ),
    )


def _entity_immutable(old: object, new: object) -> bool:
    return old == new


class ClientQuotaSpec(SpecModel):
    """The desired Kafka client quota: who it applies to (entity), the limits (quota) and the cluster."""

    cluster_ref: ClusterName | None = Field(None, description=CLUSTER_REF_DOC)
    entity: Annotated[
        ClientQuotaEntity,
        Cel(TransitionRule("self == oldSelf", ENTITY_IMMUTABLE, _entity_immutable)),
    ] = Field(
        description="The Kafka quota entity. Valid combinations: user; clientId; user and clientId; ip "
        "alone. " + PRECEDENCE_DOC + " Immutable: to move a quota, delete this resource and create "
        "another.",
    )
    quota: ClientQuotaLimits = Field(description="The quota values; set at least one.")

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.quota) || !has(self.quota.connectionCreationRate) || (has(self.entity) && has(self.entity.ip))",
            CONNECTION_RATE_NEEDS_IP,
            lambda s: s.quota.connection_creation_rate is None or s.entity.ip is not None,
            field_path=".quota.connectionCreationRate",
        ),
        Rule(
            "!has(self.entity) || !has(self.entity.ip) || !has(self.quota) || !(has(self.quota.producerByteRate)"
            " || has(self.quota.consumerByteRate) || has(self.quota.requestPercentage))",
            IP_ONLY_CONNECTION_RATE,
            lambda s: (
                s.entity.ip is None
                or (
                    s.quota.producer_byte_rate is None
                    and s.quota.consumer_byte_rate is None
                    and s.quota.request_percentage is None
                )
            ),
            field_path=".quota",
        ),
    )


class ClientQuota(Resource):
    """A Kafka client quota (user, client-id, user+client-id or IP) managed by kquota.

    The operator sets the quota on the brokers of the referenced KafkaCluster and, when the
    resource is deleted, removes the keys it set for it (a finalizer waits until they are gone).
    Quotas are per broker. Status reports what was applied and, with metrics configured, how close
    clients are to the limit.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="ClientQuota",
        plural="clientquotas",
        scope="Namespaced",
        short_names=("cq",),
        printer_columns=(
            PrinterColumn("Entity", ".status.entity", description="The Kafka entity, e.g. users/alice."),
            PrinterColumn("Producer", ".spec.quota.producerByteRate", description="producer_byte_rate."),
            PrinterColumn("Consumer", ".spec.quota.consumerByteRate", description="consumer_byte_rate."),
            PrinterColumn(
                "Request%", ".spec.quota.requestPercentage", type="number", description="request_percentage."
            ),
            PrinterColumn(
                "Conn/s",
                ".spec.quota.connectionCreationRate",
                type="integer",
                description="connection_creation_rate.",
                priority=1,
            ),
            PrinterColumn("Cluster", ".spec.clusterRef", description="The KafkaCluster.", priority=1),
            READY_COLUMN,
            AGE_COLUMN,
        ),
    )

    kind: Literal["ClientQuota"] = "ClientQuota"
    spec: ClientQuotaSpec
    status: ClientQuotaStatus | None = None
