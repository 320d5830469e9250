"""One Kafka cluster's reconcile loop: coalesced, level-based, batched.

Every change to any quota resource only *triggers* the loop; the loop then
takes a snapshot of all resources, reads the brokers' quotas once, plans the
minimal change with the pure domain functions and applies it in as few
requests as the broker allows. A burst of thousands of changes therefore
becomes a handful of passes, not thousands of requests.

Two kinds of pass share that code. A *full* pass covers every resource and
describes every quota on the brokers: it runs first, on the drift timer, after
an error and after a large burst. A *narrow* pass follows a few resource
changes: it covers only the entities those resources name (and every resource
that claims one of them, so conflicts resolve as in a full pass) and describes
just those entities, so one change costs the same with 10 or 10,000 resources.
Anything a narrow pass cannot see (TopicQuotas, whose entities depend on the
live leader layout; drift on other entities) waits for the next full pass.

Safety rules kept here:

* Ownership is written ahead: keys are recorded in the ledger *before* they are
  sent, and forgotten only *after* their removal succeeded, so a crash at any
  point leaves the ledger a superset of what kquota set.
* The broker applies each entity's keys atomically and every entity's ops go in
  one request (the adapter guarantees it), so no entity is half-changed. A
  rejected entity's ledger entries are rolled back to what they were.
* A value the broker rejected is not retried until the spec changes or
  ``rejected_retry_seconds`` pass: no hot loop against the controller.
* Kafka unreachable: every resource says KafkaUnavailable, the loop backs off
  exponentially (capped) and recovers on its own.
* A missing ACL on the cluster (docs/install.md#acls): every resource says
  NotAuthorized, backed off the same way; a refused AlterClientQuotas is rolled
  back in the ledger like a rejection but not held back, so a grant is enough.
  A topic kquota may not describe affects only its TopicQuotas, whose clients'
  quotas are left as they are.
* A ledger in a format a newer kquota wrote (a downgrade): nothing is read from
  or written to the brokers and no deletion completes; the KafkaCluster and its
  resources say ``LedgerFromNewerOperator`` (Stalled), with an error log line and
  a Warning event, and every retry reads the ledger again (a restored one is used).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kquota.domain.callback import CALLBACK_CONFIG, callbacks_from_configs, cluster_condition, with_callback
from kquota.domain.contest import ContestTracker
from kquota.domain.desired import split_budget
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import (
    APPROVAL_ANNOTATION,
    GuardHold,
    GuardLimits,
    guard,
    hold_message,
    removals,
    without,
)
from kquota.domain.ledger import LedgerFromNewerOperator
from kquota.domain.mutation import WINDOW_NUM, WINDOW_SIZE, ControllerWindow, window_from_configs, with_burst
from kquota.domain.observed import (
    NEAR_LIMIT,
    THROTTLED,
    Observed,
    TopicObserved,
    attribute,
    needs_observed_write,
    observe,
    observe_topic,
    previous_near_limit,
)
from kquota.domain.outcomes import ContestRule, base_outcome, with_contest
from kquota.domain.plan import (
    DesiredEntry,
    Drift,
    EntityChange,
    Protection,
    ResourceRef,
    apply_ledger,
    plan,
    resolve_claims,
)
from kquota.domain.status import (
    Outcome,
    Reason,
    merge_patch,
    needs_write,
    render_cluster_status,
    render_status,
    value_text,
)
from kquota.domain.tenancy import refusal
from kquota.domain.topics import TopicLayout, allowance, with_enforcement
from kquota.k8s.api import Kube, ObjectRef, SecretNotFound, gather_limited
from kquota.k8s.ledger import LedgerStore
from kquota.kafka.metrics import MetricsSource, read_quota_metrics
from kquota.kafka.metrics import source_for as metrics_source_for
from kquota.kafka.quotas import EntityAlteration, KafkaNotAuthorized, KafkaUnavailable, QuotaAdmin
from kquota.kafka.quotas import QuotaOp as AdapterOp
from kquota.reconcile import metrics
from kquota.reconcile.records import ClusterConfig, ResourceRecord
from kquota.reconcile.settings import OperatorSettings

log = logging.getLogger(__name__)

Ledger = dict[Entity, dict[QuotaKey, float]]
#: KIP-1010's proposed topic configs; a broker that has them can enforce topic budgets itself.
KIP1010_CONFIGS = frozenset({"producer.byte.rate", "consumer.byte.rate"})


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
#: Seconds before a transiently failed change is sent again.
TRANSIENT_RETRY_SECONDS = 5.0


class DuplicateCluster(Exception):
    """An older KafkaCluster already manages the Kafka cluster this one points at."""


class ClusterNotReady(Exception):
    """The KafkaCluster cannot be used yet (missing, or its Secret is unreadable)."""


@dataclass(slots=True)
class _Rejection:
    change: EntityChange
    message: str
    retry_at: float


@dataclass(slots=True)
class PassReport:
    """What one pass did; returned for tests and logged."""

    changes: int = 0
    ops: int = 0
    rejected: int = 0
    drift: int = 0
    status_writes: int = 0
    outcomes: dict[str, Outcome] = field(default_factory=dict)


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


def _describe_each(admin: QuotaAdmin, entities: Iterable[Entity]) -> dict[Entity, dict[QuotaKey, float]]:
    """The live quotas of a few entities, one small request each (a narrow pass)."""
    live = {}
    for entity in entities:
        values = admin.describe_entity(entity)
        if values:
            live[entity] = values
    return live


def _to_adapter(changes: Iterable[EntityChange]) -> list[EntityAlteration]:
    return [EntityAlteration(c.entity, tuple(AdapterOp(op.key, op.value) for op in c.ops)) for c in changes]


class ClusterReconciler:
    """Keeps one Kafka cluster's quotas equal to what its resources declare."""

    def __init__(
        self,
        name: str,
        records: Callable[[], Iterable[ResourceRecord]],
        cluster: Callable[[], Awaitable[ClusterConfig | None]],
        kube: Kube,
        ledger_store: LedgerStore,
        settings: OperatorSettings,
        admin_factory: Callable[[ClusterConfig], QuotaAdmin] | None = None,
        cluster_object: Callable[[], Mapping[str, Any]] | None = None,
        peers: Callable[[], Mapping[str, tuple[str, str | None]]] | None = None,
    ) -> None:
        self.name = name
        self._records = records
        self._cluster = cluster
        self.kube = kube
        self.ledger_store = ledger_store
        self.settings = settings
        self._admin_factory = admin_factory or (lambda cfg: QuotaAdmin(cfg.connection))
        #: The KafkaCluster object (a live view), for its own status.
        self._cluster_object = cluster_object
        self._cluster_written: Mapping[str, Any] | None = None
        #: Every KafkaCluster's (creationTimestamp, status.clusterId), to refuse a second one for a Kafka cluster.
        self._peers = peers or dict
        self._cluster_id: str | None = None
        self._windows: tuple[float, dict[int, ControllerWindow]] | None = None
        #: (when read, each broker's client.quota.callback.class; None when the brokers refused to say).
        self._callbacks: tuple[float, list[int], dict[int, str] | None] | None = None
        #: The KafkaCluster's QuotaCallback condition (status, reason, message); None until read.
        self._callback_condition: tuple[str, str, str] | None = None
        #: What Strimzi manages on this cluster, in words (None: not a Strimzi Kafka).
        self._strimzi_text: str | None = None
        # Observed metrics: the source (kept: the scrape source remembers readings),
        # the latest observation per resource, and when status.observed was written.
        self._metrics_src: MetricsSource | None = None
        self._metrics_read_at = 0.0
        self._observed: dict[str, Observed | TopicObserved] = {}
        self._observed_written: dict[str, float] = {}
        self._wait = settings.drift_interval
        self._admin: QuotaAdmin | None = None
        self._admin_conn: object | None = None
        self._wake = asyncio.Event()
        self._first_trigger: float | None = None
        #: When the last change arrived, and since when removals wait for changes to stop.
        self._last_trigger = float("-inf")
        self._deferring_since: float | None = None
        #: Loaded by the first pass (and by every pass until a load succeeds).
        self._ledger: Ledger | None = None
        #: The LedgerFromNewerOperator message last logged and sent as an event (None: none since the last pass).
        self._newer_ledger_announced: str | None = None
        self._rejections: dict[Entity, _Rejection] = {}
        self._written: dict[str, Mapping[str, Any]] = {}
        #: (generation, outcome) whose status is known to be on the object: no need to render again.
        self._rendered: dict[str, tuple[int, Outcome]] = {}
        self._release_waiters: dict[str, list[asyncio.Future[None]]] = {}
        # Narrow passes: the resources changed since the last pass, whether a full
        # pass is due anyway, and the entities each resource claimed when last seen
        # (so a narrow pass also covers what a resource used to claim).
        self._dirty: set[str] = set()
        self._full = True
        self._entities_by_uid: dict[str, frozenset[Entity]] = {}
        self._reasons: dict[str, Reason] = {}
        self._brokers: list[int] | None = None
        # The mass-removal guard's current hold (None: nothing held) and the last id announced.
        self._hold: GuardHold | None = None
        self._hold_text = ""
        self._hold_announced: str | None = None
        self._limits = GuardLimits(
            settings.deletion_guard,
            settings.deletion_guard_percent,
            settings.deletion_guard_max,
            settings.deletion_guard_min,
        )
        self._contest = ContestTracker(settings.contested_restores, settings.contested_window, settings.contested_retry)
        #: The KafkaCluster's (generation, removal approval) last seen by the handlers (a change means a full pass).
        self.cluster_version: tuple[int, str | None] | None = None
        self.passes = 0
        self.narrow_passes = 0

    # -- triggering ------------------------------------------------------------

    def trigger(self, uid: str | None = None) -> None:
        """Ask for a pass soon. Cheap and safe to call from any handler, any number of times.

        ``uid`` names the resource that changed, which allows a narrow pass;
        without it the pass covers everything.
        """
        if uid is None:
            self._full = True
        else:
            self._dirty.add(uid)
        if self._first_trigger is None:
            self._first_trigger = time.monotonic()
        self._last_trigger = time.monotonic()
        self._wake.set()

    def _wake_full(self) -> None:
        """A full pass soon, without counting as a change (the end of a removal deferral)."""
        self._full = True
        self._wake.set()

    def _defer_removals(self, now: float) -> bool:
        """Whether this pass's removals wait: a change arrived less than ``removal_settle`` ago.

        Bounded: under changes that never stop, removals go after six settle
        times (at least 30 s) of waiting.
        """
        settle = self.settings.removal_settle
        quiet = now - self._last_trigger
        if settle <= 0 or quiet >= settle:
            self._deferring_since = None
            return False
        if self._deferring_since is None:
            self._deferring_since = now
        if now - self._deferring_since >= max(30.0, 6 * settle):
            return False
        asyncio.get_running_loop().call_later(settle - quiet + 0.05, self._wake_full)
        return True

    async def wait_released(self, uid: str, timeout: float) -> None:
        """Wait until a deleting resource's keys are gone from the brokers (for the finalizer)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._release_waiters.setdefault(uid, []).append(fut)
        self.trigger(uid)
        try:
            await asyncio.wait_for(fut, timeout)
        finally:
            waiters = self._release_waiters.get(uid, [])
            if fut in waiters:
                waiters.remove(fut)

    # -- the loop ----------------------------------------------------------------

    async def run(self, stopped: asyncio.Event | None = None) -> None:
        backoff = 1.0
        self.trigger()
        while stopped is None or not stopped.is_set():
            # On timeout this is the drift check: a pass with nothing changed on our side.
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._wait)
            except TimeoutError:
                # The drift check covers everything; re-render every status too,
                # in case someone edited one by hand.
                self._full = True
                self._rendered.clear()
            if self.settings.coalesce_seconds:
                await asyncio.sleep(self.settings.coalesce_seconds)
            self._wake.clear()
            started = self._first_trigger
            self._first_trigger = None
            # While removals are held, every pass is full: the held set, and so the id an
            # approval names, must be the whole picture, not a narrow pass's part of it.
            scope = None if self._full or self._hold is not None else frozenset(self._dirty)
            self._full = False
            self._dirty.clear()
            try:
                await self.reconcile_once(scope)
                backoff = 1.0
                self._newer_ledger_announced = None
                if started is not None:
                    metrics.CHANGE_LATENCY_SECONDS.labels(self.name).observe(time.monotonic() - started)
            except (
                KafkaUnavailable,
                KafkaNotAuthorized,
                ClusterNotReady,
                SecretNotFound,
                DuplicateCluster,
                LedgerFromNewerOperator,
            ) as exc:
                # A missing ACL is retried with the same capped backoff: the admin may grant it any time.
                # So is a ledger from a newer operator: restoring the old ledger is enough.
                if isinstance(exc, KafkaNotAuthorized):
                    reason = Reason.NOT_AUTHORIZED
                elif isinstance(exc, LedgerFromNewerOperator):
                    reason = Reason.LEDGER_FROM_NEWER_OPERATOR
                    await self._announce_newer_ledger(exc)
                elif isinstance(exc, KafkaUnavailable):
                    reason = Reason.KAFKA_UNAVAILABLE
                elif isinstance(exc, SecretNotFound):
                    reason = Reason.CLUSTER_NOT_READY
                elif isinstance(exc, DuplicateCluster):
                    reason = Reason.DUPLICATE_CLUSTER
                else:
                    reason = Reason.CLUSTER_NOT_FOUND
                metrics.ERRORS.labels(self.name, reason.value).inc()
                metrics.PASSES.labels(self.name, "unavailable").inc()
                log.warning("cluster %s: %s; retrying in %.0fs", self.name, exc, backoff)
                self._full = True
                if not isinstance(exc, (KafkaNotAuthorized, LedgerFromNewerOperator)):  # the connection is fine
                    self._drop_admin()
                await self._report_unavailable(reason, str(exc))
                await self._sleep_or_wake(backoff)
                backoff = min(backoff * 2, self.settings.retry_max_seconds)
                self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.PASSES.labels(self.name, "error").inc()
                metrics.ERRORS.labels(self.name, "Internal").inc()
                log.exception("cluster %s: reconcile pass failed; retrying in %.0fs", self.name, backoff)
                self._full = True
                await self._sleep_or_wake(backoff)
                backoff = min(backoff * 2, self.settings.retry_max_seconds)
                self._wake.set()

    async def _announce_newer_ledger(self, exc: LedgerFromNewerOperator) -> None:
        """Say once (an error log line, a Warning event on the KafkaCluster) that this cluster is left alone.

        The ledger load failed before anything was read from or written to the
        brokers, and every later pass fails the same way until the ledger is
        readable: nothing is applied, nothing removed, no finalizer released.
        """
        message = str(exc)
        if self._newer_ledger_announced == message:
            return
        self._newer_ledger_announced = message
        log.error("cluster %s: %s", self.name, message)
        ref = self._cluster_ref()
        if ref is not None:
            await self.kube.event(ref, "Warning", Reason.LEDGER_FROM_NEWER_OPERATOR.value, message)

    async def _sleep_or_wake(self, seconds: float) -> None:
        # Sleep the backoff fully: a resource change during an outage must not
        # turn the backoff into a tight loop.
        await asyncio.sleep(seconds)

    def close(self) -> None:
        self._drop_admin()
        for waiters in self._release_waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.cancel()

    def _drop_admin(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:
                log.debug("closing Kafka admin client failed", exc_info=True)
        self._admin = None
        self._admin_conn = None

    def _admin_for(self, cfg: ClusterConfig) -> QuotaAdmin:
        if self._admin is None or self._admin_conn != cfg.connection:
            self._drop_admin()
            self._admin = self._admin_factory(cfg)
            self._admin_conn = cfg.connection
        return self._admin

    # -- one pass ------------------------------------------------------------------

    async def reconcile_once(self, scope: frozenset[str] | None = None) -> PassReport:
        """One pass: over everything (``scope`` None) or narrowed to the resources with these uids."""
        started = time.monotonic()
        report = PassReport()
        cfg = await self._cluster()
        if cfg is None:
            raise ClusterNotReady(f"KafkaCluster {self.name!r} not found or not usable")
        every = [r for r in self._records() if r.cluster == self.name]
        if self._ledger is None:
            self._ledger = await self.ledger_store.load()
        ledger = self._ledger
        admin = self._admin_for(cfg)
        # Before anything is read or written: is this Kafka cluster another KafkaCluster's?
        cluster_id, brokers = await self._cluster_info(admin, fresh=scope is None)
        self._refuse_duplicate(cluster_id)
        narrowed = None if scope is None else self._narrow(every, scope)
        touched = None if narrowed is None else narrowed[1]
        records = every if narrowed is None else narrowed[0]
        records, outcomes, topic_extra = await self._expand_topic_quotas(admin, records)
        # A TopicQuota whose topic kquota may not describe keeps its clients' quotas as they are.
        frozen = {
            entity: outcome.message
            for rec in records
            if (outcome := outcomes.get(rec.ref.uid)) is not None
            and outcome.reason is Reason.NOT_AUTHORIZED
            and rec.extras.get("enforcement") == "ClientQuotas"
            for entity, _ in rec.extras.get("clients", ())
        }

        claimers: list[ResourceRecord] = []
        refused_recs: list[ResourceRecord] = []
        entries: list[DesiredEntry] = []
        # A refused resource (invalid spec, outside its tenancy grant) keeps what it
        # set on the brokers: refusing must not un-throttle its clients.
        keep: dict[Entity, frozenset[QuotaKey] | None] = {}
        for rec in records:
            if rec.deleting or rec.ref.uid in outcomes:
                continue
            if rec.error is not None:
                outcomes[rec.ref.uid] = Outcome(Reason.INVALID_SPEC, rec.error)
                refused_recs.append(rec)
                for entity in self._entities_by_uid.get(rec.ref.uid, ()):
                    keep[entity] = None
                continue
            refused = refusal(rec.ref.namespace, [e for e, _ in rec.entries], cfg.grants, cfg.protection)
            if refused is not None:
                outcomes[rec.ref.uid] = Outcome(*refused)
                if refused[0] not in (Reason.PROTECTED, Reason.OWNED_BY_STRIMZI):
                    refused_recs.append(rec)
                    for entity, values in rec.entries:
                        held = keep.get(entity, frozenset())
                        keep[entity] = None if held is None else held | frozenset(values)
                continue
            claimers.append(rec)
            entries.extend(DesiredEntry(rec.ref, rec.created, e, v) for e, v in rec.entries)
        claims = resolve_claims(entries)

        owned_before = ledger
        if touched is None:
            live = await asyncio.to_thread(admin.describe_all)
            the_plan = plan(claims.desired, live, ledger, cfg.policy, cfg.protection, keep)
        else:
            live = await asyncio.to_thread(_describe_each, admin, touched)
            owned = {e: ledger[e] for e in touched if e in ledger}
            the_plan = plan(claims.desired, live, owned, cfg.policy, cfg.protection, keep)
        for rec in refused_recs:
            outcome = outcomes[rec.ref.uid]
            kept = self._kept_text(rec, the_plan.kept)
            if kept:
                outcomes[rec.ref.uid] = dataclasses.replace(
                    outcome,
                    message=f"{outcome.message}; {kept} stay on the brokers as they are until this resource "
                    "is fixed or deleted",
                    applied={},
                )

        now = time.monotonic()
        sendable: list[EntityChange] = []
        held_back: dict[Entity, str] = dict(frozen)
        drift_keys = {(d.entity, d.key) for d in the_plan.drift}
        uncontested = (self._uncontested(c, drift_keys, now) for c in the_plan.changes)
        for change in (c for c in uncontested if c is not None):
            if change.entity in frozen:
                continue
            rejection = self._rejections.get(change.entity)
            if rejection is not None and rejection.change == change and now < rejection.retry_at:
                held_back[change.entity] = rejection.message
                continue
            sendable.append(change)
        # Anything no longer planned the same way gets a fresh chance.
        planned = {c.entity for c in sendable}
        for entity in list(self._rejections):
            if (touched is None or entity in touched) and entity not in held_back and entity not in planned:
                del self._rejections[entity]

        # The mass-removal guard: too many removals at once are all held until approved.
        plan_record: Mapping[Entity, Mapping[QuotaKey, float]] = the_plan.record
        plan_forget: Mapping[Entity, set[QuotaKey]] = the_plan.forget
        removed = removals(sendable)
        if not removed:
            self._deferring_since = None
        elif self._defer_removals(time.monotonic()):
            # Changes are still arriving (a prune, a namespace deletion): remove once they
            # stop, so the guard and the events see the whole set, as `kquota plan` does.
            sendable, plan_record, plan_forget = without(sendable, plan_record, plan_forget, removed)
            removed = frozenset()
        # The base is every key kquota owns plus the unowned ones it would remove (Adopt).
        base = sum(len(v) for v in ledger.values()) + sum(1 for e, k in removed if k not in ledger.get(e, {}))
        hold = self._guard(removed, base, full=touched is None)
        if hold is not None:
            sendable, plan_record, plan_forget = without(sendable, plan_record, plan_forget, hold.keys)

        # Write-ahead: ownership first, then the broker.
        record = {e: v for e, v in plan_record.items() if e not in held_back}
        before = {e: dict(ledger[e]) for e in record if e in ledger}
        ledger = apply_ledger(ledger, record, {})
        if record:
            await self.ledger_store.save(ledger, record.keys())

        failed: dict[Entity, str] = {}
        transient: set[Entity] = set()
        acl_refusal: KafkaNotAuthorized | None = None
        if sendable:
            metrics.QUEUE_DEPTH.labels(self.name).set(len(sendable))
            report.changes = len(sendable)
            report.ops = sum(len(c.ops) for c in sendable)
            metrics.BATCH_OPS.labels(self.name).observe(report.ops)
            try:
                results = await asyncio.to_thread(admin.alter, _to_adapter(sendable))
            except KafkaNotAuthorized as exc:
                # No ALTER_CONFIGS: roll back like a rejection below, but hold nothing back
                # (granting the ACL is enough), then end the pass in backoff.
                acl_refusal, results = exc, list(exc.results)
            for res in results:
                if not res.ok:
                    failed[res.entity] = res.error_message or f"error code {res.error_code}"
                    if res.error_name in TRANSIENT_ERRORS:
                        transient.add(res.entity)
            metrics.QUEUE_DEPTH.labels(self.name).set(0)

        # Roll back the write-ahead for rejected entities (the broker changed nothing there).
        for entity, message in failed.items():
            if entity in before:
                ledger[entity] = before[entity]
            else:
                ledger.pop(entity, None)
            if acl_refusal is not None:
                continue
            change = next(c for c in sendable if c.entity == entity)
            if entity in transient:
                # Not the value's fault (e.g. the controller failed the request):
                # try again soon, without holding the change back.
                metrics.ERRORS.labels(self.name, Reason.KAFKA_UNAVAILABLE.value).inc()
                log.warning("cluster %s: broker could not apply %s now: %s; retrying", self.name, entity, message)
                continue
            self._rejections[entity] = _Rejection(change, message, now + self.settings.rejected_retry_seconds)
            metrics.ERRORS.labels(self.name, Reason.REJECTED.value).inc()
            log.warning("cluster %s: broker rejected %s: %s", self.name, entity, message)
        if transient and acl_refusal is None:
            asyncio.get_running_loop().call_later(TRANSIENT_RETRY_SECONDS, self.trigger)
        forget = {e: keys for e, keys in plan_forget.items() if e not in failed and e not in held_back}
        ledger = apply_ledger(ledger, {}, forget)
        if failed or forget:
            await self.ledger_store.save(ledger, set(failed) | set(forget))
        self._ledger = ledger
        if touched is None:
            self._contest.forget({(e, k) for e, values in ledger.items() for k in values})
        metrics.OWNED_KEYS.labels(self.name).set(sum(len(v) for v in ledger.values()))
        report.rejected = len(failed)
        if acl_refusal is not None:
            raise acl_refusal

        # The brokers' state after this pass, as far as we know it.
        live_after = {e: dict(v) for e, v in live.items()}
        for change in sendable:
            if change.entity in failed:
                continue
            values = live_after.setdefault(change.entity, {})
            for op in change.ops:
                if op.value is None:
                    values.pop(op.key, None)
                else:
                    values[op.key] = op.value

        sent_keys = {(c.entity, op.key) for c in sendable for op in c.ops}
        drifted = [
            d
            for d in the_plan.drift
            if d.entity not in failed and d.entity not in held_back and (d.entity, d.key) in sent_keys
        ]
        report.drift = len(drifted)
        if drifted:
            metrics.DRIFT.labels(self.name).inc(len(drifted))
            await self._drift_events(drifted, claims.holders, records)
            await self._contest_events(drifted, claims.holders, records, time.monotonic())
        done = [c for c in sendable if c.entity not in failed]
        changed_uids = await self._change_events(done, live, owned_before, claims.holders, records, drifted)

        problems = {e: m for e, m in {**held_back, **failed}.items() if e not in transient}
        retrying = {e: failed[e] for e in transient}
        windows = await self._controller_windows(admin, brokers, claimers)
        self._strimzi_text = cfg.protection.strimzi.summary() if cfg.protection.strimzi is not None else None
        found = await self._quota_callbacks(admin, brokers, fresh=touched is None)
        callbacks = found or {}
        self._callback_condition = (
            ("Unknown", "NotAuthorized", f"cannot read {CALLBACK_CONFIG}: the brokers refused DescribeConfigs")
            if found is None
            else cluster_condition(found, cfg.callback_honoured)
        )
        contested = self._contest.active(time.monotonic())
        contest_rule = ContestRule(self._contest.restores, self._contest.window)
        for rec in claimers:
            outcome = base_outcome(
                rec.ref, rec.entries, claims, live_after, problems, retrying, TRANSIENT_RETRY_SECONDS
            )
            if rec.ref.kind == "ControllerMutationQuota":
                rate, burst = float(rec.extras.get("rate", 0.0)), rec.extras.get("expectedBurst")
                outcome = with_burst(outcome, rate, burst, windows)
            elif rec.ref.kind == "TopicQuota":
                outcome = with_enforcement(outcome, rec.entries, topic_extra.get(rec.ref.uid, {}))
            outcome = with_callback(outcome, (e for e, _ in rec.entries), callbacks, cfg.callback_honoured)
            outcomes[rec.ref.uid] = with_contest(
                outcome, rec.ref, rec.entries, claims.holders, live_after, contested, contest_rule
            )
        report.outcomes = outcomes
        if touched is None:
            # Metrics are read on full passes only: a narrow pass sees too few
            # resources to attribute them.
            await self._observe(cfg, claimers, records, live_after)
        report.status_writes = await self._write_statuses(
            records, outcomes, prune=touched is None, announced=changed_uids
        )
        await self._report_hold(hold)
        await self._write_cluster_status(Reason.APPLIED, f"connected; {len(brokers)} broker(s)", len(brokers))
        self._resolve_release_waiters(every, ledger, claims.holders, cfg.protection)
        self._remember(records, claimers + refused_recs, outcomes, full=touched is None)
        self.passes += 1
        metrics.PASSES.labels(self.name, "ok").inc()
        if touched is not None:
            self.narrow_passes += 1
            metrics.NARROW_PASSES.labels(self.name).inc()
        metrics.RECONCILE_SECONDS.labels(self.name).observe(time.monotonic() - started)
        if report.changes or report.drift or report.rejected:
            log.info(
                "cluster %s: %s pass applied %d ops on %d entities, %d rejected, %d drift corrected, "
                "%d status writes in %.2fs",
                self.name,
                "full" if touched is None else "narrow",
                report.ops,
                report.changes,
                report.rejected,
                report.drift,
                report.status_writes,
                time.monotonic() - started,
            )
        return report

    async def _controller_windows(
        self, admin: QuotaAdmin, brokers: list[int], claimers: list[ResourceRecord]
    ) -> dict[int, ControllerWindow]:
        """Each broker's controller quota window, re-read at most once per drift interval."""
        if not any(r.ref.kind == "ControllerMutationQuota" for r in claimers):
            return {}
        now = time.monotonic()
        if (
            self._windows is not None
            and now - self._windows[0] < self.settings.drift_interval
            and set(self._windows[1]) == set(brokers)
        ):
            return self._windows[1]
        windows = {}
        for broker in brokers:
            configs = await asyncio.to_thread(admin.broker_configs, broker, [WINDOW_NUM, WINDOW_SIZE])
            windows[broker] = window_from_configs(configs)
        self._windows = (now, windows)
        return windows

    async def _quota_callbacks(self, admin: QuotaAdmin, brokers: list[int], fresh: bool) -> dict[int, str] | None:
        """Each broker's client.quota.callback.class (brokers without one left out).

        Re-read on full passes at most once per drift interval, and whenever
        the brokers change. None when the brokers refuse DescribeConfigs on
        the cluster (the KafkaCluster then says it could not tell).
        """
        now = time.monotonic()
        cached = self._callbacks
        if (
            cached is not None
            and cached[1] == brokers
            and (not fresh or now - cached[0] < self.settings.drift_interval)
        ):
            return cached[2]
        configs: dict[int, dict[str, str]] = {}
        try:
            for broker in brokers:
                configs[broker] = await asyncio.to_thread(admin.broker_configs, broker, [CALLBACK_CONFIG])
            found: dict[int, str] | None = callbacks_from_configs(configs)
        except KafkaNotAuthorized as exc:
            log.warning("cluster %s: cannot read %s from the brokers: %s", self.name, CALLBACK_CONFIG, exc)
            found = None
        if found and (cached is None or cached[2] != found):
            log.warning("cluster %s: %s", self.name, cluster_condition(found, False)[2])
        self._callbacks = (now, list(brokers), found)
        return found

    async def _expand_topic_quotas(
        self, admin: QuotaAdmin, records: list[ResourceRecord]
    ) -> tuple[list[ResourceRecord], dict[str, Outcome], dict[str, dict[str, Any]]]:
        """Turn TopicQuotas into client-quota entries (ClientQuotas mode) or final outcomes.

        Reads the leader layout of every referenced topic on every pass, so a
        leadership change is reflected within one drift interval.
        """
        outcomes: dict[str, Outcome] = {}
        extra: dict[str, dict[str, Any]] = {}
        topic_recs = [r for r in records if r.ref.kind == "TopicQuota" and not r.deleting and r.error is None]
        if not topic_recs:
            return records, outcomes, extra
        names = sorted({r.extras["topic"] for r in topic_recs if r.extras["topic"]})
        topics_refused: dict[str, str] = {}
        try:
            leaders = await asyncio.to_thread(admin.topic_leaders, names)
        except KafkaNotAuthorized as exc:
            # Per topic: TopicQuotas on topics kquota may describe carry on.
            leaders = exc.leaders
            topics_refused = {t: str(exc.only(t)) for t in exc.resources}
        layouts = {t: TopicLayout.from_partition_leaders(p) for t, p in leaders.items() if p}
        kip1010: bool | None = None
        expanded: dict[str, ResourceRecord] = {}
        for rec in topic_recs:
            topic, mode, budget = rec.extras["topic"], rec.extras["enforcement"], rec.extras["budget"]
            layout = layouts.get(topic) if topic else None
            extra[rec.ref.uid] = {"allowance": allowance(budget, layout)} if layout else {}
            missing = f"topic {topic!r} does not exist (yet)"
            if topic in topics_refused:
                kept = dict((rec.status.get("applied") or {}).get("values") or {})
                message = topics_refused[topic]
                outcomes[rec.ref.uid] = Outcome(Reason.NOT_AUTHORIZED, message, kept, extra=extra[rec.ref.uid])
                continue
            if mode == "ClientQuotas":
                if layout is None:
                    outcomes[rec.ref.uid] = Outcome(
                        Reason.TOPIC_NOT_FOUND,
                        f"{missing}: its clients' quotas are computed from its partition leaders",
                        extra=extra[rec.ref.uid],
                    )
                    continue
                entries = tuple(split_budget(budget, rec.extras["clients"], layout))
                expanded[rec.ref.uid] = dataclasses.replace(rec, entries=entries)
            elif mode == "TopicConfig":
                if kip1010 is None and layouts:
                    probe = topic if topic in layouts else next(iter(layouts))
                    try:
                        kip1010 = bool(KIP1010_CONFIGS & await asyncio.to_thread(admin.topic_config_names, probe))
                    except KafkaNotAuthorized as exc:
                        outcomes[rec.ref.uid] = Outcome(Reason.NOT_AUTHORIZED, str(exc), extra=extra[rec.ref.uid])
                        continue
                if kip1010 is None:
                    outcomes[rec.ref.uid] = Outcome(Reason.TOPIC_NOT_FOUND, f"{missing}: cannot probe topic configs")
                    continue
                message = (
                    "the brokers have no producer.byte.rate / consumer.byte.rate topic configs (KIP-1010 is not "
                    "part of this Kafka); nothing was changed. Use enforcement ClientQuotas or Monitor."
                    if not kip1010
                    else "the brokers support KIP-1010 topic configs, but this kquota version does not write "
                    "them yet; nothing was changed."
                )
                outcomes[rec.ref.uid] = Outcome(
                    Reason.UNSUPPORTED_BY_BROKER,
                    message,
                    extra=extra[rec.ref.uid],
                    extra_conditions=(("Enforced", "False", Reason.UNSUPPORTED_BY_BROKER.value, message),),
                )
            else:
                note = "" if layout or not topic else f"; {missing}"
                outcomes[rec.ref.uid] = Outcome(
                    Reason.MONITORING,
                    f"monitoring the topic against its budget (not enforced){note}",
                    extra=extra[rec.ref.uid],
                    fully_applied=True,
                    extra_conditions=(("Enforced", "False", "MonitorOnly", "enforcement is Monitor"),),
                )
        return [expanded.get(r.ref.uid, r) for r in records], outcomes, extra

    # -- observed metrics --------------------------------------------------------------

    async def _observe(
        self,
        cfg: ClusterConfig,
        claimers: list[ResourceRecord],
        records: list[ResourceRecord],
        live: Mapping[Entity, Mapping[QuotaKey, float]],
    ) -> None:
        """Read the brokers' quota metrics (at most every metrics_interval) and attribute them to resources."""
        if cfg.metrics is None:
            self._wait = self.settings.drift_interval
            self._observed.clear()
            return
        # Passes come at least this often while metrics are configured, so
        # Throttled flips show up without waiting for a change or drift check.
        self._wait = min(self.settings.drift_interval, self.settings.metrics_interval)
        now = time.monotonic()
        if now - self._metrics_read_at < self.settings.metrics_interval * 0.9:
            return
        self._metrics_read_at = now
        m = cfg.metrics
        self._metrics_src = metrics_source_for(
            m.prometheus_url,
            m.broker_endpoints,
            previous=self._metrics_src,
            selector=m.prometheus_selector,
            names=m.names,
        )
        if self._metrics_src is None:
            return
        reading = await asyncio.to_thread(read_quota_metrics, self._metrics_src, m.window_seconds)
        attribution = attribute(reading, live)
        seen = set()
        for rec in claimers:
            uid = rec.ref.uid
            if rec.ref.kind in ("ClientQuota", "ControllerMutationQuota") and len(rec.entries) == 1:
                entity, values = rec.entries[0]
                prev = self._written.get(uid) or rec.status
                obs = observe(attribution, entity, values.keys(), m.near_limit_percent, previous_near_limit(prev))
                if obs is not None:
                    self._observed[uid] = obs
                    seen.add(uid)
        for rec in records:
            if rec.ref.kind == "TopicQuota" and rec.extras.get("topic") and rec.extras.get("enforcement") == "Monitor":
                topic_obs = observe_topic(reading, rec.extras["topic"], rec.extras["budget"], m.near_limit_percent)
                self._observed[rec.ref.uid] = topic_obs
                seen.add(rec.ref.uid)
        for uid in set(self._observed) - seen:
            del self._observed[uid]

    def _with_observed(self, rec: ResourceRecord, outcome: Outcome, prev: Mapping[str, Any]) -> Outcome:
        """Add status.observed and its conditions, writing new numbers only at a bounded rate."""
        obs = self._observed.get(rec.ref.uid)
        if obs is None:
            return outcome
        prev_conditions = {c.get("type"): c for c in prev.get("conditions") or [] if isinstance(c, Mapping)}
        if isinstance(obs, TopicObserved):
            topic_status: Any = obs.to_status()
            over = [k.value for k, share in sorted(obs.shares().items()) if share > 1]
            cond = (
                ("OverBudget", "True", "BudgetExceeded", f"the topic's traffic exceeds its budget: {', '.join(over)}")
                if over
                else ("OverBudget", "False", "WithinBudget", "the topic's traffic is within its budget")
            )
            if prev.get("observed") is not None and not self._observed_due(rec.ref.uid, cond, prev_conditions):
                topic_status = prev["observed"]
            else:
                self._observed_written[rec.ref.uid] = time.monotonic()
            return dataclasses.replace(
                outcome,
                extra={**outcome.extra, "observed": topic_status},
                extra_conditions=(*outcome.extra_conditions, cond),
            )
        since = self._observed_written.get(rec.ref.uid)
        elapsed = None if since is None else time.monotonic() - since
        status: Any
        if needs_observed_write(prev.get("observed"), obs, elapsed, self.settings.observed_min_interval):
            self._observed_written[rec.ref.uid] = time.monotonic()
            status = obs.to_status()
            conds = tuple((c.type, c.status, c.reason, c.message) for c in obs.conditions())
        else:
            status = prev.get("observed")
            conds = tuple(
                (c["type"], c["status"], c["reason"], c["message"])
                for t in (THROTTLED, NEAR_LIMIT)
                if (c := prev_conditions.get(t)) is not None
            )
        return dataclasses.replace(
            outcome, extra={**outcome.extra, "observed": status}, extra_conditions=(*outcome.extra_conditions, *conds)
        )

    def _observed_due(
        self, uid: str, cond: tuple[str, str, str, str], prev_conditions: Mapping[Any, Mapping[str, Any]]
    ) -> bool:
        old = prev_conditions.get(cond[0])
        if old is None or old.get("status") != cond[1]:
            return True
        since = self._observed_written.get(uid)
        return since is None or time.monotonic() - since >= self.settings.observed_min_interval

    # -- status, events, waiters ---------------------------------------------------

    async def _write_statuses(
        self,
        records: list[ResourceRecord],
        outcomes: Mapping[str, Outcome],
        prune: bool = True,
        announced: set[str] | frozenset[str] = frozenset(),
    ) -> int:
        now = _now()
        writes = []
        events = []
        flips: list[tuple[ResourceRecord, Mapping[str, Any]]] = []
        live_uids = set()
        for rec in records:
            live_uids.add(rec.ref.uid)
            outcome = outcomes.get(rec.ref.uid)
            if outcome is None or rec.deleting:
                continue
            # Most resources are unchanged in most passes: skip rendering them.
            # (Observed metrics change on their own, so those always render.)
            memo = (rec.generation, outcome)
            if self._rendered.get(rec.ref.uid) == memo and rec.ref.uid not in self._observed:
                continue
            # kquota is the only writer of these fields: what it wrote last is newer
            # than a watch event that may not have arrived yet.
            prev = self._written.get(rec.ref.uid) or rec.status
            outcome = self._with_observed(rec, outcome, prev)
            new = render_status(prev, rec.generation, outcome, rec.display, self.name, now)
            if not needs_write(prev, new):
                self._rendered[rec.ref.uid] = memo
                continue
            writes.append((rec, new, merge_patch(prev, new), memo[1]))
            old_ready = next((c for c in (prev or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
            if (old_ready is None or old_ready.get("reason") != outcome.reason.value) and not (
                outcome.reason is Reason.APPLIED and rec.ref.uid in announced
            ):
                events.append((rec, outcome))
            flips.extend((rec, c) for c in _flipped_true(prev, new, ("Throttled", "OverBudget")))
        if prune:
            for uid in list(self._written):
                if uid not in live_uids:
                    del self._written[uid]
            for uid in list(self._rendered):
                if uid not in live_uids:
                    del self._rendered[uid]
        if not writes:
            return 0

        async def write(rec: ResourceRecord, status: dict[str, Any], patch: dict[str, Any], outcome: Outcome) -> None:
            if await self.kube.patch_status(rec.object_ref, patch):
                self._written[rec.ref.uid] = status
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
            [self.kube.event(rec.object_ref, "Warning", c["type"], c["message"]) for rec, c in flips],
            self.settings.status_concurrency,
        )
        return len(writes) - len(errors)

    async def _event_for(self, rec: ResourceRecord, outcome: Outcome) -> None:
        if outcome.reason is Reason.APPLIED:
            values = ", ".join(f"{k}={value_text(v)}" for k, v in sorted(outcome.applied.items()))
            await self.kube.event(rec.object_ref, "Normal", "Applied", f"{rec.display}: {values}")
        elif outcome.reason is Reason.CONTESTED:
            return  # the Contested event of the restore that made it so says it, with the counts
        elif outcome.reason is Reason.MONITORING:
            # Monitor is a mode the user chose, not a problem.
            await self.kube.event(rec.object_ref, "Normal", outcome.reason.value, outcome.message)
        elif outcome.reason is not Reason.PENDING:
            await self.kube.event(rec.object_ref, "Warning", outcome.reason.value, outcome.message)

    def _guard(self, removed: frozenset[tuple[Entity, QuotaKey]], owned: int, full: bool) -> GuardHold | None:
        """The removals this pass must hold back (None: all may go)."""
        hold = guard(removed, owned, self._limits)
        if hold is None:
            return None
        if not full:
            # A narrow pass sees part of the picture: hold, and size the hold in a
            # full pass (not a new change: it must not restart the removal settle).
            self._wake_full()
            return hold
        if self._approval() == hold.id:
            log.warning("cluster %s: %d removals approved (%s=%s)", self.name, hold.count, APPROVAL_ANNOTATION, hold.id)
            return None
        return hold

    def _approval(self) -> str | None:
        if self._cluster_object is None:
            return None
        annotations = (self._cluster_object().get("metadata") or {}).get("annotations") or {}
        value = annotations.get(APPROVAL_ANNOTATION)
        return str(value) if value is not None else None

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

    def _uncontested(
        self, change: EntityChange, drift_keys: set[tuple[Entity, QuotaKey]], now: float
    ) -> EntityChange | None:
        """``change`` without restores of contested keys (left as the other writer set them); None if empty."""
        if not any((change.entity, op.key) in drift_keys for op in change.ops):
            return change
        ops = tuple(
            op
            for op in change.ops
            if (change.entity, op.key) not in drift_keys or not self._contest.contested((change.entity, op.key), now)
        )
        return EntityChange(change.entity, ops) if ops else None

    async def _contest_events(
        self,
        drifted: list[Drift],
        holders: Mapping[tuple[Entity, QuotaKey], ResourceRef],
        records: list[ResourceRecord],
        now: float,
    ) -> None:
        """Record each restore; a key restored too often becomes contested, with a Warning event."""
        by_ref = {r.ref: r for r in records}
        coros = []
        for d in drifted:
            if not self._contest.restored((d.entity, d.key), now):
                continue
            metrics.CONTESTED.labels(self.name).inc()
            text = (
                f"{d.key.value} on {d.entity.path()} was changed back on the brokers {self._contest.restores} times "
                f"within {self._contest.window:g}s: another writer is at work; kquota stops restoring it for "
                f"{self._contest.retry:g}s"
            )
            log.warning("cluster %s: %s", self.name, text)
            ref = holders.get((d.entity, d.key))
            rec = by_ref.get(ref) if ref is not None else None
            target = rec.object_ref if rec is not None else self._cluster_ref()
            if target is not None:
                coros.append(self.kube.event(target, "Warning", "Contested", text))
        await gather_limited(coros, self.settings.status_concurrency)

    def _kept_text(self, rec: ResourceRecord, kept: Mapping[Entity, Mapping[QuotaKey, float]]) -> str:
        """The keys a refused resource keeps on the brokers, as text ('' when none)."""
        entities = {e for e, _ in rec.entries} or self._entities_by_uid.get(rec.ref.uid, frozenset())
        wanted = {e: set(v) for e, v in rec.entries}
        parts = [
            f"{key.value}={value_text(value)} on {entity.path()}"
            for entity in sorted(entities & kept.keys(), key=Entity.sort_key)
            for key, value in sorted(kept[entity].items())
            if entity not in wanted or key in wanted[entity]
        ]
        return ", ".join(parts)

    async def _change_events(
        self,
        done: list[EntityChange],
        live: Mapping[Entity, Mapping[QuotaKey, float]],
        owned_before: Mapping[Entity, Mapping[QuotaKey, float]],
        holders: Mapping[tuple[Entity, QuotaKey], ResourceRef],
        records: list[ResourceRecord],
        drifted: list[Drift],
    ) -> set[str]:
        """An event for every key this pass set or removed on the brokers, with exact values.

        A set key goes to the resource that holds it (``Applied``, old and new
        value); a removed key to the resource whose deletion or edit caused it,
        else to the KafkaCluster (``QuotaRemoved``, with the cause). Drift
        corrections have their own event. Returns the uids that got an Applied
        event, so the status-change event does not repeat it.
        """
        by_ref = {r.ref: r for r in records}
        causes = self._removal_causes(records) if any(op.value is None for c in done for op in c.ops) else ({}, {})
        drift = {(d.entity, d.key) for d in drifted}
        applied: dict[str, tuple[ResourceRecord, list[str]]] = {}
        removed: dict[tuple[str, str], tuple[ResourceRecord | None, bool, list[str]]] = {}
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
                cause_rec, cause, warn = self._removal_cause(change.entity, op.key, causes, owned_before)
                text = f"{op.key.value} on {change.entity.path()} (was {'unset' if old is None else value_text(old)})"
                log.info("cluster %s: removed %s from the brokers: %s", self.name, text, cause)
                metrics.REMOVED.labels(self.name).inc()
                group = (cause_rec.ref.uid if cause_rec is not None else "", cause)
                removed.setdefault(group, (cause_rec, warn, []))[2].append(text)
        for (_, cause), (cause_rec, warn, texts) in removed.items():
            # One event per resource and cause, naming every key: a deleted resource's
            # three keys are one event, not three.
            target = cause_rec.object_ref if cause_rec is not None else self._cluster_ref()
            if target is not None:
                message = f"removed from the brokers: {', '.join(texts)}: {cause}"
                coros.append(self.kube.event(target, "Warning" if warn else "Normal", "QuotaRemoved", message))
        for rec, texts in applied.values():
            coros.append(self.kube.event(rec.object_ref, "Normal", "Applied", "set " + ", ".join(texts)))
        await gather_limited(coros, self.settings.status_concurrency)
        return set(applied)

    def _removal_causes(
        self, records: list[ResourceRecord]
    ) -> tuple[dict[tuple[Entity, QuotaKey], ResourceRecord], dict[Entity, ResourceRecord]]:
        """Index, once per pass, which resource a removal can come from.

        The first index maps each key of a resource being deleted to it; the
        second maps each entity a live resource held at its last pass to it
        (its edit dropped the key). Earlier records win, as a scan would.
        Built once so a prune of N resources costs O(N), not O(N^2).
        """
        deleting: dict[tuple[Entity, QuotaKey], ResourceRecord] = {}
        held: dict[Entity, ResourceRecord] = {}
        for rec in records:
            if rec.deleting:
                for entity, values in rec.entries:
                    for key in values:
                        deleting.setdefault((entity, key), rec)
            elif rec.error is None:
                for entity in self._entities_by_uid.get(rec.ref.uid, ()):
                    held.setdefault(entity, rec)
        return deleting, held

    def _removal_cause(
        self,
        entity: Entity,
        key: QuotaKey,
        causes: tuple[dict[tuple[Entity, QuotaKey], ResourceRecord], dict[Entity, ResourceRecord]],
        owned_before: Mapping[Entity, Mapping[QuotaKey, float]],
    ) -> tuple[ResourceRecord | None, str, bool]:
        """Which resource a removal comes from, why, and whether it deserves a Warning."""
        deleting, held = causes
        rec = deleting.get((entity, key))
        if rec is not None:
            return rec, f"{rec.ref} is being deleted", False
        rec = held.get(entity)
        if rec is not None:
            return rec, f"{rec.ref} no longer sets it", False
        if key not in owned_before.get(entity, {}):
            return None, f"KafkaCluster {self.name} has unmanaged.policy Adopt and no resource sets it", True
        return None, "kquota set it and no resource sets it any more (its resource was deleted or moved)", True

    def _cluster_ref(self) -> ObjectRef | None:
        if self._cluster_object is None:
            return None
        meta = self._cluster_object().get("metadata") or {}
        return ObjectRef(
            "KafkaCluster", "kafkaclusters", None, str(meta.get("name", self.name)), str(meta.get("uid", ""))
        )

    async def _drift_events(
        self,
        drifted: list[Drift],
        holders: Mapping[tuple[Entity, QuotaKey], ResourceRef],
        records: list[ResourceRecord],
    ) -> None:
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
                        rec.object_ref,
                        "Normal",
                        "DriftCorrected",
                        f"{d.key.value} on {d.entity.path()} was {live} on the brokers; "
                        f"restored to {value_text(d.expected)}",
                    )
                )
        await gather_limited(coros, self.settings.status_concurrency)

    def _resolve_release_waiters(
        self,
        records: list[ResourceRecord],
        ledger: Ledger,
        holders: Mapping[tuple[Entity, QuotaKey], ResourceRef],
        protection: Protection,
    ) -> None:
        if not self._release_waiters:
            return
        by_uid = {r.ref.uid: r for r in records}
        for uid, waiters in list(self._release_waiters.items()):
            rec = by_uid.get(uid)
            # A protected entity is never changed, so deleting a resource cannot wait for
            # its keys to go (a user added to protectedUsers after its quota was applied).
            released = rec is None or all(
                key not in ledger.get(entity, {})
                or holders.get((entity, key)) not in (None, rec.ref)
                or protection.covers(entity)
                for entity, values in rec.entries
                for key in values
            )
            if released:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
                del self._release_waiters[uid]

    async def _report_unavailable(self, reason: Reason, message: str) -> None:
        records = [r for r in self._records() if r.cluster == self.name and not r.deleting]
        outcomes = {}
        for rec in records:
            prev_applied = (rec.status.get("applied") or {}).get("values") or {}
            outcomes[rec.ref.uid] = Outcome(reason, message, dict(prev_applied), False)
        await self._write_cluster_status(reason, message, None)
        for waiters in self._release_waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(KafkaUnavailable(message))
        self._release_waiters.clear()
        try:
            await self._write_statuses(records, outcomes)
        except Exception:
            log.warning("cluster %s: could not report %s in status", self.name, reason.value, exc_info=True)

    async def _write_cluster_status(self, reason: Reason, message: str, brokers: int | None) -> None:
        if self._cluster_object is None:
            return
        body = self._cluster_object()
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

    def _remember(
        self,
        records: list[ResourceRecord],
        claimers: list[ResourceRecord],
        outcomes: Mapping[str, Outcome],
        full: bool,
    ) -> None:
        """Keep what the next narrow pass needs (entities per resource) and the per-reason gauge."""
        before = self._entities_by_uid
        if full:
            self._entities_by_uid = {}
            self._reasons.clear()
        for rec in claimers:
            if rec.error is not None:
                # An invalid spec names nothing: remember what it named when it was
                # valid, so its keys stay kept (and a narrow pass still covers them).
                self._entities_by_uid[rec.ref.uid] = before.get(rec.ref.uid, frozenset())
            else:
                self._entities_by_uid[rec.ref.uid] = frozenset(e for e, _ in rec.entries)
        for rec in records:
            out = outcomes.get(rec.ref.uid)
            if out is not None:
                self._reasons[rec.ref.uid] = out.reason
            elif rec.deleting:
                self._reasons.pop(rec.ref.uid, None)
        counts: dict[str, int] = {r.value: 0 for r in Reason}
        for reason in self._reasons.values():
            counts[reason.value] += 1
        for reason_name, n in counts.items():
            metrics.RESOURCES.labels(self.name, reason_name).set(n)

    def _narrow(
        self, records: list[ResourceRecord], scope: frozenset[str]
    ) -> tuple[list[ResourceRecord], frozenset[Entity]] | None:
        """The resources and entities a narrow pass over ``scope`` must cover; None when it must be full.

        Closed under "claims a touched entity", so every resource competing
        for a key takes part in resolving it, exactly as in a full pass.
        """
        touched: set[Entity] = set()
        for uid in scope:
            touched |= self._entities_by_uid.get(uid, frozenset())
        involved: list[ResourceRecord] = []
        while True:
            involved = []
            grown = set(touched)
            for rec in records:
                if rec.ref.kind == "TopicQuota":
                    # Its entities come from the live layout (a full pass's work).
                    clients = {e for e, _ in rec.extras.get("clients", ())}
                    if rec.ref.uid in scope or clients & touched:
                        return None
                    continue
                entities = {e for e, _ in rec.entries}
                if rec.ref.uid in scope or entities & touched:
                    involved.append(rec)
                    grown |= entities
            if grown == touched:
                break
            touched = grown
            if len(touched) > self.settings.narrow_max_entities:
                return None
        if len(touched) > self.settings.narrow_max_entities:
            return None
        return involved, frozenset(touched)

    async def _cluster_info(self, admin: QuotaAdmin, fresh: bool) -> tuple[str, list[int]]:
        """The Kafka cluster's id and brokers' ids, re-read on full passes (at least once per drift interval)."""
        if fresh or self._brokers is None or self._cluster_id is None:
            cluster_id, brokers = await asyncio.to_thread(admin.cluster_info)
            self._cluster_id, self._brokers = cluster_id, brokers
            return cluster_id, brokers
        return self._cluster_id, self._brokers

    def _refuse_duplicate(self, cluster_id: str) -> None:
        """Raise DuplicateCluster when an older KafkaCluster manages the same Kafka cluster.

        Two KafkaClusters on one Kafka cluster keep two ledgers and fight over
        any key both claim (each restores its value on every drift check), and
        Adopt on either removes the other's quotas. The older one (creation
        time, then name) keeps the cluster; the younger changes nothing.
        """
        if self.settings.allow_shared_kafka_clusters or self._cluster_object is None:
            return
        meta = self._cluster_object().get("metadata") or {}
        me = (str(meta.get("creationTimestamp") or ""), self.name)
        for name, (created, other_id) in self._peers().items():
            if name != self.name and other_id == cluster_id and (created, name) < me:
                raise DuplicateCluster(
                    f"KafkaCluster {name!r} already manages Kafka cluster {cluster_id} (created first): this "
                    "KafkaCluster changes nothing; delete one of them, or set KQUOTA_ALLOW_SHARED_KAFKA_CLUSTERS "
                    "(Helm value operator.allowSharedKafkaClusters) if several are meant to share it"
                )
