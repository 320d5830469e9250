"""Desired quota state from all resources, and the minimal change to reach it.

Pure functions, no I/O. The reconciler feeds them what it read (every quota
resource, the broker's live quotas, the ownership ledger) and gets back what to
send to the broker, what to record, and what each resource's outcome is.

Decisions made here, and why:

* **Claims are resolved per (entity, key)**: when two resources set the same
  key on the same entity, the oldest resource wins (creation time, then kind,
  namespace, name as tie-breakers, so the answer never depends on list order).
  The loser keeps its other keys and reports a Conflict naming the winner. A
  per-key rule cannot cascade (a loser never gives up a key that a third
  resource would then take), so outcomes do not flap.
* **Ownership is the ledger**: kquota only ever changes or removes keys it has
  recorded as set by itself. A key a resource claims is taken over even if it
  was set by hand (the resource is explicit intent); an unclaimed key nobody
  recorded is left alone unless the cluster's unmanaged policy is Adopt.
* **Protected principals** (configured, plus the operator's own user) are
  never changed: resources naming them contribute nothing and say so.
* **A refused resource keeps what it set**: the caller passes the keys of
  resources it refuses (NotPermitted, InvalidSpec) as ``keep``; they are
  neither removed nor forgotten, only listed in ``Plan.kept``. Refusing a
  resource (a tenancy grant narrowed, a typo in a spec) must not un-throttle
  its clients; deleting the resource is what removes its keys.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.strimzi import StrimziOwnership

Quotas = Mapping[Entity, Mapping[QuotaKey, float]]


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """Which custom resource a claim comes from."""

    kind: str
    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class DesiredEntry:
    """One resource's wish: these values on this entity of this cluster."""

    ref: ResourceRef
    created: str  # RFC 3339 creationTimestamp; sorts chronologically as a string
    entity: Entity
    values: Mapping[QuotaKey, float]

    def rank(self) -> tuple[str, str, str, str]:
        return (self.created, self.ref.kind, self.ref.namespace, self.ref.name)


@dataclass(frozen=True, slots=True)
class ConflictInfo:
    entity: Entity
    key: QuotaKey
    winner: ResourceRef


@dataclass(slots=True)
class ClaimResolution:
    """Desired broker state and who holds each key."""

    desired: dict[Entity, dict[QuotaKey, float]] = field(default_factory=dict)
    holders: dict[tuple[Entity, QuotaKey], ResourceRef] = field(default_factory=dict)
    conflicts: dict[ResourceRef, list[ConflictInfo]] = field(default_factory=dict)


def resolve_claims(entries: Iterable[DesiredEntry]) -> ClaimResolution:
    by_key: dict[tuple[Entity, QuotaKey], list[DesiredEntry]] = defaultdict(list)
    for entry in entries:
        for key in entry.values:
            by_key[(entry.entity, key)].append(entry)
    out = ClaimResolution()
    for (entity, key), claimants in by_key.items():
        claimants.sort(key=DesiredEntry.rank)
        winner = claimants[0]
        out.desired.setdefault(entity, {})[key] = float(winner.values[key])
        out.holders[(entity, key)] = winner.ref
        for loser in claimants[1:]:
            if loser.ref == winner.ref:
                continue
            out.conflicts.setdefault(loser.ref, []).append(ConflictInfo(entity, key, winner.ref))
    return out


class UnmanagedPolicy(enum.StrEnum):
    IGNORE = "Ignore"
    ADOPT = "Adopt"


@dataclass(frozen=True, slots=True)
class Protection:
    """Principals kquota must never change."""

    users: frozenset[str] = frozenset()
    client_ids: frozenset[str] = frozenset()
    #: What Strimzi manages on this cluster (its entities are never touched either).
    strimzi: StrimziOwnership | None = None

    def covers(self, entity: Entity) -> bool:
        return (
            (entity.has_user and entity.user is not None and entity.user in self.users)
            or (entity.has_client_id and entity.client_id is not None and entity.client_id in self.client_ids)
            or (self.strimzi is not None and self.strimzi.owner(entity) is not None)
        )


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: QuotaKey
    value: float | None  # None removes the key


@dataclass(frozen=True, slots=True)
class EntityChange:
    """Every change to one entity; sent in one request so the broker applies it whole."""

    entity: Entity
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True, slots=True)
class Drift:
    entity: Entity
    key: QuotaKey
    expected: float
    live: float | None


