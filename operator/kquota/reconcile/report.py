"""The report step of a pass: each resource's status (with observed metrics), its events, the KafkaCluster's status.

A status is rendered from its outcome and written as a merge patch only when
it changes; a resource whose (generation, outcome) was already written is not
rendered again. Observed metrics are attributed here from the reading gather
made, and written at a bounded rate. A reading between drift checks costs what
changed: it observes again only the entities whose series changed, and renders
only those and the resources not yet settled (a held-back observation once due).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kquota.domain.claims import ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import GuardHold, GuardLimits, hold_message
from kquota.domain.observed import (
    NEAR_LIMIT,
    THROTTLED,
    Attribution,
    MetricsReading,
    Observed,
    TopicObserved,
    attribute,
    needs_observed_write,
    needs_topic_observed_write,
    observe,
    observe_topic,
    previous_near_limit,
)
from kquota.domain.status import (
    Condition,
    Outcome,
    Reason,
    conditions_by_type,
    merge_patch,
    needs_write,
    render_cluster_status,
    render_status,
    value_text,
)
from kquota.domain.stored_status import StoredStatus
from kquota.k8s.api import gather_limited
from kquota.reconcile import metrics
from kquota.reconcile.events import Events
from kquota.reconcile.records import ClusterConfig, MetricsConfig, object_ref

log = logging.getLogger(__name__)


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _observable(rec: ResourceClaim) -> bool:
    """A resource observed from its entity's quota series (a ClientQuota or ControllerMutationQuota on one entity)."""
    return rec.ref.kind in ("ClientQuota", "ControllerMutationQuota") and len(rec.entries) == 1


def _monitored(rec: ResourceClaim) -> tuple[str, Mapping[QuotaKey, float]] | None:
    """(topic, budget) of a TopicQuota in Monitor mode, observed from its topic's rates; None for any other."""
    spec = rec.topic
    if spec is None or not spec.topic or spec.enforcement != "Monitor":
        return None
    return spec.topic, spec.budget


@dataclasses.dataclass(slots=True, eq=False)
class _Attributed:
    """What the last metrics reading was attributed on, and its series per (entity, key) that governs them."""

    #: The reading's fields an observation reads besides its series (source, window, availability, ...).
    shape: tuple[Any, ...]
    near_limit_percent: int
    live: Mapping[Entity, Mapping[QuotaKey, float]]
    claimers: Sequence[ResourceClaim]
    records: Sequence[ResourceClaim]
    #: (broker, bucket, sample) of each series, by the (entity, key) whose quota governs it.
    groups: dict[tuple[Entity, QuotaKey], tuple[Any, ...]]
    #: Built on the first reading that needs them, then kept while the basis stays the same.
    by_entity: dict[Entity, list[ResourceClaim]] | None = None
    #: (resource, topic, budget) of each monitored TopicQuota.
    monitored: list[tuple[ResourceClaim, str, Mapping[QuotaKey, float]]] = dataclasses.field(default_factory=list)
    #: Each record's place in ``records``, by uid.
    places: dict[str, int] | None = None

    def same_basis(self, other: _Attributed) -> bool:
        """The same resources, quotas on the brokers and reading shape: only changed series matter."""
        return (
            self.live is other.live
            and self.claimers is other.claimers
            and self.records is other.records
            and self.shape == other.shape
            and self.near_limit_percent == other.near_limit_percent
        )


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


