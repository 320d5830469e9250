"""A ledger save encodes only what changed, and writes exactly what encoding the whole shard would (issue #35).

``fmt.ShardTexts`` keeps each shard's members and encoded rows from save to save.
These tests drive it, and the LedgerStore that uses it, through random histories
(entities set, changed, removed; named to the save or not; copy-on-write and
in-place ledgers) and compare every shard with ``fmt.encode_shard`` of the same
ledger, which is the definition of a shard's text.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from kquota.domain import ledger as fmt
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import apply_ledger
from kquota.k8s.ledger import DATA_KEY, shard_name
from tests.unit.test_ledger_growth import Api, store

pytestmark = pytest.mark.unit

P, C, R = QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE
Ledger = dict[Entity, dict[QuotaKey, float]]
SHARDS = 4


def entity(rng: random.Random) -> Entity:
    i = rng.randrange(60)
    kind = rng.randrange(4)
    if kind == 0:
        return Entity.for_user(f"u{i}" if i else None)
    if kind == 1:
        return Entity.for_client(f"c{i}")
    if kind == 2:
        return Entity.for_pair(f"u{i}", f"c{i % 7}" if i % 5 else None)
    return Entity.for_user(f"ü-{i}")


def expected(ledger: Ledger, shard: int, shards: int = SHARDS) -> str:
    return fmt.encode_shard(fmt.split(ledger, shards)[shard])


def test_join_rows_is_json_dumps_of_the_document() -> None:
    led: Ledger = {Entity.for_user("a"): {P: 1.0, C: 2.5}, Entity.for_pair(None, "é"): {R: 40.0}}
    text = fmt.encode_shard(led)
    assert fmt.decode_shard(text) == led
    assert fmt.join_rows(()) == fmt.encode_shard({})


@pytest.mark.parametrize("seed", range(12))
def test_texts_equal_encoding_the_whole_shard_through_a_random_history(seed: int) -> None:
    rng = random.Random(seed)
    texts = fmt.ShardTexts(SHARDS)
    ledger: Ledger = {}
    for _step in range(300):
        changed: dict[Entity, dict[QuotaKey, float]] = {}
        forget: dict[Entity, set[QuotaKey]] = {}
        for _ in range(rng.randrange(1, 4)):
            e = entity(rng)
            if rng.random() < 0.3 and e in ledger:
                forget[e] = set(rng.sample(sorted(ledger[e], key=lambda k: k.value), 1))
            else:
                changed[e] = {rng.choice((P, C, R)): float(rng.randrange(1, 100))}
        ledger = apply_ledger(ledger, changed, forget)
        named = set(changed) | set(forget)
        how = rng.random()
        if how < 0.15 and named:
            # One change the caller does not name: the texts must still be right.
            named.discard(next(iter(named)))
        elif how < 0.25 and ledger:
            # A value changed in place behind the copy-on-write rule's back, and named.
            victim = rng.choice(list(ledger))
            ledger[victim] = {**ledger[victim], P: float(rng.randrange(100, 200))}
            named.add(victim)
        texts.update(ledger, named)
        for shard in range(SHARDS):
            assert texts.text(ledger, shard) == expected(ledger, shard), (seed, _step, shard)


def test_an_entity_added_without_being_named_is_found_by_the_count() -> None:
    texts = fmt.ShardTexts(SHARDS)
    a, b = Entity.for_user("a"), Entity.for_user("b")
    ledger: Ledger = {a: {P: 1.0}}
    texts.update(ledger, [a])
    ledger = {**ledger, b: {C: 2.0}}
    texts.update(ledger, [])
    assert [texts.text(ledger, s) for s in range(SHARDS)] == [expected(ledger, s) for s in range(SHARDS)]
    assert sum(texts.count(s) for s in range(SHARDS)) == 2


def test_only_changed_entries_are_encoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger: Ledger = {Entity.for_user(f"u{i}"): {P: float(i + 1)} for i in range(400)}
    texts = fmt.ShardTexts(SHARDS)
    texts.reindex(ledger)
    for shard in range(SHARDS):
        texts.text(ledger, shard)
    encoded: list[Entity] = []
    real = fmt.encode_row

    def counting(e: Entity, values: dict[QuotaKey, float]) -> str:
        encoded.append(e)
        return real(e, values)

    monkeypatch.setattr(fmt, "encode_row", counting)
    one = Entity.for_user("u7")
    ledger = apply_ledger(ledger, {one: {P: 9.0}}, {})
    texts.update(ledger, [one])
    shard = fmt.shard_of(one, SHARDS)
    text = texts.text(ledger, shard)
    assert encoded == [one]
    assert text == expected(ledger, shard)


@pytest.mark.parametrize("seed", range(6))
def test_the_store_writes_what_encoding_the_whole_ledger_would(seed: int) -> None:
    """Every shard on the (in-memory) API server says exactly the ledger, save after save, repair included."""
    rng = random.Random(seed)
    api = Api()
    st = store(api, "c")
    ledger: Ledger = {}

    async def history() -> None:
        nonlocal ledger
        for step in range(120):
            changed = {entity(rng): {rng.choice((P, C)): float(rng.randrange(1, 50))} for _ in range(rng.randrange(3))}
            forget = {e: set(ledger[e]) for e in rng.sample(sorted(ledger, key=Entity.sort_key), min(1, len(ledger)))}
            if rng.random() < 0.5:
                forget = {}
            ledger = apply_ledger(ledger, changed, forget)
            await st.save(ledger, set(changed) | set(forget))
            if step % 40 == 39:
                # A shard edited by hand: repair puts the ledger back.
                name = shard_name("c", rng.randrange(fmt.SHARDS))
                if name in api.objects:
                    api.objects[name].data = {DATA_KEY: fmt.encode_shard({})}
                await st.repair(ledger)
        # Every shard that holds an entity was written, and says exactly its part of the ledger.
        for shard, entries in fmt.split(ledger, fmt.SHARDS).items():
            cm = api.objects.get(shard_name("c", shard))
            if entries:
                assert cm is not None
                assert cm.data[DATA_KEY] == fmt.encode_shard(entries)
        assert await store(api, "c").load() == ledger

    asyncio.run(history())
