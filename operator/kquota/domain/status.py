"""What a quota resource's status says, computed from the reconciler's outcome.

Pure, so the rules are table-tested: conditions follow the Kubernetes API
conventions (``Ready`` is the summary; ``lastTransitionTime`` moves only when a
condition's status flips), and kstatus' conventions so Flux and Argo CD read
them without custom code: ``Reconciling=True`` while work is under way,
``Stalled=True`` when only a change to the resource (or to the cluster's
policy) can fix it. Both are omitted when false, as kstatus recommends.

Rendering is idempotent: the same outcome renders the same status, so the
reconciler can compare and skip writes that would change nothing.

Every condition kquota writes is decided as a :class:`Condition` and written
through :func:`set_condition`, the one transition rule; ``kquota.api.status``
holds the stored form's schema (the CRD), not a second rule.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kquota.api.status import ConditionStatus
from kquota.domain.status_format import (
    FORMAT_VERSION,
    STATUS_FORMAT_CONDITION,
    STATUS_FROM_NEWER_OPERATOR,
    UNVERSIONED,
    read_status,
)


class Reason(enum.StrEnum):
    APPLIED = "Applied"
    PENDING = "Pending"
    CONFLICT = "Conflict"
    NOT_PERMITTED = "NotPermitted"
    PROTECTED = "Protected"
    INVALID_SPEC = "InvalidSpec"
    CLUSTER_NOT_FOUND = "ClusterNotFound"
    CLUSTER_NOT_READY = "ClusterNotReady"
    KAFKA_UNAVAILABLE = "KafkaUnavailable"
    #: The brokers refused kquota's principal an operation (a Kafka ACL is missing).
    NOT_AUTHORIZED = "NotAuthorized"
    #: The brokers refused kquota's credentials the same way several times in a row (auth_failures_to_stall).
    AUTHENTICATION_FAILED = "AuthenticationFailed"
    REJECTED = "Rejected"
    MONITORING = "Monitoring"
    TOPIC_NOT_FOUND = "TopicNotFound"
    UNSUPPORTED_BY_BROKER = "UnsupportedByBroker"
    #: KafkaCluster only: the mass-removal guard holds this pass's removals until approved.
    REMOVALS_HELD = "RemovalsHeld"
    #: A key this resource set (dropped from its spec, or the resource is being deleted) is still on the
    #: brokers because the mass-removal guard holds its removal until the KafkaCluster approves it.
    REMOVAL_HELD = "RemovalHeld"
    #: Another writer changes a key back again and again; kquota stopped restoring it for a while.
    CONTESTED = "Contested"
    #: Another KafkaCluster already manages the same Kafka cluster (same cluster id).
    DUPLICATE_CLUSTER = "DuplicateCluster"
    #: The brokers run a client.quota.callback.class: it decides whether the keys kquota set are enforced.
    QUOTA_CALLBACK = "QuotaCallback"
    #: Strimzi manages this entity's quotas (its User Operator or Cluster Operator would change them back).
    OWNED_BY_STRIMZI = "OwnedByStrimzi"
    #: The cluster's ownership ledger is in a format a newer kquota wrote: nothing is changed until it is readable.
    LEDGER_FROM_NEWER_OPERATOR = "LedgerFromNewerOperator"
    #: KafkaCluster only: the operator's memory limit cannot hold the quota resources it found; it reconciles nothing.
    INSUFFICIENT_MEMORY = "InsufficientMemory"


#: Reasons only a KafkaCluster's status carries, never a quota resource's.
CLUSTER_ONLY = frozenset({Reason.REMOVALS_HELD, Reason.INSUFFICIENT_MEMORY})

#: Failures that retrying cannot fix: the user must change something. (NotAuthorized
#: is still retried with backoff, so granting the ACL is enough, but nothing
#: happens until an admin does.)
STALLED = frozenset(
    {
        Reason.CONFLICT,
        Reason.NOT_PERMITTED,
        Reason.PROTECTED,
        Reason.INVALID_SPEC,
        Reason.REJECTED,
        Reason.UNSUPPORTED_BY_BROKER,
        Reason.NOT_AUTHORIZED,
        # Refused several times in a row: someone must correct the credentials (still retried, so
        # corrected ones recover by themselves).
        Reason.AUTHENTICATION_FAILED,
        # No KafkaCluster of that name: nothing is applied until a KafkaCluster
        # is created or clusterRef changes, so GitOps health must not wait on it.
        Reason.CLUSTER_NOT_FOUND,
        # Two KafkaClusters for one Kafka cluster would fight over keys: one must go.
        Reason.DUPLICATE_CLUSTER,
        # Someone must stop the other writer (or delete the resource).
        Reason.CONTESTED,
        # Someone must say whether the brokers' quota callback enforces entity quotas.
        Reason.QUOTA_CALLBACK,
        # Hand the user over in Strimzi (or set its quota in the KafkaUser).
        Reason.OWNED_BY_STRIMZI,
        # Upgrade the operator again, or restore the ledger: an older operator never guesses.
        Reason.LEDGER_FROM_NEWER_OPERATOR,
        # Give the operator more memory: restarting it as it is would only be OOM-killed again.
        Reason.INSUFFICIENT_MEMORY,
        # An admin approves the held removals (the approval command is in the message).
        Reason.REMOVAL_HELD,
    }
)


@dataclass(frozen=True, slots=True)
class Condition:
    """A condition as a rule decides it; :func:`set_condition` adds the transition time and generation."""

    type: str
    status: ConditionStatus
    #: CamelCase; usually a :class:`Reason`, but kind conditions have their own (WithinBurst, NoThrottle, ...).
    reason: str
    message: str


def set_condition(prev: Mapping[str, Mapping[str, Any]], cond: Condition, generation: int, now: str) -> dict[str, Any]:
    """``cond`` in the stored form (metav1.Condition), given the previous conditions by type.

    The one transition rule: ``lastTransitionTime`` is kept while the status
    stays the same (a new reason or message is not a transition) and is
    ``now`` when the status changes or the condition is new;
    ``observedGeneration`` is always the generation the condition describes.
    """
    old = prev.get(cond.type)
    since = old.get("lastTransitionTime", now) if old is not None and old.get("status") == cond.status else now
    return {
        "type": cond.type,
        "status": cond.status,
        "reason": cond.reason,
        "message": cond.message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def conditions_by_type(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """A stored status's conditions keyed by type (the previous state :func:`set_condition` reads)."""
    return {c.get("type", ""): c for c in (status or {}).get("conditions") or [] if isinstance(c, Mapping)}


