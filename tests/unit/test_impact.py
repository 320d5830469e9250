"""Where a plan moves each measured bucket's limit (the pure half of ``kquota plan --impact``), case by case."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.impact import Bucket, Limit, Move, moves
from tests.support.quotas import C, P

pytestmark = pytest.mark.unit

MI = 2**20
ALICE = Bucket("alice", None)
ALICE_APP = Bucket("alice", "app")
U_ALICE = Entity.for_user("alice")
U_DEFAULT = Entity.for_user(None)
PAIR_ALICE_APP = Entity.for_pair("alice", "app")

Quotas = dict[Entity, dict[QuotaKey, float]]


@dataclass
class Case:
    before: Quotas
    after: Quotas
    measured: list[tuple[QuotaKey, Bucket]]
    #: (key, measured) -> (limit before, limit after, destination, bound); buckets not listed must not appear.
    expect: dict[tuple[QuotaKey, Bucket], tuple[Limit, Limit, Bucket, str | None]] = field(default_factory=dict)


def lim(value: float, entity: Entity, level: int) -> Limit:
    return Limit(float(value), entity, level)


CASES = {
    "a lowered user quota lowers the user's bucket in place": Case(
        {U_ALICE: {P: 10 * MI}},
        {U_ALICE: {P: 5 * MI}},
        [(P, ALICE)],
        {(P, ALICE): (lim(10 * MI, U_ALICE, 3), lim(5 * MI, U_ALICE, 3), ALICE, None)},
    ),
    "a removed override falls back to users/<default> in the same bucket": Case(
        {U_ALICE: {P: 10 * MI}, U_DEFAULT: {P: MI}},
        {U_DEFAULT: {P: MI}},
        [(P, ALICE), (P, Bucket("bob", None))],
        {(P, ALICE): (lim(10 * MI, U_ALICE, 3), lim(MI, U_DEFAULT, 6), ALICE, None)},
    ),
    "a removed override with nothing beneath it leaves the bucket unlimited": Case(
        {U_ALICE: {P: 10 * MI}},
        {},
        [(P, ALICE)],
        {(P, ALICE): (lim(10 * MI, U_ALICE, 3), Limit(), ALICE, None)},
    ),
    "a removed pair quota sends the pair's traffic into the user's bucket, which is listed too": Case(
        {PAIR_ALICE_APP: {P: 5 * MI}, U_ALICE: {P: 10 * MI}},
        {U_ALICE: {P: 10 * MI}},
        [(P, ALICE_APP), (P, ALICE), (P, Bucket("bob", None))],
        {
            (P, ALICE_APP): (lim(5 * MI, PAIR_ALICE_APP, 1), lim(10 * MI, U_ALICE, 3), ALICE, None),
            (P, ALICE): (lim(10 * MI, U_ALICE, 3), lim(10 * MI, U_ALICE, 3), ALICE, None),
        },
    ),
    "a new users/<default> merges an unlimited user's client-ids into one bucket": Case(
        {},
        {U_DEFAULT: {P: MI}},
        [(P, Bucket("bob", "c1")), (P, Bucket("bob", "c2"))],
        {
            (P, Bucket("bob", "c1")): (Limit(), lim(MI, U_DEFAULT, 6), Bucket("bob", None), None),
            (P, Bucket("bob", "c2")): (Limit(), lim(MI, U_DEFAULT, 6), Bucket("bob", None), None),
        },
    ),
    "a new per-client-id default splits the user's bucket: its traffic is only an upper bound": Case(
        {U_ALICE: {P: 10 * MI}},
        {U_ALICE: {P: 10 * MI}, Entity.for_pair("alice", None): {P: 2 * MI}},
        [(P, ALICE)],
        {(P, ALICE): (lim(10 * MI, U_ALICE, 3), lim(2 * MI, Entity.for_pair("alice", None), 2), ALICE, "at most")},
    ),
    "a new pair entry takes part of the user's bucket: bounded by its smallest limit": Case(
        {U_ALICE: {P: 10 * MI}},
        {U_ALICE: {P: 10 * MI}, PAIR_ALICE_APP: {P: MI}},
        [(P, ALICE)],
        {(P, ALICE): (lim(10 * MI, U_ALICE, 3), lim(MI, PAIR_ALICE_APP, 1), ALICE, "at most")},
    ),
    "a pair bucket a split may feed is known only from below": Case(
        {U_ALICE: {P: 10 * MI}, PAIR_ALICE_APP: {P: 3 * MI}},
        {U_ALICE: {P: 10 * MI}, PAIR_ALICE_APP: {P: 2 * MI}, Entity.for_pair("alice", None): {P: 4 * MI}},
        [(P, ALICE), (P, ALICE_APP)],
        {
            (P, ALICE): (lim(10 * MI, U_ALICE, 3), lim(4 * MI, Entity.for_pair("alice", None), 2), ALICE, "at most"),
            (P, ALICE_APP): (lim(3 * MI, PAIR_ALICE_APP, 1), lim(2 * MI, PAIR_ALICE_APP, 1), ALICE_APP, "at least"),
        },
    ),
    "a client-id bucket splits by user when users/<default> appears": Case(
        {Entity.for_client("app"): {P: 5 * MI}},
        {Entity.for_client("app"): {P: 5 * MI}, U_DEFAULT: {P: MI}},
        [(P, Bucket(None, "app"))],
        {
            (P, Bucket(None, "app")): (
                lim(5 * MI, Entity.for_client("app"), 7),
                lim(MI, U_DEFAULT, 6),
                Bucket(None, "app"),
                "at most",
            )
        },
    ),
    "an unchanged entry moves nothing": Case(
        {U_ALICE: {P: 10 * MI}, Entity.for_user("dave"): {P: MI}},
        {U_ALICE: {P: 5 * MI}, Entity.for_user("dave"): {P: MI}},
        [(P, ALICE), (P, Bucket("dave", None))],
        {(P, ALICE): (lim(10 * MI, U_ALICE, 3), lim(5 * MI, U_ALICE, 3), ALICE, None)},
    ),
    "each key is resolved on its own: a producer change leaves the consumer bucket alone": Case(
        {U_ALICE: {P: 10 * MI, C: 20 * MI}},
        {U_ALICE: {P: 5 * MI, C: 20 * MI}},
        [(P, ALICE), (C, ALICE)],
        {(P, ALICE): (lim(10 * MI, U_ALICE, 3), lim(5 * MI, U_ALICE, 3), ALICE, None)},
    ),
    "a user literally named <default> is a user, not the default": Case(
        {Entity.for_user("<default>"): {P: MI}},
        {Entity.for_user("<default>"): {P: 2 * MI}},
        [(P, Bucket("<default>", None)), (P, ALICE)],
        {
            (P, Bucket("<default>", None)): (
                lim(MI, Entity.for_user("<default>"), 3),
                lim(2 * MI, Entity.for_user("<default>"), 3),
                Bucket("<default>", None),
                None,
            )
        },
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_moves(case: Case) -> None:
    got = {
        (m.key, m.measured): (m.before, m.after, m.destination, m.bound)
        for m in moves(case.before, case.after, case.measured)
    }
    assert got == case.expect


def test_a_lowered_limit_tightens_and_a_removed_one_loosens() -> None:
    lowered = Move(P, ALICE, lim(10, U_ALICE, 3), lim(5, U_ALICE, 3), ALICE)
    removed = Move(P, ALICE, lim(10, U_ALICE, 3), Limit(), ALICE)
    new = Move(P, ALICE, Limit(), lim(5, U_ALICE, 3), ALICE)
    assert (lowered.tightens, lowered.loosens) == (True, False)
    assert (removed.tightens, removed.loosens) == (False, True)
    assert (new.tightens, new.loosens) == (True, False)


def test_a_bucket_has_a_name() -> None:
    with pytest.raises(ValueError, match="a user, a client-id or both"):
        Bucket(None, None)
    assert [b.path() for b in (ALICE, Bucket(None, "app"), ALICE_APP)] == [
        "users/alice",
        "clients/app",
        "users/alice/clients/app",
    ]
