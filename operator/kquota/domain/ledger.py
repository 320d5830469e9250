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

Format versions. Every shard carries ``"version"``; version 1 is what kquota
0.1.0 wrote (``tests/data/ledger-0.1.0/`` keeps such a ledger, made by that
code, and a test reads it). :func:`decode_shard` reads a shard of this
version, brings an older known version up to date through :func:`migrate`, and
refuses a shard of a *newer* version with :class:`LedgerFromNewerOperator`: an
older operator cannot know what a newer format means, so it must not guess
(a wrong guess would un-throttle clients or forget ownership). Anything else
is :class:`LedgerMalformed`.

A future version N adds one pure step to ``MIGRATIONS`` (``N - 1`` -> ``N``)
and raises ``FORMAT_VERSION`` to N; an operator then reads every format since
``OLDEST_VERSION``, and writes only its own.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
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
#: The format this code writes (and the newest it reads). Version 1: kquota 0.1.0.
FORMAT_VERSION = 1
#: The oldest format this code reads: no release ever wrote an older one.
OLDEST_VERSION = 1

#: A shard document as JSON gives it: ``{"version": n, "entries": [...]}``.
Doc = dict[str, Any]

#: ``MIGRATIONS[n]`` turns a version-``n`` document into a version-``n + 1`` one:
#: pure, no I/O, so each step is table-tested. Empty while version 1 is the only
#: format; a version 2 adds ``MIGRATIONS[1]`` here and sets ``FORMAT_VERSION = 2``.
MIGRATIONS: dict[int, Callable[[Doc], Doc]] = {}


class LedgerTooLarge(ValueError):
    """Even MAX_SHARDS shards cannot hold the ledger."""


class LedgerFormatError(ValueError):
    """A ledger shard this code cannot read."""


class LedgerMalformed(LedgerFormatError):
    """Not a ledger shard of any known version: broken JSON, a missing field, an unknown entity type."""


class LedgerFromNewerOperator(LedgerFormatError):
    """A shard written by a newer kquota, in a format this code does not know: never guessed at."""

    def __init__(self, found: int, supported: int = FORMAT_VERSION, where: str = "") -> None:
        self.found = found
        self.supported = supported
        self.where = where
        readable = f"version {supported}" if supported == OLDEST_VERSION else f"versions {OLDEST_VERSION}-{supported}"
        super().__init__(
            f"the ownership ledger{f' ({where})' if where else ''} is in format version {found}, written by a "
            f"newer kquota; this operator reads format {readable} only, so it changes nothing on this cluster: "
            "upgrade the operator to the release that wrote it, or restore the ledger ConfigMaps saved before "
            "that upgrade"
        )


@functools.lru_cache(maxsize=1 << 17)
def shard_of(entity: Entity, shards: int = SHARDS) -> int:
    # Cached: every ledger save splits the whole ledger by shard, and a narrow
    # pass at 10,000 entities must not pay 10,000 JSON dumps and hashes for it.
    digest = hashlib.sha256(json.dumps(entity.parts(), sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:4], "big") % shards


def encode_row(entity: Entity, values: Mapping[QuotaKey, float]) -> str:
    """One entry of a shard, as :func:`encode_shard` writes it."""
    row = {"entity": entity.parts(), "keys": {k.value: v for k, v in sorted(values.items())}}
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


def join_rows(rows: Iterable[str]) -> str:
    """A shard from its encoded entries, in order: exactly ``json.dumps`` of the whole document, compact."""
    return f'{{"version":{FORMAT_VERSION},"entries":[{",".join(rows)}]}}'


def encode_shard(entries: Mapping[Entity, Mapping[QuotaKey, float]]) -> str:
    """A shard's text: its non-empty entries in entity order (the same ledger always gives the same text)."""
    ordered = sorted(entries.items(), key=lambda item: item[0].sort_key())
    return join_rows(encode_row(e, vals) for e, vals in ordered if vals)


