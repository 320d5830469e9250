"""The planner: claims, conflicts, ownership, drift and the minimal change."""

from __future__ import annotations

import pytest

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.ledger import LedgerFromNewerOperator, decode_shard, encode_shard, shard_of, split
from kquota.domain.plan import (
    DesiredEntry,
    Protection,
    QuotaOp,
    ResourceRef,
    UnmanagedPolicy,
    apply_ledger,
    plan,
    resolve_claims,
)
from tests.support.quotas import ALICE, BOB, C, P, R

DEF_USER = Entity.for_user(None)


def entry(name: str, created: str, entity: Entity, **values: float) -> DesiredEntry:
    keys = {QuotaKey(k): v for k, v in values.items()}
    return DesiredEntry(ResourceRef("ClientQuota", "ns", name), created, entity, keys)


class TestClaims:
    def test_single_claim_is_desired(self) -> None:
        res = resolve_claims([entry("a", "2026-01-01T00:00:00Z", ALICE, producer_byte_rate=100)])
        assert res.desired == {ALICE: {P: 100.0}}
        assert res.conflicts == {}

    def test_oldest_resource_wins_a_contested_key_and_the_other_reports_it(self) -> None:
        old = entry("old", "2026-01-01T00:00:00Z", ALICE, producer_byte_rate=100)
        new = entry("new", "2026-02-01T00:00:00Z", ALICE, producer_byte_rate=999, consumer_byte_rate=5)
        for order in ([old, new], [new, old]):
            res = resolve_claims(order)
            assert res.desired == {ALICE: {P: 100.0, C: 5.0}}, "winner independent of list order"
            assert [c.winner.name for c in res.conflicts[new.ref]] == ["old"]
            assert old.ref not in res.conflicts

    def test_same_creation_time_breaks_ties_by_name(self) -> None:
        a = entry("a", "2026-01-01T00:00:00Z", ALICE, producer_byte_rate=1)
        b = entry("b", "2026-01-01T00:00:00Z", ALICE, producer_byte_rate=2)
        assert resolve_claims([b, a]).desired[ALICE][P] == 1.0

    def test_different_keys_on_one_entity_do_not_conflict(self) -> None:
        a = entry("a", "2026-01-01T00:00:00Z", ALICE, producer_byte_rate=1)
        b = entry("b", "2026-01-02T00:00:00Z", ALICE, consumer_byte_rate=2)
        res = resolve_claims([a, b])
        assert res.desired == {ALICE: {P: 1.0, C: 2.0}}
        assert res.conflicts == {}

    def test_user_named_default_and_the_default_user_are_different_entities(self) -> None:
        a = entry("a", "2026-01-01T00:00:00Z", Entity.for_user("<default>"), producer_byte_rate=1)
        b = entry("b", "2026-01-02T00:00:00Z", DEF_USER, producer_byte_rate=2)
        res = resolve_claims([a, b])
        assert len(res.desired) == 2
        assert res.conflicts == {}


