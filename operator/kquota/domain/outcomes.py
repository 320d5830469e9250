"""A quota resource's outcome after a pass: pure rules, applied in one order.

After act, the pass collects the facts (:class:`OutcomeFacts`: what the
brokers hold after the pass, which entities were rejected or must be retried,
which keys another writer contests) and :func:`pass_outcomes` asks these rules
what each claiming resource reports.
The order is the order of precedence: a transient broker failure, then a
rejection, then a conflict, then Applied or Pending (:func:`base_outcome`);
a key the resource set that is still on the brokers awaiting its removal
(:func:`with_removals`) keeps it from Applied (Ready means the brokers hold
exactly the spec); kind-specific rules (:mod:`kquota.domain.mutation`,
:mod:`kquota.domain.topics`) and the brokers' quota callback
(:mod:`kquota.domain.callback`) refine it; a contested key
(:func:`with_contest`) comes last, since it overrides Applied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, TypeVar

from kquota.domain.callback import with_callback
from kquota.domain.claims import MutationSpec, TopicSpec
from kquota.domain.decide import Decision
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.gating import Claimant, conflict_outcome
from kquota.domain.guard import APPROVAL_ANNOTATION, GuardHold
from kquota.domain.mutation import ControllerWindow, with_burst
from kquota.domain.plan import ClaimResolution, Drift, EntityChange, ResourceRef
from kquota.domain.status import Condition, Outcome, Reason, value_text
from kquota.domain.status_format import read_status
from kquota.domain.topics import with_enforcement

Entries = Sequence[tuple[Entity, Mapping[QuotaKey, float]]]
Quotas = Mapping[Entity, Mapping[QuotaKey, float]]
Key = tuple[Entity, QuotaKey]
R = TypeVar("R", bound=Claimant)


def base_outcome(
    ref: ResourceRef,
    entries: Entries,
    claims: ClaimResolution,
    live_after: Mapping[Entity, Mapping[QuotaKey, float]],
    problems: Mapping[Entity, str],
    retrying: Mapping[Entity, str],
    retry_seconds: float,
) -> Outcome:
    """What a claiming resource reports: its live keys, and the first rule that applies.

    ``problems`` are entities whose change the brokers rejected (or that are
    held back); ``retrying`` those whose change failed for a passing reason
    and is sent again after ``retry_seconds``.
    """
    applied: dict[str, float] = {}
    all_live = True
    for entity, values in entries:
        for key in values:
            if claims.holders.get((entity, key)) != ref:
                continue
            want = claims.desired[entity][key]
            if live_after.get(entity, {}).get(key) == want:
                applied[key.value] = want
            else:
                all_live = False
    for entity, _ in entries:
        if entity in retrying:
            return Outcome(
                Reason.KAFKA_UNAVAILABLE,
                f"the brokers could not apply the change to {entity.path()} now ({retrying[entity]}); "
                f"retrying in {retry_seconds:g}s",
                applied,
                False,
            )
        if entity in problems:
            return Outcome(
                Reason.REJECTED,
                f"the broker rejected the change to {entity.path()}: {problems[entity]}",
                applied,
                False,
            )
    conflict = conflict_outcome(ref, claims, applied)
    if conflict is not None:
        return conflict
    if all_live:
        return Outcome(Reason.APPLIED, "quota applied on the brokers", applied, True)
    return Outcome(Reason.PENDING, "waiting for the brokers to apply the quota", applied, False)


@dataclasses.dataclass(frozen=True)
class ContestRule:
    """The contested-key settings, for the message."""

    restores: int
    window: float


def with_contest(
    outcome: Outcome,
    ref: ResourceRef,
    entries: Entries,
    holders: Mapping[tuple[Entity, QuotaKey], ResourceRef],
    live: Mapping[Entity, Mapping[QuotaKey, float]],
    active: Mapping[tuple[Entity, QuotaKey], float],
    rule: ContestRule,
) -> Outcome:
    """Contested (Ready=False) while a key this resource holds is left to another writer (``active``)."""
    if not active:
        return outcome
    mine = [
        (entity, key)
        for entity, values in entries
        for key in values
        if (entity, key) in active and holders.get((entity, key)) == ref
    ]
    if not mine:
        return outcome
    parts = []
    for entity, key in mine:
        value = live.get(entity, {}).get(key)
        was = "unset" if value is None else value_text(value)
        # No countdown in the message: it would rewrite the status on every pass.
        parts.append(f"{key.value} on {entity.path()} (now {was})")
    message = (
        f"another writer keeps changing {', '.join(parts)} back on the brokers: restored "
        f"{rule.restores} times within {rule.window:g}s, kquota leaves it as the other writer "
        "set it and restores it once more after the retry time; stop the other writer (a script, Strimzi's "
        "User Operator, a second KafkaCluster) or delete this resource"
    )
    return dataclasses.replace(outcome, reason=Reason.CONTESTED, message=message, fully_applied=False)


# -- removals not yet made ------------------------------------------------------------------------


def lingering_removals(changes: Iterable[EntityChange], live_after: Quotas) -> dict[Key, float]:
    """Keys the plan removes that the brokers still hold after the pass, with their values.

    Deferred until changes stop arriving (the removal settle), held by the
    mass-removal guard, or not applied (a failure): each is still live.
    """
    out: dict[Key, float] = {}
    for change in changes:
        have = live_after.get(change.entity, {})
        for op in change.ops:
            if op.value is None and op.key in have:
                out[(change.entity, op.key)] = have[op.key]
    return out


def removals_of(
    rec: Claimant,
    lingering: Mapping[Key, float],
    named_before: frozenset[Entity] = frozenset(),
    status: Mapping[str, Any] | None = None,
) -> list[Key]:
    """The lingering removals that are ``rec``'s doing.

    A deleting resource's are every key of its spec. A live one's are keys its
    status (``status``: what kquota last wrote, else ``rec.status``) still
    reports applied, on an entity it names or named at its last pass
    (``named_before``), that its spec no longer sets: what its edit dropped.
    The status is read only when such an entity has a lingering removal.
    """
    if not lingering:
        return []
    if rec.deleting:
        return sorted(((e, k) for e, values in rec.entries for k in values if (e, k) in lingering), key=_key_order)
    named = {e for e, _ in rec.entries} | named_before
    candidates = [(e, k) for (e, k) in lingering if e in named]
    if not candidates:
        return []
    before = read_status(status if status is not None else rec.status).applied_values
    return sorted(((e, k) for e, k in candidates if k.value in before), key=_key_order)


def _key_order(item: Key) -> tuple[tuple[Any, ...], str]:
    return (item[0].sort_key(), item[1].value)


def held_message(keys: Sequence[Key], hold: GuardHold, cluster: str) -> str:
    """What a resource whose removals the guard holds says: the keys, and how to approve."""
    what = ", ".join(f"{k.value} on {e.path()}" for e, k in keys)
    return (
        f"{what} stays on the brokers: the mass-removal guard holds its removal, with the cluster's other "
        f"{hold.count - len(keys)} held removals, until KafkaCluster {cluster} approves them "
        f"(see its DeletionGuard condition): kubectl annotate kafkacluster {cluster} "
        f"{APPROVAL_ANNOTATION}={hold.id} --overwrite"
    )


def with_removals(
    outcome: Outcome,
    rec: Claimant,
    lingering: Mapping[Key, float],
    hold: GuardHold | None,
    cluster: str,
    named_before: frozenset[Entity] = frozenset(),
    status: Mapping[str, Any] | None = None,
) -> Outcome:
    """``status.applied`` keeps the keys this resource set until they are gone; Applied waits for them too.

    A removal the guard holds makes the resource RemovalHeld (Stalled, with a
    RemovalHeld condition giving the approval command); one deferred by the
    removal settle makes it Pending (Reconciling). Reasons that already say
    Ready is not True (a rejection, a conflict, retrying) stay, with the keys.
    """
    mine = removals_of(rec, lingering, named_before, status)
    if not mine:
        return outcome
    applied = {**outcome.applied, **{k.value: lingering[(e, k)] for e, k in mine}}
    held = [x for x in mine if hold is not None and x in hold.keys]
    if hold is not None and held:
        message = held_message(held, hold, cluster)
        cond = Condition("RemovalHeld", "True", "AwaitingApproval", message)
        if outcome.reason is Reason.APPLIED or rec.deleting:
            return dataclasses.replace(
                outcome,
                reason=Reason.REMOVAL_HELD,
                message=message,
                applied=applied,
                fully_applied=False,
                conditions=(*outcome.conditions, cond),
            )
        return dataclasses.replace(outcome, applied=applied, conditions=(*outcome.conditions, cond))
    if outcome.reason is Reason.APPLIED:
        what = ", ".join(f"{k.value} on {e.path()}" for e, k in mine)
        message = (
            f"{what} no longer set by this resource is still on the brokers: it is removed once changes stop "
            "arriving (the removal settle, KQUOTA_REMOVAL_SETTLE)"
        )
        return dataclasses.replace(
            outcome, reason=Reason.PENDING, message=message, applied=applied, fully_applied=False
        )
    return dataclasses.replace(outcome, applied=applied)


# -- after act: the facts, and the chain for every resource ---------------------------------------


def live_after(live: Quotas, sent: Iterable[EntityChange], failed: Set[Entity]) -> Quotas:
    """The brokers' quotas after a pass, as far as kquota knows them.

    Copy on write: entities the pass did not change share their values with ``live``
    (copying all of them was a third of a second per full pass at 50,000 resources).
    """
    after = dict(live)
    for change in sent:
        if change.entity in failed:
            continue
        values = dict(after.get(change.entity, {}))
        for op in change.ops:
            if op.value is None:
                values.pop(op.key, None)
            else:
                values[op.key] = op.value
        after[change.entity] = values
    return after


def drifted(decision: Decision[Any], failed: Set[Entity]) -> list[Drift]:
    """The drift this pass corrected (sent, and not failed or held back)."""
    sent_keys = {(c.entity, op.key) for c in decision.sendable for op in c.ops}
    return [
        d
        for d in decision.plan.drift
        if d.entity not in failed and d.entity not in decision.held_back and (d.entity, d.key) in sent_keys
    ]


@dataclass(frozen=True, slots=True)
class OutcomeFacts:
    """What the outcome rules look at after act."""

    live_after: Quotas
    #: Entities rejected or held back, with why.
    problems: Mapping[Entity, str]
    #: Entities that failed for a passing reason, with why.
    retrying: Mapping[Entity, str]
    retry_seconds: float
    windows: Mapping[int, ControllerWindow]
    callbacks: Mapping[int, str]
    callback_honoured: bool
    contested: Mapping[Key, float]
    contest_rule: ContestRule
    #: The KafkaCluster's name (the approval command names it).
    cluster: str = ""
    #: The entities each resource claimed at its last pass, by uid.
    remembered: Mapping[str, frozenset[Entity]] = dataclasses.field(default_factory=dict)
    #: The status kquota last wrote to each resource, by uid (newer than a watch event may be).
    written: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)


def pass_outcomes(decision: Decision[R], facts: OutcomeFacts) -> dict[str, Outcome]:
    """Every resource's outcome: those decided before act, then one ordered chain for each claimer.

    The chain: the base outcome (retrying, rejected, conflict, Applied or
    Pending), then the removals it made that are not done yet, then the kind's
    rule (burst for ControllerMutationQuota, the Enforced condition for
    TopicQuota), then the brokers' quota callback, then a contested key. A
    resource being deleted has an outcome only while the guard holds its
    removal (RemovalHeld): otherwise its finalizer, not its status, says it waits.
    """
    out = dict(decision.outcomes)
    claims = decision.claims
    lingering = lingering_removals(decision.plan.changes, facts.live_after)
    hold = decision.hold
    if hold is not None:
        for rec in decision.records:
            if rec.deleting:
                held = with_removals(Outcome(Reason.APPLIED, ""), rec, lingering, hold, facts.cluster)
                if held.reason is Reason.REMOVAL_HELD:
                    out[rec.ref.uid] = held
    for rec in decision.claimers:
        outcome = base_outcome(
            rec.ref, rec.entries, claims, facts.live_after, facts.problems, facts.retrying, facts.retry_seconds
        )
        uid = rec.ref.uid
        outcome = with_removals(
            outcome, rec, lingering, hold, facts.cluster, facts.remembered.get(uid, frozenset()), facts.written.get(uid)
        )
        if isinstance(rec.spec, MutationSpec):
            outcome = with_burst(outcome, rec.spec.rate, rec.spec.expected_burst, facts.windows)
        elif isinstance(rec.spec, TopicSpec):
            outcome = with_enforcement(outcome, rec.entries, decision.topic_allowance.get(rec.ref.uid))
        outcome = with_callback(outcome, (e for e, _ in rec.entries), facts.callbacks, facts.callback_honoured)
        out[rec.ref.uid] = with_contest(
            outcome, rec.ref, rec.entries, claims.holders, facts.live_after, facts.contested, facts.contest_rule
        )
    return out


def unavailable(records: Iterable[Claimant], reason: Reason, message: str) -> dict[str, Outcome]:
    """Every resource's outcome when the pass could not run: the reason, and what it last had applied.

    What it last had applied is read from its status (:func:`read_status`): none
    from a status in a format this code does not know, and the message says so.
    """
    out = {}
    for rec in records:
        read = read_status(rec.status)
        out[rec.ref.uid] = Outcome(reason, message + read.unknown_applied(), read.applied_values, False)
    return out
