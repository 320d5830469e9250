"""Part of the report step: the events of what a pass changed on the brokers.

DriftCorrected for each restored key, Contested when a key is restored too
often, Applied (exact old and new values) for each key set, QuotaRemoved (key,
old value, cause) for each key removed, LedgerRepaired for each ownership
ledger shard rewritten after a change by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set
from typing import Any

from kquota.domain.claims import ResourceClaim
from kquota.domain.contest import ContestTracker
from kquota.domain.decide import Decision
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import Drift, EntityChange, ResourceRef
from kquota.domain.status import value_text
from kquota.k8s.api import ObjectRef, gather_limited
from kquota.reconcile import metrics
from kquota.reconcile.ports import StatusWriter
from kquota.reconcile.records import object_ref
from kquota.reconcile.settings import OperatorSettings

log = logging.getLogger(__name__)

Holders = Mapping[tuple[Entity, QuotaKey], ResourceRef]
#: Which resource a removed key comes from: one being deleted, one whose edit dropped it, one found gone.
Causes = tuple[
    dict[tuple[Entity, QuotaKey], ResourceClaim],
    dict[Entity, ResourceClaim],
    dict[tuple[Entity, QuotaKey], ResourceClaim],
]


class Events:
    """The change events of a pass (part of :class:`~kquota.reconcile.engine.ClusterReconciler`)."""

    name: str
    kube: StatusWriter
    settings: OperatorSettings
    _contest: ContestTracker
    _entities_by_uid: dict[str, frozenset[Entity]]
    _cluster_object: Mapping[str, Any] | None
    _gone: Mapping[str, ResourceClaim]

    def _cluster_ref(self) -> ObjectRef | None:
        if self._cluster_object is None:
            return None
        meta = self._cluster_object.get("metadata") or {}
        return ObjectRef(
            "KafkaCluster", "kafkaclusters", None, str(meta.get("name", self.name)), str(meta.get("uid", ""))
        )

    async def _ledger_repaired(self, lines: list[str]) -> None:
        """Say each ledger shard rewritten after a change by hand: a Warning log line and event on the KafkaCluster."""
        ref = self._cluster_ref()
        for line in lines:
            log.warning("cluster %s: %s", self.name, line)
            if ref is not None:
                await self.kube.event(ref, "Warning", "LedgerRepaired", line)

    async def _drift_events(self, drifted: list[Drift], holders: Holders, records: tuple[ResourceClaim, ...]) -> None:
        by_ref = {r.ref: r for r in records}
        coros = []
        for d in drifted:
            log.info(
                "cluster %s: drift on %s %s: live %s, restoring %s",
                self.name,
                d.entity,
                d.key.value,
                d.live,
                value_text(d.expected),
            )
            ref = holders.get((d.entity, d.key))
            rec = by_ref.get(ref) if ref is not None else None
            if rec is not None:
                live = "unset" if d.live is None else value_text(d.live)
                coros.append(
                    self.kube.event(
                        object_ref(rec),
                        "Normal",
                        "DriftCorrected",
                        f"{d.key.value} on {d.entity.path()} was {live} on the brokers; "
                        f"restored to {value_text(d.expected)}",
                    )
                )
        await gather_limited(coros, self.settings.status_concurrency)

    async def _contest_events(
        self, contested: list[Drift], holders: Holders, records: tuple[ResourceClaim, ...]
    ) -> None:
        """A Warning event for each key that this pass's restore made contested (restored too often)."""
        if not contested:
            return
        by_ref = {r.ref: r for r in records}
        coros = []
        for d in contested:
            metrics.CONTESTED.labels(self.name).inc()
            text = (
                f"{d.key.value} on {d.entity.path()} was changed back on the brokers {self._contest.restores} times "
                f"within {self._contest.window:g}s: another writer is at work; kquota stops restoring it for "
                f"{self._contest.retry:g}s"
            )
            log.warning("cluster %s: %s", self.name, text)
            ref = holders.get((d.entity, d.key))
            rec = by_ref.get(ref) if ref is not None else None
            target = object_ref(rec) if rec is not None else self._cluster_ref()
            if target is not None:
                coros.append(self.kube.event(target, "Warning", "Contested", text))
        await gather_limited(coros, self.settings.status_concurrency)

    async def _pass_events(
        self,
        live: Mapping[Entity, Mapping[QuotaKey, float]],
        owned_before: Mapping[Entity, Mapping[QuotaKey, float]],
        decision: Decision[ResourceClaim],
        failed: Mapping[Entity, str],
        fixed: list[Drift],
        newly_contested: list[Drift],
    ) -> set[str]:
        """Drift, contest and change events for what one pass did; the uids that got an Applied event."""
        holders, records = decision.claims.holders, decision.records
        if fixed:
            metrics.DRIFT.labels(self.name).inc(len(fixed))
            await self._drift_events(fixed, holders, records)
            await self._contest_events(newly_contested, holders, records)
        done = [c for c in decision.sendable if c.entity not in failed]
        # Keys forgotten that the brokers' answer did not show (an earlier pass's removal whose answer
        # or events were lost, another writer, or a broker's metadata image behind the controller):
        # their removal was sent, but no old value was read, so they are named apart.
        off_brokers = {
            e: {k for k in keys if k not in live.get(e, {})}
            for e, keys in decision.forget.items()
            if e not in failed and e not in decision.held_back
        }
        return await self._change_events(done, live, owned_before, holders, records, fixed, off_brokers)

    async def _change_events(
        self,
        done: list[EntityChange],
        live: Mapping[Entity, Mapping[QuotaKey, float]],
        owned_before: Mapping[Entity, Mapping[QuotaKey, float]],
        holders: Holders,
        records: tuple[ResourceClaim, ...],
        drifted: list[Drift],
        off_brokers: Mapping[Entity, Set[QuotaKey]] | None = None,
    ) -> set[str]:
        """An event for every key this pass set or removed on the brokers, with exact values.

        A set key goes to the resource that holds it (``Applied``, old and new
        value); a removed key to the resource whose deletion or edit caused it,
        else to the KafkaCluster (``QuotaRemoved``, with the cause). ``off_brokers``
        are keys kquota owned that this pass forgets although the brokers' answer
        did not show them (their removal is sent all the same): they are named the
        same way, with the value kquota owned, so a removal whose own pass failed
        before its events still gets one. Drift
        corrections have their own event. Returns the uids that got an Applied
        event, so the status-change event does not repeat it.
        """
        off_brokers = {e: keys for e, keys in (off_brokers or {}).items() if keys}
        if not done and not off_brokers:
            return set()  # nothing changed: no resource index to build (50,000 entries in a full pass)
        by_ref = {r.ref: r for r in records}
        removing = bool(off_brokers) or any(op.value is None for c in done for op in c.ops)
        causes = self._removal_causes(records) if removing else ({}, {}, {})
        drift = {(d.entity, d.key) for d in drifted}
        applied: dict[str, tuple[ResourceClaim, list[str]]] = {}
        removed: dict[tuple[str, str], tuple[ResourceClaim | None, bool, list[str]]] = {}
        coros = []
        for change in done:
            have = live.get(change.entity, {})
            for op in change.ops:
                old = have.get(op.key)
                if op.value is not None:
                    holder = holders.get((change.entity, op.key))
                    rec = by_ref.get(holder) if holder is not None else None
                    if rec is None or (change.entity, op.key) in drift:
                        continue
                    was = "unset" if old is None else value_text(old)
                    applied.setdefault(rec.ref.uid, (rec, []))[1].append(
                        f"{op.key.value}={value_text(op.value)} on {change.entity.path()} (was {was})"
                    )
                    continue
                if old is None and op.key in off_brokers.get(change.entity, ()):
                    continue  # sent although the brokers' answer did not show it: named below
                cause_rec, cause, warn = self._removal_cause(change.entity, op.key, causes, owned_before)
                text = f"{op.key.value} on {change.entity.path()} (was {'unset' if old is None else value_text(old)})"
                log.info("cluster %s: removed %s from the brokers: %s", self.name, text, cause)
                metrics.REMOVED.labels(self.name).inc()
                group = (cause_rec.ref.uid if cause_rec is not None else "", cause)
                removed.setdefault(group, (cause_rec, warn, []))[2].append(text)
        for entity, keys in off_brokers.items():
            for key in sorted(keys):
                cause_rec, cause, warn = self._removal_cause(entity, key, causes, owned_before)
                owned = owned_before.get(entity, {}).get(key)
                text = (
                    f"{key.value} on {entity.path()} (was {'unset' if owned is None else value_text(owned)}, "
                    "already gone from the brokers when this pass read them)"
                )
                log.info("cluster %s: forgot %s: %s", self.name, text, cause)
                metrics.REMOVED.labels(self.name).inc()
                group = (cause_rec.ref.uid if cause_rec is not None else "", cause)
                removed.setdefault(group, (cause_rec, warn, []))[2].append(text)
        for (_, cause), (cause_rec, warn, texts) in removed.items():
            # One event per resource and cause, naming every key: a deleted resource's
            # three keys are one event, not three.
            target = object_ref(cause_rec) if cause_rec is not None else self._cluster_ref()
            if target is not None:
                message = f"removed from the brokers: {', '.join(texts)}: {cause}"
                coros.append(self.kube.event(target, "Warning" if warn else "Normal", "QuotaRemoved", message))
        for rec, texts in applied.values():
            coros.append(self.kube.event(object_ref(rec), "Normal", "Applied", "set " + ", ".join(texts)))
        await gather_limited(coros, self.settings.status_concurrency)
        return set(applied)

    def _removal_causes(self, records: tuple[ResourceClaim, ...]) -> Causes:
        """Index, once per pass, which resource a removal can come from.

        The first index maps each key of a resource being deleted to it; the
        second maps each entity a live resource held at its last pass to it
        (its edit dropped the key); the third each key of a resource found
        deleted after its deletion went unseen (:mod:`~kquota.reconcile.ghosts`).
        Earlier records win, as a scan would.
        Built once so a prune of N resources costs O(N), not O(N^2).
        """
        deleting: dict[tuple[Entity, QuotaKey], ResourceClaim] = {}
        held: dict[Entity, ResourceClaim] = {}
        for rec in records:
            if rec.deleting:
                for entity, values in rec.entries:
                    for key in values:
                        deleting.setdefault((entity, key), rec)
            elif rec.error is None:
                for entity in self._entities_by_uid.get(rec.ref.uid, ()):
                    held.setdefault(entity, rec)
        vanished: dict[tuple[Entity, QuotaKey], ResourceClaim] = {}
        for rec in self._gone.values():
            if rec.cluster == self.name:
                for entity, values in rec.entries:
                    for key in values:
                        vanished.setdefault((entity, key), rec)
        return deleting, held, vanished

    def _removal_cause(
        self,
        entity: Entity,
        key: QuotaKey,
        causes: Causes,
        owned_before: Mapping[Entity, Mapping[QuotaKey, float]],
    ) -> tuple[ResourceClaim | None, str, bool]:
        """Which resource a removal comes from, why, and whether it deserves a Warning."""
        deleting, held, vanished = causes
        rec = deleting.get((entity, key))
        if rec is not None:
            return rec, f"{rec.ref} is being deleted", False
        if key not in owned_before.get(entity, {}) and (entity, key) not in vanished:
            # Never kquota's: only Adopt removes such a key, whichever resource names the entity.
            return None, f"KafkaCluster {self.name} has unmanaged.policy Adopt and no resource sets it", True
        rec = held.get(entity)
        if rec is not None:
            return rec, f"{rec.ref} no longer sets it", False
        rec = vanished.get((entity, key))
        if rec is not None:
            # The object is gone: the event goes to the KafkaCluster, naming the resource.
            return None, f"{rec.ref} was deleted while the operator could not see it (gone from the API server)", True
        if key not in owned_before.get(entity, {}):
            return None, f"KafkaCluster {self.name} has unmanaged.policy Adopt and no resource sets it", True
        return None, "kquota set it and no resource sets it any more (its resource was deleted or moved)", True
