"""The mass-removal guard: a pass that would remove a large share of a cluster's quotas removes none.

Removing a quota key un-throttles a client. Most removals are deliberate (one
resource deleted, one key dropped from a spec), but a few everyday mistakes
remove hundreds at once: Argo CD pruning a whole application, a team's
namespace deleted, ``unmanaged.policy: Adopt`` switched on over a cluster of
hand-made quotas, a KafkaCluster renamed. So a pass whose removals exceed a
share (default 30 %) of the keys kquota owns on the cluster, or a count
(default 500), holds every removal back; the rest of the pass (sets and
changes) goes ahead. The hold is named by an id derived from the exact set of
held keys, and is released by annotating the KafkaCluster with that id
(``kquota.io/approve-removals=<id>``): an approval covers exactly the removals
the user saw, and a different set (more resources deleted meanwhile) needs a
new one. Passes removing fewer than a minimum (default 10) are never held, so
deleting a resource from a small cluster is not a ceremony. A prune reaches
the operator as a stream of deletions; the reconciler removes keys only once
changes have stopped for ``removal_settle`` seconds, so the guard (like
``kquota plan``) sees the whole set.

Pure: the reconciler passes the removals it planned and gets back what to hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange

#: The KafkaCluster annotation that approves a held set of removals (its value is the hold's id).
APPROVAL_ANNOTATION = "kquota.io/approve-removals"


@dataclass(frozen=True, slots=True)
class GuardLimits:
    """When removals are held (the operator's deletion_guard settings)."""

    enabled: bool = True
    percent: float = 30.0
    max_count: int = 500
    min_count: int = 10


@dataclass(frozen=True, slots=True)
class GuardHold:
    """Removals held back in one pass."""

    id: str
    keys: frozenset[tuple[Entity, QuotaKey]]
    owned: int

    @property
    def count(self) -> int:
        return len(self.keys)


def removals(changes: Iterable[EntityChange]) -> frozenset[tuple[Entity, QuotaKey]]:
    """Every (entity, key) the changes remove."""
    return frozenset((c.entity, op.key) for c in changes for op in c.ops if op.value is None)


def hold_id(keys: Iterable[tuple[Entity, QuotaKey]]) -> str:
    """A short id of a set of removals: the same set always gets the same id."""
    digest = hashlib.sha256()
    for entity, key in sorted(keys, key=lambda item: (item[0].sort_key(), item[1].value)):
        digest.update(f"{entity.path()}\0{key.value}\n".encode())
    return digest.hexdigest()[:12]


def guard(removed: frozenset[tuple[Entity, QuotaKey]], owned: int, limits: GuardLimits) -> GuardHold | None:
    """The hold for these removals, or None when they may go ahead.

    ``owned`` is the base of the share: the keys kquota owns on the cluster
    (plus the unowned ones Adopt would remove).
    """
    n = len(removed)
    if not limits.enabled or n < limits.min_count:
        return None
    if n > limits.max_count or n * 100 > limits.percent * max(owned, 1):
        return GuardHold(hold_id(removed), removed, owned)
    return None


def without(
    changes: Iterable[EntityChange],
    record: Mapping[Entity, Mapping[QuotaKey, float]],
    forget: Mapping[Entity, set[QuotaKey]],
    held: frozenset[tuple[Entity, QuotaKey]],
) -> tuple[list[EntityChange], dict[Entity, dict[QuotaKey, float]], dict[Entity, set[QuotaKey]]]:
    """The plan's changes, ledger records and forgets with the held removals taken out.

    A held key stays on the brokers and in the ledger (an adopted one is not
    recorded), exactly as if this pass had not planned its removal.
    """
    kept_changes = []
    for change in changes:
        ops = tuple(op for op in change.ops if not (op.value is None and (change.entity, op.key) in held))
        if ops:
            kept_changes.append(EntityChange(change.entity, ops))
    kept_record = {e: {k: v for k, v in values.items() if (e, k) not in held} for e, values in record.items()}
    kept_forget = {e: {k for k in keys if (e, k) not in held} for e, keys in forget.items()}
    return (
        kept_changes,
        {e: v for e, v in kept_record.items() if v},
        {e: k for e, k in kept_forget.items() if k},
    )


def hold_message(hold: GuardHold, cluster: str, limits: GuardLimits) -> str:
    """What the KafkaCluster's DeletionGuard condition and event say."""
    sample = ", ".join(
        f"{key.value} on {entity.path()}"
        for entity, key in sorted(hold.keys, key=lambda item: (item[0].sort_key(), item[1].value))[:5]
    )
    more = f" and {hold.count - 5} more" if hold.count > 5 else ""
    share = 100 * hold.count / max(hold.owned, 1)
    return (
        f"{hold.count} quota key removals held ({share:.0f}% of the {hold.owned} keys kquota owns or would adopt "
        f"on this cluster; "
        f"the guard holds more than {limits.percent:g}% or more than {limits.max_count}): {sample}{more}. "
        f"Nothing is removed until approved: kubectl annotate kafkacluster {cluster} "
        f"{APPROVAL_ANNOTATION}={hold.id} --overwrite"
    )
