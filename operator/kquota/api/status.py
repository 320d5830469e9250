"""Status of kquota's resources: conditions (kstatus/Flux compatible) and what was applied.

Conventions (Kubernetes API conventions, as kstatus reads them):
``status.observedGeneration`` is the ``metadata.generation`` the status
describes; ``conditions`` is a list keyed by ``type`` with ``Ready`` as the
summary; ``lastTransitionTime`` changes only when a condition's status flips
(the rule is ``kquota.domain.status.set_condition``; these models are the
schema of what it writes); a condition is ``Unknown`` until the operator has an
answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import Field

from kquota.api.base import NO_CRD_DEFAULT, StatusModel

#: Matches metav1.Condition's reason validation.
REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    """One aspect of the resource's state, in the metav1.Condition shape."""

    type: str = Field(
        min_length=1,
        max_length=316,
        description="Condition type in CamelCase: Ready (the summary), Applied, Reconciling, Stalled, and "
        "per kind Throttled, NearLimit, OverBudget, Enforced, BurstSufficient; StatusFormat (reason "
        "StatusFromNewerOperator) when the operator rewrote a status a newer kquota had written.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=REASON_PATTERN,
        description="Machine-readable CamelCase cause, e.g. Applied, InvalidSpec, Conflict, NotPermitted, "
        "KafkaUnavailable (see the conditions list for every reason).",
    )
    # The operator always writes a message; "" only reads old or hand-written conditions.
    message: str = Field("", max_length=32768, description="Human-readable details.", json_schema_extra=NO_CRD_DEFAULT)
    last_transition_time: datetime = Field(
        description="When status last changed (not when the condition was last written)."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation this condition was computed for."
    )


#: A free-form status object the CRD keeps as is (x-kubernetes-preserve-unknown-fields).
PRESERVE_UNKNOWN: Final[dict[str, Any]] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


class AppliedQuota(StatusModel):
    """What the operator last set on the brokers for this resource."""

    cluster: str = Field(description="The KafkaCluster the values were applied to.")
    values: dict[str, float] = Field(
        default_factory=dict,
        description="The Kafka quota keys this resource holds that are live on the brokers, with their "
        "values, e.g. producer_byte_rate: 10485760, and a key it set and no longer sets until that key is "
        "gone from the brokers (its removal waits, or is held). Empty when it holds none (e.g. it lost every "
        "key in a Conflict).",
    )
    last_applied_time: datetime | None = Field(None, description="When values last changed.")


_CONDITIONS_DOC: Final = (
    "Current state, keyed by type. Ready is the summary: True (reason Applied) once the brokers hold "
    "exactly what this resource sets, or (reason Monitoring) once a TopicQuota with enforcement Monitor is "
    "watched; Unknown (Pending) while a change is on its way, including a key dropped from the spec that "
    "is still on the brokers until its removal (removals wait for changes to stop: the removal settle). "
    "RemovalHeld (Stalled): such a key, or a key of a resource being deleted, stays on the brokers because "
    "the mass-removal guard holds its removal; a RemovalHeld condition gives the command that approves it "
    "(the KafkaCluster's DeletionGuard condition lists the whole held set), and a Warning event says so "
    "once. Reconciling=True while work is under way; "
    "Stalled=True when only a change to the resource or to the cluster can help. Ready=False reasons: "
    "Conflict (an older resource sets the same key on the same entity; this one keeps its other keys); "
    "NotPermitted (the KafkaCluster's tenancy does not grant the entity to this namespace) and "
    "InvalidSpec (a spec the API server accepted but kquota cannot use): kquota sets nothing for it, "
    "keys it already applied are kept as they are on the brokers, and the status says so; Protected "
    "(the entity names a protected principal: its quotas on the brokers are never set, changed or "
    "removed); Rejected (the broker refused the value; tried again after a spec change or 5 minutes); "
    "KafkaUnavailable (the brokers do not answer, checked every few seconds while idle, or refused a "
    "connection; retried with backoff); AuthenticationFailed (Stalled: the brokers refused kquota's credentials "
    "the same way several times in a row, 3 by default; still retried with backoff, so corrected credentials "
    "recover by themselves); NotAuthorized (a Kafka ACL is missing; retried with "
    "backoff); ClusterNotFound (no KafkaCluster of the name clusterRef, or the operator's default "
    "cluster, gives: Stalled, written within seconds, also when the KafkaCluster is deleted later; "
    "keys applied before stay on the brokers); Contested (another writer keeps changing a key back: "
    "restored 3 times within 10 minutes, it is left as the other writer set it and restored once more "
    "after 5 minutes); DuplicateCluster (an older KafkaCluster manages the "
    "same Kafka cluster: nothing is applied through this one); QuotaCallback (the keys are set on the brokers, but a "
    "broker runs a client.quota.callback.class, which decides client quotas itself: Stalled until the "
    "KafkaCluster's spec.quotaCallback.honoursEntityQuotas says the callback enforces them; a QuotaCallback "
    "condition names the class; IP connection rates are not affected); OwnedByStrimzi (the KafkaCluster "
    "connects through a Strimzi Kafka and Strimzi manages this entity: its User Operator (either name form of a "
    "KafkaUser's user, or any user the STRIMZI_IGNORED_USERS_PATTERN it runs with does not match in both forms) or "
    "its Cluster Operator (users/<default>), or setting it would make the User Operator delete its user (a pair "
    "whose user has neither a KafkaUser nor a pattern match): kquota sets and removes nothing on it); "
    "LedgerFromNewerOperator (the KafkaCluster's ownership ledger is in a format a "
    "newer kquota wrote: nothing is set or removed and deletions wait until the operator is upgraded again or the "
    "ledger is restored); ClusterNotReady (the KafkaCluster's "
    "spec is unusable, a Secret or Strimzi object it names is missing or unusable, or a pass failed while "
    "reading what it needs: the message names the step and the cause; retried with backoff, one Warning event "
    "on the KafkaCluster); TopicNotFound; UnsupportedByBroker."
)
_CONDITIONS_EXTRA: Final[dict[str, Any]] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