#: The message of Applied=True.
ALL_LIVE: Final = "everything this resource sets is live on the brokers"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one reconcile pass went for one resource."""

    reason: Reason
    message: str
    #: Quota keys (Kafka names) this resource holds that are live on the brokers.
    applied: Mapping[str, float] = field(default_factory=dict)
    #: True when every key the resource asks for (and holds) is live.
    fully_applied: bool = False
    #: TopicQuota ``status.allowance``: how the budget divides over the brokers (None: no leader layout).
    allowance: Mapping[str, Any] | None = None
    #: ClientQuotas-mode TopicQuota ``status.clients``: each client's entity and its per-broker keys.
    clients: tuple[Mapping[str, Any], ...] | None = None
    #: ControllerMutationQuota ``status.burst``: the brokers' window and the effective burst.
    burst: Mapping[str, Any] | None = None
    #: ``status.observed``: what the brokers' metrics report (None: metrics not configured or not read).
    observed: Mapping[str, Any] | None = None
    #: Kind-specific conditions after Ready, Applied and Stalled/Reconciling, in order.
    conditions: tuple[Condition, ...] = ()

    @property
    def ready(self) -> ConditionStatus:
        if self.reason in (Reason.APPLIED, Reason.MONITORING):
            return "True"
        if self.reason is Reason.PENDING:
            return "Unknown"
        return "False"


#: Reasons under which work is still under way (Reconciling=True).
RECONCILING = frozenset({Reason.PENDING, Reason.KAFKA_UNAVAILABLE, Reason.CLUSTER_NOT_READY, Reason.TOPIC_NOT_FOUND})


def outcome_conditions(outcome: Outcome) -> tuple[Condition, ...]:
    """An outcome's conditions in written order: Ready, Applied, Stalled or Reconciling, then the kind's."""
    reason = outcome.reason.value
    conds = [
        Condition("Ready", outcome.ready, reason, outcome.message),
        Condition("Applied", "True", "Applied", ALL_LIVE)
        if outcome.fully_applied
        else Condition("Applied", "False", reason, outcome.message),
    ]
    if outcome.reason in STALLED:
        conds.append(Condition("Stalled", "True", reason, outcome.message))
    elif outcome.reason in RECONCILING:
        conds.append(Condition("Reconciling", "True", reason, outcome.message))
    return (*conds, *outcome.conditions)


def render_status(
    prev_status: Mapping[str, Any] | None, generation: int, outcome: Outcome, entity: str, cluster: str, now: str
) -> dict[str, Any]:
    """The full status to write (the kind's fields only when the outcome has them), in FORMAT_VERSION.

    ``prev_status`` is the stored status as read from the API server: it is read
    through :func:`~kquota.domain.status_format.read_status`, so a status of a
    format this code does not know counts as none, and the new one says so in a
    ``StatusFormat`` condition.
    """
    read = read_status(prev_status)
    prev = conditions_by_type(read.current)
    applied_values = {k: outcome.applied[k] for k in sorted(outcome.applied)}
    if read.applied_values == applied_values and read.applied_cluster == cluster:
        last_applied = read.last_applied_time or now
    else:
        last_applied = now
    conditions = outcome_conditions(outcome)
    if read.unreadable:
        conditions = (*conditions, Condition(STATUS_FORMAT_CONDITION, "True", STATUS_FROM_NEWER_OPERATOR, read.note()))
    status: dict[str, Any] = {
        "formatVersion": FORMAT_VERSION,
        "observedGeneration": generation,
        "entity": entity,
        "conditions": [set_condition(prev, c, generation, now) for c in conditions],
        "applied": {"cluster": cluster, "values": applied_values, "lastAppliedTime": last_applied},
    }
    if outcome.allowance is not None:
        status["allowance"] = outcome.allowance
    if outcome.clients is not None:
        # A list, as the API server returns it: a tuple would never compare equal to what was read back.
        status["clients"] = list(outcome.clients)
    if outcome.burst is not None:
        status["burst"] = outcome.burst
    if outcome.observed is not None:
        status["observed"] = outcome.observed
    return status


def value_text(value: float) -> str:
    """A quota value as text, exact: byte rates are integers (20971520, never 2.09715e+07)."""
    if value == int(value) and abs(value) < 2**63:
        return str(int(value))
    return repr(value)


def needs_write(prev_status: Mapping[str, Any] | None, new_status: Mapping[str, Any]) -> bool:
    """True when writing ``new_status`` would change what the API server holds.

    A stored status without ``formatVersion`` is in format 1 (kquota 0.1.0 wrote
    none), so stamping it is no change on its own: an API server whose CRDs are
    still 0.1.0's prunes the field, and comparing it as missing would write every
    status again on every drift check.
    """
    prev_status = prev_status or {}
    if _observed_dropped(prev_status, new_status):
        return True
    return any(prev_status.get(k, UNVERSIONED if k == "formatVersion" else None) != v for k, v in new_status.items())


def _observed_dropped(prev_status: Mapping[str, Any], new_status: Mapping[str, Any]) -> bool:
    """``status.observed`` is stored but no longer rendered: it must go.

    It is kquota's own reading, rendered only while the KafkaCluster's metrics are read;
    once they are not (spec.metrics removed), the last reading would be shown as current.
    """
    return "observed" in prev_status and "observed" not in new_status


def merge_patch(prev_status: Mapping[str, Any] | None, new_status: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns ``prev_status`` into ``new_status`` for the fields kquota renders.

    A merge patch keeps every key it does not mention, so a key that left a
    nested map (a quota removed from ``applied.values``, a key gone from
    ``observed``) must be sent as null or it stays forever. Top-level fields
    absent from ``new_status`` are left alone: they belong to other writers;
    except ``observed``, kquota's metrics reading, removed when it is no longer
    rendered (the KafkaCluster's metrics are not read any more); and except when
    ``prev_status`` is in a format this code does not know (written
    by a newer kquota): then every field of it not in ``new_status`` is removed,
    so nothing of unknown meaning stays under this code's ``formatVersion``.
    """
    prev_status = prev_status or {}
    patch = _nulls_for_removed(prev_status, new_status)
    if _observed_dropped(prev_status, new_status):
        patch["observed"] = None
    if read_status(prev_status).unreadable:
        patch.update({k: None for k in prev_status if k not in new_status})
    return patch


def _nulls_for_removed(prev: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in new.items():
        old = prev.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            nested = _nulls_for_removed(old, value)
            nested.update({k: None for k in old if k not in value})
            out[key] = nested
        else:
            out[key] = value
    return out


def render_cluster_status(
    prev_status: Mapping[str, Any] | None,
    generation: int,
    reason: Reason,
    message: str,
    brokers: int | None,
    now: str,
    held: str | None = None,
    cluster_id: str | None = None,
    callback: Condition | None = None,
    strimzi: str | None = None,
) -> dict[str, Any]:
    """A KafkaCluster's status: Ready while kquota can reach it, with the broker count.

    ``held`` is the mass-removal guard's message while it holds removals: then
    ``Ready=False, reason RemovalsHeld``, ``Stalled=True`` (an approval is needed)
    and a ``DeletionGuard=True`` condition saying how to approve. ``callback`` is
    the ``QuotaCallback`` condition: whether the brokers run a client quota
    callback (None: not read this time, the last one stays). ``strimzi`` is the ``StrimziUsers``
    condition's message (what Strimzi manages, how to hand users over) for a
    KafkaCluster that connects through a Strimzi Kafka.
    """
    read = read_status(prev_status)
    prev_status = read.current
    prev = conditions_by_type(prev_status)
    ok = reason is Reason.APPLIED
    decided: list[Condition]
    if ok and held is not None:
        decided = [
            Condition("Ready", "False", Reason.REMOVALS_HELD.value, held),
            Condition("Stalled", "True", Reason.REMOVALS_HELD.value, held),
            Condition("DeletionGuard", "True", Reason.REMOVALS_HELD.value, held),
        ]
    else:
        decided = [Condition("Ready", "True" if ok else "False", "Connected" if ok else reason.value, message)]
        if not ok:
            decided.append(Condition("Stalled" if reason in STALLED else "Reconciling", "True", reason.value, message))
    conds = [set_condition(prev, c, generation, now) for c in decided]
    if callback is not None:
        conds.append(set_condition(prev, callback, generation, now))
    elif "QuotaCallback" in prev:
        # Not read this time (the brokers are unreachable): what was last known stays.
        conds.append(dict(prev["QuotaCallback"]))
    if strimzi is not None:
        conds.append(set_condition(prev, Condition("StrimziUsers", "True", "Managed", strimzi), generation, now))
    if read.unreadable:
        note = Condition(STATUS_FORMAT_CONDITION, "True", STATUS_FROM_NEWER_OPERATOR, read.note())
        conds.append(set_condition(prev, note, generation, now))
    return {
        "formatVersion": FORMAT_VERSION,
        "observedGeneration": generation,
        "conditions": conds,
        "brokers": brokers if brokers is not None else prev_status.get("brokers"),
        "clusterId": cluster_id or prev_status.get("clusterId"),
    }
