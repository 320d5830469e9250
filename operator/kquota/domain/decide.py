"""The decide step of a pass: pure functions from gathered facts to what the pass does and reports.

A pass is gather -> decide -> act -> report (ARCHITECTURE.md). :func:`decide`
takes what gather read (resources, ledger, live quotas, topic metadata) and the
reconciler's memory (held rejections, contested keys, the removal settle) and
returns the changes to send, what the ledger records ahead, what is held back
and why, and the outcomes already final (topics, refusals). After act,
:func:`kquota.domain.outcomes.pass_outcomes` runs the one ordered chain of
outcome rules for every claiming resource. Nothing here reads a clock, logs or
does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from kquota.domain.claims import TopicSpec
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.gating import Claimant, gate_claims
from kquota.domain.guard import GuardHold, GuardLimits, guard, removals, without
from kquota.domain.plan import ClaimResolution, EntityChange, Plan, Protection, UnmanagedPolicy, plan
from kquota.domain.status import Outcome, Reason, value_text
from kquota.domain.tenancy import Grant
from kquota.domain.topic_outcomes import TopicFacts

Entries = tuple[tuple[Entity, Mapping[QuotaKey, float]], ...]
Quotas = Mapping[Entity, Mapping[QuotaKey, float]]
Key = tuple[Entity, QuotaKey]


R = TypeVar("R", bound=Claimant)


@dataclass(frozen=True, slots=True)
class Rejection:
    """A change the brokers rejected: not sent again, unchanged, before ``retry_at``."""

    change: EntityChange
    message: str
    retry_at: float


@dataclass(frozen=True, slots=True)
class Settle:
    """When removals may go: they wait until changes stop arriving, but not for ever."""

    now: float
    last_trigger: float
    deferring_since: float | None
    seconds: float


@dataclass(frozen=True, slots=True)
class DecideInput(Generic[R]):
    """Everything :func:`decide` looks at: the gathered facts and the reconciler's memory."""

    records: Sequence[R]
    topics: TopicFacts
    grants: tuple[Grant, ...] | None
    protection: Protection
    policy: UnmanagedPolicy
    live: Quotas
    ledger: Quotas
    #: The entities a narrow pass covers; None: a full pass.
    touched: frozenset[Entity] | None
    #: The entities each resource claimed when last seen (what an invalid spec keeps).
    remembered: Mapping[str, frozenset[Entity]]
    rejections: Mapping[Entity, Rejection]
    #: Keys another writer contests: their drift is not restored.
    contested: Set[Key]
    settle: Settle
    limits: GuardLimits
    #: The KafkaCluster's removal approval annotation (a hold id), if any.
    approval: str | None
    now: float
    #: The hold in force after the last pass (None: nothing held).
    held: GuardHold | None = None


@dataclass(frozen=True, slots=True)
class Decision(Generic[R]):
    """What a pass sends, records ahead, holds back, and the outcomes already final."""

    records: tuple[R, ...]
    claimers: tuple[R, ...]
    refused: tuple[R, ...]
    claims: ClaimResolution
    plan: Plan
    #: Outcomes decided before anything is sent (topics, refusals), by uid.
    outcomes: Mapping[str, Outcome]
    #: Each TopicQuota's status.allowance, by uid (left out without a leader layout).
    topic_allowance: Mapping[str, Mapping[str, Any]]
    sendable: tuple[EntityChange, ...]
    #: Entities not sent, with why (a held rejection, a topic kquota may not describe).
    held_back: Mapping[Entity, str]
    #: Written ahead to the ledger (held-back entities left out); forgotten after act.
    record: Mapping[Entity, Mapping[QuotaKey, float]]
    forget: Mapping[Entity, set[QuotaKey]]
    rejections: Mapping[Entity, Rejection]
    hold: GuardHold | None
    #: A hold the KafkaCluster approved this pass (its removals go).
    approved: GuardHold | None
    #: A narrow pass met the guard: a full pass must size the hold.
    wants_full: bool
    deferring_since: float | None
    #: Seconds until deferred removals may go (None: nothing deferred).
    wake_in: float | None = None


def narrow(
    records: Iterable[R], scope: frozenset[str], remembered: Mapping[str, frozenset[Entity]], max_entities: int
) -> tuple[list[R], frozenset[Entity]] | None:
    """The resources and entities a narrow pass over ``scope`` must cover; None when it must be full.

    Closed under "claims a touched entity", so every resource competing for a
    key takes part in resolving it, exactly as in a full pass. ``records`` are
    indexed here for :func:`narrow_by_index`; the operator's claim index keeps
    that index between passes instead.
    """
    by_uid: dict[str, R] = {}
    by_entity: dict[Entity, list[R]] = {}
    place: dict[str, int] = {}
    for i, rec in enumerate(records):
        by_uid[rec.ref.uid] = rec
        place[rec.ref.uid] = i
        for entity in claimed_entities(rec):
            by_entity.setdefault(entity, []).append(rec)
    found = narrow_by_index(scope, remembered, max_entities, by_uid.get, lambda e: by_entity.get(e, ()))
    if found is None:
        return None
    # In the order given, as a scan would find them.
    return sorted(found[0], key=lambda r: place[r.ref.uid]), found[1]