@dataclass(slots=True)
class Plan:
    changes: list[EntityChange] = field(default_factory=list)
    #: Keys to record as owned *before* the changes are sent (write-ahead).
    record: dict[Entity, dict[QuotaKey, float]] = field(default_factory=dict)
    #: Keys to forget once their removal succeeded (or was already true).
    forget: dict[Entity, set[QuotaKey]] = field(default_factory=dict)
    #: Owned keys changed out of band while their desired value did not change.
    drift: list[Drift] = field(default_factory=list)
    #: Live keys left alone because kquota does not own them and nothing claims them.
    unmanaged: dict[Entity, dict[QuotaKey, float]] = field(default_factory=dict)
    #: Entities skipped because they name a protected principal.
    protected: set[Entity] = field(default_factory=set)
    #: Owned keys left as they are on the brokers because a refused resource names them.
    kept: dict[Entity, dict[QuotaKey, float]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.changes and not self.forget and not self.record

    def op_count(self) -> int:
        return sum(len(c.ops) for c in self.changes)


def plan(
    desired: Quotas,
    live: Quotas,
    ledger: Quotas,
    policy: UnmanagedPolicy = UnmanagedPolicy.IGNORE,
    protection: Protection = Protection(),
    keep: Mapping[Entity, frozenset[QuotaKey] | None] | None = None,
) -> Plan:
    """The minimal set of changes that makes ``live`` match ``desired`` on owned keys.

    ``keep`` names keys (None: every key of the entity) that must stay as they
    are on the brokers even though nothing claims them: see the module notes.
    """
    out = Plan()
    keep = keep or {}
    entities = set(desired) | set(ledger) | (set(live) if policy is UnmanagedPolicy.ADOPT else set())
    for entity in sorted(entities, key=Entity.sort_key):
        if protection.covers(entity):
            if entity in desired or entity in ledger:
                out.protected.add(entity)
            continue
        want = desired.get(entity, {})
        have = live.get(entity, {})
        owned = ledger.get(entity, {})
        ops: list[QuotaOp] = []
        for key in sorted(want):
            value = want[key]
            if have.get(key) != value:
                ops.append(QuotaOp(key, value))
                if key in owned and owned[key] == value:
                    out.drift.append(Drift(entity, key, value, have.get(key)))
            if owned.get(key) != value:
                out.record.setdefault(entity, {})[key] = value
        removable = set(owned) | (set(have) if policy is UnmanagedPolicy.ADOPT else set())
        if entity in keep:
            held = keep[entity]
            # Named keys are kept whoever set them (Adopt must not take them either);
            # "every key" covers only what kquota owns.
            kept = {k for k in removable - set(want) if (k in owned if held is None else k in held)}
            for key in kept:
                if key in have:
                    out.kept.setdefault(entity, {})[key] = have[key]
            removable -= kept
        for key in sorted(removable - set(want)):
            # An owned key is removed even when the brokers' answer did not show it: that answer
            # comes from a broker's metadata image, which may not have caught up with a set the
            # controller already committed (KRaft), and forgetting the key unsent would leave it on
            # the brokers owned by no one. Removing a key that is not set changes nothing.
            if key in have or key in owned:
                ops.append(QuotaOp(key, None))
            if key in owned:
                out.forget.setdefault(entity, set()).add(key)
            elif key in have:
                # Adopted: recorded first so a crash mid-removal still knows it is ours.
                out.record.setdefault(entity, {})[key] = have[key]
                out.forget.setdefault(entity, set()).add(key)
        if ops:
            out.changes.append(EntityChange(entity, tuple(ops)))
    if policy is UnmanagedPolicy.IGNORE:
        for entity, values in live.items():
            stray = {
                k: v for k, v in values.items() if k not in desired.get(entity, {}) and k not in ledger.get(entity, {})
            }
            if stray:
                out.unmanaged[entity] = stray
    return out


def apply_ledger(
    ledger: Quotas, record: Quotas, forget: Mapping[Entity, Iterable[QuotaKey]]
) -> dict[Entity, dict[QuotaKey, float]]:
    """A new ledger with ``record`` added and ``forget`` removed (entities left empty vanish).

    Entities neither recorded nor forgotten share their value dicts with
    ``ledger`` (copy on write: a pass touching a few of 10,000 entities copies
    a few), so neither the result's nor the input's values may be mutated.
    """
    out: dict[Entity, dict[QuotaKey, float]] = dict(ledger)  # type: ignore[arg-type]
    for entity, values in record.items():
        out[entity] = {**out.get(entity, {}), **values}
    for entity, keys in forget.items():
        current = out.get(entity)
        if current is None:
            continue
        gone = set(keys)
        kept = {k: v for k, v in current.items() if k not in gone}
        if kept:
            out[entity] = kept
        else:
            del out[entity]
    return out
