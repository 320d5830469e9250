"""The ledger grows past 16 ConfigMaps without ever losing an entity, even when a save stops half-way.

The API server's side is an in-memory stand-in that refuses, like the real one,
a ConfigMap whose data passes 1 MiB, and that can fail the n-th write (an API
server outage or an operator crash mid-save). The real API server's limit is
exercised in tests/e2e/test_ledger_store.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from kquota.domain import ledger as fmt
from kquota.domain.entities import Entity, QuotaKey
from kquota.k8s.ledger import LABEL, RETIRED_LABEL, SHARDS_LABEL, LedgerStore, label_value, shard_name

P, C = QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE
Ledger = dict[Entity, dict[QuotaKey, float]]
LIMIT = 1_048_576


class Refused(Exception):
    pass


@dataclass
class Meta:
    name: str
    labels: dict[str, str]


@dataclass
class ConfigMap:
    metadata: Meta
    data: dict[str, str]


@dataclass
class Api:
    """ConfigMaps by name; ``fail_at`` makes the n-th write (counting from 1) fail."""

    objects: dict[str, ConfigMap] = field(default_factory=dict)
    writes: int = 0
    fail_at: int | None = None

    async def list_config_maps(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        # As the API server returns them: JSON objects.
        key, value = selector.split("=")
        return [
            {"metadata": {"name": cm.metadata.name, "labels": dict(cm.metadata.labels)}, "data": dict(cm.data)}
            for cm in self.objects.values()
            if cm.metadata.labels.get(key) == value
        ]

    async def put_config_map(self, namespace: str, name: str, labels: dict[str, str], data: dict[str, str]) -> None:
        self.writes += 1
        if self.fail_at is not None and self.writes >= self.fail_at:
            raise Refused(f"write {self.writes} failed")
        if sum(len(k) + len(v.encode()) for k, v in data.items()) > LIMIT:
            raise Refused(f"{name}: Too long: must have at most {LIMIT} bytes")
        self.objects[name] = ConfigMap(Meta(name, dict(labels)), dict(data))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def store(api: Api, cluster: str = "main") -> LedgerStore:
    return LedgerStore(api, "kquota-system", cluster)  # type: ignore[arg-type]  # the stand-in has the methods


def long_pairs(count: int, start: int = 0) -> Ledger:
    """User/client-id pairs with 1,024-character names of 4-byte characters: 8 KiB of names each."""
    wide = "\U0001d11e" * 1018
    return {
        Entity.for_pair(f"{wide}u{i:05d}", f"{wide}c{i:05d}"): {P: float(i), C: 2.0 * i}
        for i in range(start, start + count)
    }


def test_ordinary_names_stay_in_sixteen_shards() -> None:
    led: Ledger = {Entity.for_pair(f"team-{i}", f"app-{i}"): {P: 1e6, C: 2e6} for i in range(20_000)}
    assert fmt.shards_needed(led) == fmt.SHARDS


def test_long_names_double_the_shards_until_each_fits() -> None:
    led = long_pairs(2_500)
    shards = fmt.shards_needed(led)
    assert shards > fmt.SHARDS and shards & (shards - 1) == 0
    parts = fmt.split(led, shards)
    assert max(fmt.encoded_size(fmt.encode_shard(p)) for p in parts.values()) <= fmt.SHARD_BYTES
    # ... and the next smaller layout would not have fitted.
    smaller = fmt.split(led, shards // 2)
    assert max(fmt.encoded_size(fmt.encode_shard(p)) for p in smaller.values()) > fmt.SHARD_BYTES


def test_beyond_the_most_shards_the_error_says_how_big_the_ledger_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fmt, "MAX_SHARDS", 16)
    with pytest.raises(fmt.LedgerTooLarge, match=r"2500 entities, \d+ MiB\) does not fit 16 ConfigMaps"):
        fmt.shards_needed(long_pairs(2_500))


def save_in_batches(s: LedgerStore, led: Ledger, batch: int = 200) -> Ledger:
    """Grow the ledger the way the engine does: write-ahead of each batch, then save it."""
    current: Ledger = {}
    items = list(led.items())
    for i in range(0, len(items), batch):
        chunk = dict(items[i : i + batch])
        current = {**current, **chunk}
        run(s.save(current, chunk.keys()))
    return current


def test_a_growing_ledger_moves_to_more_shards_and_reads_back_exactly() -> None:
    api = Api()
    s = store(api)
    led = save_in_batches(s, long_pairs(2_500))
    assert s.shards > fmt.SHARDS
    assert run(store(api).load()) == led
    live = run(api.list_config_maps("", f"{LABEL}=main"))
    assert {cm["metadata"]["name"] for cm in live} == {shard_name("main", i, s.shards) for i in range(s.shards)}
    assert all(cm["metadata"]["labels"][SHARDS_LABEL] == str(s.shards) for cm in live)
    # The first layout is retired, emptied, not left to be read.
    retired = [cm for cm in api.objects.values() if RETIRED_LABEL in cm.metadata.labels]
    assert retired and all(not cm.data and LABEL not in cm.metadata.labels for cm in retired)
    assert {cm.metadata.name for cm in retired} <= {shard_name("main", i) for i in range(fmt.SHARDS)}


def test_later_saves_write_only_the_touched_shards_of_the_grown_layout() -> None:
    api = Api()
    s = store(api)
    led = save_in_batches(s, long_pairs(2_500))
    before = api.writes
    one = next(iter(led))
    led = {**led, one: {P: 1.0}}
    assert run(s.save(led, [one])) == 1
    assert api.writes == before + 1
    assert run(store(api).load())[one] == {P: 1.0}


@pytest.mark.parametrize("failing_write", ["first shard of the new layout", "middle", "last shard", "retiring"])
def test_a_save_that_stops_half_way_through_growing_loses_nothing(failing_write: str) -> None:
    api = Api()
    s = store(api)
    # Just below growing: the next batch makes a shard too big.
    base = long_pairs(1_400)
    save_in_batches(s, base)
    assert s.shards == fmt.SHARDS, "the set-up must start from the first layout"
    grown = {**base, **long_pairs(600, start=1_400)}
    needed = fmt.shards_needed(grown)
    assert needed > fmt.SHARDS
    offset = {"first shard of the new layout": 1, "middle": needed // 2, "last shard": needed, "retiring": needed + 3}
    api.fail_at = api.writes + offset[failing_write]
    with pytest.raises(Refused):
        run(s.save(grown, grown.keys() - base.keys()))
    api.fail_at = None
    # A restarted operator reads a whole layout: the one before, or (once the new one was
    # written whole) the new one. Never a mixture that lacks an entity of either.
    after = store(api)
    loaded = run(after.load())
    assert loaded == (grown if failing_write == "retiring" else base)
    # Saving again from there finishes the move.
    run(after.save(grown, grown.keys()))
    assert run(store(api).load()) == grown
    assert len(run(api.list_config_maps("", f"{LABEL}=main"))) == after.shards == needed


def test_long_cluster_names_get_valid_labels_and_names() -> None:
    cluster = "kafka-" + "x" * 240
    api = Api()
    s = store(api, cluster)
    led: Ledger = {Entity.for_user("u"): {P: 1.0}}
    run(s.save(led, led.keys()))
    (cm,) = api.objects.values()
    assert len(cm.metadata.labels[LABEL]) <= 63 and cm.metadata.labels[LABEL] == label_value(cluster)
    assert len(cm.metadata.name) <= 253
    assert run(store(api, cluster).load()) == led
    # Another long name with the same first 63 characters is another ledger.
    assert run(store(api, "kafka-" + "x" * 239 + "y").load()) == {}
