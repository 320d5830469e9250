"""The pure steps the operator and `kquota plan` share: the gate, the topic split, per-kind outcomes, the ledger."""

from __future__ import annotations

from typing import Any

import pytest

from kquota.domain.desired import split_budget
from kquota.domain.entities import Entity
from kquota.domain.mutation import ControllerWindow, with_burst
from kquota.domain.plan import Protection, apply_ledger
from kquota.domain.status import Outcome, Reason
from kquota.domain.tenancy import Grant, refusal
from kquota.domain.topics import TopicLayout, with_enforcement
from tests.support.quotas import C, P

TEAM_A = (Grant(frozenset({"team-a"}), users=("a-*",)),)


@pytest.mark.parametrize(
    ("namespace", "entities", "grants", "protection", "expected"),
    [
        pytest.param("any", [Entity.for_user("x")], None, Protection(), None, id="no tenancy: everything passes"),
        pytest.param("team-a", [Entity.for_user("a-1")], TEAM_A, Protection(), None, id="granted user passes"),
        pytest.param(
            "team-a",
            [Entity.for_user("b-1")],
            TEAM_A,
            Protection(),
            (Reason.NOT_PERMITTED, "namespace team-a is not granted users/b-1 on this Kafka cluster"),
            id="user outside the grant is NotPermitted",
        ),
        pytest.param(
            "team-a",
            [Entity.for_user("a-op")],
            TEAM_A,
            Protection(users=frozenset({"a-op"})),
            (Reason.PROTECTED, "users/a-op names a protected principal; kquota never changes it"),
            id="granted but protected is Protected",
        ),
        pytest.param(
            "team-b",
            [Entity.for_user("op")],
            TEAM_A,
            Protection(users=frozenset({"op"})),
            (Reason.NOT_PERMITTED, "namespace team-b has no quota grant on this Kafka cluster"),
            id="the grant is checked before protection",
        ),
    ],
)
def test_refusal(
    namespace: str,
    entities: list[Entity],
    grants: tuple[Grant, ...] | None,
    protection: Protection,
    expected: tuple[Reason, str] | None,
) -> None:
    assert refusal(namespace, entities, grants, protection) == expected


def test_split_budget_uses_the_busiest_broker_of_the_live_layout() -> None:
    # 4 partitions, 3 led by broker 1: a client may send 3/4 of its share through
    # one broker. Byte rates are whole bytes, rounded down (never over budget).
    layout = TopicLayout.from_partition_leaders({0: 1, 1: 1, 2: 1, 3: 2})
    got = split_budget({P: 1000.0, C: 400.0}, [(Entity.for_user("a"), 50), (Entity.for_user("b"), 25)], layout)
    assert got == [
        (Entity.for_user("a"), {P: 375.0, C: 150.0}),
        (Entity.for_user("b"), {P: 187.0, C: 75.0}),
    ]


@pytest.mark.parametrize(
    ("outcome", "enforced"),
    [
        pytest.param(Outcome(Reason.APPLIED, "ok", fully_applied=True), ("True", "ClientQuotas"), id="applied"),
        pytest.param(Outcome(Reason.CONFLICT, "taken by x"), ("False", "Conflict"), id="conflict is not enforced"),
    ],
)
def test_with_enforcement(outcome: Outcome, enforced: tuple[str, str]) -> None:
    got = with_enforcement(outcome, [(Entity.for_user("a"), {P: 5.0})], {"x": 1})
    assert got.allowance == {"x": 1}
    assert got.clients == ({"entity": "users/a", "producer_byte_rate": 5.0},)
    (cond,) = got.conditions
    assert (cond.type, cond.status, cond.reason) == ("Enforced", *enforced)
    assert got.reason is outcome.reason


def test_with_burst_names_the_window_that_would_fit() -> None:
    windows = {1: ControllerWindow(num=11, size_seconds=1.0)}
    got = with_burst(Outcome(Reason.APPLIED, "ok"), 10.0, 500, windows)
    burst: dict[str, Any] = dict(got.burst or {})
    assert burst, "status.burst is filled from the brokers' windows"
    (cond,) = got.conditions
    assert (cond.type, cond.status) == ("BurstSufficient", "False")
    assert "quota.window.num" in cond.message


def test_apply_ledger_copies_only_what_changes() -> None:
    a, b, c = Entity.for_user("a"), Entity.for_user("b"), Entity.for_user("c")
    before = {a: {P: 1.0}, b: {P: 2.0, C: 3.0}, c: {P: 4.0}}
    after = apply_ledger(before, {a: {C: 9.0}}, {b: {C}, c: {P}})
    assert after == {a: {P: 1.0, C: 9.0}, b: {P: 2.0}}
    # The input is untouched (the engine rolls back to it after a rejection).
    assert before == {a: {P: 1.0}, b: {P: 2.0, C: 3.0}, c: {P: 4.0}}
