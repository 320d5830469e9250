"""The ownership ledger stored in ConfigMaps (format in ``kquota.domain.ledger``).

One set of shards per Kafka cluster, in the operator's namespace, labelled
``kquota.io/ledger=<cluster>``. Loaded once when a cluster's reconciler starts,
then kept in memory and written through: the operator is the only writer (Kopf
peering keeps one replica active), so the in-memory copy is authoritative.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from kquota.domain import ledger as fmt
from kquota.domain.entities import Entity, QuotaKey
from kquota.k8s.api import Kube

LABEL = "kquota.io/ledger"
DATA_KEY = "ledger.json"


def _name(cluster: str, shard: int) -> str:
    # Cluster names are DNS labels already; the hash keeps long ones within 253 chars.
    short = cluster if len(cluster) <= 200 else hashlib.sha256(cluster.encode()).hexdigest()[:16]
    return f"kquota-ledger-{short}-{shard:02d}"


class LedgerStore:
    def __init__(self, kube: Kube, namespace: str, cluster: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.cluster = cluster

    async def load(self) -> dict[Entity, dict[QuotaKey, float]]:
        out: dict[Entity, dict[QuotaKey, float]] = {}
        for cm in await self.kube.list_config_maps(self.namespace, f"{LABEL}={self.cluster}"):
            text = (cm.data or {}).get(DATA_KEY)
            if text:
                out.update(fmt.decode_shard(text))
        return out

    async def save(self, ledger: Mapping[Entity, Mapping[QuotaKey, float]], entities: Iterable[Entity]) -> int:
        """Rewrite the shards holding ``entities``; returns how many shards were written."""
        shards = fmt.touched_shards(entities)
        if not shards:
            return 0
        parts = fmt.split(ledger)
        for shard in sorted(shards):
            await self.kube.put_config_map(
                self.namespace,
                _name(self.cluster, shard),
                {LABEL: self.cluster, "app.kubernetes.io/managed-by": "kquota"},
                {DATA_KEY: fmt.encode_shard(parts[shard])},
            )
        return len(shards)
