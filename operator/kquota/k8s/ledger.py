"""The ownership ledger stored in ConfigMaps (format in ``kquota.domain.ledger``).

One set of shards per Kafka cluster, in the operator's namespace, labelled
``kquota.io/ledger=<cluster>``. Loaded once when a cluster's reconciler starts,
then kept in memory and written through: the operator is the only writer (Kopf
peering keeps one replica active), so the in-memory copy is authoritative.

A save rewrites only the shards holding the entities it was given, and encodes
only the entries that changed (``fmt.ShardTexts`` keeps the rest); every full
pass rewrites the shards changed by hand (:meth:`LedgerStore.repair`). When one of
them would pass the API server's size limit, the ledger moves to a layout with
more shards: the new layout is written whole (every shard, empty ones too) under
new names, and only then is the old one retired. A crash in between leaves the
old layout whole and the new one incomplete, and :meth:`LedgerStore.load` reads
the largest *complete* layout, so the ledger never loses an entity.

Retired shards are emptied and relabelled ``kquota.io/ledger-retired``, not
deleted: the operator's Role has no ``delete`` on ConfigMaps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from kquota.domain import ledger as fmt
from kquota.domain.entities import Entity, QuotaKey
from kquota.k8s.api import Kube

LABEL = "kquota.io/ledger"
SHARDS_LABEL = "kquota.io/ledger-shards"
RETIRED_LABEL = "kquota.io/ledger-retired"
DATA_KEY = "ledger.json"


def _hashed(cluster: str, limit: int) -> str:
    return cluster if len(cluster) <= limit else "h-" + hashlib.sha256(cluster.encode()).hexdigest()[:16]


def label_value(cluster: str) -> str:
    """The ``kquota.io/ledger`` label of a cluster's shards: label values stop at 63 characters."""
    return _hashed(cluster, 63)


def selector(cluster: str) -> str:
    return f"{LABEL}={label_value(cluster)}"


def shard_name(cluster: str, shard: int, shards: int = fmt.SHARDS) -> str:
    # Cluster names are DNS subdomains already; the hash keeps long ones within 253 chars.
    # The first layout keeps its original names; larger ones carry their size, so two
    # layouts never share a name and a half-written one never overwrites the other.
    short = _hashed(cluster, 200)
    if shards == fmt.SHARDS:
        return f"kquota-ledger-{short}-{shard:02d}"
    return f"kquota-ledger-{short}.s{shards}-{shard:04d}"


def _shards_of(cm: Mapping[str, Any]) -> int:
    labels = cm.get("metadata", {}).get("labels") or {}
    try:
        return int(labels.get(SHARDS_LABEL, fmt.SHARDS))
    except ValueError:
        return fmt.SHARDS


