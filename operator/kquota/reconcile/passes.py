"""One pass of the reconcile loop, as its phases: gather -> decide -> act -> report.

:meth:`Pass.reconcile_once` reads as the phases; the glue around them keeps
what a pass remembers for the next one (held rejections, contested keys, the
entities each resource claimed, the removal settle) and releases the
finalizers of deleted resources whose keys are gone. I/O happens only in
gather (:mod:`~kquota.reconcile.gather`: before decide, and ``observe`` after
act for what only outcomes need), act (:mod:`~kquota.reconcile.act`) and report
(:mod:`~kquota.reconcile.report`, :mod:`~kquota.reconcile.events`); decide is
:mod:`kquota.domain.decide` and :func:`kquota.domain.outcomes.pass_outcomes`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from kquota.domain.callback import cluster_condition
from kquota.domain.claims import ResourceClaim
from kquota.domain.contest import ContestTracker
from kquota.domain.decide import DecideInput, Decision, Rejection, Settle, decide
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import APPROVAL_ANNOTATION, GuardLimits
from kquota.domain.outcomes import ContestRule, OutcomeFacts, drifted, lingering_removals, live_after, pass_outcomes
from kquota.domain.plan import Drift, Protection, ResourceRef
from kquota.domain.status import Outcome, Reason
from kquota.reconcile import metrics
from kquota.reconcile.act import Acted, act
from kquota.reconcile.gather import FullPassYielded, Gather, Ledger, Observations, PassInput
from kquota.reconcile.report import Report

log = logging.getLogger(__name__)

#: Seconds before a transiently failed change is sent again.
TRANSIENT_RETRY_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class _ObserveBasis:
    """A full pass's resources, claimers, brokers' quotas after it and outcomes (see Pass.observe_once)."""

    records: tuple[ResourceClaim, ...]
    claimers: tuple[ResourceClaim, ...]
    live: Mapping[Entity, Mapping[QuotaKey, float]]
    outcomes: Mapping[str, Outcome]


@dataclass(slots=True)
class PassReport:
    """What one pass did; returned for tests and logged."""

    changes: int = 0
    ops: int = 0
    rejected: int = 0
    drift: int = 0
    status_writes: int = 0
    outcomes: dict[str, Outcome] = field(default_factory=dict)


#: What a pass remembers for the next: entities per resource, reason per resource, resources per reason.
Memory = tuple[dict[str, frozenset[Entity]], dict[str, Reason], dict[Reason, int]]


def remember(
    lingering: frozenset[Entity],
    records: Iterable[ResourceClaim],
    claimers: Iterable[ResourceClaim],
    outcomes: Mapping[str, Outcome],
    before: Mapping[str, frozenset[Entity]],
    entities: dict[str, frozenset[Entity]],
    reasons: dict[str, Reason],
    counts: dict[Reason, int],
) -> None:
    """Write into ``entities``, ``reasons`` and ``counts`` what a pass over ``records`` leaves for the next.

    ``before`` is the entities remembered so far (a narrow pass updates that same mapping;
    a full pass fills new ones, off the event loop). ``lingering``: entities with a key
    the pass planned to remove that the brokers still hold.
    """
    for rec in claimers:
        if rec.error is not None:
            # An invalid spec names nothing: remember what it named when it was
            # valid, so its keys stay kept (and a narrow pass still covers them).
            entities[rec.ref.uid] = before.get(rec.ref.uid, frozenset())
        else:
            # An entity it named before keeps counting while a key it set there awaits removal: the
            # resource is not Applied until that key is gone (a ClientQuota moved to another user).
            named = frozenset(e for e, _ in rec.entries)
            left = before.get(rec.ref.uid, frozenset()) & lingering
            entities[rec.ref.uid] = named | left if left else named
    for rec in records:
        uid = rec.ref.uid
        out = outcomes.get(uid)
        if out is None and not rec.deleting:
            continue
        old = reasons.pop(uid, None)
        if old is not None:
            counts[old] -= 1
        if out is not None:
            reasons[uid] = out.reason
            counts[out.reason] += 1


class Pass(Gather, Report):
    """One pass and what it remembers (part of :class:`~kquota.reconcile.engine.ClusterReconciler`)."""

    #: Provided by the loop: a pass soon (for a change, or a full one that is not a change).
    trigger: Callable[[], None]
    _wake_full: Callable[[], None]
    _last_trigger: float

    def _init_pass(self) -> None:
        self._rejections: dict[Entity, Rejection] = {}
        #: Since when removals wait for changes to stop (None: they do not).
        self._deferring_since: float | None = None
        #: Finalizers waiting for a deleting resource's keys to leave the brokers, by uid.
        self._release_waiters: dict[str, list[asyncio.Future[None]]] = {}
        #: The entities each resource claimed when last seen (a narrow pass also covers what it used to claim).
        self._entities_by_uid: dict[str, frozenset[Entity]] = {}
        self._reasons: dict[str, Reason] = {}
        #: How many resources have each reason (kept with _reasons: a narrow pass must not count all N).
        self._reason_counts: dict[Reason, int] = dict.fromkeys(Reason, 0)
        #: A full pass's memory, worked out with its outcomes (see _outcomes), until _remember takes it.
        self._full_memory: Memory | None = None
        s = self.settings
        self._limits = GuardLimits(
            s.deletion_guard, s.deletion_guard_percent, s.deletion_guard_max, s.deletion_guard_min
        )
        self._contest = ContestTracker(s.contested_restores, s.contested_window, s.contested_retry)
        #: What the last pass left for a metrics reading between drift checks (None: a full pass is needed).
        self._observe_basis: _ObserveBasis | None = None
        #: When the last full pass ended (the drift check is due drift_interval later).
        self.last_full_at = float("-inf")
        #: When the ledger's ConfigMaps were last checked against memory (once per drift interval).
        self._ledger_checked_at = float("-inf")
        #: Entities with a key the last pass planned to remove that the brokers still hold.
        self._lingering: frozenset[Entity] = frozenset()

    async def reconcile_once(self, scope: frozenset[str] | None = None) -> PassReport:
        """One pass: over everything (``scope`` None) or narrowed to the resources with these uids."""
        clock = metrics.PhaseClock(self.name)
        # Whatever this pass changes, the last one's outcomes are no basis for a metrics reading any more.
        self._observe_basis = None
        inp = await self.gather(scope)
        clock.done("gather")
        # A full pass takes long at 10,000 resources (reading, deciding, the outcomes of
        # everything); a resource change that comes in meanwhile goes first rather than wait
        # for the rest of it. Until act this pass has changed nothing (giving way loses only
        # the work done); after act, only once what it changed is announced (see _report_pass).
        decision = await self._unless_changed(inp.full, partial(decide, self._decide_input(inp)))
        self._decided(decision)
        clock.done("decide")
        acted = await self._act(inp, decision)
        clock.done("act")
        report = await self._report_pass(inp, decision, acted)
        self._finish(inp, decision, acted.ledger, report.outcomes)
        clock.done("report", full=inp.full)
        self._log_pass(inp, report, clock.started)
        return report

    async def _act(self, inp: PassInput, decision: Decision[ResourceClaim]) -> Acted:
        """Send the decided changes (write-ahead ledger, alter, rollback) and keep what the next pass needs."""
        acted = await act(
            self.name,
            inp.admin,
            self.ledger_store,
            inp.ledger,
            decision,
            time.monotonic() + self.settings.rejected_retry_seconds,
            # Kept at once: an alter that raises may have applied what was recorded ahead.
            ahead=self._keep_ledger,
            blocking=self._blocking,
        )
        self._acted(inp, acted)
        return acted

    async def _report_pass(self, inp: PassInput, decision: Decision[ResourceClaim], acted: Acted) -> PassReport:
        """After act: events for what changed, the ledger check, the metrics, the outcomes, the statuses."""
        if acted.acl_refusal is not None:
            raise acted.acl_refusal
        fixed = drifted(decision, acted.failed.keys())
        # Record the restores first: a key restored once too often is contested in the outcomes.
        now = time.monotonic()
        newly_contested = [d for d in fixed if self._contest.restored((d.entity, d.key), now)]
        # The events go before anything else is read: a read that fails below (a broker killed
        # mid-pass) must not lose the announcement of a removal the brokers already made.
        announced = await self._pass_events(inp.live, inp.ledger, decision, acted.failed, fixed, newly_contested)
        # What this pass changed on the brokers is in the ledger and announced: a change that came
        # in meanwhile may go first now, and the next full pass, right after it, writes the
        # statuses. Not when this pass holds removals: the hold is announced first.
        may_yield = inp.full and decision.hold is None
        if may_yield and self._full_gives_way():
            raise FullPassYielded
        if inp.full:
            await self._repair_ledger(acted.ledger)
        seen = await self.observe(inp, decision.claimers)
        after = live_after(inp.live, decision.sendable, acted.failed.keys())
        self._lingering = frozenset(e for e, _ in lingering_removals(decision.plan.changes, after))
        facts = self._outcome_facts(inp, seen, decision, acted, after)
        result = await self._outcomes(inp.full, decision, facts, may_yield)
        report = await self._report(inp, seen, decision, acted, fixed, announced, result, after)
        if inp.full:
            self.last_full_at = time.monotonic()
            self._observe_basis = _ObserveBasis(decision.records, decision.claimers, after, result)
        return report

    async def _outcomes(
        self, full: bool, decision: Decision[ResourceClaim], facts: OutcomeFacts, may_yield: bool
    ) -> dict[str, Outcome]:
        """Every covered resource's outcome; in a full pass also what it remembers, both off the event loop.

        At 50,000 resources the memory (entities and reason of every resource) took 0.1-0.2 s
        of the event loop's time at the end of each full pass; it is worked out here, on the
        pass's thread, from copies (the remembered entities in ``facts``), and only put in
        place by _remember.
        """
        self._full_memory = None
        if not full:
            return pass_outcomes(decision, facts)
        lingering, claimers = self._lingering, decision.claimers + decision.refused

        def work() -> tuple[dict[str, Outcome], Memory]:
            result = pass_outcomes(decision, facts)
            memory: Memory = ({}, {}, dict.fromkeys(Reason, 0))
            remember(lingering, decision.records, claimers, result, facts.remembered, *memory)
            return result, memory

        result, self._full_memory = await self._unless_changed(True, work, may_give_way=may_yield)
        return result

    async def _repair_ledger(self, ledger: Ledger) -> None:
        """Put back ledger shards deleted or edited by hand, from what this operator knows it owns.

        At most once per drift interval: a bulk create makes many full passes in a row, and each
        check lists every shard and encodes the whole ledger (70 ms at 10,000 entities).
        """
        now = time.monotonic()
        if now - self._ledger_checked_at < self.settings.drift_interval:
            return
        self._ledger_checked_at = now
        try:
            lines = await self.ledger_store.repair(ledger)
        except Exception:
            # The brokers are right; only the record of ownership is at risk, and the next full pass retries.
            log.warning("cluster %s: could not check the ownership ledger's ConfigMaps", self.name, exc_info=True)
            return
        if lines:
            await self._ledger_repaired(lines)

    async def observe_once(self) -> bool:
        """Between drift checks, with ``spec.metrics``: read the metrics and write the statuses they change.

        Nothing else is read or decided: the outcomes, the resources and the brokers' quotas are the
        last full pass's, valid because any change since (a resource, the KafkaCluster, an error)
        triggers a pass, which drops them. False: there is no such basis, a full pass must run.
        """
        basis = self._observe_basis
        if basis is None:
            return False
        cfg = await self._cluster()
        if cfg is None or cfg.metrics is None:
            return False
        reading = await self._read_metrics(cfg)
        if reading is not None:
            changed = self._observe(cfg, reading, basis.claimers, basis.records, basis.live)
            await self._write_statuses(self._observed_records(basis.records, changed), basis.outcomes, prune=False)
        return True

    def _decide_input(self, inp: PassInput) -> DecideInput[ResourceClaim]:
        now = time.monotonic()
        # A full pass may decide in a worker thread while a narrow pass records what its
        # resources claim: that one reads a copy.
        remembered = dict(self._entities_by_uid) if inp.full else self._entities_by_uid
        return DecideInput(
            records=inp.records,
            topics=inp.topics,
            grants=inp.cfg.grants,
            protection=inp.cfg.protection,
            policy=inp.cfg.policy,
            live=inp.live,
            ledger=inp.ledger,
            touched=inp.touched,
            remembered=remembered,
            rejections=self._rejections,
            contested=self._contest.active(now).keys(),
            settle=Settle(now, self._last_trigger, self._deferring_since, self.settings.removal_settle),
            limits=self._limits,
            approval=inp.approval,
            now=now,
            held=self._hold,
        )

    def _decided(self, decision: Decision[ResourceClaim]) -> None:
        """Keep what decide remembers for the next pass, and schedule the passes it asks for."""
        self._rejections = dict(decision.rejections)
        self._deferring_since = decision.deferring_since
        if decision.wake_in is not None:
            asyncio.get_running_loop().call_later(decision.wake_in, self._wake_full)
        if decision.wants_full:
            # Not a new change: it must not restart the removal settle.
            self._wake_full()
        if decision.approved is not None:
            hold = decision.approved
            log.warning("cluster %s: %d removals approved (%s=%s)", self.name, hold.count, APPROVAL_ANNOTATION, hold.id)

    def _keep_ledger(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def _acted(self, inp: PassInput, acted: Acted) -> None:
        self._ledger = acted.ledger
        self._rejections = dict(acted.rejections)
        if acted.transient and acted.acl_refusal is None:
            asyncio.get_running_loop().call_later(TRANSIENT_RETRY_SECONDS, self.trigger)
        if inp.full:
            owned = acted.ledger
            self._contest.forget(lambda key: key[1] in owned.get(key[0], ()))

    def _outcome_facts(
        self,
        inp: PassInput,
        seen: Observations,
        decision: Decision[ResourceClaim],
        acted: Acted,
        after: Mapping[Entity, Mapping[QuotaKey, float]],
    ) -> OutcomeFacts:
        cfg = inp.cfg
        self._strimzi_text = cfg.protection.strimzi.summary() if cfg.protection.strimzi is not None else None
        self._callback_condition = cluster_condition(seen.callbacks, cfg.callback_honoured)
        problems = {**decision.held_back, **acted.failed}
        return OutcomeFacts(
            live_after=after,
            problems={e: m for e, m in problems.items() if e not in acted.transient},
            retrying={e: acted.failed[e] for e in acted.transient},
            retry_seconds=TRANSIENT_RETRY_SECONDS,
            windows=seen.windows,
            callbacks=seen.callbacks or {},
            callback_honoured=cfg.callback_honoured,
            contested=self._contest.active(time.monotonic()),
            contest_rule=ContestRule(self._contest.restores, self._contest.window),
            cluster=self.name,
            # Copies: a full pass may work out its outcomes in a worker thread.
            remembered=dict(self._entities_by_uid) if inp.full else self._entities_by_uid,
            written=dict(self._written) if inp.full else self._written,
        )

    async def _report(
        self,
        inp: PassInput,
        seen: Observations,
        decision: Decision[ResourceClaim],
        acted: Acted,
        fixed: list[Drift],
        announced: set[str],
        result: dict[str, Outcome],
        after: Mapping[Entity, Mapping[QuotaKey, float]],
    ) -> PassReport:
        """Statuses (with observed metrics on full passes), then the KafkaCluster's status."""
        sent = decision.sendable
        report = PassReport(len(sent), sum(len(c.ops) for c in sent), len(acted.failed), len(fixed), 0, result)
        if inp.full:
            # Metrics are read on full passes only: a narrow pass sees too few resources to attribute them.
            self._observe(inp.cfg, seen.reading, decision.claimers, decision.records, after)
        report.status_writes = await self._write_statuses(decision.records, result, prune=inp.full, announced=announced)
        await self._report_hold(decision.hold)
        await self._write_cluster_status(Reason.APPLIED, f"connected; {len(inp.brokers)} broker(s)", len(inp.brokers))
        return report

    def _finish(
        self, inp: PassInput, decision: Decision[ResourceClaim], ledger: Ledger, result: Mapping[str, Outcome]
    ) -> None:
        self._resolve_release_waiters(inp.find, ledger, decision.claims.holders, inp.cfg.protection, decision.plan.kept)
        self._remember(decision.records, decision.claimers + decision.refused, result, full=inp.full)
        metrics.PASSES.labels(self.name, "ok").inc()
        if not inp.full:
            metrics.NARROW_PASSES.labels(self.name).inc()

    def _log_pass(self, inp: PassInput, report: PassReport, started: float) -> None:
        metrics.RECONCILE_SECONDS.labels(self.name).observe(time.monotonic() - started)
        if report.changes or report.drift or report.rejected:
            log.info(
                "cluster %s: %s pass applied %d ops on %d entities, %d rejected, %d drift corrected, "
                "%d status writes in %.2fs",
                self.name,
                "full" if inp.full else "narrow",
                report.ops,
                report.changes,
                report.rejected,
                report.drift,
                report.status_writes,
                time.monotonic() - started,
            )

    # -- finalizers, memory ------------------------------------------------------------

    def _resolve_release_waiters(
        self,
        find: Callable[[str], ResourceClaim | None],
        ledger: Ledger,
        holders: Mapping[tuple[Entity, QuotaKey], ResourceRef],
        protection: Protection,
        kept: Mapping[Entity, Mapping[QuotaKey, float]],
    ) -> None:
        if not self._release_waiters:
            return
        for uid, waiters in list(self._release_waiters.items()):
            rec = find(uid)
            # A protected entity is never changed, so deleting a resource cannot wait for
            # its keys to go (a user added to protectedUsers after its quota was applied);
            # nor can it wait for a key a refused resource names, which stays as it is
            # until that resource is fixed or deleted (refusing never un-throttles).
            released = rec is None or all(
                key not in ledger.get(entity, {})
                or holders.get((entity, key)) not in (None, rec.ref)
                or protection.covers(entity)
                or key in kept.get(entity, {})
                for entity, values in rec.entries
                for key in values
            )
            if released:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
                del self._release_waiters[uid]

    def _remember(
        self,
        records: Iterable[ResourceClaim],
        claimers: Iterable[ResourceClaim],
        outcomes: Mapping[str, Outcome],
        full: bool,
    ) -> None:
        """Keep what the next narrow pass needs (entities per resource) and the per-reason gauge.

        A full pass's memory was worked out with its outcomes, off the event loop (_outcomes):
        here it only takes its place.
        """
        memory, self._full_memory = self._full_memory, None
        if full:
            assert memory is not None, "a full pass works out its memory with its outcomes"
            self._entities_by_uid, self._reasons, self._reason_counts = memory
        else:
            before = self._entities_by_uid
            remember(self._lingering, records, claimers, outcomes, before, before, self._reasons, self._reason_counts)
        for reason, n in self._reason_counts.items():
            metrics.RESOURCES.labels(self.name, reason.value).set(n)
