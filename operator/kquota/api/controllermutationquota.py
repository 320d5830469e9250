"""ControllerMutationQuota: KIP-599's limit on partition creations and deletions per second."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

from pydantic import Field

from kquota.api.base import SpecModel
from kquota.api.cel import Cel, Rule, TransitionRule
from kquota.api.fields import CLUSTER_REF_DOC, MAX_INT32, ClusterName, EntityName
from kquota.api.resource import AGE_COLUMN, READY_COLUMN, CrdInfo, PrinterColumn, Resource
from kquota.api.status import ControllerMutationQuotaStatus

ENTITY_EMPTY: Final = "entity needs user, clientId or both"
ENTITY_IMMUTABLE: Final = (
    "spec.entity is immutable: delete this ControllerMutationQuota and create a new one to move the quota"
)
#: Same sanity cap as request_percentage: a controller does not process a million partitions a second.
MAX_MUTATION_RATE: Final = 1_000_000


class ControllerMutationEntity(SpecModel):
    """Who the quota applies to: user, clientId, or both (no ip: Kafka has no such quota per IP)."""

    user: EntityName | None = Field(
        None,
        description="The Kafka user principal name (SASL username or TLS principal): {name: ...} or {default: true}.",
    )
    client_id: EntityName | None = Field(None, description="The client.id: {name: ...} or {default: true}.")

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.user) || has(self.clientId)",
            ENTITY_EMPTY,
            lambda s: s.user is not None or s.client_id is not None,
        ),
    )


def _entity_immutable(old: object, new: object) -> bool:
    return old == new


class ControllerMutationQuotaSpec(SpecModel):
    """The desired controller mutation quota: who it applies to (entity) and the rate."""

    cluster_ref: ClusterName | None = Field(None, description=CLUSTER_REF_DOC)
    entity: Annotated[
        ControllerMutationEntity,
        Cel(TransitionRule("self == oldSelf", ENTITY_IMMUTABLE, _entity_immutable)),
    ] = Field(
        description="The Kafka quota entity: user, clientId, or both. Resolved with the same 8-level "
        "precedence as client quotas. Immutable: to move the quota, delete this resource and create another."
    )
    rate: float = Field(
        gt=0,
        le=MAX_MUTATION_RATE,
        allow_inf_nan=False,
        description="Partition mutations per second (Kafka's controller_mutation_rate): partitions created "
        "by CreateTopics and CreatePartitions and deleted by DeleteTopics. Over the limit, those requests "
        "fail with THROTTLING_QUOTA_EXCEEDED. Greater than 0, at most 1000000.",
    )
    expected_burst: int | None = Field(
        None,
        ge=1,
        le=MAX_INT32,
        description="Partition mutations the client expects to make at once (e.g. creating a 50-partition "
        "topic is 50). The brokers allow a burst of controller.quota.window.num x "
        "controller.quota.window.size.seconds x rate (11 x 1 x rate by default); the operator reports in "
        "status when that is smaller than expectedBurst. It does not change the brokers' settings.",
    )


class ControllerMutationQuota(Resource):
    """A Kafka controller mutation quota (KIP-599) for a user and/or client-id.

    Limits how fast a client may create and delete partitions, so one client cannot flood the
    controller.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="ControllerMutationQuota",
        plural="controllermutationquotas",
        scope="Namespaced",
        short_names=("cmq",),
        printer_columns=(
            PrinterColumn("Entity", ".status.entity", description="The Kafka entity, e.g. users/alice."),
            PrinterColumn("Rate", ".spec.rate", type="number", description="controller_mutation_rate."),
            PrinterColumn("Burst", ".spec.expectedBurst", type="integer", description="Expected burst."),
            PrinterColumn("Cluster", ".spec.clusterRef", description="The KafkaCluster.", priority=1),
            READY_COLUMN,
            AGE_COLUMN,
        ),
    )

    kind: Literal["ControllerMutationQuota"] = "ControllerMutationQuota"
    spec: ControllerMutationQuotaSpec
    status: ControllerMutationQuotaStatus | None = None
