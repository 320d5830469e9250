"""Hostile entity names: how status shows them, and how they are batched for the controller.

``Entity.path()`` is what ``status.entity``, condition messages and logs show.
It must be unambiguous (two names, two paths), decodable (``unquote`` of a
segment is the name) and visible: a name with a newline, NUL, escape or
invisible character must not print as a line break or as nothing, so those
are percent-encoded. The request splitter must keep each AlterClientQuotas
request's metadata records under the controller's 8 MiB batch cap even with
the longest names the CRD admits.
"""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.batching import MAX_OPS_PER_REQUEST, MAX_RECORD_BYTES_PER_REQUEST, batches, record_bytes

#: KRaft's cap on one metadata record batch (KafkaRaftClient.MAX_BATCH_SIZE_BYTES).
KRAFT_MAX_BATCH_BYTES = 8 * 1024 * 1024

#: (id, name, how status.entity shows it as a user).
RENDERED = [
    ("plain", "alice", "users/alice"),
    ("CJK letters print as they are", "数据管道", "users/数据管道"),
    ("emoji print as they are", "🚀team", "users/🚀team"),
    ("combining marks print as they are", "cafe\u0301", "users/cafe\u0301"),
    ("right-to-left letters print as they are", "שלום", "users/שלום"),
    ("a space prints as it is", "a b", "users/a b"),
    ("plus is not a space", "a+b", "users/a+b"),
    ("TLS DN with commas and equals", "CN=app,OU=x=y,O=Acme\\, Inc.", "users/CN=app,OU=x=y,O=Acme\\, Inc."),
    ("quotes and backslashes", 'it\'s "q" \\', 'users/it\'s "q" \\'),
    ("a literal <default> is encoded", "<default>", "users/%3Cdefault%3E"),
    ("an encoded-looking name is encoded again", "%3Cdefault%3E", "users/%253Cdefault%253E"),
    ("percent", "%", "users/%25"),
    ("%25 is not %", "%25", "users/%2525"),
    ("slash", "a/b", "users/a%2Fb"),
    ("%2F is not a slash", "%2F", "users/%252F"),
    ("%20 is not a space", "a%20b", "users/a%2520b"),
    ("newline", "line1\nline2", "users/line1%0Aline2"),
    ("carriage return", "a\rb", "users/a%0Db"),
    ("NUL", "nul\x00byte", "users/nul%00byte"),
    ("tab and ANSI escape", "t\tx\x1b[31m", "users/t%09x%1B%5B31m"),
    ("DEL and C1 next-line", "d\x7f\x85", "users/d%7F%C2%85"),
    ("right-to-left override", "evil\u202etxt", "users/evil%E2%80%AEtxt"),
    ("zero-width joiner", "👩\u200d💻", "users/%F0%9F%91%A9%E2%80%8D%F0%9F%92%BB"),
    ("no-break space is not a space", "no\u00a0break", "users/no%C2%A0break"),
    ("byte-order mark", "\ufeffbom", "users/%EF%BB%BFbom"),
    ("line separator", "a\u2028b", "users/a%E2%80%A8b"),
]


@pytest.mark.parametrize(("name", "shown"), [(n, s) for _, n, s in RENDERED], ids=[i for i, _, _ in RENDERED])
def test_status_entity_shows_every_name_visibly_and_unambiguously(name: str, shown: str) -> None:
    path = Entity.for_user(name).path()
    assert path == shown
    assert path.isprintable()
    assert unquote(path.split("/", 1)[1]) == name


def test_distinct_names_give_distinct_paths_in_every_entity_form() -> None:
    names = [n for _, n, _ in RENDERED]
    for form in (Entity.for_user, Entity.for_client, lambda n: Entity.for_pair(n, n)):
        paths = [form(n).path() for n in names]
        assert len(set(paths)) == len(names)
    assert Entity.for_user("<default>").path() != Entity.for_user(None).path()
    assert Entity.for_pair("<default>", None).path() != Entity.for_pair(None, "<default>").path()


def test_pair_segments_decode_back_to_the_names() -> None:
    user, client = "CN=a/b,O=x\n", "%2F\x00"
    segs = Entity.for_pair(user, client).path().split("/")
    assert segs[0] == "users" and segs[2] == "clients" and len(segs) == 4
    assert (unquote(segs[1]), unquote(segs[3])) == (user, client)


def longest_pair(i: int) -> EntityChange:
    """A (user, client-id) pair with the longest names the CRD admits (1024 four-byte characters)."""
    name = f"{i:04d}" + "\U0001f642" * 1020
    return EntityChange(
        Entity.for_pair(name, name),
        tuple(
            QuotaOp(k, 1000.0)
            for k in (QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE)
        ),
    )


def test_record_estimate_is_not_below_kafkas_own_size() -> None:
    # Measured on Kafka 4.3.1: 2,500 users named 5 digits + 1,019 emoji, one key each,
    # came to 10,329,997 bytes of records (the controller's error message).
    user = EntityChange(Entity.for_user("00000" + "\U0001f600" * 1019), (QuotaOp(QuotaKey.PRODUCER_BYTE_RATE, 1000.0),))
    assert record_bytes(user) * 2500 >= 10_329_997


def test_longest_names_are_split_below_the_controllers_batch_cap() -> None:
    alterations = [longest_pair(i) for i in range(400)]
    assert sum(record_bytes(a) for a in alterations) > KRAFT_MAX_BATCH_BYTES  # one request would fail
    cut = batches(alterations)
    assert len(cut) > 1
    assert [a for b in cut for a in b] == alterations  # order kept, nothing lost or split
    for batch in cut:
        assert sum(record_bytes(a) for a in batch) <= MAX_RECORD_BYTES_PER_REQUEST < KRAFT_MAX_BATCH_BYTES


def test_short_names_still_fill_a_request_up_to_the_op_limit() -> None:
    alterations = [
        EntityChange(Entity.for_user(f"user-{i:06d}"), (QuotaOp(QuotaKey.PRODUCER_BYTE_RATE, 1.0),))
        for i in range(MAX_OPS_PER_REQUEST + 1)
    ]
    assert [len(b) for b in batches(alterations)] == [MAX_OPS_PER_REQUEST, 1]
