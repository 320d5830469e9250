"""The report step of a pass: each resource's status (with observed metrics), its events, the KafkaCluster's status.

A status is rendered from its outcome and written as a merge patch only when
it changes; a resource whose (generation, outcome) was already written is not
rendered again. Observed metrics (:mod:`~kquota.reconcile.observing`) are
attributed from the reading gather made and written at a bounded rate; events
are :mod:`~kquota.reconcile.events`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kquota.domain.claims import ResourceClaim
from kquota.domain.guard import GuardHold, GuardLimits, hold_message
from kquota.domain.status import (
    Condition,
    Outcome,
    Reason,
    merge_patch,
    needs_write,
    render_cluster_status,
    render_status,
    value_text,
)
from kquota.domain.status_format import STATUS_FROM_NEWER_OPERATOR, read_status
from kquota.domain.stored_status import StoredStatus
from kquota.k8s.api import gather_limited
from kquota.reconcile import metrics
from kquota.reconcile.events import Events
from kquota.reconcile.observing import Observing
from kquota.reconcile.records import object_ref

log = logging.getLogger(__name__)


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _flipped_true(
    prev: Mapping[str, Any] | None, new: Mapping[str, Any], types: tuple[str, ...]
) -> list[Mapping[str, Any]]:
    """Conditions of ``types`` that are True in ``new`` and were not True in ``prev``."""
    before = {c.get("type"): c.get("status") for c in (prev or {}).get("conditions") or []}
    return [
        c
        for c in new.get("conditions") or []
        if c.get("type") in types and c.get("status") == "True" and before.get(c.get("type")) != "True"
    ]


class Report(Observing, Events):
    """Statuses and events (part of :class:`~kquota.reconcile.engine.ClusterReconciler`)."""

    _limits: GuardLimits
    _cluster_id: str | None

    def _init_report(self) -> None:
        #: What kquota last wrote to each resource's status (newer than a watch event that may not have arrived).
        self._written: dict[str, StoredStatus] = {}
        #: (generation, outcome) whose status is known to be on the object: no need to render again.
        self._rendered: dict[str, tuple[int, Outcome]] = {}
        #: Set by the drift check: the next full pass compares each stored status with what kquota wrote.
        self._check_stored = False
        #: Status writes the last _write_statuses call could not make.
        self._status_write_errors = 0
        #: The failure last said on every resource, with the trigger count then (None: any status written since
        #: says otherwise): the same failure again with nothing changed need not look at every status.
        self._unavailable_said: tuple[Reason, str, int] | None = None
        self._init_observing()
        self._cluster_written: Mapping[str, Any] | None = None
        # The mass-removal guard's current hold (None: nothing held) and the last id announced.
        self._hold: GuardHold | None = None
        self._hold_text = ""
        self._hold_announced: str | None = None
        #: The KafkaCluster's QuotaCallback condition; None until read.
        self._callback_condition: Condition | None = None
        #: What Strimzi manages on this cluster, in words (None: not a Strimzi Kafka).
        self._strimzi_text: str | None = None

    # -- statuses ------------------------------------------------------------------------

    def written_status(self, uid: str) -> StoredStatus | None:
        """What kquota last wrote to ``uid``'s status (None: nothing since the operator started)."""
        return self._written.get(uid)

    async def _write_statuses(
        self,
        records: Iterable[ResourceClaim],
        outcomes: Mapping[str, Outcome],
        prune: bool = True,
        announced: set[str] | frozenset[str] = frozenset(),
    ) -> int:
        self._unavailable_said = None
        now = _now()
        writes = []
        events = []
        flips: list[tuple[ResourceClaim, Mapping[str, Any]]] = []
        #: Statuses a newer kquota wrote, rewritten in this code's format: each says so in an event.
        rewritten: list[tuple[ResourceClaim, str]] = []
        live_uids = set()
        for rec in records:
            live_uids.add(rec.ref.uid)
            outcome = outcomes.get(rec.ref.uid)
            # A resource being deleted has an outcome only while its removal is held (RemovalHeld).
            if outcome is None:
                continue
            # Most resources are unchanged in most passes: skip rendering them.
            # (Observed metrics change on their own: those render when the observation does.)
            uid = rec.ref.uid
            if self._check_stored and uid in self._written and rec.status.digest != self._written[uid].digest:
                # Changed since kquota wrote it (kubectl edit --subresource=status, a restore from
                # backup): render it again on what is stored. One comparison per resource, no
                # rendering: at 10,000 resources re-rendering every status was most of a drift check.
                del self._written[uid]
                self._rendered.pop(uid, None)
            memo = (rec.generation, outcome)
            obs = self._observed.get(uid)
            rendered = self._rendered.get(uid) == memo
            # (No observation now, and none shown: nothing to do; one shown and none now: the
            # KafkaCluster's metrics are no longer read, and the shown one must go.)
            if rendered and self._observed_shown.get(uid) == obs:
                self._unsettled.discard(uid)
                # An equal outcome: keep this pass's (a full pass keeps its outcomes for the
                # metrics readings), so one copy is held per resource, not two.
                self._rendered[uid] = memo
                continue
            self._unsettled.add(uid)
            # kquota is the only writer of these fields: what it wrote last is newer
            # than a watch event that may not have arrived yet.
            stored = self._written.get(uid) or rec.status
            held = self._observed_held.get(uid)
            if rendered and held is not None and held[0] is obs and held[1] is stored and not self._observed_due(uid):
                continue  # still held back, on the same status: rendering it again would change nothing
            # As stored (what the merge patch is computed against), and as this code reads it
            # (empty when a newer kquota wrote it: nothing of unknown meaning is carried on).
            prev = stored.decoded()
            read = read_status(prev)
            outcome = self._with_observed(rec, outcome, read.current)
            new = render_status(prev, rec.generation, outcome, rec.display, self.name, now)
            # Shown in full, or held back by observed_min_interval (then rendered again once due).
            self._observed_held.pop(uid, None)
            if obs is not None and new.get("observed") == obs.to_status():
                self._observed_shown[uid] = obs
            else:
                self._observed_shown.pop(uid, None)
                if obs is not None:
                    self._observed_held[uid] = (obs, stored)
            if not needs_write(prev, new):
                self._rendered[uid] = memo
                continue
            writes.append((rec, new, merge_patch(prev, new), memo[1]))
            if read.unreadable:
                rewritten.append((rec, read.note()))
            old_ready = next((c for c in read.current.get("conditions") or [] if c.get("type") == "Ready"), None)
            if (old_ready is None or old_ready.get("reason") != outcome.reason.value) and not (
                outcome.reason is Reason.APPLIED and rec.ref.uid in announced
            ):
                events.append((rec, outcome))
            flips.extend((rec, c) for c in _flipped_true(read.current, new, ("Throttled", "OverBudget")))
        if prune:
            self._check_stored = False
            for uid in list(self._written):
                if uid not in live_uids:
                    del self._written[uid]
            for uid in list(self._rendered):
                if uid not in live_uids:
                    del self._rendered[uid]
            for uid in list(self._observed_shown):
                if uid not in live_uids:
                    del self._observed_shown[uid]
            for uid in list(self._observed_held):
                if uid not in live_uids:
                    del self._observed_held[uid]
            self._unsettled &= live_uids
        self._status_write_errors = 0
        if not writes:
            return 0

        written = metrics.STATUS_WRITES.labels(self.name)

        async def write(rec: ResourceClaim, status: dict[str, Any], patch: dict[str, Any], outcome: Outcome) -> None:
            if await self.kube.patch_status(object_ref(rec), patch):
                self._written[rec.ref.uid] = StoredStatus.written(status)
                self._rendered[rec.ref.uid] = (rec.generation, outcome)
            # Counted as each one lands: 50,000 statuses take minutes, and a counter that moved only
            # at the end showed a dashboard (and the bench) nothing happening meanwhile.
            written.inc()

        results = await gather_limited([write(r, s, p, o) for r, s, p, o in writes], self.settings.status_concurrency)
        errors = [r for r in results if isinstance(r, BaseException)]
        self._status_write_errors = len(errors)
        for err in errors[:3]:
            log.warning("cluster %s: status write failed: %s", self.name, err)
        await gather_limited(
            [self._event_for(rec, outcome) for rec, outcome in events], self.settings.status_concurrency
        )
        await gather_limited(
            [self.kube.event(object_ref(rec), "Warning", c["type"], c["message"]) for rec, c in flips],
            self.settings.status_concurrency,
        )
        for rec, note in rewritten[:3]:
            log.warning("%s %s/%s: %s", rec.ref.kind, rec.ref.namespace, rec.ref.name, note)
        await gather_limited(
            [self.kube.event(object_ref(rec), "Warning", STATUS_FROM_NEWER_OPERATOR, note) for rec, note in rewritten],
            self.settings.status_concurrency,
        )
        return len(writes) - len(errors)

    async def _event_for(self, rec: ResourceClaim, outcome: Outcome) -> None:
        if outcome.reason is Reason.APPLIED:
            values = ", ".join(f"{k}={value_text(v)}" for k, v in sorted(outcome.applied.items()))
            await self.kube.event(object_ref(rec), "Normal", "Applied", f"{rec.display}: {values}")
        elif outcome.reason is Reason.CONTESTED:
            return  # the Contested event of the restore that made it so says it, with the counts
        elif outcome.reason is Reason.MONITORING:
            # Monitor is a mode the user chose, not a problem.
            await self.kube.event(object_ref(rec), "Normal", outcome.reason.value, outcome.message)
        elif outcome.reason is not Reason.PENDING:
            await self.kube.event(object_ref(rec), "Warning", outcome.reason.value, outcome.message)

    # -- the KafkaCluster --------------------------------------------------------------

    async def _report_hold(self, hold: GuardHold | None) -> None:
        """The hold on the KafkaCluster: condition (with the cluster status), metric, one Warning event per id."""
        metrics.GUARD_HELD.labels(self.name).set(0 if hold is None else hold.count)
        self._hold = hold
        if hold is None:
            self._hold_announced = None
            return
        message = hold_message(hold, self.name, self._limits)
        self._hold_text = message
        if self._hold_announced != hold.id:
            self._hold_announced = hold.id
            log.warning("cluster %s: %s", self.name, message)
            ref = self._cluster_ref()
            if ref is not None:
                await self.kube.event(ref, "Warning", "DeletionGuard", message)

    async def _write_cluster_status(self, reason: Reason, message: str, brokers: int | None) -> None:
        if self._cluster_object is None:
            return
        body = self._cluster_object
        meta = body.get("metadata") or {}
        prev = self._cluster_written or body.get("status") or {}
        held = self._hold_text if self._hold is not None and reason is Reason.APPLIED else None
        new = render_cluster_status(
            prev,
            int(meta.get("generation") or 0),
            reason,
            message,
            brokers,
            _now(),
            held=held,
            cluster_id=self._cluster_id,
            callback=self._callback_condition,
            strimzi=self._strimzi_text,
        )
        ref = self._cluster_ref()
        if ref is None or not needs_write(prev, new):
            return
        try:
            if await self.kube.patch_status(ref, merge_patch(prev, new)):
                self._cluster_written = new
                read = read_status(prev)
                if read.unreadable:
                    log.warning("KafkaCluster %s: %s", self.name, read.note())
                    await self.kube.event(ref, "Warning", STATUS_FROM_NEWER_OPERATOR, read.note())
        except Exception as exc:  # noqa: BLE001 - the cluster's own status must not stop quota work
            log.warning("cluster %s: could not write KafkaCluster status: %s", self.name, exc)