_FORMAT_VERSION_DOC: Final = (
    "The format of this status, an integer kquota sets on every status it writes (1: the format of kquota "
    "0.1.0, which wrote no formatVersion; a status without it is format 1). An operator reads the formats up "
    "to its own and brings an older one up to date; a status of a newer format (written by a newer kquota, "
    "e.g. before a downgrade) is never guessed at: nothing is taken from it (applied values, times), it is "
    "rewritten in the operator's own format with a StatusFormat condition and a Warning event, reason "
    "StatusFromNewerOperator. Ownership does not depend on it: that is the ownership ledger's."
)


class QuotaStatus(StatusModel):
    """Status shared by ClientQuota, TopicQuota and ControllerMutationQuota."""

    format_version: int | None = Field(None, ge=1, description=_FORMAT_VERSION_DOC)
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
        "'<default>' are URL-encoded); for a TopicQuota the topic, topics/<name> or topics/<default>.",
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
        description="How the topic budget divides over the brokers, as KIP-1010 computes it: the topic's "
        "partitions, the most leaders on one broker, and per broker its leaders and its slice of each "
        "rate (budget / partitions x leaders).",
        json_schema_extra=PRESERVE_UNKNOWN,
    )
    clients: list[dict[str, Any]] | None = Field(
        None,
        description="With enforcement ClientQuotas: each client's entity and the per-broker quota keys it "
        "is given, e.g. {entity: users/app, producer_byte_rate: 349525}.",
        json_schema_extra={"items": PRESERVE_UNKNOWN},
    )


class ControllerMutationQuotaStatus(QuotaStatus):
    """Status of a ControllerMutationQuota."""

    burst: dict[str, Any] | None = Field(
        None,
        description="The burst the brokers allow: windowNum and windowSizeSeconds (the smallest window "
        "among the brokers; a note when they differ), effective = windowNum x windowSizeSeconds x rate, "
        "and expected (spec.expectedBurst) when set.",
        json_schema_extra=PRESERVE_UNKNOWN,
    )


class ControllerQuotaWindow(StatusModel):
    """The brokers' controller mutation quota window (KIP-599)."""

    num: int | None = Field(None, description="controller.quota.window.num (samples kept).")
    size_seconds: int | None = Field(None, description="controller.quota.window.size.seconds.")


class KafkaClusterStatus(StatusModel):
    """Status of a KafkaCluster: connectivity and what the brokers support."""

    format_version: int | None = Field(None, ge=1, description=_FORMAT_VERSION_DOC)
    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation the operator last acted on."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Current state, keyed by type; Ready is True (reason Connected) while the operator "
        "can reach the brokers. While the mass-removal guard holds a pass's removals: Ready=False and "
        "Stalled=True with reason RemovalsHeld, and DeletionGuard=True whose message gives the count, "
        "some of the keys and the id to approve with the annotation kquota.io/approve-removals. "
        "Ready=False, Stalled=True with reason DuplicateCluster when an older KafkaCluster already "
        "manages the same Kafka cluster (same clusterId): nothing is read or changed through this one. "
        "Ready=False, Stalled=True with reason LedgerFromNewerOperator when its ownership ledger is in a format "
        "a newer kquota wrote (a downgrade): nothing is changed on the brokers until the operator is upgraded "
        "again or the ledger ConfigMaps are restored from before the upgrade. "
        "Ready=False, Stalled=True with reason InsufficientMemory when the operator's memory limit cannot hold "
        "the quota resources it found at start-up (it would be OOM-killed at every start): it reconciles "
        "nothing, and the message gives the limit to set.",
        json_schema_extra=_CONDITIONS_EXTRA,
    )
    brokers: int | None = Field(None, ge=0, description="Number of brokers in the cluster.")
    cluster_id: str | None = Field(
        None,
        description="The Kafka cluster's id (DescribeCluster). The operator refuses a second KafkaCluster "
        "for the same id unless KQUOTA_ALLOW_SHARED_KAFKA_CLUSTERS is set (Helm value "
        "operator.allowSharedKafkaClusters).",
    )
    controller_quota_window: ControllerQuotaWindow | None = Field(
        None,
        description="Reserved: not filled by this kquota version. Each ControllerMutationQuota's "
        "status.burst shows the window the brokers use.",
    )
    kip1010_supported: bool | None = Field(
        None,
        description="Reserved: not filled by this kquota version, which writes no KIP-1010 topic configs "
        "(a TopicQuota with enforcement TopicConfig reports UnsupportedByBroker).",
    )
