"""Kafka's client-quota admin APIs: DescribeClientQuotas and AlterClientQuotas.

This is the one place that reads and writes broker quota configuration. The
requests are kafka-python's protocol classes sent over a ``Connection``;
changes come in as the domain's ``EntityChange`` (the type ``plan`` produces),
results go out as ``EntityResult``. An integration test against a real broker
(tests/integration/test_quota_adapter.py) keeps a kafka-python upgrade from
breaking this silently.

Without DESCRIBE_CONFIGS (reads) or ALTER_CONFIGS (writes) on the cluster the
broker refuses the whole request: that raises ``KafkaNotAuthorized``, never a
silent empty answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange
from kquota.kafka.batching import batches, check
from kquota.kafka.connection import Connection
from kquota.kafka.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    UNKNOWN_SERVER_ERROR,
    EntityResult,
    KafkaNotAuthorized,
    QuotaRequestError,
    error_name,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RawQuotaEntry:
    """One entry exactly as the broker described it, including types/keys kquota does not know."""

    parts: tuple[tuple[str, str | None], ...]
    values: tuple[tuple[str, float], ...]


def describe_all_raw(conn: Connection) -> list[RawQuotaEntry]:
    """Every quota entry on the cluster, as the broker reports it."""
    # No components and strict=false is "everything"; any broker answers
    # from its metadata image.
    return _describe(conn, DescribeClientQuotasRequest(components=[], strict=False))


def describe_entity(conn: Connection, entity: Entity) -> dict[QuotaKey, float]:
    """The quotas set on exactly this entity (one small request, for polling)."""
    # match_type 0 = EXACT name, 1 = DEFAULT entity; strict excludes entities with more parts.
    component = DescribeClientQuotasRequest.ComponentData
    components = [
        component(entity_type=etype, match_type=1 if name is None else 0, match=name)
        for etype, name in entity.parts().items()
    ]
    for raw in _describe(conn, DescribeClientQuotasRequest(components=components, strict=True)):
        if Entity.from_parts(dict(raw.parts)) == entity:
            return {QuotaKey(k): v for k, v in raw.values if k in QuotaKey._value2member_map_}
    return {}


def _describe(conn: Connection, request: Any) -> list[RawQuotaEntry]:
    response = conn.send(request, "DescribeClientQuotas")
    if response.error_code == CLUSTER_AUTHORIZATION_FAILED:
        raise KafkaNotAuthorized(conn.principal, "DESCRIBE_CONFIGS", "CLUSTER", [], "DescribeClientQuotas")
    if response.error_code:
        raise QuotaRequestError(response.error_code, error_name(response.error_code), response.error_message)
    entries: list[RawQuotaEntry] = []
    for entry in response.entries or ():
        parts = tuple((str(e.entity_type), None if e.entity_name is None else str(e.entity_name)) for e in entry.entity)
        values = tuple((str(v.key), float(v.value)) for v in entry.values)
        entries.append(RawQuotaEntry(parts, values))
    return entries


def describe_all(conn: Connection) -> dict[Entity, dict[QuotaKey, float]]:
    """Every quota kquota understands: entity -> {key: value}.

    Entity types or keys from a newer Kafka are left out (logged at debug;
    ``describe_all_raw`` shows them) rather than failing the whole read.
    """
    out: dict[Entity, dict[QuotaKey, float]] = {}
    for raw in describe_all_raw(conn):
        try:
            entity = Entity.from_parts(dict(raw.parts))
        except ValueError as exc:
            log.debug("skipping quota entity %r unknown to kquota: %s", raw.parts, exc)
            continue
        values: dict[QuotaKey, float] = {}
        for key, value in raw.values:
            try:
                values[QuotaKey(key)] = value
            except ValueError:
                log.debug("skipping quota key %r of %s unknown to kquota", key, entity)
        if values:
            out[entity] = values
    return out


def alter(conn: Connection, changes: Sequence[EntityChange], validate_only: bool = False) -> list[EntityResult]:
    """Apply ``changes``; return one result per entity, in the given order.

    Each entity is applied all-or-nothing by the broker, independently of
    the others, and requests are cut between entities (batching.py). If the
    connection fails after some requests went through, ``KafkaUnavailable`` is
    raised and those changes stay applied: callers re-read the live state
    anyway. Removing a key that is not set succeeds and changes nothing.

    Without ALTER_CONFIGS on the cluster the broker refuses the whole
    request: ``KafkaNotAuthorized`` is raised, carrying the same per-entity
    results (refused and unsent entities not ok, so nothing is mistaken
    for applied); later batches are not sent.
    """
    check(changes)
    results: dict[Entity, EntityResult] = {}
    refused = False
    for batch in batches(changes):
        if refused:
            break
        request = AlterClientQuotasRequest(entries=[_entry(change) for change in batch], validate_only=validate_only)
        response = conn.send(request, "AlterClientQuotas")
        for entry in response.entries:
            parts = {str(e.entity_type): None if e.entity_name is None else str(e.entity_name) for e in entry.entity}
            entity = Entity.from_parts(parts)
            code = int(entry.error_code)
            results[entity] = EntityResult(entity, code, entry.error_message or None, error_name(code))
            refused = refused or code == CLUSTER_AUTHORIZATION_FAILED
    missing = "not sent: an earlier request was refused" if refused else "no result in the broker's answer"
    out = [
        results.get(c.entity) or EntityResult(c.entity, UNKNOWN_SERVER_ERROR, missing, error_name(UNKNOWN_SERVER_ERROR))
        for c in changes
    ]
    if refused:
        raise KafkaNotAuthorized(conn.principal, "ALTER_CONFIGS", "CLUSTER", [], "AlterClientQuotas", results=out)
    return out


def _entry(change: EntityChange) -> Any:
    data = AlterClientQuotasRequest.EntryData
    return data(
        entity=[data.EntityData(entity_type=t, entity_name=n) for t, n in change.entity.parts().items()],
        ops=[
            data.OpData(key=op.key.value, value=0.0 if op.value is None else float(op.value), remove=op.value is None)
            for op in change.ops
        ],
    )
