"""Status of kquota's resources: conditions (kstatus/Flux compatible) and what was applied.

Conventions (Kubernetes API conventions, as kstatus reads them):
``status.observedGeneration`` is the ``metadata.generation`` the status
describes; ``conditions`` is a list keyed by ``type`` with ``Ready`` as the
summary; ``lastTransitionTime`` changes only when a condition's status flips
(see :func:`set_condition`); a condition is ``Unknown`` until the operator
has an answer.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import Field

from kquota.api.base import StatusModel

#: Matches metav1.Condition's reason validation.
REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_READY: Final = "Ready"


class Reason(enum.StrEnum):
    """CamelCase reasons the operator writes; others may appear (the field is a free string)."""

    APPLIED = "Applied"
    PENDING = "Pending"
    INVALID_SPEC = "InvalidSpec"
    CONFLICT = "Conflict"
    FORBIDDEN = "Forbidden"
    PROTECTED = "Protected"
    CLUSTER_NOT_FOUND = "ClusterNotFound"
    KAFKA_UNAVAILABLE = "KafkaUnavailable"
    KAFKA_REJECTED = "KafkaRejected"
    UNSUPPORTED = "Unsupported"
    CONNECTED = "Connected"


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    """One aspect of the resource's state, in the metav1.Condition shape."""

    type: str = Field(
        min_length=1,
        max_length=316,
        description="Condition type in CamelCase. Ready summarises the resource: True once the brokers "
        "hold the desired quota.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=REASON_PATTERN,
        description="Machine-readable CamelCase cause, e.g. Applied, InvalidSpec, Conflict, KafkaUnavailable.",
    )
    message: str = Field("", max_length=32768, description="Human-readable details.")
    last_transition_time: datetime = Field(
        description="When status last changed (not when the condition was last written)."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation this condition was computed for."
    )


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> list[Condition]:
    """Conditions with ``type_`` set; ``lastTransitionTime`` is kept unless the status flips."""
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type != type_:
            out.append(cond)
            continue
        found = True
        since = cond.last_transition_time if cond.status == status else now
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=since,
                observed_generation=observed_generation,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=now,
                observed_generation=observed_generation,
            )
        )
    return out


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


#: A free-form status object the CRD keeps as is (x-kubernetes-preserve-unknown-fields).
PRESERVE_UNKNOWN: Final[dict[str, Any]] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


class AppliedQuota(StatusModel):
    """What the operator last set on the brokers for this resource."""

    cluster: str = Field(description="The KafkaCluster the values were applied to.")
    values: dict[str, float] = Field(
        default_factory=dict,
        description="Kafka quota keys and the values set, e.g. producer_byte_rate: 10485760.",
    )
    last_applied_time: datetime | None = Field(None, description="When the brokers accepted the values.")


_CONDITIONS_DOC: Final = (
    "Current state, keyed by type. Ready is the summary (True once the brokers hold the desired "
    "quota); reasons are CamelCase, e.g. Applied, InvalidSpec, Conflict, KafkaUnavailable."
)
_CONDITIONS_EXTRA: Final[dict[str, Any]] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


class QuotaStatus(StatusModel):
    """Status shared by ClientQuota, TopicQuota and ControllerMutationQuota."""

    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation the operator last acted on."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description=_CONDITIONS_DOC, json_schema_extra=_CONDITIONS_EXTRA
    )
    entity: str | None = Field(
        None,
        description="The Kafka entity in the precedence-table form, e.g. users/alice/clients/<default> "
        "(names containing '/', '%', a character that does not print such as a newline, or literally "
        "'<default>' are URL-encoded).",
    )
    applied: AppliedQuota | None = Field(None, description="What the operator last set on the brokers.")
    observed: dict[str, Any] | None = Field(
        None,
        description="What the brokers report for this entity (throttling, usage); filled when metrics "
        "are configured on the KafkaCluster.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )


class ClientQuotaStatus(QuotaStatus):
    """Status of a ClientQuota."""


class TopicQuotaStatus(QuotaStatus):
    """Status of a TopicQuota."""

    allowance: dict[str, Any] | None = Field(
        None,
        description="How the topic budget is divided: per broker and, with enforcement ClientQuotas, per client.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )


class ControllerMutationQuotaStatus(QuotaStatus):
    """Status of a ControllerMutationQuota."""

    burst: dict[str, Any] | None = Field(
        None,
        description="The burst the brokers allow (effectiveBurst = controller.quota.window.num x "
        "controller.quota.window.size.seconds x rate) compared with spec.expectedBurst.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )


class ControllerQuotaWindow(StatusModel):
    """The brokers' controller mutation quota window (KIP-599)."""

    num: int | None = Field(None, description="controller.quota.window.num (samples kept).")
    size_seconds: int | None = Field(None, description="controller.quota.window.size.seconds.")


class KafkaClusterStatus(StatusModel):
    """Status of a KafkaCluster: connectivity and what the brokers support."""

    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation the operator last acted on."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Current state, keyed by type; Ready is True while the operator can reach the brokers.",
        json_schema_extra=_CONDITIONS_EXTRA,
    )
    brokers: int | None = Field(None, ge=0, description="Number of brokers in the cluster.")
    controller_quota_window: ControllerQuotaWindow | None = Field(
        None, description="The brokers' controller mutation quota window settings."
    )
    kip1010_supported: bool | None = Field(
        None,
        description="Whether the brokers support KIP-1010 topic quotas (needed for TopicQuota enforcement "
        "TopicConfig).",
    )