class TestPlan:
    def test_nothing_to_do_when_live_matches_desired(self) -> None:
        p = plan({ALICE: {P: 100.0}}, {ALICE: {P: 100.0}}, {ALICE: {P: 100.0}})
        assert p.changes == [] and p.empty

    def test_new_key_is_set_and_recorded_before_sending(self) -> None:
        p = plan({ALICE: {P: 100.0}}, {}, {})
        assert p.changes[0].ops == (QuotaOp(P, 100.0),)
        assert p.record == {ALICE: {P: 100.0}}

    def test_changed_value_sends_only_the_changed_key(self) -> None:
        p = plan({ALICE: {P: 200.0, C: 5.0}}, {ALICE: {P: 100.0, C: 5.0}}, {ALICE: {P: 100.0, C: 5.0}})
        assert [c.ops for c in p.changes] == [(QuotaOp(P, 200.0),)]

    def test_owned_key_no_longer_desired_is_removed_and_forgotten(self) -> None:
        p = plan({ALICE: {P: 1.0}}, {ALICE: {P: 1.0, C: 2.0}}, {ALICE: {P: 1.0, C: 2.0}})
        assert p.changes[0].ops == (QuotaOp(C, None),)
        assert p.forget == {ALICE: {C}}

    def test_key_not_owned_is_never_removed_under_ignore(self) -> None:
        p = plan({}, {BOB: {P: 7.0}, ALICE: {C: 3.0}}, {})
        assert p.changes == []
        assert p.unmanaged == {BOB: {P: 7.0}, ALICE: {C: 3.0}}

    def test_unowned_key_on_a_managed_entity_is_left_alone(self) -> None:
        p = plan({ALICE: {P: 1.0}}, {ALICE: {P: 1.0, R: 50.0}}, {ALICE: {P: 1.0}})
        assert p.changes == []
        assert p.unmanaged == {ALICE: {R: 50.0}}

    def test_adopt_policy_removes_what_no_resource_declares(self) -> None:
        p = plan({ALICE: {P: 1.0}}, {ALICE: {P: 1.0}, BOB: {P: 7.0}}, {ALICE: {P: 1.0}}, policy=UnmanagedPolicy.ADOPT)
        assert [(c.entity, c.ops) for c in p.changes] == [(BOB, (QuotaOp(P, None),))]
        assert p.record == {BOB: {P: 7.0}}, "recorded first so a crash mid-removal keeps ownership"
        assert p.forget == {BOB: {P}}

    def test_owned_key_the_brokers_did_not_show_is_still_removed_then_forgotten(self) -> None:
        # The answer may come from a broker whose metadata image lags the controller (#33): the
        # removal is sent anyway (a no-op when the key is really gone), never only forgotten.
        p = plan({}, {}, {ALICE: {P: 1.0}})
        assert [(c.entity, c.ops) for c in p.changes] == [(ALICE, (QuotaOp(P, None),))]
        assert p.forget == {ALICE: {P}}

    def test_out_of_band_change_to_an_owned_key_is_drift(self) -> None:
        p = plan({ALICE: {P: 100.0}}, {ALICE: {P: 5.0}}, {ALICE: {P: 100.0}})
        assert p.changes[0].ops == (QuotaOp(P, 100.0),)
        assert [(d.entity, d.key, d.live) for d in p.drift] == [(ALICE, P, 5.0)]

    def test_out_of_band_removal_of_an_owned_key_is_drift(self) -> None:
        p = plan({ALICE: {P: 100.0}}, {}, {ALICE: {P: 100.0}})
        assert [(d.key, d.live) for d in p.drift] == [(P, None)]

    def test_spec_change_is_not_drift(self) -> None:
        p = plan({ALICE: {P: 200.0}}, {ALICE: {P: 100.0}}, {ALICE: {P: 100.0}})
        assert p.drift == []

    def test_protected_principal_is_never_changed(self) -> None:
        prot = Protection(users=frozenset({"alice"}))
        p = plan({ALICE: {P: 1.0}}, {ALICE: {P: 9.0}}, {ALICE: {P: 9.0}}, policy=UnmanagedPolicy.ADOPT, protection=prot)
        assert p.changes == [] and p.forget == {} and p.record == {}
        assert p.protected == {ALICE}

    def test_protection_covers_pairs_and_client_ids(self) -> None:
        prot = Protection(users=frozenset({"op"}), client_ids=frozenset({"ops-tool"}))
        assert prot.covers(Entity.for_pair("op", None))
        assert prot.covers(Entity.for_client("ops-tool"))
        assert not prot.covers(Entity.for_user(None)), "the default user is not a protected name"
        assert not prot.covers(Entity.for_user("operator"))

    def test_all_ops_of_one_entity_travel_together(self) -> None:
        p = plan({ALICE: {P: 2.0, C: 3.0}}, {ALICE: {R: 1.0}}, {ALICE: {R: 1.0}})
        assert len(p.changes) == 1
        assert set(p.changes[0].ops) == {QuotaOp(P, 2.0), QuotaOp(C, 3.0), QuotaOp(R, None)}

    def test_apply_ledger_adds_records_and_drops_empty_entities(self) -> None:
        led = apply_ledger({ALICE: {P: 1.0}}, {BOB: {C: 2.0}}, {ALICE: {P}})
        assert led == {BOB: {C: 2.0}}


class TestLedgerFormat:
    @pytest.mark.parametrize(
        "entity",
        [
            Entity.for_user("CN=app,OU=x=y"),
            Entity.for_user("<default>"),
            Entity.for_user(None),
            Entity.for_pair(None, "clïent/ü%2F"),
            Entity.for_ip("10.0.0.1"),
            Entity.for_ip(None),
        ],
        ids=["tls-dn", "literal-default", "default-user", "unicode-pair", "ip", "default-ip"],
    )
    def test_hostile_names_round_trip_exactly(self, entity: Entity) -> None:
        led = {entity: {P if not entity.is_ip else QuotaKey.CONNECTION_CREATION_RATE: 12.0}}
        assert decode_shard(encode_shard(led)) == led

    def test_shards_are_stable_and_cover_everything(self) -> None:
        led = {Entity.for_user(f"u{i}"): {P: float(i)} for i in range(500)}
        parts = split(led)
        assert sum(len(v) for v in parts.values()) == 500
        assert all(parts[shard_of(e)][e] == v for e, v in led.items())
        assert len([s for s in parts.values() if s]) == 16

    def test_unknown_format_is_refused(self) -> None:
        # More in test_ledger_versions.py: a newer format is refused, never guessed at.
        with pytest.raises(LedgerFromNewerOperator, match="format version 99"):
            decode_shard('{"version": 99, "entries": []}')


def test_entities_sort_by_user_then_client_id_then_ip_name_with_unnamed_parts_first() -> None:
    """The order every plan, ledger shard and `kquota plan` table uses, written out by hand.

    A part with no name (a default, or absent) sorts before any name; among
    entities equal by name, fewer parts come first.
    """
    shuffled = [
        Entity.for_ip("10.0.0.1"),
        Entity.for_pair("alice", "app"),
        Entity.for_client("app"),
        Entity.for_user("bob"),
        Entity.for_pair("alice", None),
        Entity.for_user(None),
        Entity.for_ip(None),
        Entity.for_user("alice"),
        Entity.for_client(None),
        Entity.for_pair(None, None),
    ]
    expected = [
        Entity.for_ip(None),
        Entity.for_client(None),
        Entity.for_user(None),
        Entity.for_pair(None, None),
        Entity.for_ip("10.0.0.1"),
        Entity.for_client("app"),
        Entity.for_user("alice"),
        Entity.for_pair("alice", None),
        Entity.for_pair("alice", "app"),
        Entity.for_user("bob"),
    ]
    assert sorted(shuffled, key=Entity.sort_key) == expected
    the_plan = plan({e: {P: 1.0} for e in shuffled if not e.has_ip}, {}, {})
    assert [c.entity for c in the_plan.changes] == [e for e in expected if not e.has_ip]
