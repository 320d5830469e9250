"""The ownership ledger's data format: which (entity, key) kquota set, and to what.

The ledger is what makes ownership durable: after a restart, or after a resource
was deleted while the operator was down, the keys in the ledger that no
resource wants are exactly the keys to remove, and nothing else is touched.

It is stored as JSON in a few ConfigMaps per Kafka cluster (see
``kquota.k8s.ledger``). Entities are spread over shards by a stable hash so a
batch rewrites only the shards it touched. Sixteen shards hold tens of
thousands of entities with ordinary names; when a shard would pass the
API server's 1 MiB object limit (a thousand or so user/client-id pairs with
1,024-character names), the shard count doubles until every shard fits.
Entity names are stored as JSON strings with ``null`` for the default entity,
so any name Kafka accepts (unicode, commas, ``<default>`` itself) round-trips
exactly.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from kquota.domain.entities import Entity, QuotaKey

SHARDS = 16
#: Most shards (x 1 MiB): beyond this the ledger refuses to grow rather than fill etcd.
MAX_SHARDS = 1024
#: Largest encoded shard in UTF-8 bytes: the API server refuses a ConfigMap whose data
#: passes 1 MiB (1,048,576 bytes); the rest is margin for the key and the metadata. The
#: request carrying it is JSON with non-ASCII escaped (a 4-byte character becomes 12),
#: at most 3x this, which stays under the API server's 3 MiB request body limit.
SHARD_BYTES = 1_000_000
FORMAT_VERSION = 1


class LedgerTooLarge(ValueError):
    """Even MAX_SHARDS shards cannot hold the ledger."""


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


def encoded_size(text: str) -> int:
    """Bytes the API server counts for a shard's text (UTF-8)."""
    return len(text.encode())


def shards_needed(ledger: Mapping[Entity, Mapping[QuotaKey, float]], shards: int = SHARDS) -> int:
    """The least power-of-two multiple of ``shards`` in which every shard fits SHARD_BYTES.

    Never fewer than ``shards``: the count only grows, so a layout on the API
    server is never replaced by a smaller one that a crash could leave half-written.
    """
    while True:
        parts = split(ledger, shards)
        if all(encoded_size(encode_shard(entries)) <= SHARD_BYTES for entries in parts.values()):
            return shards
        if shards * 2 > MAX_SHARDS:
            size = sum(encoded_size(encode_shard(entries)) for entries in parts.values())
            raise LedgerTooLarge(
                f"the ownership ledger ({len(ledger)} entities, {size / 2**20:.0f} MiB) does not fit "
                f"{MAX_SHARDS} ConfigMaps of {SHARD_BYTES / 2**20:.2f} MiB"
            )
        shards *= 2
