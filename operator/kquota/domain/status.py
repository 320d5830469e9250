"""What a quota resource's status says, computed from the reconciler's outcome.

Pure, so the rules are table-tested: conditions follow the Kubernetes API
conventions (``Ready`` is the summary; ``lastTransitionTime`` moves only when a
condition's status flips), and kstatus' conventions so Flux and Argo CD read
them without custom code: ``Reconciling=True`` while work is under way,
``Stalled=True`` when only a change to the resource (or to the cluster's
policy) can fix it. Both are omitted when false, as kstatus recommends.

Rendering is idempotent: the same outcome renders the same status, so the
reconciler can compare and skip writes that would change nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
    REJECTED = "Rejected"
    MONITORING = "Monitoring"
    TOPIC_NOT_FOUND = "TopicNotFound"
    UNSUPPORTED_BY_BROKER = "UnsupportedByBroker"
    #: KafkaCluster only: the mass-removal guard holds this pass's removals until approved.
    REMOVALS_HELD = "RemovalsHeld"
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


#: Reasons only a KafkaCluster's status carries, never a quota resource's.
CLUSTER_ONLY = frozenset({Reason.REMOVALS_HELD})

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
    }
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one reconcile pass went for one resource."""

    reason: Reason
    message: str
    #: Quota keys (Kafka names) this resource holds that are live on the brokers.
    applied: Mapping[str, float] = field(default_factory=dict)
    #: True when every key the resource asks for (and holds) is live.
    fully_applied: bool = False
    #: Kind-specific status fields (e.g. a ControllerMutationQuota's ``burst``).
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Kind-specific conditions: (type, status, reason, message).
    extra_conditions: tuple[tuple[str, str, str, str], ...] = ()

    @property
    def ready(self) -> str:
        if self.reason in (Reason.APPLIED, Reason.MONITORING):
            return "True"
        if self.reason is Reason.PENDING:
            return "Unknown"
        return "False"


def _condition(
    prev: Mapping[str, Mapping[str, Any]], ctype: str, status: str, reason: str, message: str, generation: int, now: str
) -> dict[str, Any]:
    old = prev.get(ctype)
    same = old is not None and old.get("status") == status
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old.get("lastTransitionTime", now) if same and old else now,
        "observedGeneration": generation,
    }


def render_status(
    prev_status: Mapping[str, Any] | None, generation: int, outcome: Outcome, entity: str, cluster: str, now: str
) -> dict[str, Any]:
    """The full status to write (minus fields other writers own, such as ``observed``)."""
    prev_status = prev_status or {}
    prev = {c.get("type", ""): c for c in prev_status.get("conditions") or [] if isinstance(c, Mapping)}
    conds = [
        _condition(prev, "Ready", outcome.ready, outcome.reason.value, outcome.message, generation, now),
        _condition(
            prev,
            "Applied",
            "True" if outcome.fully_applied else "False",
            "Applied" if outcome.fully_applied else outcome.reason.value,
            "everything this resource sets is live on the brokers" if outcome.fully_applied else outcome.message,
            generation,
            now,
        ),
    ]
    if outcome.reason in STALLED:
        conds.append(_condition(prev, "Stalled", "True", outcome.reason.value, outcome.message, generation, now))
    elif outcome.reason in (
        Reason.PENDING,
        Reason.KAFKA_UNAVAILABLE,
        Reason.CLUSTER_NOT_READY,
        Reason.TOPIC_NOT_FOUND,
    ):
        conds.append(_condition(prev, "Reconciling", "True", outcome.reason.value, outcome.message, generation, now))
    for ctype, cstatus, reason, message in outcome.extra_conditions:
        conds.append(_condition(prev, ctype, cstatus, reason, message, generation, now))
    applied_values = {k: outcome.applied[k] for k in sorted(outcome.applied)}
    prev_applied = prev_status.get("applied") or {}
    if prev_applied.get("values") == applied_values and prev_applied.get("cluster") == cluster:
        last_applied = prev_applied.get("lastAppliedTime", now)
    else:
        last_applied = now
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "entity": entity,
        "conditions": conds,
        "applied": {"cluster": cluster, "values": applied_values, "lastAppliedTime": last_applied},
    }
    status.update(outcome.extra)
    return status


def value_text(value: float) -> str:
    """A quota value as text, exact: byte rates are integers (20971520, never 2.09715e+07)."""
    if value == int(value) and abs(value) < 2**63:
        return str(int(value))
    return repr(value)


def needs_write(prev_status: Mapping[str, Any] | None, new_status: Mapping[str, Any]) -> bool:
    """True when writing ``new_status`` would change what the API server holds."""
    prev_status = prev_status or {}
    return any(prev_status.get(k) != v for k, v in new_status.items())


def merge_patch(prev_status: Mapping[str, Any] | None, new_status: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns ``prev_status`` into ``new_status`` for the fields kquota renders.

    A merge patch keeps every key it does not mention, so a key that left a
    nested map (a quota removed from ``applied.values``, a key gone from
    ``observed``) must be sent as null or it stays forever. Top-level fields
    absent from ``new_status`` are left alone: they belong to other writers.
    """
    return _nulls_for_removed(prev_status or {}, new_status)


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
    callback: tuple[str, str, str] | None = None,
    strimzi: str | None = None,
) -> dict[str, Any]:
    """A KafkaCluster's status: Ready while kquota can reach it, with the broker count.

    ``held`` is the mass-removal guard's message while it holds removals: then
    ``Ready=False, reason RemovalsHeld``, ``Stalled=True`` (an approval is needed)
    and a ``DeletionGuard=True`` condition saying how to approve. ``callback`` is
    the ``QuotaCallback`` condition (status, reason, message): whether the
    brokers run a client quota callback. ``strimzi`` is the ``StrimziUsers``
    condition's message (what Strimzi manages, how to hand users over) for a
    KafkaCluster that connects through a Strimzi Kafka.
    """
    prev_status = prev_status or {}
    prev = {c.get("type", ""): c for c in prev_status.get("conditions") or [] if isinstance(c, Mapping)}
    ok = reason is Reason.APPLIED
    if ok and held is not None:
        conds = [
            _condition(prev, kind, status, Reason.REMOVALS_HELD.value, held, generation, now)
            for kind, status in (("Ready", "False"), ("Stalled", "True"), ("DeletionGuard", "True"))
        ]
    else:
        conds = [
            _condition(
                prev, "Ready", "True" if ok else "False", "Connected" if ok else reason.value, message, generation, now
            )
        ]
        if not ok:
            kind = "Stalled" if reason in STALLED else "Reconciling"
            conds.append(_condition(prev, kind, "True", reason.value, message, generation, now))
    if callback is not None:
        conds.append(_condition(prev, "QuotaCallback", *callback, generation, now))
    elif "QuotaCallback" in prev:
        # Not read this time (the brokers are unreachable): what was last known stays.
        conds.append(dict(prev["QuotaCallback"]))
    if strimzi is not None:
        conds.append(_condition(prev, "StrimziUsers", "True", "Managed", strimzi, generation, now))
    return {
        "observedGeneration": generation,
        "conditions": conds,
        "brokers": brokers if brokers is not None else prev_status.get("brokers"),
        "clusterId": cluster_id or prev_status.get("clusterId"),
    }
