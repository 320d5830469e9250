"""One Kafka cluster's reconcile loop: coalesced, level-based, batched; a pass is gather -> decide -> act -> report.

Every change to any quota resource only *triggers* the loop; the loop then
runs a pass: :mod:`~kquota.reconcile.gather` reads everything once,
:func:`kquota.domain.decide.decide` plans the minimal change,
:mod:`~kquota.reconcile.act` applies it in as few requests as the broker
allows, :func:`kquota.domain.decide.outcomes` decides what every resource
reports and :mod:`~kquota.reconcile.report` writes it. A burst of thousands of
changes becomes a handful of passes, not thousands of requests.

A *full* pass covers every resource and describes every quota on the
brokers: it runs first, on the drift timer, after an error and after a large
burst. A *narrow* pass follows a few resource changes: it covers only the
entities those resources name (and every resource that claims one of them, so
conflicts resolve as in a full pass) and describes just those entities, so one
change costs the same with 10 or 10,000 resources. Anything a narrow pass
cannot see (TopicQuotas, whose entities depend on the live leader layout;
drift on other entities) waits for the next full pass.

Safety rules of the loop and the pass:

* A value the broker rejected is not retried until the spec changes or
  ``rejected_retry_seconds`` pass: no hot loop against the controller
  (act records the rejection, decide holds the change back).
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
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kquota.domain.claims import ResourceClaim
from kquota.domain.ledger import LedgerFromNewerOperator
from kquota.domain.outcomes import unavailable
from kquota.domain.status import Reason
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.errors import KafkaNotAuthorized, KafkaRefusalUnconfirmed, KafkaUnavailable
from kquota.reconcile import metrics
from kquota.reconcile.failures import NAMED_FAILURES, Refusals, answered
from kquota.reconcile.gather import ClusterNotReady, DuplicateCluster, FullPassYielded, GatherFailed
from kquota.reconcile.passes import Pass, PassReport
from kquota.reconcile.ports import LedgerPort, QuotaAdminPort, StatusWriter
from kquota.reconcile.records import ClusterConfig
from kquota.reconcile.settings import OperatorSettings

__all__ = ["ClusterNotReady", "ClusterReconciler", "DuplicateCluster", "PassReport", "ReconcilerStopped"]

log = logging.getLogger(__name__)

#: A lone change after the loop waited this long starts a pass at once (no coalescing wait).
BURST_GAP_SECONDS = 1.0

#: How long a full pass keeps giving way to the changes made while it runs, from the first time.
#: A full pass at 50,000 resources takes seconds, and a change that waits for one misses its
#: latency target many times over; but the full pass corrects drift and writes the statuses of
#: everything, and a stream of changes must not put that off for ever.
FULL_PASS_PUT_OFF_SECONDS = 10.0


class ReconcilerStopped(Exception):
    """The reconciler a finalizer waited on stopped (its KafkaCluster deleted, or the operator pausing)."""


class ClusterReconciler(Pass):
    """Keeps one Kafka cluster's quotas equal to what its resources declare."""

    def __init__(
        self,
        name: str,
        indexes: Iterable[Mapping[str, Iterable[ResourceClaim]]],
        cluster_config: Callable[[], Awaitable[ClusterConfig | None]],
        kube: StatusWriter,
        ledger_store: LedgerPort,
        settings: OperatorSettings,
        cluster_object: Mapping[str, Any] | None = None,
        peers: Mapping[str, tuple[str, str | None]] | None = None,
        admin_factory: Callable[[ClusterConfig], QuotaAdminPort] | None = None,
        gone: Mapping[str, ResourceClaim] | None = None,
        ready: asyncio.Event | None = None,
    ) -> None:
        """Values, not callbacks into the caller: the mappings are read on every pass and may change in between.

        ``indexes`` hold the quota resources by cluster name (Kopf's indexes);
        ``cluster_config`` resolves the KafkaCluster to its connection and
        policy (:class:`~kquota.reconcile.build.ClusterResolver`);
        ``cluster_object`` is the KafkaCluster (Kopf's live body), read for its
        approval annotation and its own status; ``peers`` is every
        KafkaCluster's (creationTimestamp, status.clusterId), to refuse a second
        one for the same Kafka cluster; ``gone`` holds, by uid, the resources
        found deleted although the indexes still hold them (see
        :mod:`~kquota.reconcile.ghosts`): they are left out, so their keys are
        removed as a deletion's; ``ready`` is set once the indexes hold every
        resource (the loop's first pass waits for it). Kafka and Kubernetes are reached through
        the ports in :mod:`~kquota.reconcile.ports`; tests replace how the Kafka
        admin client is made (``admin_factory``).
        """
        self.name = name
        self._indexes = tuple(indexes)
        self._gone: Mapping[str, ResourceClaim] = gone if gone is not None else {}
        self.kube = kube
        self.ledger_store = ledger_store
        self.settings = settings
        self._cluster_object = cluster_object
        self._peers: Mapping[str, tuple[str, str | None]] = peers if peers is not None else {}
        self._admin_factory = admin_factory or (lambda cfg: QuotaAdmin(cfg.connection))
        self._cluster = cluster_config
        self._ready = ready
        self._init_gather()
        self._init_report()
        self._init_pass()
        self._wake = asyncio.Event()
        #: Set by every resource change: a full pass deciding in a worker thread waits on it too.
        self._changed = asyncio.Event()
        self._first_trigger: float | None = None
        #: Triggers since the loop last woke (more than one: a burst, coalesced).
        self._pending = 0
        #: When the last change arrived (removals wait for changes to stop).
        self._last_trigger = float("-inf")
        #: The LedgerFromNewerOperator message last logged and sent as an event (None: none since the last pass).
        self._newer_ledger_announced: str | None = None
        #: The reason of the failed passes last sent as an event (None: a pass has succeeded since): one event
        #: per failure, not one per retry.
        self._failure_announced: Reason | None = None
        #: Triggers ever (a resource or the KafkaCluster changed): see _unavailable_said.
        self._triggers = 0
        #: Refused logins in a row (AuthenticationFailed after settings.auth_failures_to_stall).
        self._refusals = Refusals(settings.auth_failures_to_stall)
        # Narrow passes: the resources changed since the last pass, and whether a full pass is due anyway.
        self._dirty: set[str] = set()
        self._full = True
        #: When the full pass now due first gave way to changes (None: it has not). They go next
        #: (narrow), then the full pass again, which gives way again only within
        #: FULL_PASS_PUT_OFF_SECONDS of that: a stream of changes cannot put it off forever.
        self._put_off_since: float | None = None
        #: The narrow pass for the changes a full pass gave way to is due (once).
        self._narrow_first = False
        #: Passes run by :meth:`run` (the loop) may give way; one called directly runs whole.
        self._looping = False
        #: The KafkaCluster's (generation, removal approval) last seen (a change means a full pass).
        self._cluster_version: tuple[int, str | None] | None = None

    # -- triggering ------------------------------------------------------------

    def cluster_seen(self, version: tuple[int, str | None]) -> None:
        """The KafkaCluster's (generation, removal approval) as an event shows it: a change asks for a full pass.

        Grants, protection or policy may have changed (a new generation), or
        held removals been approved (an annotation): every resource is affected.
        """
        if self._cluster_version not in (None, version):
            self.trigger()
        self._cluster_version = version

    def trigger(self, uid: str | None = None) -> None:
        """Ask for a pass soon. Cheap and safe to call from any handler, any number of times.

        ``uid`` names the resource that changed, which allows a narrow pass;
        without it the pass covers everything.
        """
        if uid is None:
            self._full = True
        else:
            self._dirty.add(uid)
            self._changed.set()
        self._triggers += 1
        if self._first_trigger is None:
            self._first_trigger = time.monotonic()
        self._last_trigger = time.monotonic()
        self._pending += 1
        self._wake.set()

    def _wake_full(self) -> None:
        """A full pass soon, without counting as a change (the end of a removal deferral)."""
        self._full = True
        self._wake.set()

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
        self._looping = True
        if self._ready is not None:
            # Never plan against a half-read desired state: it would remove keys and put them back.
            await self._ready.wait()
        self.trigger()
        while stopped is None or not stopped.is_set():
            if self._unanswered:
                # The brokers give no answer: a check every reachability_interval (each failure said as a
                # failed pass's is) until they answer, then a full pass. Cheaper than passes that wait
                # out a connect timeout, and the first answer ends it (no backoff to sit out).
                await asyncio.sleep(self.settings.reachability_interval)
                try:
                    await self.reach_again()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - said on every resource and logged by _retry_after
                    backoff = await self._retry_after(exc, backoff, check=True)
                    continue
                self._wake_full()
            idle_since = time.monotonic()
            try:
                # On timeout this is the drift check: a pass with nothing changed on our side. Meanwhile
                # the brokers are checked on the reachability timer: a failure is said as a pass's.
                woken = await self._idle(self._wait)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - said on every resource and logged by _retry_after
                backoff = await self._retry_after(exc, backoff, check=True)
                continue
            if not woken:
                # With spec.metrics the loop wakes every metrics_interval; before the drift
                # check is due, only the metrics are read (and the statuses they change).
                if await self._observe_between_drift_checks():
                    continue
                # The drift check covers everything, statuses too: one edited by hand
                # since kquota wrote it is rendered and written again.
                self._full = True
                self._check_stored = True
            # A change after a quiet second goes at once; changes that follow one another
            # closely (kubectl apply of a directory, a prune) wait a little to become one pass.
            burst = self._pending > 1 or time.monotonic() - idle_since < BURST_GAP_SECONDS
            # (Not the changes a full pass just gave way to: they have waited already.)
            if self.settings.coalesce_seconds and burst and not self._narrow_first:
                await asyncio.sleep(self.settings.coalesce_seconds)
            self._pending = 0
            self._wake.clear()
            started = self._first_trigger
            self._first_trigger = None
            # While removals are held, every pass is full: the held set, and so the id an
            # approval names, must be the whole picture, not a narrow pass's part of it.
            if self._dirty and self._hold is None and (self._narrow_first or self._full_may_wait()):
                # The changes a full pass gave way to, or that came with a full pass due (a
                # KafkaCluster edit, a drift check); the full pass stays due and follows at once.
                scope: frozenset[str] | None = frozenset(self._dirty)
                self._narrow_first = False
                self._put_off()
                self._wake.set()
            else:
                scope = None if self._full or self._hold is not None else frozenset(self._dirty)
                self._full = False
            self._dirty.clear()
            try:
                await self.reconcile_once(scope)
                if scope is None:
                    self._put_off_since = None
                backoff = 1.0
                self._answered_at = time.monotonic()
                self._newer_ledger_announced = None
                self._failure_announced = None
                self._refusals.reset()
                if started is not None:
                    metrics.CHANGE_LATENCY_SECONDS.labels(self.name).observe(time.monotonic() - started)
            except FullPassYielded:
                metrics.PASSES.labels(self.name, "yielded").inc()
                self._put_off()
                self._narrow_first = True
                self._full = True
                self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - said on every resource and logged by _retry_after
                backoff = await self._retry_after(exc, backoff, check=False)

    async def _idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a trigger (True; False: none came).

        Meanwhile the brokers are checked every reachability_interval (one DescribeCluster
        through the pass's admin client): a check that goes unanswered raises, so the
        KafkaCluster and its resources say so within about two intervals of the brokers
        going away, not at the next pass. A check that is answered writes nothing.
        """
        deadline = time.monotonic() + timeout
        while not self._wake.is_set():
            until = min(deadline, self.reachability_due())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, until - time.monotonic()))
                return True
            except TimeoutError:
                if time.monotonic() >= deadline:
                    return False
            await self.check_reachable()
        return True

    async def _retry_after(self, exc: Exception, backoff: float, check: bool) -> float:
        """A failed pass or reachability check (``check``): say it, then wait for the retry; the next backoff.

        While the brokers give no answer at all, the retry is the loop's reachability check
        (no backoff); after any other failure a full pass follows the backoff, slept fully: a
        resource change during an outage must not turn the backoff into a tight loop.
        """
        await self._failed(exc, backoff, check)
        if self._unanswered:
            return backoff
        await self._back_off(backoff)
        self._wake.set()
        return min(backoff * 2, self.settings.retry_max_seconds)

    async def _failed(self, exc: Exception, backoff: float, check: bool) -> None:
        """A failed pass or reachability check: said on every resource and the KafkaCluster (a status written only
        when it changes, one Warning event per cause), logged and counted; refused logins are counted towards
        AuthenticationFailed."""
        self._full = True
        if isinstance(exc, NAMED_FAILURES):
            reason, message = self._refusals.failed(exc, self._tried)
            if answered(exc) or (isinstance(exc, KafkaRefusalUnconfirmed) and self._refusals.active(self._tried)):
                # The brokers answered, refusing: each check would be one more refused login.
                # Passes retry with backoff instead (each reads the Secret again).
                self._unanswered = False
            if isinstance(exc, LedgerFromNewerOperator):
                await self._announce_newer_ledger(exc)
            metrics.ERRORS.labels(self.name, reason.value).inc()
            retry = (
                f"checking again in {self.settings.reachability_interval:g}s"
                if self._unanswered
                else f"retrying in {backoff:.0f}s"
            )
            if isinstance(exc, GatherFailed):
                # Not an outage kquota knows: the cause's traceback is for the developers.
                log.warning("cluster %s: %s; %s", self.name, exc, retry, exc_info=exc.__cause__)
            else:
                log.warning("cluster %s: %s; %s", self.name, exc, retry)
            # A missing ACL or a ledger from a newer operator: the connection is fine.
            if not isinstance(exc, (KafkaNotAuthorized, LedgerFromNewerOperator)):
                self._drop_admin()
        else:
            # Nothing is known about the brokers' state after an unexpected failure: say so on every
            # resource, with the cause, rather than leave their last status standing.
            self._unanswered = False
            metrics.ERRORS.labels(self.name, "Internal").inc()
            log.exception("cluster %s: reconcile pass failed; retrying in %.0fs", self.name, backoff)
            text = " ".join(str(exc).split())[:300]
            reason = Reason.CLUSTER_NOT_READY
            message = (
                f"the reconcile pass failed: {type(exc).__name__}: {text} (the operator's log has the traceback); "
                "retrying with backoff"
            )
        if not check:
            metrics.PASSES.labels(self.name, "unavailable" if isinstance(exc, NAMED_FAILURES) else "error").inc()
        await self.report_failure(reason, message)

    def _put_off(self) -> None:
        """The full pass due gives way to changes (they go first); the first time starts its bound."""
        if self._put_off_since is None:
            self._put_off_since = time.monotonic()

    def _full_may_give_way(self) -> bool:
        """Whether the full pass under way would stop for a resource change.

        Only in the loop, never while removals are held, and only until it has been put
        off FULL_PASS_PUT_OFF_SECONDS: after that it runs whole (drift is corrected and every
        status written at least that often however many changes come), and a change made
        meanwhile waits for its end.
        """
        if not self._looping or self._hold is not None:
            return False
        since = self._put_off_since
        return since is None or time.monotonic() - since < FULL_PASS_PUT_OFF_SECONDS

    def _full_may_wait(self) -> bool:
        """Whether a full pass that is due may wait for a narrow pass over the changes that came with it.

        The full pass would cover them, but only at its end (a third of a second at 10,000
        resources, seconds at 50,000): they go first, as the changes a full pass gives way to
        do, and counts as its giving way (see _full_may_give_way); never before the first
        full pass has run, which is what a narrow pass's bookkeeping starts from.
        """
        return self._full and self._full_may_give_way() and self.last_full_at > float("-inf")

    def _full_gives_way(self) -> bool:
        """Whether the full pass under way should stop for the changes that arrived meanwhile."""
        return bool(self._dirty) and self._full_may_give_way()

    async def _observe_between_drift_checks(self) -> bool:
        """A metrics reading instead of a full pass, when nothing else is due (see Pass.observe_once)."""
        due = time.monotonic() - self.last_full_at >= self.settings.drift_interval
        if due or self._full or self._dirty or self._hold is not None:
            return False
        try:
            return await self.observe_once()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("cluster %s: reading metrics between drift checks failed", self.name, exc_info=True)
            return False

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

    async def _back_off(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def close(self) -> None:
        # Waiting finalizers learn that this loop is gone (not a cancellation of their own handler):
        # they decide again, e.g. QuotaKept once the KafkaCluster is gone.
        stopped = ReconcilerStopped(f"the reconciler of KafkaCluster {self.name!r} stopped")
        for waiters in self._release_waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(stopped)
        self._release_waiters.clear()
        self._drop_admin()
        self._blocking.close()

    async def report_failure(self, reason: Reason, message: str) -> None:
        """A failed pass, said on every resource and the KafkaCluster, and once (per cause) as a Warning event."""
        await self._report_unavailable(reason, message)
        # A ledger from a newer operator has its own announcement (_announce_newer_ledger).
        if self._failure_announced is reason or reason is Reason.LEDGER_FROM_NEWER_OPERATOR:
            return
        self._failure_announced = reason
        ref = self._cluster_ref()
        if ref is not None:
            await self.kube.event(ref, "Warning", reason.value, message)

    async def _report_unavailable(self, reason: Reason, message: str) -> None:
        await self._write_cluster_status(reason, message, None)
        for waiters in self._release_waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(KafkaUnavailable(message))
        self._release_waiters.clear()
        said = (reason, message, self._triggers)
        if said == self._unavailable_said:
            # Said on every resource already, and none has changed since: while the brokers give no
            # answer this comes every few seconds, and looking at 10,000 statuses costs 0.1 s of CPU.
            return
        self._unavailable_said = None
        try:
            records = [r for r in self._every_record() if not r.deleting]
        except Exception:  # the failure may be the listing itself: the KafkaCluster still says it
            log.warning("cluster %s: cannot list its resources to report %s", self.name, reason.value, exc_info=True)
            return
        try:
            await self._write_statuses(records, unavailable(records, reason, message))
        except Exception:
            log.warning("cluster %s: could not report %s in status", self.name, reason.value, exc_info=True)
            return
        if not self._status_write_errors:
            self._unavailable_said = said
