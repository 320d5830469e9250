"""The decide step of a pass (domain/decide.py): tables of gathered facts in, changes and outcomes out.

No broker, API server or stand-in: decide and the outcome chain are pure, so
each case is a value in and a value out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kquota.api.topicquota import Enforcement
from kquota.domain.claims import MutationSpec, ResourceClaim, TopicSpec
from kquota.domain.decide import (
    DecideInput,
    Decision,
    Rejection,
    Settle,
    decide,
    narrow,
    settle_removals,
)
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import GuardLimits
from kquota.domain.mutation import ControllerWindow
from kquota.domain.outcomes import ContestRule, OutcomeFacts, drifted, live_after, pass_outcomes, unavailable
from kquota.domain.plan import EntityChange, Protection, QuotaOp, ResourceRef, UnmanagedPolicy
from kquota.domain.status import Reason
from kquota.domain.stored_status import StoredStatus
from kquota.domain.tenancy import Grant
from kquota.domain.topic_outcomes import TopicFacts, topic_outcomes
from kquota.domain.topics import TopicLayout
from tests.support.quotas import ALICE, BOB, P

Quotas = Mapping[Entity, Mapping[QuotaKey, float]]


def res(
    name: str,
    entries: Mapping[Entity, Mapping[QuotaKey, float]] | None = None,
    kind: str = "ClientQuota",
    created: str = "2026-01-01T00:00:00Z",
    namespace: str = "ns",
    **kw: Any,
) -> ResourceClaim:
    return ResourceClaim(
        ref=ResourceRef(kind, namespace, name, name),
        created=created,
        generation=1,
        cluster="c",
        entries=tuple((entries or {}).items()),
        **kw,
    )


def given(records: list[ResourceClaim], **kw: Any) -> DecideInput[ResourceClaim]:
    now = kw.pop("now", 1000.0)
    defaults: dict[str, Any] = {
        "records": records,
        "topics": TopicFacts(),
        "grants": None,
        "protection": Protection(),
        "policy": UnmanagedPolicy.IGNORE,
        "live": {},
        "ledger": {},
        "touched": None,
        "remembered": {},
        "rejections": {},
        "contested": frozenset(),
        "settle": Settle(now, float("-inf"), None, 0.0),
        "limits": GuardLimits(enabled=False),
        "approval": None,
        "now": now,
    }
    return DecideInput(**(defaults | kw))


def sent(decision: Decision[ResourceClaim]) -> dict[Entity, dict[QuotaKey, float | None]]:
    return {c.entity: {op.key: op.value for op in c.ops} for c in decision.sendable}


def set_p(entity: Entity, value: float) -> EntityChange:
    return EntityChange(entity, (QuotaOp(P, value),))


# -- gating, claims, plan, hold-back ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "records", "kw", "expect_sent", "expect_reasons"),
    [
        (
            "a valid resource's keys are sent and it claims them",
            [res("a", {ALICE: {P: 100.0}})],
            {},
            {ALICE: {P: 100.0}},
            {},
        ),
        (
            "the oldest resource wins a key; the younger is not refused here (its outcome is decided after act)",
            [res("old", {ALICE: {P: 1.0}}), res("new", {ALICE: {P: 2.0}}, created="2026-02-01T00:00:00Z")],
            {},
            {ALICE: {P: 1.0}},
            {},
        ),
        (
            "an invalid spec is refused and what it named before stays on the brokers",
            [res("bad", error="spec.quota: empty")],
            {"live": {ALICE: {P: 5.0}}, "ledger": {ALICE: {P: 5.0}}, "remembered": {"bad": frozenset({ALICE})}},
            {},
            {"bad": Reason.INVALID_SPEC},
        ),
        (
            "a resource outside its tenancy grant is refused and keeps its keys",
            [res("q", {BOB: {P: 7.0}})],
            {
                "grants": (Grant(frozenset({"ns"}), users=("alice",)),),
                "live": {BOB: {P: 7.0}},
                "ledger": {BOB: {P: 7.0}},
            },
            {},
            {"q": Reason.NOT_PERMITTED},
        ),
        (
            "a protected principal is never changed, and kept nothing",
            [res("q", {ALICE: {P: 7.0}})],
            {"protection": Protection(frozenset({"alice"}))},
            {},
            {"q": Reason.PROTECTED},
        ),
        (
            "a deleting resource's owned keys are removed",
            [res("gone", {ALICE: {P: 7.0}}, deleting=True)],
            {"live": {ALICE: {P: 7.0}}, "ledger": {ALICE: {P: 7.0}}},
            {ALICE: {P: None}},
            {},
        ),
        (
            "a change the brokers rejected is not sent again, unchanged, before its retry time",
            [res("a", {ALICE: {P: 100.0}})],
            {"rejections": {ALICE: Rejection(set_p(ALICE, 100.0), "no", retry_at=2000.0)}},
            {},
            {},
        ),
        (
            "after its retry time it is sent again",
            [res("a", {ALICE: {P: 100.0}})],
            {"rejections": {ALICE: Rejection(set_p(ALICE, 100.0), "no", retry_at=999.0)}},
            {ALICE: {P: 100.0}},
            {},
        ),
        (
            "a contested key's drift is left as the other writer set it",
            [res("a", {ALICE: {P: 100.0}})],
            {"live": {ALICE: {P: 1.0}}, "ledger": {ALICE: {P: 100.0}}, "contested": frozenset({(ALICE, P)})},
            {},
            {},
        ),
        (
            "an uncontested key's drift is restored",
            [res("a", {ALICE: {P: 100.0}})],
            {"live": {ALICE: {P: 1.0}}, "ledger": {ALICE: {P: 100.0}}},
            {ALICE: {P: 100.0}},
            {},
        ),
    ],
)
def test_decide_sends_and_refuses(
    case: str,
    records: list[ResourceClaim],
    kw: dict[str, Any],
    expect_sent: dict[Entity, dict[QuotaKey, float | None]],
    expect_reasons: dict[str, Reason],
) -> None:
    decision = decide(given(records, **kw))
    assert sent(decision) == expect_sent, case
    assert {uid: o.reason for uid, o in decision.outcomes.items()} == expect_reasons, case


def test_a_refused_resource_says_which_keys_it_keeps() -> None:
    decision = decide(
        given(
            [res("q", {BOB: {P: 7.0}})],
            grants=(Grant(frozenset({"ns"}), users=("alice",)),),
            live={BOB: {P: 7.0}},
            ledger={BOB: {P: 7.0}},
        )
    )
    outcome = decision.outcomes["q"]
    assert "producer_byte_rate=7 on users/bob stay on the brokers as they are" in outcome.message
    assert outcome.applied == {}


def test_a_held_rejection_is_held_back_and_not_written_ahead() -> None:
    rejection = Rejection(set_p(ALICE, 100.0), "value too large", retry_at=2000.0)
    decision = decide(given([res("a", {ALICE: {P: 100.0}})], rejections={ALICE: rejection}))
    assert decision.held_back == {ALICE: "value too large"}
    assert decision.record == {}
    assert decision.rejections == {ALICE: rejection}


def test_a_rejection_of_an_entity_no_longer_changed_is_forgotten() -> None:
    stale = Rejection(set_p(ALICE, 1.0), "no", retry_at=2000.0)
    assert decide(given([], rejections={ALICE: stale})).rejections == {}


def test_a_changed_spec_is_sent_at_once_despite_an_earlier_rejection() -> None:
    earlier = Rejection(set_p(ALICE, 1.0), "no", retry_at=2000.0)
    decision = decide(given([res("a", {ALICE: {P: 100.0}})], rejections={ALICE: earlier}))
    assert sent(decision) == {ALICE: {P: 100.0}}
    assert decision.held_back == {}


def test_a_narrow_pass_forgets_only_rejections_of_entities_it_covers() -> None:
    stale = Rejection(set_p(BOB, 1.0), "no", retry_at=2000.0)
    decision = decide(given([res("a", {ALICE: {P: 100.0}})], rejections={BOB: stale}, touched=frozenset({ALICE})))
    assert decision.rejections == {BOB: stale}


# -- removals: settle, guard ------------------------------------------------------------------------

MANY = {Entity.for_user(f"u{i}"): {P: 1.0} for i in range(20)}


def test_a_mass_removal_is_held_until_approved_by_its_id() -> None:
    limits = GuardLimits(enabled=True, percent=30.0, max_count=500, min_count=10)
    held = decide(given([], live=MANY, ledger=MANY, limits=limits))
    assert held.hold is not None and held.hold.count == 20
    assert sent(held) == {} and held.forget == {}
    approved = decide(given([], live=MANY, ledger=MANY, limits=limits, approval=held.hold.id))
    assert approved.hold is None and approved.approved == held.hold
    assert len(approved.sendable) == 20


def test_a_narrow_pass_that_meets_the_guard_asks_for_a_full_pass_and_ignores_approval() -> None:
    limits = GuardLimits(enabled=True, percent=30.0, max_count=500, min_count=10)
    first = decide(given([], live=MANY, ledger=MANY, limits=limits))
    assert first.hold is not None
    narrow_pass = decide(
        given([], live=MANY, ledger=MANY, limits=limits, touched=frozenset(MANY), approval=first.hold.id)
    )
    assert narrow_pass.hold is not None and narrow_pass.wants_full and narrow_pass.approved is None


@pytest.mark.parametrize(
    ("settle", "removed", "expect"),
    [
        (Settle(100.0, 99.0, None, 5.0), False, (False, None, None)),
        (Settle(100.0, 99.0, None, 0.0), True, (False, None, None)),
        (Settle(100.0, 90.0, None, 5.0), True, (False, None, None)),
        (Settle(100.0, 99.0, None, 5.0), True, (True, 100.0, pytest.approx(4.05))),
        (Settle(100.0, 99.0, 80.0, 5.0), True, (True, 80.0, pytest.approx(4.05))),
        (Settle(100.0, 99.0, 69.0, 5.0), True, (False, 69.0, None)),
    ],
    ids=[
        "nothing removed",
        "no settle time",
        "changes stopped long enough ago",
        "a change just arrived: removals wait",
        "still waiting since the first deferral",
        "waited six settle times (at least 30 s): they go",
    ],
)
def test_removals_wait_for_changes_to_stop_but_not_for_ever(
    settle: Settle, removed: bool, expect: tuple[bool, float | None, float | None]
) -> None:
    assert settle_removals(settle, removed) == expect


def test_deferred_removals_are_neither_sent_nor_forgotten() -> None:
    decision = decide(
        given(
            [res("a", {ALICE: {P: 1.0}})],
            live={BOB: {P: 1.0}},
            ledger={BOB: {P: 1.0}},
            settle=Settle(1000.0, 999.0, None, 5.0),
        )
    )
    assert sent(decision) == {ALICE: {P: 1.0}}
    assert decision.forget == {} and decision.wake_in == pytest.approx(4.05)


# -- the outcome chain ---------------------------------------------------------------------------------


def facts(**kw: Any) -> OutcomeFacts:
    defaults: dict[str, Any] = {
        "live_after": {},
        "problems": {},
        "retrying": {},
        "retry_seconds": 5.0,
        "windows": {},
        "callbacks": {},
        "callback_honoured": False,
        "contested": {},
        "contest_rule": ContestRule(3, 600.0),
    }
    return OutcomeFacts(**(defaults | kw))


CMQ = res(
    "m", {ALICE: {QuotaKey.CONTROLLER_MUTATION_RATE: 1.0}}, kind="ControllerMutationQuota", spec=MutationSpec(1.0, None)
)


@pytest.mark.parametrize(
    ("case", "records", "kw", "expect"),
    [
        ("applied when the key is live", [res("a", {ALICE: {P: 5.0}})], {"live_after": {ALICE: {P: 5.0}}}, "Applied"),
        ("pending when it is not", [res("a", {ALICE: {P: 5.0}})], {}, "Pending"),
        ("a rejection", [res("a", {ALICE: {P: 5.0}})], {"problems": {ALICE: "too big"}}, "Rejected"),
        (
            "retrying comes before a rejection",
            [res("a", {ALICE: {P: 5.0}})],
            {"problems": {ALICE: "too big"}, "retrying": {ALICE: "not controller"}},
            "KafkaUnavailable",
        ),
        (
            "the younger claimant of a key is in conflict",
            [res("old", {ALICE: {P: 5.0}}), res("a", {ALICE: {P: 6.0}}, created="2026-02-01T00:00:00Z")],
            {"live_after": {ALICE: {P: 5.0}}},
            "Conflict",
        ),
        (
            "a broker's quota callback decides instead of Applied",
            [res("a", {ALICE: {P: 5.0}})],
            {"live_after": {ALICE: {P: 5.0}}, "callbacks": {1: "com.example.Callback"}},
            "QuotaCallback",
        ),
        (
            "a contested key overrides Applied, and comes last",
            [res("a", {ALICE: {P: 5.0}})],
            {
                "live_after": {ALICE: {P: 5.0}},
                "callbacks": {1: "com.example.Callback"},
                "contested": {(ALICE, P): 2000.0},
            },
            "Contested",
        ),
        (
            "a ControllerMutationQuota gets its burst check",
            [CMQ],
            {
                "live_after": {ALICE: {QuotaKey.CONTROLLER_MUTATION_RATE: 1.0}},
                "windows": {1: ControllerWindow(11, 1.0)},
            },
            "Applied",
        ),
    ],
)
def test_the_outcome_chain(case: str, records: list[ResourceClaim], kw: dict[str, Any], expect: str) -> None:
    decision = decide(given(records))
    assert pass_outcomes(decision, facts(**kw))["a" if records[-1].ref.uid == "a" else "m"].reason.value == expect, case


def test_a_controller_mutation_quota_reports_its_burst() -> None:
    decision = decide(given([CMQ]))
    got = pass_outcomes(decision, facts(windows={1: ControllerWindow(11, 1.0)}))["m"]
    assert got.burst is not None and got.burst["windowNum"] == 11


def test_outcomes_decided_before_act_are_kept() -> None:
    decision = decide(given([res("bad", error="no")]))
    assert pass_outcomes(decision, facts())["bad"].reason is Reason.INVALID_SPEC


def test_unavailable_keeps_what_each_resource_last_had_applied() -> None:
    rec = res("a", {ALICE: {P: 5.0}}, status=StoredStatus.of({"applied": {"values": {"producer_byte_rate": 5.0}}}))
    got = unavailable([rec], Reason.KAFKA_UNAVAILABLE, "down")["a"]
    assert (got.reason, got.message, dict(got.applied), got.fully_applied) == (
        Reason.KAFKA_UNAVAILABLE,
        "down",
        {"producer_byte_rate": 5.0},
        False,
    )


# -- after act -----------------------------------------------------------------------------------------


def test_live_after_applies_what_was_sent_except_failed_entities() -> None:
    changes = [set_p(ALICE, 9.0), EntityChange(BOB, (QuotaOp(P, None),))]
    assert live_after({ALICE: {P: 1.0}, BOB: {P: 2.0}}, changes, set()) == {ALICE: {P: 9.0}, BOB: {}}
    assert live_after({ALICE: {P: 1.0}}, changes, {ALICE}) == {ALICE: {P: 1.0}, BOB: {}}


def test_drift_corrected_is_what_was_sent_and_not_failed() -> None:
    decision = decide(given([res("a", {ALICE: {P: 100.0}})], live={ALICE: {P: 1.0}}, ledger={ALICE: {P: 100.0}}))
    assert [(d.entity, d.key) for d in drifted(decision, set())] == [(ALICE, P)]
    assert drifted(decision, {ALICE}) == []


# -- topics ----------------------------------------------------------------------------------------------


def topic(name: str, mode: Enforcement, topic_name: str = "orders", **kw: Any) -> ResourceClaim:
    spec = TopicSpec(topic_name, mode, {P: 1000.0}, ((ALICE, 50), (BOB, 50)))
    return res(name, kind="TopicQuota", spec=spec, **kw)


LAYOUT = {"orders": TopicLayout.from_partition_leaders({0: 1, 1: 2})}


@pytest.mark.parametrize(
    ("case", "rec", "facts_", "expect"),
    [
        (
            "a topic kquota may not describe",
            topic("t", "ClientQuotas"),
            TopicFacts(refused={"orders": "no"}),
            "NotAuthorized",
        ),
        ("ClientQuotas on a missing topic", topic("t", "ClientQuotas"), TopicFacts(), "TopicNotFound"),
        ("ClientQuotas on a live topic: entries, no outcome yet", topic("t", "ClientQuotas"), TopicFacts(LAYOUT), None),
        (
            "TopicConfig without KIP-1010",
            topic("t", "TopicConfig"),
            TopicFacts(LAYOUT, kip1010={"t": False}),
            "UnsupportedByBroker",
        ),
        (
            "TopicConfig with KIP-1010",
            topic("t", "TopicConfig"),
            TopicFacts(LAYOUT, kip1010={"t": True}),
            "UnsupportedByBroker",
        ),
        (
            "TopicConfig probe refused",
            topic("t", "TopicConfig"),
            TopicFacts(LAYOUT, kip1010={"t": "denied"}),
            "NotAuthorized",
        ),
        ("TopicConfig with nothing to probe", topic("t", "TopicConfig"), TopicFacts(), "TopicNotFound"),
        ("Monitor", topic("t", "Monitor"), TopicFacts(), "Monitoring"),
    ],
)
def test_topic_outcomes(case: str, rec: ResourceClaim, facts_: TopicFacts, expect: str | None) -> None:
    entries, decided, _ = topic_outcomes([rec], facts_)
    got = decided.get("t")
    assert (got.reason.value if got else None) == expect, case
    assert ("t" in entries) == (expect is None), case


def test_a_topic_quota_kquota_may_not_describe_freezes_its_clients() -> None:
    decision = decide(
        given([topic("t", "ClientQuotas")], topics=TopicFacts(refused={"orders": "no"}), live={ALICE: {P: 1.0}})
    )
    assert decision.held_back == {ALICE: "no", BOB: "no"}
    assert decision.outcomes["t"].reason is Reason.NOT_AUTHORIZED


def test_a_topic_quota_on_a_live_topic_claims_its_clients_quotas() -> None:
    decision = decide(given([topic("t", "ClientQuotas")], topics=TopicFacts(LAYOUT)))
    assert set(sent(decision)) == {ALICE, BOB}
    assert [r.ref.uid for r in decision.claimers] == ["t"]


# -- narrow passes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "scope", "remembered", "expect"),
    [
        ("a resource and the entity it names", {"a"}, {}, (["a"], {ALICE})),
        ("what it named before", {"b"}, {"b": frozenset({ALICE})}, (["a", "b"], {ALICE, BOB})),
        ("a TopicQuota needs a full pass", {"t"}, {}, None),
    ],
)
def test_narrow(
    case: str,
    scope: set[str],
    remembered: dict[str, frozenset[Entity]],
    expect: tuple[list[str], set[Entity]] | None,
) -> None:
    far = res("t", kind="TopicQuota", spec=TopicSpec("x", "Monitor", {}, ()))
    records = [res("a", {ALICE: {P: 1.0}}), res("b", {BOB: {P: 1.0}}), far]
    got = narrow(records, frozenset(scope), remembered, 100)
    assert (None if got is None else ([r.ref.uid for r in got[0]], set(got[1]))) == expect, case
