"""Who set a quota, and the full answer to "what limits this client": the pure half of ``kquota explain``.

:func:`kquota.domain.resolver.resolve` says which configured entity wins each
key. ``kquota explain`` adds, for the winner and for every value it overrides,
*who* set it. That is per (entity, key), not per entity: two resources may
set different keys of one entity, and a key set by hand may sit next to one
kquota owns. :func:`owner_of` decides it from what is known:

* a resource holds the key (it won the claim for it): that resource, or
  "pending" when the brokers do not have its value yet;
* no resource holds it but a resource the operator refuses (not permitted by
  the tenancy grants) names it: kept as it is, as ``kquota plan`` says
  (``keep``), until that resource is fixed or deleted;
* no resource holds it but the ownership ledger has it: kquota set it and the
  operator will remove it (its resource is gone or no longer sets it);
* neither: unmanaged, set outside kquota and left alone;
* no ledger available (no access to the Kubernetes cluster): unknown.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kquota.domain.entities import CLIENT_KEYS, IP_KEYS, Entity, QuotaKey
from kquota.domain.plan import ResourceRef
from kquota.domain.resolver import IP_LEVEL_NAMES, LEVEL_NAMES, Connection, resolve
from kquota.domain.strimzi import StrimziOwnership

Quotas = Mapping[Entity, Mapping[QuotaKey, float]]


class Ownership(enum.StrEnum):
    RESOURCE = "resource"
    PENDING = "pending"
    ORPHANED = "orphaned"
    #: Named by a resource the operator refuses: left as it is (plan's ``keep``).
    KEPT = "kept"
    UNMANAGED = "unmanaged"
    UNKNOWN = "unknown"
    #: Strimzi manages the entity (a KafkaCluster connected through a Strimzi Kafka).
    STRIMZI = "strimzi"


@dataclass(frozen=True, slots=True)
class Owner:
    """Who set one key of one entity."""

    state: Ownership
    resource: ResourceRef | None = None
    #: For PENDING: the value the resource asks for.
    wants: float | None = None

    def label(self, fmt: Callable[[float | None], str] | None = None) -> str:
        """In words; ``fmt`` renders the wanted value of a pending key (default :func:`number`)."""
        if self.state is Ownership.RESOURCE:
            return f"{self.resource}"
        if self.state is Ownership.PENDING:
            return f"{self.resource} (pending: wants {(fmt or number)(self.wants)})"
        if self.state is Ownership.ORPHANED:
            return "kquota, no resource (to be removed)"
        if self.state is Ownership.KEPT:
            return "kquota, kept for a refused resource (not removed until it is fixed or deleted)"
        if self.state is Ownership.UNMANAGED:
            return "unmanaged"
        if self.state is Ownership.STRIMZI:
            return "Strimzi"
        return "unknown owner"


def number(value: float | None) -> str:
    """A quota value exactly, without a useless ``.0``; ``-`` for none.

    Whole values print as integers however large (``1e+20`` would hide which
    integer the broker holds); others in the shortest form that reads back
    as the same double, never rounded.
    """
    if value is None:
        return "-"
    value = float(value)
    return str(int(value)) if math.isfinite(value) and value.is_integer() else repr(value)


def owner_of(
    entity: Entity,
    key: QuotaKey,
    live_value: float | None,
    holders: Mapping[tuple[Entity, QuotaKey], ResourceRef],
    desired: Quotas,
    ledger: Quotas | None,
    strimzi: StrimziOwnership | None = None,
    keep: Mapping[Entity, frozenset[QuotaKey] | None] | None = None,
) -> Owner:
    """Who set ``key`` on ``entity``.

    ``live_value`` is the brokers' value, or None when explaining manifests
    offline (then the holder simply set it). ``holders`` and ``desired`` come
    from :func:`kquota.domain.plan.resolve_claims`; ``ledger`` is None when it
    could not be read. ``keep`` is what refused resources keep, as the gating
    the operator and ``kquota plan`` share gives it (None for an entity: every
    key kquota owns there), read as :func:`kquota.domain.plan.plan` reads it.
    """
    if strimzi is not None and strimzi.owner(entity) is not None:
        return Owner(Ownership.STRIMZI)
    holder = holders.get((entity, key))
    if holder is not None:
        want = desired.get(entity, {}).get(key)
        if live_value is None or want == live_value:
            return Owner(Ownership.RESOURCE, holder)
        return Owner(Ownership.PENDING, holder, want)
    if ledger is None:
        return Owner(Ownership.UNKNOWN)
    owned = key in ledger.get(entity, {})
    if keep and entity in keep:
        held = keep[entity]
        if (held is None and owned) or (held is not None and key in held):
            return Owner(Ownership.KEPT)
    if owned:
        return Owner(Ownership.ORPHANED)
    return Owner(Ownership.UNMANAGED)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A configured value that matches the connection, with its precedence level and owner."""

    level: int
    entity: Entity
    value: float
    owner: Owner


@dataclass(frozen=True, slots=True)
class KeyExplanation:
    """One quota key for one connection: the enforced value (None: unlimited) and why."""

    key: QuotaKey
    winner: Candidate | None
    #: Lower-precedence values the winner overrides, most specific first.
    overrides: tuple[Candidate, ...]
    #: Kafka's (user, client-id) metric tags of the bucket; None for ip keys and unlimited keys.
    bucket: tuple[str, str] | None

    @property
    def level_name(self) -> str | None:
        if self.winner is None:
            return None
        names = IP_LEVEL_NAMES if self.key in IP_KEYS else LEVEL_NAMES
        return names[self.winner.level]


def shared_by(explanation: KeyExplanation) -> str:
    """Who shares the limit, in words."""
    if explanation.winner is None:
        return "-"
    if explanation.key in IP_KEYS:
        return "this IP address"
    user, client = explanation.bucket or ("", "")
    if user and not client:
        return f"all clients of user {user}"
    if client and not user:
        return f"all users of client-id {client}"
    return "this user and client-id"


def explain(
    entries: Quotas,
    connection: Connection,
    owner: Callable[[Entity, QuotaKey, float], Owner],
) -> list[KeyExplanation]:
    """Every quota key that can apply to ``connection``, resolved, with owners.

    Keys are the client keys, plus connection_creation_rate when the
    connection has an IP; a key no entity sets is listed with no winner
    (unlimited).
    """
    resolved = resolve(entries, connection)
    keys = [k for k in QuotaKey if k in CLIENT_KEYS or (k in IP_KEYS and connection.ip is not None)]
    out: list[KeyExplanation] = []
    for key in keys:
        res = resolved.get(key)
        if res is None:
            out.append(KeyExplanation(key, None, (), None))
            continue
        winner = Candidate(res.level, res.entity, res.value, owner(res.entity, key, res.value))
        overrides = tuple(Candidate(c.level, c.entity, c.value, owner(c.entity, key, c.value)) for c in res.overrides)
        out.append(KeyExplanation(key, winner, overrides, res.bucket))
    return out
