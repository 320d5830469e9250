"""The act step of a pass: write ownership ahead, alter the brokers, roll back what they refused.

Ownership is written ahead: keys are recorded in the ledger *before* they are
sent, and forgotten only *after* their removal succeeded, so a crash at any
point leaves the ledger a superset of what kquota set. The in-memory ledger is
the caller's as soon as the write-ahead is saved (``ahead``), so an alter that
raises (its answer lost, the change perhaps applied) leaves memory a superset
too. The broker applies each entity's keys atomically and every entity's ops go
in one request (the adapter guarantees it), so no entity is half-changed; a
rejected entity's write-ahead records are rolled back to what they were, and a
removal it refused leaves the key owned: the next pass removes it, and a
deleted resource's finalizer waits for that (issue #33: dropping the entity
from the ledger instead made the key no one's, left on the brokers for good).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kquota.domain.decide import Decision, Rejection
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import apply_ledger
from kquota.domain.status import Reason
from kquota.kafka.errors import EntityResult, KafkaNotAuthorized
from kquota.reconcile import metrics
from kquota.reconcile.ports import LedgerPort, QuotaAdminPort

log = logging.getLogger(__name__)

Ledger = dict[Entity, dict[QuotaKey, float]]

#: Per-entity errors that say the broker could not apply the change *now*, not
#: that the value is wrong: retried after a short wait, reported as
#: KafkaUnavailable (in progress), never held for rejected_retry_seconds.
TRANSIENT_ERRORS = frozenset(
    {
        "UNKNOWN_SERVER_ERROR",
        "REQUEST_TIMED_OUT",
        "NOT_CONTROLLER",
        "NETWORK_EXCEPTION",
        "BROKER_NOT_AVAILABLE",
        "LEADER_NOT_AVAILABLE",
        "THROTTLING_QUOTA_EXCEEDED",
        "CONCURRENT_TRANSACTIONS",
    }
)


@dataclass(frozen=True, slots=True)
class Acted:
    """What act did: the ledger after it, the entities the brokers refused, and why."""

    ledger: Ledger
    #: Entities whose change failed, with the broker's message.
    failed: Mapping[Entity, str]
    #: The failed entities whose error is transient (sent again soon, not held back).
    transient: frozenset[Entity]
    #: Rejections to hold back, including those decide kept.
    rejections: Mapping[Entity, Rejection]
    #: The brokers refused AlterClientQuotas itself (a missing ACL): the pass ends in backoff.
    acl_refusal: KafkaNotAuthorized | None


async def act(
    cluster: str,
    admin: QuotaAdminPort,
    store: LedgerPort,
    ledger: Ledger,
    decision: Decision[Any],
    retry_at: float,
    ahead: Callable[[Ledger], None] = lambda _: None,
    blocking: Callable[[Callable[[], list[EntityResult]]], Awaitable[list[EntityResult]]] = asyncio.to_thread,
) -> Acted:
    """Write ahead, send ``decision.sendable`` in one alter, roll back and remember what the brokers refused.

    ``ahead`` gets the ledger once its write-ahead is saved, before anything is sent;
    ``blocking`` runs the alter off the event loop (the cluster's own threads, :mod:`~kquota.reconcile.blocking`).
    """
    sendable = decision.sendable
    record = decision.record
    # What each recorded entity held before (None: nothing); only these are rolled back.
    before = {e: (dict(ledger[e]) if e in ledger else None) for e in record}
    ledger = apply_ledger(ledger, record, {})
    if record:
        await store.save(ledger, record.keys())
    ahead(ledger)

    failed: dict[Entity, str] = {}
    transient: set[Entity] = set()
    acl_refusal: KafkaNotAuthorized | None = None
    if sendable:
        metrics.QUEUE_DEPTH.labels(cluster).set(len(sendable))
        metrics.BATCH_OPS.labels(cluster).observe(sum(len(c.ops) for c in sendable))
        try:
            results = await blocking(partial(admin.alter, sendable))
        except KafkaNotAuthorized as exc:
            # No ALTER_CONFIGS: roll back like a rejection below, but hold nothing back
            # (granting the ACL is enough), then end the pass in backoff.
            acl_refusal, results = exc, list(exc.results)
        for res in results:
            if not res.ok:
                failed[res.entity] = res.error_message or f"error code {res.error_code}"
                if res.error_name in TRANSIENT_ERRORS:
                    transient.add(res.entity)
        metrics.QUEUE_DEPTH.labels(cluster).set(0)

    # Roll back the write-ahead for rejected entities (the broker changed nothing there). An
    # entity that was not recorded ahead (a removal only) keeps its ledger entry: its keys are
    # still on the brokers and still kquota's to remove.
    rejections = dict(decision.rejections)
    for entity, message in failed.items():
        if entity in before:
            previous = before[entity]
            if previous is None:
                ledger.pop(entity, None)
            else:
                ledger[entity] = previous
        if acl_refusal is not None:
            continue
        change = next(c for c in sendable if c.entity == entity)
        if entity in transient:
            # Not the value's fault (e.g. the controller failed the request):
            # try again soon, without holding the change back.
            metrics.ERRORS.labels(cluster, Reason.KAFKA_UNAVAILABLE.value).inc()
            log.warning("cluster %s: broker could not apply %s now: %s; retrying", cluster, entity, message)
            continue
        rejections[entity] = Rejection(change, message, retry_at)
        metrics.ERRORS.labels(cluster, Reason.REJECTED.value).inc()
        log.warning("cluster %s: broker rejected %s: %s", cluster, entity, message)
    forget = {e: keys for e, keys in decision.forget.items() if e not in failed and e not in decision.held_back}
    ledger = apply_ledger(ledger, {}, forget)
    if failed or forget:
        await store.save(ledger, set(failed) | set(forget))
    metrics.OWNED_KEYS.labels(cluster).set(sum(len(v) for v in ledger.values()))
    return Acted(ledger, failed, frozenset(transient), rejections, acl_refusal)
