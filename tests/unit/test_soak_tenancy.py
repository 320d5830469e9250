"""The soak's oracles: tenancy (harness/soak/tenancy.py), refused resources and TopicQuota shares (engine).

The oracles are written from the README and the CRDs, apart from the operator;
a few cases are checked by hand here, and each is checked against the
operator's own function (``kquota.domain.tenancy.denied`` on every entity the
history can name, ``kquota.domain.topics.client_quota`` on every layout of 4
partitions): a disagreement would be a finding in one of them.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.soak.engine import Soak, claims, entries_of, topic_share, values_during
from harness.soak.history import (
    CLIENTS,
    FAULT_KINDS,
    IPS,
    NAMESPACES,
    TENANCY_EDITS,
    THREE_BROKER_KINDS,
    TOPICS,
    USERS,
    Op,
    Resource,
    generate,
)
from harness.soak.tenancy import grants_for, permitted

from kquota.domain.entities import Entity
from kquota.domain.tenancy import Grant, denied
from kquota.domain.topics import TopicLayout, client_quota


@pytest.mark.parametrize(
    ("edit", "namespace", "parts", "expected"),
    [
        ("restored", "soak-b", {"user": None, "clientId": None}, True),
        ("soak-b-no-defaults", "soak-b", {"user": None, "clientId": "c1"}, False),
        ("soak-b-no-defaults", "soak-a", {"user": None, "clientId": "c1"}, True),
        ("soak-b-no-defaults", "soak-b", {"ip": "192.0.2.3"}, True),
        ("soak-a-no-ips", "soak-a", {"ip": "192.0.2.3"}, False),
        ("soak-a-no-ips", "soak-a", {"ip": None}, True),  # a default ip needs allowDefaults only
        ("soak-a-users-u2-u3", "soak-a", {"user": "u0", "clientId": "c3"}, False),
        ("soak-a-users-u2-u3", "soak-a", {"user": "u2", "clientId": "c3"}, True),
        ("soak-a-users-u2-u3", "soak-a", {"user": None, "clientId": "c3"}, True),  # the client-id decides
        ("soak-a-users-u2-u3", "soak-a", {"clientId": "c0"}, True),
        ("soak-b-clients-c0-c1-ip-1", "soak-b", {"clientId": "c2"}, False),
        ("soak-b-clients-c0-c1-ip-1", "soak-b", {"user": "u0", "clientId": "c2"}, True),  # the user decides
        ("soak-b-clients-c0-c1-ip-1", "soak-b", {"ip": "192.0.2.2"}, False),
        ("soak-b-clients-c0-c1-ip-1", "soak-b", {"ip": "192.0.2.1"}, True),
        ("soak-b-no-grant", "soak-b", {"user": "u0"}, False),
        ("deny-all", "soak-a", {"user": "u0"}, False),
    ],
)
def test_hand_checked_cases(edit: str, namespace: str, parts: dict[str, str | None], expected: bool) -> None:
    assert permitted(namespace, parts, grants_for(edit)) is expected


def test_no_tenancy_permits_everything() -> None:
    assert permitted("anywhere", {"user": None}, None)


def _every_entity() -> list[dict[str, str | None]]:
    users, clients, ips = [*USERS, None], [*CLIENTS, None], [*IPS, None]
    return (
        [{"user": u} for u in users]
        + [{"clientId": c} for c in clients]
        + [{"user": u, "clientId": c} for u, c in itertools.product(users, clients)]
        + [{"ip": i} for i in ips]
    )


def _domain(grants: list[dict[str, object]]) -> tuple[Grant, ...]:
    return tuple(
        Grant(
            frozenset(g["namespaces"]),  # type: ignore[arg-type]
            tuple(g.get("users", ())),  # type: ignore[arg-type]
            tuple(g.get("clientIds", ())),  # type: ignore[arg-type]
            tuple(g.get("ips", ())),  # type: ignore[arg-type]
            bool(g.get("allowDefaults")),
        )
        for g in grants
    )


def test_the_oracle_agrees_with_the_operators_gate_on_every_entity_the_history_names() -> None:
    wire = {"user": "user", "clientId": "client-id", "ip": "ip"}
    for edit, namespace, parts in itertools.product(TENANCY_EDITS, NAMESPACES, _every_entity()):
        grants = grants_for(edit)
        entity = Entity.from_parts({wire[p]: n for p, n in parts.items()})
        operator = denied(namespace, [entity], _domain(grants)) is None
        assert permitted(namespace, parts, grants) is operator, (edit, namespace, parts)


def test_every_revocation_refuses_something_the_history_applies_and_restores_come_after_revocations() -> None:
    for seed in range(1, 6):
        revoked = False
        for step in generate(seed, 100, ("tenancy-revoked",)):
            edit = TENANCY_EDITS[int(step.fault.param("grants"))]
            assert revoked or edit != "restored", seed
            revoked = edit != "restored"
    seen = {TENANCY_EDITS[int(s.fault.param("grants"))] for s in generate(1, 60, ("tenancy-revoked",))}
    assert seen == set(TENANCY_EDITS)


def _obj(ns: str, name: str, created: str, entity: dict[str, object], quota: dict[str, float]) -> dict:  # type: ignore[type-arg]
    return {
        "kind": "ClientQuota",
        "metadata": {"namespace": ns, "name": name, "creationTimestamp": created},
        "spec": {"entity": entity, "quota": quota},
    }


def test_a_refused_resource_claims_nothing_and_its_keys_not_claimed_by_others_are_kept() -> None:
    old = _obj("soak-b", "old", "2026-01-01T00:00:01Z", {"clientId": {"name": "c2"}}, {"producerByteRate": 1})
    young = _obj(
        "soak-a",
        "young",
        "2026-01-01T00:00:02Z",
        {"clientId": {"name": "c2"}},
        {"producerByteRate": 2, "consumerByteRate": 3},
    )
    lone = _obj("soak-b", "lone", "2026-01-01T00:00:03Z", {"clientId": {"name": "c3"}}, {"consumerByteRate": 4})
    c2, c3 = Entity.for_client("c2"), Entity.for_client("c3")
    # Everything permitted: the older claim wins producer_byte_rate.
    c = claims([old, young, lone], grants_for("restored"))
    assert c.desired == {c2: {"producer_byte_rate": 1.0, "consumer_byte_rate": 3.0}, c3: {"consumer_byte_rate": 4.0}}
    assert c.refused == set() and c.kept == set()
    assert c.winners == {("ClientQuota", "soak-b", "old"), ("ClientQuota", "soak-b", "lone")}
    # soak-b loses c2 and c3: the younger claim takes the key; c3's key is kept, not desired.
    c = claims([old, young, lone], grants_for("soak-b-clients-c0-c1-ip-1"))
    assert c.desired == {c2: {"producer_byte_rate": 2.0, "consumer_byte_rate": 3.0}}
    assert c.refused == {("ClientQuota", "soak-b", "old"), ("ClientQuota", "soak-b", "lone")}
    assert c.kept == {(c3, "consumer_byte_rate")}
    assert c.winners == {("ClientQuota", "soak-a", "young")}


# -- the 3-broker mode: TopicQuotas ----------------------------------------------------------


def test_a_topic_share_checked_by_hand() -> None:
    # 6 partitions, leaders 3/2/1 over brokers 1-3: the busiest broker carries 3/6 of the budget.
    layout = {0: 1, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3}
    # 6,000,000 B/s x 50 % x 3 / 6 = 1,500,000; 1,000 x 1 % x 3 / 6 = 5; never below 1.
    assert topic_share(6_000_000, 50, layout) == 1_500_000.0
    assert topic_share(1_000, 1, layout) == 5.0
    assert topic_share(10, 1, layout) == 1.0
    # 7,000 x 33 % x 2 / 4 = 1,155 exactly; 7,001 x 33 % x 2 / 4 = 1,155.165, rounded down.
    assert topic_share(7_000, 33, {0: 1, 1: 1, 2: 2, 3: 3}) == 1155.0
    assert topic_share(7_001, 33, {0: 1, 1: 1, 2: 2, 3: 3}) == 1155.0


def test_the_topic_share_agrees_with_the_operators_split_on_every_layout_of_4_partitions() -> None:
    for leaders in itertools.product((1, 2, 3), repeat=4):
        layout = dict(enumerate(leaders))
        domain_layout = TopicLayout.from_partition_leaders(layout)
        for budget, share in ((1_000, 1), (9_999_000, 37), (123_000, 100), (5_000, 49)):
            assert topic_share(budget, share, layout) == client_quota(float(budget), share, domain_layout)


def test_a_topic_quota_claims_its_clients_keys_on_the_layout_and_conflicts_like_any_claim() -> None:
    def tq(name: str, created: str, share: int) -> dict:  # type: ignore[type-arg]
        return {
            "kind": "TopicQuota",
            "metadata": {"namespace": "soak-a", "name": name, "creationTimestamp": created},
            "spec": {
                "topic": {"name": "soak-t0"},
                "budget": {"producerByteRate": 6_000_000},
                "enforcement": "ClientQuotas",
                "clients": [{"user": {"name": "t0"}, "share": share}],
            },
        }

    layout = {"soak-t0": {0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3}}
    old, young = tq("old", "2026-01-01T00:00:01Z", 10), tq("young", "2026-01-01T00:00:02Z", 20)
    assert entries_of(old, layout) == [(Entity.for_user("t0"), {"producer_byte_rate": 200_000.0})]
    assert entries_of(old, {}) == []  # no layout read yet: nothing claimed
    c = claims([young, old], None, layout)
    assert c.desired == {Entity.for_user("t0"): {"producer_byte_rate": 200_000.0}}
    assert c.winners == {("TopicQuota", "soak-a", "old")}
    # Refused (soak-a may not name t0), a TopicQuota's keys are kept and what it would set is allowed.
    c = claims([old], grants_for("soak-a-users-u2-u3"), layout)
    assert c.refused == {("TopicQuota", "soak-a", "old")}
    assert c.kept == {(Entity.for_user("t0"), "producer_byte_rate")}
    assert c.would == {(Entity.for_user("t0"), "producer_byte_rate"): {200_000.0}}


def test_the_3_broker_history_adds_topic_quotas_and_leaves_the_1_broker_history_as_it_was() -> None:
    plain = generate(4, 40)
    assert not any(o.resource.kind == "TopicQuota" for s in plain for o in s.ops())
    steps = generate(4, 40, FAULT_KINDS + THREE_BROKER_KINDS, topics=True)
    topic_ops = [o for s in steps for o in s.ops() if o.resource.kind == "TopicQuota"]
    assert {o.why for o in topic_ops} == {"topic-create", "topic-modify", "topic-delete"}
    for op in topic_ops:
        shares = [share for _, share in op.resource.clients]
        assert 1 <= len(shares) <= 3 and sum(shares) <= 100, op
        spec = op.resource.manifest()["spec"]
        assert spec["enforcement"] == "ClientQuotas" and spec["topic"]["name"] in {t for t, _ in TOPICS}
    assert {s.fault.kind for s in steps} >= set(THREE_BROKER_KINDS)


def test_a_kept_key_may_hold_what_the_old_grants_gave_it_in_the_step_that_changed_them(tmp_path: Path) -> None:
    """Seed 15, step 10: the older claim deleted, then soak-b's grant revoked in the same step; the
    operator let the younger claim win first, and then kept its value, rightly."""
    young = _obj("soak-b", "cq19", "2026-01-01T00:00:02Z", {"user": {"default": True}}, {"requestPercentage": 22.5})
    default = Entity.for_user(None)
    soak = Soak(15, 10, tmp_path)
    soak._last_broker = {default: {"request_percentage": 179.5}}  # the deleted older claim's value
    now = claims([young], grants_for("soak-b-no-grant"))
    assert now.kept == {(default, "request_percentage")}
    before = claims([young], grants_for("restored")).desired
    held = {default: {"request_percentage": 22.5}}
    assert soak.expected(now, held, before) == held
    # Without the grant change the value is not one the operator could have set: the old one is expected.
    assert soak.expected(now, held) == {default: {"request_percentage": 179.5}}
    assert soak.expected(now, {default: {"request_percentage": 33.0}}, before) == {
        default: {"request_percentage": 179.5}
    }


def test_a_kept_key_may_hold_the_value_a_claim_won_with_between_two_operations_of_the_step() -> None:
    """Seed 2, step 93: the older claim deleted, then the younger one's edit dropped the key, which
    only a refused resource still names. Between the two operations the younger claim rightly won
    with its old value, and the key kept it: the soak must allow that value, and no other."""
    default = Entity.for_user(None)
    older = _obj("soak-a", "cq62", "2026-01-01T00:00:01Z", {"user": {"default": True}}, {"consumerByteRate": 1216725})
    younger = _obj(
        "soak-a", "cq128", "2026-01-01T00:00:02Z", {"user": {"default": True}}, {"consumerByteRate": 2805526}
    )
    refused = _obj("soak-b", "cq76", "2026-01-01T00:00:00Z", {"user": {"default": True}}, {"consumerByteRate": 9021935})
    grants = grants_for("soak-b-no-defaults")
    drop_older = Op("delete", _resource(older), "move")
    edit_younger = Op("apply", replace(_resource(younger), values=(("producerByteRate", 8197787.0),)), "modify")
    during = values_during([older, younger, refused], [drop_older, edit_younger], grants, {})
    assert during[(default, "consumer_byte_rate")] == {2805526.0}
    assert during[(default, "producer_byte_rate")] == {8197787.0}
    # In the other order the younger claim never wins the key while it still names it.
    during = values_during([older, younger, refused], [edit_younger, drop_older], grants, {})
    assert during[(default, "consumer_byte_rate")] == {1216725.0}
    # And at the end the key is kept, not claimed: the soak expects what the step may have left.
    end = claims([refused, {**younger, "spec": edit_younger.resource.manifest()["spec"]}], grants)
    assert end.kept == {(default, "consumer_byte_rate")}


def _resource(obj: dict[str, Any]) -> Resource:
    meta, spec = obj["metadata"], obj["spec"]
    entity = tuple((part, None if v.get("default") else v["name"]) for part, v in spec["entity"].items())
    values = tuple((k, float(v)) for k, v in spec["quota"].items())
    return Resource(obj["kind"], meta["namespace"], meta["name"], "", entity, values)
