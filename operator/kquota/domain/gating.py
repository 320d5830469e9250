"""Which resources claim which keys: TopicQuota expansion, gating and claim resolution, in one function.

:func:`gate_claims` is the one place the operator's decide step
(:func:`kquota.domain.decide.decide`) and every CLI command that plans
(``kquota plan``, ``kquota explain``) decide what each resource claims, so a
plan never promises what the operator would refuse and both say it in the
same words: a TopicQuota's clients from the live leader layout (or why it
has none), then an invalid spec, a namespace without a tenancy grant, a
protected principal or one Strimzi owns, then the older resource winning a
key two resources set (:func:`conflict_outcome`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import ClaimResolution, DesiredEntry, Protection, ResourceRef, resolve_claims
from kquota.domain.status import Outcome, Reason
from kquota.domain.tenancy import Grant, refusal
from kquota.domain.topic_outcomes import Entries, TopicClaimant, TopicFacts, topic_outcomes


class Claimant(TopicClaimant, Protocol):
    """What gating needs of a quota resource (:class:`kquota.domain.claims.ResourceClaim` is one)."""

    @property
    def created(self) -> str: ...
    @property
    def entries(self) -> Entries: ...
    def with_entries(self, entries: Entries) -> Self: ...


R = TypeVar("R", bound=Claimant)


@dataclass(frozen=True, slots=True)
class Gated(Generic[R]):
    """Who claims what: the resources (TopicQuotas with their clients' entries), claimers and refused ones."""

    records: tuple[R, ...]
    claimers: list[R]
    #: Refused resources that keep what they set on the brokers (invalid spec, no tenancy grant).
    refused: list[R]
    claims: ClaimResolution
    #: What refused resources keep on the brokers: entity -> keys (None: every key).
    keep: dict[Entity, frozenset[QuotaKey] | None]
    #: Outcomes decided before anything is sent (topics, refusals), by uid.
    outcomes: dict[str, Outcome]
    #: Each TopicQuota's status.allowance, by uid (left out without a leader layout).
    topic_allowance: dict[str, dict[str, Any]]


def gate_claims(
    records: Iterable[R],
    topics: TopicFacts,
    grants: tuple[Grant, ...] | None,
    protection: Protection,
    remembered: Mapping[str, frozenset[Entity]],
) -> Gated[R]:
    """TopicQuota expansion, then gating, then the claims resolved (the older resource wins a key).

    ``remembered`` is the entities each resource claimed when last seen: an
    invalid spec keeps them on the brokers.
    """
    records = tuple(records)
    entries, outcomes, allowance = topic_outcomes(records, topics)
    expanded = tuple(rec.with_entries(entries[rec.ref.uid]) if rec.ref.uid in entries else rec for rec in records)
    claimers, refused, claims, keep = gate(expanded, outcomes, grants, protection, remembered)
    return Gated(expanded, claimers, refused, claims, keep, outcomes, allowance)


def gate(
    records: Iterable[R],
    outcomes: dict[str, Outcome],
    grants: tuple[Grant, ...] | None,
    protection: Protection,
    remembered: Mapping[str, frozenset[Entity]],
) -> tuple[list[R], list[R], ClaimResolution, dict[Entity, frozenset[QuotaKey] | None]]:
    """Claimers, refused resources (their outcomes added to ``outcomes``), the resolved claims and what to keep.

    A refused resource (invalid spec, outside its tenancy grant) keeps what it
    set on the brokers: refusing must not un-throttle its clients.
    """
    claimers: list[R] = []
    refused_recs: list[R] = []
    entries: list[DesiredEntry] = []
    keep: dict[Entity, frozenset[QuotaKey] | None] = {}
    for rec in records:
        if rec.deleting or rec.ref.uid in outcomes:
            continue
        if rec.error is not None:
            outcomes[rec.ref.uid] = Outcome(Reason.INVALID_SPEC, rec.error)
            refused_recs.append(rec)
            for entity in remembered.get(rec.ref.uid, ()):
                keep[entity] = None
            continue
        refused = refusal(rec.ref.namespace, [e for e, _ in rec.entries], grants, protection)
        if refused is not None:
            outcomes[rec.ref.uid] = Outcome(*refused)
            if refused[0] not in (Reason.PROTECTED, Reason.OWNED_BY_STRIMZI):
                refused_recs.append(rec)
                for entity, values in rec.entries:
                    held = keep.get(entity, frozenset())
                    keep[entity] = None if held is None else held | frozenset(values)
            continue
        claimers.append(rec)
        entries.extend(DesiredEntry(rec.ref, rec.created, e, v) for e, v in rec.entries)
    return claimers, refused_recs, resolve_claims(entries), keep


def conflict_outcome(ref: ResourceRef, claims: ClaimResolution, applied: Mapping[str, float]) -> Outcome | None:
    """A claimer that loses keys to an older resource: Conflict, naming the first entity and who wins."""
    conflicts = claims.conflicts.get(ref, [])
    if not conflicts:
        return None
    first = conflicts[0]
    keys = ", ".join(sorted({c.key.value for c in conflicts}))
    return Outcome(Reason.CONFLICT, conflict_message(keys, first.entity, first.winner), dict(applied), False)


def conflict_message(keys: str, entity: Entity, winner: ResourceRef) -> str:
    """The words for keys a resource loses to an older one: its status says them, and each `kquota plan` note."""
    return f"{keys} on {entity.path()} is already set by {winner} (the older resource wins)"


def claimers_outcomes(gated: Gated[Any]) -> dict[str, Outcome]:
    """The outcomes known before anything is sent: topics, refusals, and conflicts among the claimers."""
    out = dict(gated.outcomes)
    for rec in gated.claimers:
        conflict = conflict_outcome(rec.ref, gated.claims, {})
        if conflict is not None:
            out[rec.ref.uid] = conflict
    return out


__all__ = ["Claimant", "Gated", "claimers_outcomes", "conflict_message", "conflict_outcome", "gate", "gate_claims"]
