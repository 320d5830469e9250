"""The outcome rules, as tables: which reason a resource reports, in which order the rules apply."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.outcomes import ContestRule, base_outcome, with_contest
from kquota.domain.plan import ClaimResolution, DesiredEntry, ResourceRef, resolve_claims
from kquota.domain.status import Outcome, Reason
from tests.support.quotas import C, P

ALICE, BOB = Entity.for_user("alice"), Entity.for_user("bob")
OLD = ResourceRef("ClientQuota", "ns", "old", "u-old")
NEW = ResourceRef("ClientQuota", "ns", "new", "u-new")
NEW_ENTRIES = ((ALICE, {P: 200.0, C: 300.0}),)


def claims_with_conflict() -> ClaimResolution:
    return resolve_claims(
        [
            DesiredEntry(OLD, "2026-01-01T00:00:00Z", ALICE, {P: 100.0}),
            DesiredEntry(NEW, "2026-02-01T00:00:00Z", ALICE, {P: 200.0, C: 300.0}),
        ]
    )


@pytest.mark.parametrize(
    ("live", "problems", "retrying", "reason", "applied", "says"),
    [
        # NEW lost producer_byte_rate to OLD (older): Conflict, with the key it holds live.
        ({ALICE: {P: 100.0, C: 300.0}}, {}, {}, Reason.CONFLICT, {"consumer_byte_rate": 300.0}, "ns/old"),
        # A rejection outranks the conflict.
        ({ALICE: {P: 100.0}}, {ALICE: "bad value"}, {}, Reason.REJECTED, {}, "bad value"),
        # A passing broker failure outranks both.
        ({ALICE: {P: 100.0}}, {ALICE: "bad value"}, {ALICE: "NOT_CONTROLLER"}, Reason.KAFKA_UNAVAILABLE, {}, "5s"),
    ],
)
def test_rules_apply_in_order(
    live: Mapping[Entity, Mapping[QuotaKey, float]],
    problems: Mapping[Entity, str],
    retrying: Mapping[Entity, str],
    reason: Reason,
    applied: dict[str, float],
    says: str,
) -> None:
    claims = claims_with_conflict()
    out = base_outcome(NEW, NEW_ENTRIES, claims, live, problems, retrying, 5.0)
    assert (out.reason, dict(out.applied), out.fully_applied) == (reason, applied, False)
    assert says in out.message


@pytest.mark.parametrize(
    ("live", "reason", "fully"),
    [
        ({ALICE: {P: 100.0}}, Reason.APPLIED, True),
        ({ALICE: {P: 99.0}}, Reason.PENDING, False),
        ({}, Reason.PENDING, False),
    ],
)
def test_applied_only_when_every_held_key_is_live(
    live: Mapping[Entity, Mapping[QuotaKey, float]], reason: Reason, fully: bool
) -> None:
    claims = resolve_claims([DesiredEntry(OLD, "t", ALICE, {P: 100.0})])
    out = base_outcome(OLD, ((ALICE, {P: 100.0}),), claims, live, {}, {}, 5.0)
    assert (out.reason, out.fully_applied) == (reason, fully)


def test_a_problem_on_another_entity_is_not_this_resources() -> None:
    claims = resolve_claims([DesiredEntry(OLD, "t", ALICE, {P: 100.0})])
    out = base_outcome(OLD, ((ALICE, {P: 100.0}),), claims, {ALICE: {P: 100.0}}, {BOB: "x"}, {BOB: "y"}, 5.0)
    assert out.reason is Reason.APPLIED


APPLIED = Outcome(Reason.APPLIED, "quota applied on the brokers", {"producer_byte_rate": 100.0}, True)
RULE = ContestRule(3, 600.0)


def test_a_contested_key_the_resource_holds_overrides_applied() -> None:
    holders = {(ALICE, P): OLD}
    out = with_contest(APPLIED, OLD, ((ALICE, {P: 100.0}),), holders, {ALICE: {P: 5.0}}, {(ALICE, P): 1.0}, RULE)
    assert (out.reason, out.fully_applied) == (Reason.CONTESTED, False)
    assert "producer_byte_rate on users/alice (now 5)" in out.message and "3 times within 600s" in out.message


@pytest.mark.parametrize(
    "active",
    [{}, {(BOB, P): 1.0}, {(ALICE, C): 1.0}],
    ids=["nothing contested", "another entity", "a key it does not set"],
)
def test_other_contests_change_nothing(active: dict[tuple[Entity, QuotaKey], float]) -> None:
    holders = {(ALICE, P): OLD, (BOB, P): NEW}
    assert with_contest(APPLIED, OLD, ((ALICE, {P: 100.0}),), holders, {}, active, RULE) is APPLIED


def test_a_contested_key_held_by_another_resource_is_not_this_ones() -> None:
    holders = {(ALICE, P): OLD}
    assert with_contest(APPLIED, NEW, ((ALICE, {P: 100.0}),), holders, {}, {(ALICE, P): 1.0}, RULE) is APPLIED