class Report(Events):
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
        # The latest observation per resource, and when status.observed was written.
        self._observed: dict[str, Observed | TopicObserved] = {}
        self._observed_written: dict[str, float] = {}
        #: The observation each status shows in full (not held back by observed_min_interval): a resource
        #: whose outcome and observation are both unchanged is not rendered again (at 10,000 resources,
        #: rendering every one on every metrics reading was most of the cost of standing still).
        self._observed_shown: dict[str, Observed | TopicObserved] = {}
        #: Observations held back by observed_min_interval, with the status they were held back on:
        #: until due, rendering such a resource again gives the same status, so it is not rendered.
        self._observed_held: dict[str, tuple[Observed | TopicObserved, StoredStatus]] = {}
        #: Resources the last status check did not find settled (rendered, written, held back): a
        #: reading between drift checks looks at these and those whose observation changed only.
        self._unsettled: set[str] = set()
        #: What the last reading was attributed on (see _observe).
        self._attributed: _Attributed | None = None
        self._cluster_written: Mapping[str, Any] | None = None
        # The mass-removal guard's current hold (None: nothing held) and the last id announced.
        self._hold: GuardHold | None = None
        self._hold_text = ""
        self._hold_announced: str | None = None
        #: The KafkaCluster's QuotaCallback condition; None until read.
        self._callback_condition: Condition | None = None
        #: What Strimzi manages on this cluster, in words (None: not a Strimzi Kafka).
        self._strimzi_text: str | None = None

    # -- observed metrics --------------------------------------------------------------

    def _observe(
        self,
        cfg: ClusterConfig,
        reading: MetricsReading | None,
        claimers: Sequence[ResourceClaim],
        records: Sequence[ResourceClaim],
        live: Mapping[Entity, Mapping[QuotaKey, float]],
    ) -> set[str] | None:
        """Attribute a metrics reading to resources (no reading: the last observations stay).

        Returns the uids whose observation may have changed, or None for all of them: a reading
        on the same resources and brokers' quotas as the last one (a reading between drift
        checks) observes again only the entities whose series changed, since a resource's
        observation depends on nothing else (its NearLimit hysteresis is a fixed point).
        """
        if cfg.metrics is None:
            self._observed.clear()
            self._attributed = None
            return None
        if reading is None:
            return set()
        m = cfg.metrics
        attribution = attribute(reading, live)
        groups = {
            owned: tuple((a.series.broker, a.series.bucket, a.sample) for a in attributed)
            for owned, attributed in attribution.by_owner.items()
        }
        shape = (reading.source, reading.window, reading.available, reading.unreachable, reading.error)
        last = self._attributed
        self._attributed = _Attributed(shape, m.near_limit_percent, live, claimers, records, groups)
        if last is not None and last.same_basis(self._attributed):
            self._attributed.by_entity = last.by_entity
            self._attributed.monitored = last.monitored
            self._attributed.places = last.places
            moved = {
                owned for owned in groups.keys() | last.groups.keys() if groups.get(owned) != last.groups.get(owned)
            }
            return self._observe_some(m, attribution, reading, {entity for entity, _ in moved})
        seen = set()
        for rec in claimers:
            uid = rec.ref.uid
            if _observable(rec):
                obs = self._observe_one(m, attribution, rec)
                if obs is not None:
                    self._observed[uid] = obs
                    seen.add(uid)
        for rec in records:
            watched = _monitored(rec)
            if watched is not None:
                topic_obs = observe_topic(reading, *watched, m.near_limit_percent)
                self._observed[rec.ref.uid] = topic_obs
                seen.add(rec.ref.uid)
        for uid in set(self._observed) - seen:
            del self._observed[uid]
        return None

    def _observe_one(self, m: MetricsConfig, attribution: Attribution, rec: ResourceClaim) -> Observed | None:
        entity, values = rec.entries[0]
        prev = self._written.get(rec.ref.uid) or rec.status
        # Only a NearLimit that was True changes the threshold (hysteresis): decode only then.
        was_near = previous_near_limit(prev) if prev.mentions(b'"nearLimit":true') else None
        return observe(attribution, entity, values.keys(), m.near_limit_percent, was_near)

    def _observe_some(
        self, m: MetricsConfig, attribution: Attribution, reading: MetricsReading, entities: set[Entity]
    ) -> set[str]:
        """Observe again the resources of ``entities`` and every monitored TopicQuota; the uids that changed."""
        basis = self._attributed
        assert basis is not None
        if basis.by_entity is None:
            by_entity: dict[Entity, list[ResourceClaim]] = {}
            for rec in basis.claimers:
                if _observable(rec):
                    by_entity.setdefault(rec.entries[0][0], []).append(rec)
            basis.by_entity = by_entity
            basis.monitored = [(rec, *watched) for rec in basis.records if (watched := _monitored(rec)) is not None]
        changed = set()
        for entity in entities:
            for rec in basis.by_entity.get(entity, ()):
                uid = rec.ref.uid
                obs = self._observe_one(m, attribution, rec)
                if obs is None:
                    if self._observed.pop(uid, None) is not None:
                        changed.add(uid)
                elif obs != self._observed.get(uid):
                    self._observed[uid] = obs
                    changed.add(uid)
        for rec, topic, budget in basis.monitored:
            uid = rec.ref.uid
            topic_obs = observe_topic(reading, topic, budget, m.near_limit_percent)
            if topic_obs != self._observed.get(uid):
                self._observed[uid] = topic_obs
                changed.add(uid)
        return changed

    def _observed_records(self, records: Sequence[ResourceClaim], changed: set[str] | None) -> Sequence[ResourceClaim]:
        """The records whose status a reading may change: ``changed`` (None: all) and those not yet settled."""
        if changed is None:
            return records
        wanted = changed | self._unsettled
        basis = self._attributed
        if basis is None or basis.records is not records:
            return [r for r in records if r.ref.uid in wanted]
        if basis.places is None:
            basis.places = {r.ref.uid: i for i, r in enumerate(records)}
        places = basis.places
        return [records[i] for i in sorted(places[uid] for uid in wanted if uid in places)]

    def _observed_due(self, uid: str) -> bool:
        """New numbers in ``uid``'s status.observed may be written (its last write is old enough, or unknown)."""
        since = self._observed_written.get(uid)
        return since is None or time.monotonic() - since >= self.settings.observed_min_interval

    def _with_observed(self, rec: ResourceClaim, outcome: Outcome, prev: Mapping[str, Any]) -> Outcome:
        """Add status.observed and its conditions, writing new numbers only at a bounded rate."""
        obs = self._observed.get(rec.ref.uid)
        if obs is None:
            return outcome
        prev_conditions = conditions_by_type(prev)
        if isinstance(obs, TopicObserved):
            topic_status: Mapping[str, Any] = obs.to_status()
            cond = obs.condition()
            since = self._observed_written.get(rec.ref.uid)
            elapsed = None if since is None else time.monotonic() - since
            if needs_topic_observed_write(
                prev.get("observed"),
                prev_conditions.get(cond.type),
                cond,
                elapsed,
                self.settings.observed_min_interval,
            ):
                self._observed_written[rec.ref.uid] = time.monotonic()
            else:
                topic_status = prev["observed"]
            return dataclasses.replace(outcome, observed=topic_status, conditions=(*outcome.conditions, cond))
        since = self._observed_written.get(rec.ref.uid)
        elapsed = None if since is None else time.monotonic() - since
        status: Mapping[str, Any]
        conds: tuple[Condition, ...]
        if needs_observed_write(prev.get("observed"), obs, elapsed, self.settings.observed_min_interval):
            self._observed_written[rec.ref.uid] = time.monotonic()
            status = obs.to_status()
            conds = obs.conditions()
        else:
            # Held back: the conditions stay as written with the numbers they describe.
            status = prev["observed"]
            conds = tuple(
                Condition(c["type"], c["status"], c["reason"], c["message"])
                for t in (THROTTLED, NEAR_LIMIT)
                if (c := prev_conditions.get(t)) is not None
            )
        return dataclasses.replace(outcome, observed=status, conditions=(*outcome.conditions, *conds))

    # -- statuses ------------------------------------------------------------------------

    async def _write_statuses(
        self,
        records: Iterable[ResourceClaim],
        outcomes: Mapping[str, Outcome],
        prune: bool = True,
        announced: set[str] | frozenset[str] = frozenset(),
    ) -> int:
        now = _now()
        writes = []
        events = []
        flips: list[tuple[ResourceClaim, Mapping[str, Any]]] = []
        live_uids = set()
        for rec in records:
            live_uids.add(rec.ref.uid)
            outcome = outcomes.get(rec.ref.uid)
            if outcome is None or rec.deleting:
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
            if rendered and (obs is None or self._observed_shown.get(uid) == obs):
                self._unsettled.discard(uid)
                continue
            self._unsettled.add(uid)
            # kquota is the only writer of these fields: what it wrote last is newer
            # than a watch event that may not have arrived yet.
            stored = self._written.get(uid) or rec.status
            held = self._observed_held.get(uid)
            if rendered and held is not None and held[0] is obs and held[1] is stored and not self._observed_due(uid):
                continue  # still held back, on the same status: rendering it again would change nothing
            prev = stored.decoded()
            outcome = self._with_observed(rec, outcome, prev)
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
            old_ready = next((c for c in (prev or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
            if (old_ready is None or old_ready.get("reason") != outcome.reason.value) and not (
                outcome.reason is Reason.APPLIED and rec.ref.uid in announced
            ):
                events.append((rec, outcome))
            flips.extend((rec, c) for c in _flipped_true(prev, new, ("Throttled", "OverBudget")))
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
        if not writes:
            return 0

        async def write(rec: ResourceClaim, status: dict[str, Any], patch: dict[str, Any], outcome: Outcome) -> None:
            if await self.kube.patch_status(object_ref(rec), patch):
                self._written[rec.ref.uid] = StoredStatus.of(status)
                self._rendered[rec.ref.uid] = (rec.generation, outcome)

        results = await gather_limited([write(r, s, p, o) for r, s, p, o in writes], self.settings.status_concurrency)
        errors = [r for r in results if isinstance(r, BaseException)]
        for err in errors[:3]:
            log.warning("cluster %s: status write failed: %s", self.name, err)
        metrics.STATUS_WRITES.labels(self.name).inc(len(writes) - len(errors))
        await gather_limited(
            [self._event_for(rec, outcome) for rec, outcome in events], self.settings.status_concurrency
        )
        await gather_limited(
            [self.kube.event(object_ref(rec), "Warning", c["type"], c["message"]) for rec, c in flips],
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
        except Exception as exc:  # noqa: BLE001 - the cluster's own status must not stop quota work
            log.warning("cluster %s: could not write KafkaCluster status: %s", self.name, exc)
