"""A quota resource's outcome after a pass: pure rules, applied in one order.

The engine gathers the facts (what the plan resolved, what the brokers hold
after the pass, which entities were rejected or must be retried, which keys
another writer contests) and asks these rules what each resource reports.
The order is the order of precedence: a transient broker failure, then a
rejection, then a conflict, then Applied or Pending (:func:`base_outcome`);
kind-specific rules (:mod:`kquota.domain.mutation`, :mod:`kquota.domain.topics`)
and the brokers' quota callback (:mod:`kquota.domain.callback`) refine it;
a contested key (:func:`with_contest`) comes last, since it overrides Applied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import ClaimResolution, ResourceRef
from kquota.domain.status import Outcome, Reason, value_text

Entries = Sequence[tuple[Entity, Mapping[QuotaKey, float]]]


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
    conflicts = claims.conflicts.get(ref, [])
    if conflicts:
        first = conflicts[0]
        keys = ", ".join(sorted({c.key.value for c in conflicts}))
        return Outcome(
            Reason.CONFLICT,
            f"{keys} on {first.entity.path()} is already set by {first.winner} (the older resource wins)",
            applied,
            False,
        )
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
