"""A quota resource's outcome after a pass: pure rules, applied in one order.

After act, the pass collects the facts (:class:`OutcomeFacts`: what the
brokers hold after the pass, which entities were rejected or must be retried,
which keys another writer contests) and :func:`pass_outcomes` asks these rules
what each claiming resource reports.
The order is the order of precedence: a transient broker failure, then a
rejection, then a conflict, then Applied or Pending (:func:`base_outcome`);
kind-specific rules (:mod:`kquota.domain.mutation`, :mod:`kquota.domain.topics`)
and the brokers' quota callback (:mod:`kquota.domain.callback`) refine it;
a contested key (:func:`with_contest`) comes last, since it overrides Applied.
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
from kquota.domain.mutation import ControllerWindow, with_burst
from kquota.domain.plan import ClaimResolution, Drift, EntityChange, ResourceRef
from kquota.domain.status import Outcome, Reason, value_text
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


def pass_outcomes(decision: Decision[R], facts: OutcomeFacts) -> dict[str, Outcome]:
    """Every resource's outcome: those decided before act, then one ordered chain for each claimer.

    The chain: the base outcome (retrying, rejected, conflict, Applied or
    Pending), then the kind's rule (burst for ControllerMutationQuota, the
    Enforced condition for TopicQuota), then the brokers' quota callback, then
    a contested key.
    """
    out = dict(decision.outcomes)
    claims = decision.claims
    for rec in decision.claimers:
        outcome = base_outcome(
            rec.ref, rec.entries, claims, facts.live_after, facts.problems, facts.retrying, facts.retry_seconds
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
