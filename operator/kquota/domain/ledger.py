"""The ownership ledger's data format: which (entity, key) kquota set, and to what.

The ledger is what makes ownership durable: after a restart, or after a resource
was deleted while the operator was down, the keys in the ledger that no
resource wants are exactly the keys to remove, and nothing else is touched.

It is stored as JSON in a few ConfigMaps per Kafka cluster (see
``kquota.k8s.ledger``). Entities are spread over shards by a stable hash so a
batch rewrites only the shards it touched and no object nears the 1 MiB limit
at tens of thousands of entities. Entity names are stored as JSON strings with
``null`` for the default entity, so any name Kafka accepts (unicode, commas,
``<default>`` itself) round-trips exactly.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from kquota.domain.entities import Entity, QuotaKey

SHARDS = 16
FORMAT_VERSION = 1


@functools.lru_cache(maxsize=1 << 17)
def shard_of(entity: Entity, shards: int = SHARDS) -> int:
    # Cached: every ledger save splits the whole ledger by shard, and a narrow
    # pass at 10,000 entities must not pay 10,000 JSON dumps and hashes for it.
    digest = hashlib.sha256(json.dumps(entity.parts(), sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:4], "big") % shards


def encode_shard(entries: Mapping[Entity, Mapping[QuotaKey, float]]) -> str:
    rows = [
        {"entity": e.parts(), "keys": {k.value: v for k, v in sorted(vals.items())}}
        for e, vals in sorted(entries.items(), key=lambda item: item[0].sort_key())
        if vals
    ]
    return json.dumps({"version": FORMAT_VERSION, "entries": rows}, separators=(",", ":"), ensure_ascii=False)


def decode_shard(text: str) -> dict[Entity, dict[QuotaKey, float]]:
    doc: Any = json.loads(text)
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"unsupported ledger format: {str(doc)[:80]}")
    out: dict[Entity, dict[QuotaKey, float]] = {}
    for row in doc["entries"]:
        entity = Entity.from_parts(row["entity"])
        out[entity] = {QuotaKey(k): float(v) for k, v in row["keys"].items()}
    return out


def split(
    ledger: Mapping[Entity, Mapping[QuotaKey, float]], shards: int = SHARDS
) -> dict[int, dict[Entity, Mapping[QuotaKey, float]]]:
    out: dict[int, dict[Entity, Mapping[QuotaKey, float]]] = {i: {} for i in range(shards)}
    for entity, values in ledger.items():
        out[shard_of(entity, shards)][entity] = values
    return out


def touched_shards(entities: Iterable[Entity], shards: int = SHARDS) -> set[int]:
    return {shard_of(e, shards) for e in entities}