class LedgerStore:
    def __init__(self, kube: Kube, namespace: str, cluster: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.cluster = cluster
        #: Shards of the layout in use (known after load()).
        self.shards = fmt.SHARDS
        #: ConfigMaps of other layouts found by load() (a move cut short): retired by the next save.
        self._stale: list[str] = []
        #: The shards' texts as the last save or repair made them (None: none yet, or another layout since).
        self._texts: fmt.ShardTexts | None = None

    async def load(self) -> dict[Entity, dict[QuotaKey, float]]:
        layouts: dict[int, list[Any]] = {}
        for cm in await self.kube.list_config_maps(self.namespace, selector(self.cluster)):
            layouts.setdefault(_shards_of(cm), []).append(cm)
        # The largest layout written whole; the first layout is whole by definition
        # (its shards are written as entities arrive, an absent shard is an empty one).
        complete = [n for n, cms in layouts.items() if n == fmt.SHARDS or len(cms) == n]
        self.shards = max(complete, default=fmt.SHARDS)
        self._texts = None
        self._stale = [cm["metadata"]["name"] for n, cms in layouts.items() if n != self.shards for cm in cms]
        out: dict[Entity, dict[QuotaKey, float]] = {}
        for cm in layouts.get(self.shards, []):
            text = (cm.get("data") or {}).get(DATA_KEY)
            if text:
                out.update(self._decode(cm, text))
        return out

    def _decode(self, cm: Mapping[str, Any], text: str) -> dict[Entity, dict[QuotaKey, float]]:
        """One shard's entries; an unreadable shard names its ConfigMap.

        A shard from a newer operator (LedgerFromNewerOperator) or a malformed one
        (LedgerMalformed) fails the whole load: a ledger read in part would forget
        who owns the keys in the unread shards, and the next save of such a shard
        would overwrite it.
        """
        where = f"ConfigMap {self.namespace}/{cm.get('metadata', {}).get('name', '?')}"
        try:
            return fmt.decode_shard(text)
        except fmt.LedgerFromNewerOperator as exc:
            raise fmt.LedgerFromNewerOperator(exc.found, exc.supported, where) from exc
        except fmt.LedgerMalformed as exc:
            raise fmt.LedgerMalformed(f"{where}: {exc}") from exc

    async def save(self, ledger: Mapping[Entity, Mapping[QuotaKey, float]], entities: Iterable[Entity]) -> int:
        """Rewrite the shards holding ``entities``; returns how many shards were written."""
        entities = tuple(entities)
        touched = fmt.touched_shards(entities, self.shards)
        if not touched:
            return 0
        shard_texts = self._shard_texts(ledger, entities)
        texts = {shard: shard_texts.text(ledger, shard) for shard in sorted(touched)}
        if all(fmt.encoded_size(text) <= fmt.SHARD_BYTES for text in texts.values()):
            for shard, text in texts.items():
                await self._put(self.shards, shard, text)
            await self._retire(self._stale)
            return len(texts)
        return await self._grow(ledger)

    async def repair(self, ledger: Mapping[Entity, Mapping[QuotaKey, float]]) -> list[str]:
        """Rewrite every shard that no longer says what ``ledger`` (the operator's own record) says.

        kquota is the only writer, so a shard deleted, emptied or edited in the API server was changed
        by hand, and the operator still knows exactly what it owns: left alone, the next operator to
        start (a restart, a failover) would load the changed ledger and forget which keys are its own,
        and deleting their resources would leave them on the brokers. Returns one line per shard
        rewritten, naming it and what was found, for the caller to say (a log line, an event).
        """
        found = {
            cm["metadata"]["name"]: cm
            for cm in await self.kube.list_config_maps(self.namespace, selector(self.cluster))
            if _shards_of(cm) == self.shards
        }
        lines = []
        shard_texts = self._shard_texts(ledger, None)
        for shard in range(self.shards):
            name = shard_name(self.cluster, shard, self.shards)
            cm = found.get(name)
            text = shard_texts.text(ledger, shard)
            # An absent shard of the first layout is an empty one (they are written as entities arrive).
            if cm is None and text == fmt.join_rows(()) and self.shards == fmt.SHARDS:
                continue
            if cm is not None and (cm.get("data") or {}).get(DATA_KEY) == text:
                continue
            what = "missing (deleted, or its labels removed)" if cm is None else "changed outside kquota"
            await self._put(self.shards, shard, text)
            lines.append(
                f"ownership ledger ConfigMap {self.namespace}/{name} was {what}: rewritten with the "
                f"{shard_texts.count(shard)} entities kquota owns there"
            )
        return lines

    def _shard_texts(
        self, ledger: Mapping[Entity, Mapping[QuotaKey, float]], changed: Iterable[Entity] | None
    ) -> fmt.ShardTexts:
        """The shards' texts kept from the last save, told which entities changed (None: check every entity)."""
        texts = self._texts
        if texts is None or texts.shards != self.shards:
            texts = self._texts = fmt.ShardTexts(self.shards)
            changed = None
        if changed is None:
            texts.reindex(ledger)
        else:
            texts.update(ledger, changed)
        return texts

    async def _grow(self, ledger: Mapping[Entity, Mapping[QuotaKey, float]]) -> int:
        shards = fmt.shards_needed(ledger, self.shards * 2)
        parts = fmt.split(ledger, shards)
        for shard in range(shards):
            await self._put(shards, shard, fmt.encode_shard(parts[shard]))
        # The new layout is whole: from here on load() reads it, so the old one can go.
        keep = {shard_name(self.cluster, shard, shards) for shard in range(shards)}
        live = await self.kube.list_config_maps(self.namespace, selector(self.cluster))
        self.shards = shards
        self._texts = None
        await self._retire([cm["metadata"]["name"] for cm in live if cm["metadata"]["name"] not in keep])
        return shards

    async def _retire(self, names: list[str]) -> None:
        # One by one off the list: a save that fails half-way leaves the rest to the next one.
        while names:
            await self.kube.put_config_map(
                self.namespace,
                names[-1],
                {RETIRED_LABEL: label_value(self.cluster), "app.kubernetes.io/managed-by": "kquota"},
                {},
            )
            names.pop()

    async def _put(self, shards: int, shard: int, text: str) -> None:
        await self.kube.put_config_map(
            self.namespace,
            shard_name(self.cluster, shard, shards),
            {LABEL: label_value(self.cluster), SHARDS_LABEL: str(shards), "app.kubernetes.io/managed-by": "kquota"},
            {DATA_KEY: text},
        )
