"""``QuotaAdmin``: the Kafka adapter as the reconciler and the CLI see it.

One object per cluster, holding one ``Connection`` (connected lazily,
reconnected after failures); each method is one request of client_quotas.py or
cluster_info.py. It satisfies ``kquota.reconcile.ports.QuotaAdminPort``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange
from kquota.kafka import client_quotas, cluster_info
from kquota.kafka.client_quotas import RawQuotaEntry
from kquota.kafka.connection import Connection
from kquota.kafka.errors import EntityResult
from kquota.kafka.settings import ConnectionSettings


class QuotaAdmin:
    """Describe and alter client quotas, and read what kquota needs of the cluster. Blocking; thread-safe."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self._conn = Connection(settings)

    def __repr__(self) -> str:
        s = self._conn.settings
        user = f", user={s.sasl_username!r}" if s.sasl_username else ""
        return f"QuotaAdmin({s.bootstrap_servers!r}, {s.security_protocol}{user})"

    @property
    def principal(self) -> str:
        """The principal the brokers see, as ACLs name it (as far as kquota can tell)."""
        return self._conn.principal

    def describe_all_raw(self) -> list[RawQuotaEntry]:
        """Every quota entry on the cluster, as the broker reports it."""
        return client_quotas.describe_all_raw(self._conn)

    def describe_all(self) -> dict[Entity, dict[QuotaKey, float]]:
        """Every quota kquota understands: entity -> {key: value}."""
        return client_quotas.describe_all(self._conn)

    def describe_entity(self, entity: Entity) -> dict[QuotaKey, float]:
        """The quotas set on exactly this entity."""
        return client_quotas.describe_entity(self._conn, entity)

    def alter(self, changes: Sequence[EntityChange], validate_only: bool = False) -> list[EntityResult]:
        """Apply ``changes`` (each entity whole); one result per entity, in order (see ``client_quotas.alter``)."""
        return client_quotas.alter(self._conn, changes, validate_only)

    def cluster_info(self) -> tuple[str, list[int]]:
        """The Kafka cluster's id and its brokers' ids."""
        return cluster_info.cluster_info(self._conn)

    def reachable(self, timeout: float) -> tuple[str, list[int]]:
        """The cluster's id and brokers, as :meth:`cluster_info`, but answered within ``timeout`` seconds, connecting
        included (a check that the brokers still answer); raises KafkaUnavailable otherwise."""
        return cluster_info.cluster_info(self._conn, timeout_ms=max(1, int(timeout * 1000)))

    def broker_ids(self) -> list[int]:
        """The ids of the brokers in the cluster."""
        return self.cluster_info()[1]

    def broker_configs(self, broker_id: int, keys: Sequence[str]) -> dict[str, str]:
        """Effective values (defaults included) of some configs of one broker."""
        return cluster_info.broker_configs(self._conn, broker_id, keys)

    def topic_config_names(self, topic: str) -> set[str]:
        """Every config key a topic has on these brokers."""
        return cluster_info.topic_config_names(self._conn, topic)

    def topic_leaders(self, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        """partition -> leader broker id per existing topic."""
        return cluster_info.topic_leaders(self._conn, topics)

    def close(self) -> None:
        self._conn.close()
