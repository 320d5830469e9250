"""Effective quota resolution: Kafka's 8-level precedence, per key, with what each value overrides."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.resolver import Connection, bucket_for, client_levels, resolve
from tests.support.quotas import C, M, N, P, R

#: The eight entities that can match the connection (alice, app), by precedence level.
LEVEL = {
    1: Entity.for_pair("alice", "app"),
    2: Entity.for_pair("alice", None),
    3: Entity.for_user("alice"),
    4: Entity.for_pair(None, "app"),
    5: Entity.for_pair(None, None),
    6: Entity.for_user(None),
    7: Entity.for_client("app"),
    8: Entity.for_client(None),
}
ALICE_APP = Connection("alice", "app")


@dataclass
class Case:
    entries: dict[Entity, dict[QuotaKey, float]]
    connection: Connection
    #: key -> (value, level, entity) of the winner; keys not listed must be unresolved.
    expect: dict[QuotaKey, tuple[float, int, Entity]]
    #: key -> levels of the overridden candidates, most specific first.
    overrides: dict[QuotaKey, list[int]] = field(default_factory=dict)


def levels(*numbers: int, key: QuotaKey = P, base: float = 100) -> dict[Entity, dict[QuotaKey, float]]:
    """Entries at the given levels; level n sets ``key`` to base + n so values tell levels apart."""
    return {LEVEL[n]: {key: base + n} for n in numbers}


CASES = [
    *[
        pytest.param(
            Case(levels(n), ALICE_APP, {P: (100 + n, n, LEVEL[n])}),
            id=f"level {n} alone applies to a matching connection",
        )
        for n in range(1, 9)
    ],
    *[
        pytest.param(
            Case(levels(*range(n, 9)), ALICE_APP, {P: (100 + n, n, LEVEL[n])}, {P: list(range(n + 1, 9))}),
            id=f"level {n} beats every lower level and lists them as overridden",
        )
        for n in range(1, 8)
    ],
    pytest.param(
        Case(levels(8, 1), ALICE_APP, {P: (101, 1, LEVEL[1])}, {P: [8]}),
        id="the most specific entity wins whatever the insertion order",
    ),
    pytest.param(
        Case(
            {LEVEL[3]: {P: 3000, C: 3001}, LEVEL[1]: {C: 1001}, LEVEL[8]: {P: 8000, R: 80}},
            ALICE_APP,
            {P: (3000, 3, LEVEL[3]), C: (1001, 1, LEVEL[1]), R: (80, 8, LEVEL[8])},
            {P: [8], C: [3]},
        ),
        id="each key resolves separately: producer from level 3, consumer from level 1, request from level 8",
    ),
    pytest.param(
        Case(
            {Entity.for_user("bob"): {P: 1}, Entity.for_client("other"): {P: 2}, Entity.for_pair("bob", "app"): {P: 3}},
            ALICE_APP,
            {},
        ),
        id="entities naming another user or client-id never apply",
    ),
    pytest.param(
        Case(
            {Entity.for_user("<default>"): {P: 100}, LEVEL[6]: {P: 5}},
            Connection("alice", "app"),
            {P: (5, 6, LEVEL[6])},
        ),
        id="a user literally named <default> is a name: its quota does not reach alice",
    ),
    pytest.param(
        Case(
            {Entity.for_user("<default>"): {P: 100}, LEVEL[6]: {P: 5}},
            Connection("<default>", "app"),
            {P: (100, 3, Entity.for_user("<default>"))},
            {P: [6]},
        ),
        id="the user literally named <default> gets its own level-3 quota over the default user",
    ),
    pytest.param(
        Case({LEVEL[6]: {P: 5}}, Connection("<default>", "app"), {P: (5, 6, LEVEL[6])}),
        id="a user named <default> without its own quota falls back to the default user like anyone",
    ),
    pytest.param(
        Case(levels(*range(1, 9)), Connection("alice", ""), {P: (103, 3, LEVEL[3])}, {P: [6]}),
        id="an empty client-id only gets user quotas (levels 3 and 6)",
    ),
    pytest.param(
        Case(levels(1, 2, 4, 5, 7, 8), Connection("alice", ""), {}),
        id="an empty client-id gets nothing from client-id levels",
    ),
    pytest.param(
        Case(levels(*range(1, 9)), Connection("", "app"), {P: (107, 7, LEVEL[7])}, {P: [8]}),
        id="an empty user only gets client-id quotas (levels 7 and 8)",
    ),
    pytest.param(
        Case(levels(*range(1, 9)), Connection("", ""), {}),
        id="a connection with neither user nor client-id gets no quota",
    ),
    pytest.param(
        Case({LEVEL[3]: {N: 10, P: 1}}, ALICE_APP, {P: (1, 3, LEVEL[3])}),
        id="a key Kafka does not allow on the entity type is ignored",
    ),
    pytest.param(
        Case(
            {Entity.for_ip("192.0.2.10"): {N: 10}, Entity.for_ip(None): {N: 50}, LEVEL[3]: {P: 1}},
            Connection("alice", "app", ip="192.0.2.10"),
            {N: (10, 1, Entity.for_ip("192.0.2.10")), P: (1, 3, LEVEL[3])},
            {N: [2]},
        ),
        id="connection_creation_rate comes from the ip ladder: the address beats the default ip",
    ),
    pytest.param(
        Case(
            {Entity.for_ip("2001:db8::1"): {N: 10}, Entity.for_ip(None): {N: 50}},
            Connection("alice", "app", ip="2001:db8:0:0:0:0:0:1"),
            {N: (10, 1, Entity.for_ip("2001:db8::1"))},
            {N: [2]},
        ),
        id="IPv6 addresses match in any spelling, as brokers compare InetAddress values",
    ),
    pytest.param(
        Case(
            {Entity.for_ip("192.0.2.10"): {N: 10}, Entity.for_ip(None): {N: 50}},
            Connection("alice", "app", ip="192.0.2.11"),
            {N: (50, 2, Entity.for_ip(None))},
        ),
        id="another address gets the default ip quota",
    ),
    pytest.param(
        Case({Entity.for_ip(None): {N: 50}}, ALICE_APP, {}),
        id="without the connection's ip, ip quotas are not resolved",
    ),
    pytest.param(
        Case(
            {LEVEL[2]: {M: 5}, LEVEL[7]: {M: 1}},
            ALICE_APP,
            {M: (5, 2, LEVEL[2])},
            {M: [7]},
        ),
        id="controller_mutation_rate follows the same eight levels",
    ),
]

# The examples of Kafka's quota documentation (seed 001, "Quota configuration"): the
# kafka-configs commands configure these entities, and the documentation states which
# applies. "The most specific quota matching the connection is applied."
DOC = {
    "users/user1/clients/clientA": Entity.for_pair("user1", "clientA"),
    "users/user1/clients/<default>": Entity.for_pair("user1", None),
    "users/user1": Entity.for_user("user1"),
    "users/<default>/clients/clientA": Entity.for_pair(None, "clientA"),
    "users/<default>/clients/<default>": Entity.for_pair(None, None),
    "users/<default>": Entity.for_user(None),
    "clients/clientA": Entity.for_client("clientA"),
    "clients/<default>": Entity.for_client(None),
}
DOC_VALUES = {P: 1024.0, C: 2048.0, R: 200.0}

DOC_CASES = [
    pytest.param(
        ["users/user1/clients/clientA", "users/user1", "clients/clientA"],
        Connection("user1", "clientA"),
        "users/user1/clients/clientA",
        1,
        id="docs: a (user, client-id) quota beats the user's and the client-id's quotas",
    ),
    pytest.param(
        ["users/user1", "clients/clientA", "users/<default>"],
        Connection("user1", "clientA"),
        "users/user1",
        3,
        id="docs: a user quota beats a client-id quota and the default user quota",
    ),
    pytest.param(
        ["users/user1/clients/<default>", "users/user1"],
        Connection("user1", "clientB"),
        "users/user1/clients/<default>",
        2,
        id="docs: the default client-id of user1 beats user1's own quota",
    ),
    pytest.param(
        ["users/<default>/clients/clientA", "clients/clientA", "users/<default>"],
        Connection("user2", "clientA"),
        "users/<default>/clients/clientA",
        4,
        id="docs: (default user, clientA) beats the default user and clients/clientA",
    ),
    pytest.param(
        ["users/<default>/clients/<default>", "users/<default>", "clients/<default>"],
        Connection("user2", "clientB"),
        "users/<default>/clients/<default>",
        5,
        id="docs: (default user, default client-id) beats both single defaults",
    ),
    pytest.param(
        ["users/<default>", "clients/clientA"],
        Connection("user2", "clientA"),
        "users/<default>",
        6,
        id="docs: the default user quota beats even a named client-id quota",
    ),
    pytest.param(
        ["clients/clientA", "clients/<default>"],
        Connection("user2", "clientA"),
        "clients/clientA",
        7,
        id="docs: a client-id quota beats the default client-id quota",
    ),
    pytest.param(
        ["clients/<default>"],
        Connection("user2", "clientB"),
        "clients/<default>",
        8,
        id="docs: the default client-id quota is the last resort",
    ),
    pytest.param(
        list(DOC),
        Connection("user1", "clientA"),
        "users/user1/clients/clientA",
        1,
        id="docs: with all eight configured, level 1 wins for user1 with clientA",
    ),
    pytest.param(
        [p for p in DOC if p != "users/user1/clients/clientA"],
        Connection("user1", "clientA"),
        "users/user1/clients/<default>",
        2,
        id="docs: with the exact pair removed, user1's default client-id is next",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_resolve(case: Case) -> None:
    result = resolve(case.entries, case.connection)
    got = {k: (r.value, r.level, r.entity) for k, r in result.items()}
    assert got == case.expect
    for key, res in result.items():
        assert [c.level for c in res.overrides] == case.overrides.get(key, [])
        assert all(case.entries[c.entity][key] == c.value for c in res.overrides)


@pytest.mark.parametrize(("configured", "connection", "winner", "level"), DOC_CASES)
def test_kafka_documentation_examples(configured: list[str], connection: Connection, winner: str, level: int) -> None:
    entries = {DOC[path]: dict(DOC_VALUES) for path in configured}
    result = resolve(entries, connection)
    assert set(result) == set(DOC_VALUES)
    for res in result.values():
        assert res.entity.path() == winner
        assert res.level == level
        assert {c.entity.path() for c in res.overrides} <= set(configured) - {winner}


def test_all_instances_of_a_pair_share_one_bucket() -> None:
    """Docs: a 10MB/s (test-user, test-client) quota is shared by all its producer instances."""
    entries = {Entity.for_pair("test-user", "test-client"): {P: 10 * 2**20}}
    a = resolve(entries, Connection("test-user", "test-client"))[P]
    b = resolve(entries, Connection("test-user", "test-client", ip="192.0.2.1"))[P]
    assert a.bucket == b.bucket == ("test-user", "test-client")


BUCKETS = [
    pytest.param(1, ("alice", "app"), id="level 1: one bucket per (user, client-id)"),
    pytest.param(2, ("alice", "app"), id="level 2: each client-id of the user gets its own bucket"),
    pytest.param(3, ("alice", ""), id="level 3: all clients of the user share one bucket"),
    pytest.param(4, ("alice", "app"), id="level 4: each user of the client-id gets its own bucket"),
    pytest.param(5, ("alice", "app"), id="level 5: every (user, client-id) pair gets its own bucket"),
    pytest.param(6, ("alice", ""), id="level 6: each user gets its own bucket shared by its clients"),
    pytest.param(7, ("", "app"), id="level 7: all users of the client-id share one bucket"),
    pytest.param(8, ("", "app"), id="level 8: each client-id gets its own bucket shared by its users"),
]


@pytest.mark.parametrize(("level", "bucket"), BUCKETS)
def test_bucket_follows_the_winning_level(level: int, bucket: tuple[str, str]) -> None:
    assert bucket_for(level, "alice", "app") == bucket
    assert resolve(levels(level), ALICE_APP)[P].bucket == bucket


def test_ip_resolutions_have_no_client_bucket() -> None:
    res = resolve({Entity.for_ip(None): {N: 5}}, Connection("alice", "app", ip="192.0.2.1"))
    assert res[N].bucket is None


def test_sources_label_the_winner_and_what_it_overrides() -> None:
    entries = {LEVEL[3]: {P: 10.0}, LEVEL[6]: {P: 1.0}}
    sources = {LEVEL[3]: "team-a/alice", LEVEL[6]: "unmanaged"}
    res = resolve(entries, ALICE_APP, sources)[P]
    assert res.source == "team-a/alice"
    assert [c.source for c in res.overrides] == ["unmanaged"]
    assert res.describe() == (
        "producer_byte_rate=10 from users/alice [level 3] (team-a/alice); "
        "overrides users/<default>=1 [level 6] (unmanaged)"
    )


def test_client_levels_lists_the_eight_entities_in_order() -> None:
    assert client_levels("alice", "app") == sorted(LEVEL.items())
    assert [n for n, _ in client_levels("alice", "")] == [3, 6]
    assert [n for n, _ in client_levels("", "app")] == [7, 8]
    assert client_levels("", "") == []