def claimed_entities(rec: Claimant) -> frozenset[Entity]:
    """The entities a resource's narrow pass is closed over: its entries; a TopicQuota's spec's clients.

    A TopicQuota's entries come from the live layout (a full pass's work): what it
    names is its clients, and a narrow pass that meets one of them must be full.
    """
    if rec.ref.kind == "TopicQuota":
        spec = rec.spec
        return frozenset(e for e, _ in spec.clients) if isinstance(spec, TopicSpec) else frozenset()
    return frozenset(e for e, _ in rec.entries)


def narrow_by_index(
    scope: frozenset[str],
    remembered: Mapping[str, frozenset[Entity]],
    max_entities: int,
    claim: Callable[[str], R | None],
    claimants: Callable[[Entity], Iterable[R]],
) -> tuple[list[R], frozenset[Entity]] | None:
    """:func:`narrow` over an index of the resources: ``claim(uid)`` is the resource with that uid
    (None: not one of them), ``claimants(entity)`` every one whose :func:`claimed_entities`
    hold ``entity``. A TopicQuota in scope or naming a touched client makes the pass full.
    Kept between passes (the claim index), the index makes a narrow pass cost what it
    touches, not the number of resources (a scan of all 50,000 was most of one).
    """
    touched: set[Entity] = set()
    for uid in scope:
        touched |= remembered.get(uid, frozenset())
    involved: dict[str, R] = {}
    frontier = list(touched)
    for uid in scope:
        rec = claim(uid)
        if rec is None:
            continue
        if rec.ref.kind == "TopicQuota":
            return None
        involved[uid] = rec
        frontier.extend(e for e, _ in rec.entries)
    while frontier:
        entity = frontier.pop()
        touched.add(entity)
        if len(touched) > max_entities:
            return None
        for rec in claimants(entity):
            if rec.ref.kind == "TopicQuota":
                return None
            if rec.ref.uid not in involved:
                involved[rec.ref.uid] = rec
                frontier.extend(e for e, _ in rec.entries if e not in touched)
    return list(involved.values()), frozenset(touched)


def decide(inp: DecideInput[R]) -> Decision[R]:
    """Topics, then gating and claims, then the plan, then what is held back, then the guard."""
    gated = gate_claims(inp.records, inp.topics, inp.grants, inp.protection, inp.remembered)
    records, claimers, refused, claims, keep = gated.records, gated.claimers, gated.refused, gated.claims, gated.keep
    outcomes, topic_allowance = gated.outcomes, gated.topic_allowance
    frozen = frozen_clients(records, outcomes)
    owned = inp.ledger if inp.touched is None else {e: inp.ledger[e] for e in inp.touched if e in inp.ledger}
    the_plan = plan(claims.desired, inp.live, owned, inp.policy, inp.protection, keep)
    outcomes.update(with_kept(refused, outcomes, the_plan.kept, inp.remembered))

    sendable, held_back = hold_back(the_plan, frozen, inp.rejections, inp.contested, inp.now)
    planned = {c.entity for c in sendable}
    # Anything no longer planned the same way gets a fresh chance.
    rejections = {
        e: r
        for e, r in inp.rejections.items()
        if not ((inp.touched is None or e in inp.touched) and e not in held_back and e not in planned)
    }

    # The mass-removal guard: too many removals at once are all held until approved.
    record: Mapping[Entity, Mapping[QuotaKey, float]] = the_plan.record
    forget: Mapping[Entity, set[QuotaKey]] = the_plan.forget
    removed = removals(sendable)
    defer, deferring_since, wake_in = settle_removals(inp.settle, bool(removed))
    if defer:
        # Changes are still arriving (a prune, a namespace deletion): remove once they
        # stop, so the guard and the events see the whole set, as `kquota plan` does.
        sendable, record, forget = without(sendable, record, forget, removed)
        removed = frozenset()
    # The base is every key kquota owns plus the unowned ones it would remove (Adopt).
    # (Counted only when there is something to guard: a narrow pass at 50,000 must not walk the ledger.)
    base = (
        sum(len(v) for v in inp.ledger.values()) + sum(1 for e, k in removed if k not in inp.ledger.get(e, {}))
        if removed
        else 0
    )
    hold = guard(removed, base, inp.limits)
    approved = None
    if defer and inp.held is not None:
        # Changes arrived while removals are held: nothing is removed until they stop, and the
        # hold in force stays in force, and said, meanwhile (a pass that saw no removals dropped
        # it from the KafkaCluster's status and announced it again after the settle).
        hold = inp.held
    elif hold is not None and inp.touched is None and inp.approval == hold.id:
        hold, approved = None, hold
    if hold is not None:
        sendable, record, forget = without(sendable, record, forget, hold.keys)
    return Decision(
        records=records,
        claimers=tuple(claimers),
        refused=tuple(refused),
        claims=claims,
        plan=the_plan,
        outcomes=outcomes,
        topic_allowance=topic_allowance,
        sendable=tuple(sendable),
        held_back=held_back,
        record={e: v for e, v in record.items() if e not in held_back},
        forget=forget,
        rejections=rejections,
        hold=hold,
        approved=approved,
        # A narrow pass sees part of the picture: hold, and size the hold in a full pass.
        wants_full=hold is not None and inp.touched is not None,
        deferring_since=deferring_since,
        wake_in=wake_in,
    )