class ShardTexts:
    """The texts of a ledger's shards, kept from save to save so a save of a few entities encodes a few.

    A narrow pass at 50,000 entities saves one entity, and splitting the whole ledger
    by shard and encoding a shard of 3,000 entries for it was 45 ms of its CPU (issue
    #35). This keeps each shard's members in order and each entry's encoded row with
    the values it was encoded from. :meth:`text` gives exactly what :func:`encode_shard`
    would for that shard of the ledger it is given: every member's row is checked
    against the ledger's values (the same object, else encoded again: ledger values
    are copy-on-write, :func:`kquota.domain.plan.apply_ledger`) and a member gone from
    the ledger is dropped. Entities the caller names to :meth:`update` join or leave
    their shard; an entity added without being named would be missed, so a ledger
    whose size is not the members' count is split again whole (:meth:`reindex`).
    """

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self._members: list[set[Entity]] = [set() for _ in range(shards)]
        #: Each shard's members in entity order (None: to sort again).
        self._order: list[list[Entity] | None] = [None] * shards
        #: Each shard's encoded rows, with the values object each was encoded from.
        self._rows: list[dict[Entity, tuple[Mapping[QuotaKey, float], str]]] = [{} for _ in range(shards)]
        self._count = 0

    def reindex(self, ledger: Mapping[Entity, Mapping[QuotaKey, float]]) -> None:
        """Take every shard's members from ``ledger`` (encoded rows are kept where the values are the same)."""
        members: list[set[Entity]] = [set() for _ in range(self.shards)]
        for entity, values in ledger.items():
            if values:
                members[shard_of(entity, self.shards)].add(entity)
        for shard, now in enumerate(members):
            if now != self._members[shard]:
                self._order[shard] = None
                rows = self._rows[shard]
                for gone in self._members[shard] - now:
                    rows.pop(gone, None)
        self._members = members
        self._count = sum(len(m) for m in members)

    def update(self, ledger: Mapping[Entity, Mapping[QuotaKey, float]], entities: Iterable[Entity]) -> None:
        """``entities`` changed in ``ledger`` (set, changed or gone); any other change is found by :meth:`text`."""
        for entity in entities:
            shard = shard_of(entity, self.shards)
            members = self._members[shard]
            if ledger.get(entity):
                if entity not in members:
                    members.add(entity)
                    self._order[shard] = None
                    self._count += 1
            elif entity in members:
                members.discard(entity)
                self._rows[shard].pop(entity, None)
                self._order[shard] = None
                self._count -= 1
        if self._count != len(ledger):
            self.reindex(ledger)

    def count(self, shard: int) -> int:
        """Entities in shard ``shard`` (as of the last :meth:`text` of it)."""
        return len(self._members[shard])

    def text(self, ledger: Mapping[Entity, Mapping[QuotaKey, float]], shard: int) -> str:
        """Shard ``shard`` of ``ledger``, as :func:`encode_shard` gives it."""
        gone = [e for e in self._members[shard] if not ledger.get(e)]
        if gone:
            self.update(ledger, gone)
        order = self._order[shard]
        if order is None:
            order = self._order[shard] = sorted(self._members[shard], key=Entity.sort_key)
        rows = self._rows[shard]
        out = []
        for entity in order:
            values = ledger[entity]
            cached = rows.get(entity)
            if cached is None or cached[0] is not values:
                cached = rows[entity] = (values, encode_row(entity, values))
            out.append(cached[1])
        return join_rows(out)


def shard_version(doc: Any) -> int:
    """The format version of a decoded shard document; LedgerMalformed when it has none."""
    version = doc.get("version") if isinstance(doc, dict) else None
    # bool is an int in Python, and JSON's true is no version.
    if not isinstance(version, int) or isinstance(version, bool):
        raise LedgerMalformed(f"not a ledger shard (no integer version): {str(doc)[:80]}")
    return version


def migrate(doc: Doc) -> Doc:
    """``doc`` in the current format: each step of MIGRATIONS from its version on, in order.

    The current version is returned as it is. A newer one raises
    LedgerFromNewerOperator; one older than OLDEST_VERSION (no release wrote
    it) or without a step to the next version raises LedgerMalformed.
    """
    version = shard_version(doc)
    if version > FORMAT_VERSION:
        raise LedgerFromNewerOperator(version, FORMAT_VERSION)
    if version < OLDEST_VERSION:
        raise LedgerMalformed(f"unsupported ledger format version {version} (oldest known: {OLDEST_VERSION})")
    while version < FORMAT_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise LedgerMalformed(f"no migration from ledger format version {version} to {version + 1}")
        doc = step(doc)
        if shard_version(doc) != version + 1:
            raise LedgerMalformed(f"the migration from ledger format version {version} did not give {version + 1}")
        version += 1
    return doc


def decode_shard(text: str) -> dict[Entity, dict[QuotaKey, float]]:
    """One shard's entries, from any format version this code reads (see the module's docstring)."""
    try:
        doc: Any = json.loads(text)
    except ValueError as exc:
        raise LedgerMalformed(f"a ledger shard is not JSON: {exc}") from exc
    doc = migrate(doc)
    out: dict[Entity, dict[QuotaKey, float]] = {}
    try:
        for row in doc["entries"]:
            entity = Entity.from_parts(row["entity"])
            out[entity] = {QuotaKey(k): float(v) for k, v in row["keys"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LedgerMalformed(f"a ledger shard of version {FORMAT_VERSION} has a malformed entry: {exc!r}") from exc
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
