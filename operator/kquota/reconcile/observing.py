"""Observed metrics for a pass's report: a reading attributed to resources, and status.observed at a bounded rate.

A reading between drift checks costs what changed: it observes again only the
entities whose series changed, and renders only those and the resources not yet
settled (a held-back observation once due). Part of :mod:`kquota.reconcile.report`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kquota.domain.claims import ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
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
from kquota.domain.status import Condition, Outcome, conditions_by_type
from kquota.domain.status_format import read_status
from kquota.domain.stored_status import StoredStatus
from kquota.reconcile.records import ClusterConfig, MetricsConfig
from kquota.reconcile.settings import OperatorSettings


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


class Observing:
    """The observation half of :class:`~kquota.reconcile.report.Report`."""

    settings: OperatorSettings
    _written: dict[str, StoredStatus]

    def _init_observing(self) -> None:
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
        was_near = previous_near_limit(read_status(prev).current) if prev.mentions(b'"nearLimit":true') else None
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