def frozen_clients(records: Iterable[Claimant], outcomes: Mapping[str, Outcome]) -> dict[Entity, str]:
    """A TopicQuota whose topic kquota may not describe keeps its clients' quotas as they are."""
    return {
        entity: outcome.message
        for rec in records
        if (outcome := outcomes.get(rec.ref.uid)) is not None
        and outcome.reason is Reason.NOT_AUTHORIZED
        and isinstance(spec := rec.spec, TopicSpec)
        and spec.splits
        for entity, _ in spec.clients
    }


def kept_text(rec: Claimant, kept: Quotas, remembered: Mapping[str, frozenset[Entity]]) -> str:
    """The keys a refused resource keeps on the brokers, as text ('' when none)."""
    entities = {e for e, _ in rec.entries} or remembered.get(rec.ref.uid, frozenset())
    wanted = {e: set(v) for e, v in rec.entries}
    parts = [
        f"{key.value}={value_text(value)} on {entity.path()}"
        for entity in sorted(entities & kept.keys(), key=Entity.sort_key)
        for key, value in sorted(kept[entity].items())
        if entity not in wanted or key in wanted[entity]
    ]
    return ", ".join(parts)


def with_kept(
    refused: Iterable[Claimant],
    outcomes: Mapping[str, Outcome],
    kept: Quotas,
    remembered: Mapping[str, frozenset[Entity]],
) -> dict[str, Outcome]:
    """Refused resources' outcomes that name the keys they keep on the brokers."""
    out = {}
    for rec in refused:
        outcome = outcomes[rec.ref.uid]
        text = kept_text(rec, kept, remembered)
        if text:
            out[rec.ref.uid] = replace(
                outcome,
                message=f"{outcome.message}; {text} stay on the brokers as they are until this resource "
                "is fixed or deleted",
                applied={},
            )
    return out


def uncontested(change: EntityChange, drift_keys: Set[Key], contested: Set[Key]) -> EntityChange | None:
    """``change`` without restores of contested keys (left as the other writer set them); None if empty."""
    if not any((change.entity, op.key) in drift_keys for op in change.ops):
        return change
    ops = tuple(
        op for op in change.ops if (change.entity, op.key) not in drift_keys or (change.entity, op.key) not in contested
    )
    return EntityChange(change.entity, ops) if ops else None


def hold_back(
    the_plan: Plan,
    frozen: Mapping[Entity, str],
    rejections: Mapping[Entity, Rejection],
    contested: Set[Key],
    now: float,
) -> tuple[list[EntityChange], dict[Entity, str]]:
    """The changes to send, and the entities held back with why.

    Contested restores are dropped; a frozen entity is not touched; a change the
    brokers rejected is not sent again, unchanged, before its retry time.
    """
    sendable: list[EntityChange] = []
    held_back: dict[Entity, str] = dict(frozen)
    drift_keys = {(d.entity, d.key) for d in the_plan.drift}
    for change in the_plan.changes:
        kept = uncontested(change, drift_keys, contested)
        if kept is None or kept.entity in frozen:
            continue
        rejection = rejections.get(kept.entity)
        if rejection is not None and rejection.change == kept and now < rejection.retry_at:
            held_back[kept.entity] = rejection.message
            continue
        sendable.append(kept)
    return sendable, held_back


def settle_removals(settle: Settle, any_removed: bool) -> tuple[bool, float | None, float | None]:
    """Whether removals wait for changes to stop: (defer, deferring since, seconds until they may go).

    Removals wait while a change arrived less than ``seconds`` ago; bounded:
    under changes that never stop, they go after six settle times (at least
    30 s) of waiting.
    """
    if not any_removed:
        return False, None, None
    quiet = settle.now - settle.last_trigger
    if settle.seconds <= 0 or quiet >= settle.seconds:
        return False, None, None
    since = settle.now if settle.deferring_since is None else settle.deferring_since
    if settle.now - since >= max(30.0, 6 * settle.seconds):
        return False, since, None
    return True, since, settle.seconds - quiet + 0.05
