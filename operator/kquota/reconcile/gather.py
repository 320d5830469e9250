"""The gather step of a pass: every read it makes, in two frozen inputs.

Before decide (:class:`PassInput`), in order: the KafkaCluster (connection,
Secrets, policy), the resources, the ownership ledger (first pass, and every
pass until a load succeeds), the Kafka cluster's id and brokers (a younger
KafkaCluster for the same id stops here), the topics TopicQuotas name, the live
quotas (all of them, or a narrow pass's entities) and the KafkaCluster's
removal approval. What only the outcomes and statuses need (:class:`Observations`:
the brokers' controller windows and quota callbacks, cached for a drift
interval, and the quota metrics, full passes at most every metrics_interval) is
read after act, so those reads never delay a change on its way to the brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kquota.domain.callback import CALLBACK_CONFIG, callbacks_from_configs, cluster_condition
from kquota.domain.claims import ResourceClaim
from kquota.domain.decide import narrow, narrow_by_index
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import APPROVAL_ANNOTATION
from kquota.domain.ledger import LedgerFromNewerOperator
from kquota.domain.mutation import WINDOW_NUM, WINDOW_SIZE, ControllerWindow, window_from_configs
from kquota.domain.observed import MetricsReading
from kquota.domain.topic_outcomes import TopicFacts, probe_topic, topic_recs
from kquota.domain.topics import TopicLayout
from kquota.k8s.api import SecretNotFound
from kquota.kafka.errors import KafkaNotAuthorized, KafkaUnavailable
from kquota.kafka.settings import ConnectionSettings
from kquota.metrics.sources import MetricsSource, read_quota_metrics
from kquota.metrics.sources import source_for as metrics_source_for
from kquota.reconcile.blocking import Blocking
from kquota.reconcile.ports import ClaimantIndex, LedgerPort, QuotaAdminPort
from kquota.reconcile.records import ClusterConfig
from kquota.reconcile.settings import OperatorSettings

log = logging.getLogger(__name__)

Ledger = dict[Entity, dict[QuotaKey, float]]
T = TypeVar("T")
#: KIP-1010's proposed topic configs; a broker that has them can enforce topic budgets itself.
KIP1010_CONFIGS = frozenset({"producer.byte.rate", "consumer.byte.rate"})


class FullPassYielded(Exception):
    """A full pass stopped for the resource changes waiting behind it, which go first.

    It stopped before it changed anything, or after what it changed was recorded and
    announced; the next full pass does the rest.
    """


def _dropped(result: asyncio.Future[Any]) -> None:
    """A given-up full pass's work ended: its result (or error) is not wanted."""
    if not result.cancelled():
        result.exception()


class DuplicateCluster(Exception):
    """An older KafkaCluster already manages the Kafka cluster this one points at."""


class ClusterNotReady(Exception):
    """The KafkaCluster cannot be used yet (missing, or its Secret is unreadable)."""


class GatherFailed(ClusterNotReady):
    """A read of the pass failed in a way nothing else names: the step and the cause, for the status."""

    def __init__(self, step: str, cause: BaseException) -> None:
        text = " ".join(str(cause).split())
        if len(text) > 300:
            text = text[:300] + "..."
        super().__init__(f"the pass failed while reading {step}: {type(cause).__name__}: {text}")
        self.step = step


#: Failures that already say what went wrong (each has its own reason); anything else is a GatherFailed.
_NAMED = (
    ClusterNotReady,
    SecretNotFound,
    KafkaUnavailable,
    KafkaNotAuthorized,
    LedgerFromNewerOperator,
    FullPassYielded,
)


@contextlib.contextmanager
def reading(step: str) -> Iterator[None]:
    """Turn an unexpected failure of one gather step into GatherFailed naming the step (never only a log line)."""
    try:
        yield
    except _NAMED:
        raise
    except Exception as exc:
        raise GatherFailed(step, exc) from exc


@dataclass(frozen=True, slots=True)
class PassInput:
    """Everything decide needs, read once; after act only :meth:`Gather.observe` reads again."""

    cfg: ClusterConfig
    admin: QuotaAdminPort
    #: This cluster's resource with a uid (None: none, or found gone): any of them, not only those the pass covers.
    find: Callable[[str], ResourceClaim | None]
    #: The resources the pass covers: every one of this cluster, or a narrow pass's part of them.
    records: tuple[ResourceClaim, ...]
    #: The entities a narrow pass covers; None: a full pass.
    touched: frozenset[Entity] | None
    ledger: Ledger
    brokers: tuple[int, ...]
    topics: TopicFacts
    live: Mapping[Entity, Mapping[QuotaKey, float]]
    approval: str | None

    @property
    def full(self) -> bool:
        return self.touched is None


@dataclass(frozen=True, slots=True)
class Observations:
    """What a pass reads for its outcomes and statuses only (after act)."""

    windows: Mapping[int, ControllerWindow]
    #: Each broker's client.quota.callback.class; None when the brokers refused to say.
    callbacks: Mapping[int, str] | None
    #: The quota metrics, when this pass read them.
    reading: MetricsReading | None


def _found_in(records: Iterable[ResourceClaim]) -> Callable[[str], ResourceClaim | None]:
    """A resource by uid among ``records`` (the mapping is made on the first lookup: most passes make none)."""
    by_uid: dict[str, ResourceClaim] | None = None

    def find(uid: str) -> ResourceClaim | None:
        nonlocal by_uid
        if by_uid is None:
            by_uid = {r.ref.uid: r for r in records}
        return by_uid.get(uid)

    return find


def describe_each(admin: QuotaAdminPort, entities: Iterable[Entity]) -> dict[Entity, dict[QuotaKey, float]]:
    """The live quotas of a few entities, one small request each (a narrow pass)."""
    live = {}
    for entity in entities:
        values = admin.describe_entity(entity)
        if values:
            live[entity] = values
    return live


class Gather:
    """The reads of a pass and their caches (part of :class:`~kquota.reconcile.engine.ClusterReconciler`)."""

    name: str
    settings: OperatorSettings
    ledger_store: LedgerPort
    _indexes: tuple[Mapping[str, Iterable[ResourceClaim]], ...]
    _gone: Mapping[str, ResourceClaim]
    _cluster: Callable[[], Awaitable[ClusterConfig | None]]
    _cluster_object: Mapping[str, Any] | None
    _peers: Mapping[str, tuple[str, str | None]]
    _admin_factory: Callable[[ClusterConfig], QuotaAdminPort]
    _entities_by_uid: dict[str, frozenset[Entity]]
    #: This cluster's threads for blocking calls (Kafka, metrics, a full pass's decide).
    _blocking: Blocking
    #: Provided by the loop: a full pass soon, without counting as a change.
    _wake_full: Callable[[], None]
    #: Provided by the loop: whether a full pass should give way to resource changes that
    #: arrived while it ran (see ClusterReconciler.run), and whether it would to one.
    _full_gives_way: Callable[[], bool]
    _full_may_give_way: Callable[[], bool]
    #: Provided by the loop: set by every resource change.
    _changed: asyncio.Event
    #: Provided by the loop: the pass runs in the loop (a full one may give way), not called directly.
    _looping: bool

    def _init_gather(self) -> None:
        self._blocking = Blocking(self.name)
        self._admin: QuotaAdminPort | None = None
        self._admin_conn: object | None = None
        #: Loaded by the first pass (and by every pass until a load succeeds).
        self._ledger: Ledger | None = None
        self._cluster_id: str | None = None
        self._brokers: list[int] | None = None
        self._windows: tuple[float, dict[int, ControllerWindow]] | None = None
        #: (when read, each broker's client.quota.callback.class; None when the brokers refused to say).
        self._callbacks: tuple[float, list[int], dict[int, str] | None] | None = None
        # The metrics source is kept: the scrape source remembers readings.
        self._metrics_src: MetricsSource | None = None
        self._metrics_read_at = 0.0
        self._wait = self.settings.drift_interval
        #: The brokers gave no answer to the last DescribeCluster (a pass's or a reachability check's).
        self._unanswered = False
        #: When the brokers last answered (a pass, a reachability check): the next check is due interval later.
        self._answered_at = float("-inf")
        #: The connection settings of the last attempt to reach the brokers (refusals are counted per credentials).
        self._tried: ConnectionSettings | None = None

    def _every_record(self) -> Iterator[ResourceClaim]:
        """This cluster's quota resources, as the indexes hold them now, less those found gone."""
        gone = self._gone
        for index in self._indexes:
            yield from (r for r in index.get(self.name, ()) if r.cluster == self.name and r.ref.uid not in gone)

    def _claimant_index(self) -> ClaimantIndex | None:
        """The claim index, when the resources are in one (the operator's): it finds them by uid and by entity."""
        if len(self._indexes) == 1 and isinstance(self._indexes[0], ClaimantIndex):
            return self._indexes[0]
        return None

    def _finder(self, index: ClaimantIndex) -> Callable[[str], ResourceClaim | None]:
        """This cluster's resource by uid, from the claim index (None: none, or found gone)."""
        name, gone = self.name, self._gone

        def claim(uid: str) -> ResourceClaim | None:
            rec = index.claim_in(name, uid)
            return None if rec is None or uid in gone else rec

        return claim

    def _narrow(
        self, index: ClaimantIndex, scope: frozenset[str], limit: int
    ) -> tuple[list[ResourceClaim], frozenset[Entity]] | None:
        """What a narrow pass over ``scope`` covers, from the claim index's entities."""
        name, gone = self.name, self._gone

        def claimants(entity: Entity) -> Iterator[ResourceClaim]:
            return (r for r in index.claimants(name, entity) if r.ref.uid not in gone)

        return narrow_by_index(scope, self._entities_by_uid, limit, self._finder(index), claimants)

    async def _unless_changed(self, full: bool, work: Callable[[], T], may_give_way: bool = True) -> T:
        """``work()``: in a full pass run by the loop, off the event loop, and given up for a resource change.

        A full pass takes long at 50,000 resources (reading every quota, deciding, the
        outcomes of everything: seconds), and a change made meanwhile should not wait for
        the rest of it. There ``work`` runs on this cluster's threads, so the event loop
        keeps taking watch events, and while the pass may still give way (once; see
        ClusterReconciler._full_may_give_way) a resource change made before ``work`` ends
        stops the pass (FullPassYielded): the change goes narrow at once. A full pass that
        may not give way any more still runs ``work`` off the loop and waits for it: run on
        the loop, it stalled every watch event for its whole length. ``work`` reads only
        values no one mutates in place (the domain is pure, the ledger copy-on-write, the
        remembered entities a copy; a read is a call on the thread-safe admin client), and a
        result no longer wanted is dropped when its thread ends. Narrow passes, and passes
        called directly (tests), run ``work`` here and now; ``may_give_way`` False runs it whole
        (a full pass that holds removals announces the hold first).
        """
        if not (full and self._looping):
            return work()
        if not (may_give_way and self._full_may_give_way()):
            return await self._blocking(work)
        if self._full_gives_way():
            raise FullPassYielded
        result = asyncio.ensure_future(self._blocking(work))
        while True:
            self._changed.clear()
            changed = asyncio.ensure_future(self._changed.wait())
            await asyncio.wait((result, changed), return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
            if result.done():
                return result.result()
            if self._full_gives_way():
                result.add_done_callback(_dropped)
                raise FullPassYielded

    async def gather(self, scope: frozenset[str] | None) -> PassInput:
        """Every read of one pass: over everything (``scope`` None) or narrowed to the resources with these uids."""
        with reading("the KafkaCluster, its Secrets and Strimzi objects"):
            cfg = await self._cluster()
        if cfg is None:
            raise ClusterNotReady(f"KafkaCluster {self.name!r} not found or not usable")
        self._tried = cfg.connection
        with reading("the quota resources"):
            index = self._claimant_index()
            # A narrow pass from the claim index never looks at every resource (15 ms at 50,000).
            every = None if scope is not None and index is not None else tuple(self._every_record())
        if self._ledger is None:
            with reading("the ownership ledger"):
                self._ledger = await self.ledger_store.load()
        with reading("the Kafka cluster's id and brokers"):
            admin = self._admin_for(cfg)
            # Before anything is read or written: is this Kafka cluster another KafkaCluster's?
            cluster_id, brokers = await self._cluster_info(admin, fresh=scope is None)
        self._refuse_duplicate(cluster_id)
        with reading("the resources a narrow pass covers"):
            limit = self.settings.narrow_max_entities
            if scope is None:
                narrowed = None
            elif index is not None:
                narrowed = self._narrow(index, scope, limit)
            else:
                narrowed = narrow(every or (), scope, self._entities_by_uid, limit)
            if narrowed is None and every is None:
                every = tuple(self._every_record())  # too wide for a narrow pass: a full one
            touched = None if narrowed is None else narrowed[1]
            records = tuple(narrowed[0]) if narrowed is not None else every or ()
            find = self._finder(index) if index is not None else _found_in(every or ())
        with reading("the topics TopicQuotas name"):
            topics = await self._topic_facts(admin, records)
        with reading("the live quotas"):
            if touched is None:
                # Reading every quota is most of a full pass's start (0.6-0.9 s at 50,000): a
                # change made meanwhile goes first, and the read left behind ends on its own.
                live = await self._unless_changed(True, admin.describe_all)
            else:
                live = await self._blocking(describe_each, admin, touched)
        with reading("the KafkaCluster's removal approval"):
            approval = self._approval()
        return PassInput(
            cfg=cfg,
            admin=admin,
            find=find,
            records=records,
            touched=touched,
            ledger=self._ledger,
            brokers=tuple(brokers),
            topics=topics,
            live=live,
            approval=approval,
        )

    async def observe(self, inp: PassInput, claimers: Iterable[ResourceClaim]) -> Observations:
        """The reads only outcomes and statuses need: broker configs (cached), metrics (full passes)."""
        brokers = list(inp.brokers)
        return Observations(
            windows=await self._controller_windows(inp.admin, brokers, claimers),
            callbacks=await self._quota_callbacks(inp.admin, brokers, fresh=inp.full),
            reading=await self._read_metrics(inp.cfg) if inp.full else None,
        )

    def _drop_admin(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:
                log.debug("closing Kafka admin client failed", exc_info=True)
        self._admin = None
        self._admin_conn = None

    def _admin_for(self, cfg: ClusterConfig) -> QuotaAdminPort:
        if self._admin is None or self._admin_conn != cfg.connection:
            self._drop_admin()
            self._admin = self._admin_factory(cfg)
            self._admin_conn = cfg.connection
        return self._admin

    async def _cluster_info(self, admin: QuotaAdminPort, fresh: bool) -> tuple[str, list[int]]:
        """The Kafka cluster's id and brokers' ids, re-read on full passes (at least once per drift interval)."""
        if fresh or self._brokers is None or self._cluster_id is None:
            try:
                cluster_id, brokers = await self._blocking(admin.cluster_info)
            except KafkaUnavailable:
                self._unanswered = True
                raise
            self._unanswered = False
            self._cluster_id, self._brokers = cluster_id, brokers
            return cluster_id, brokers
        return self._cluster_id, self._brokers

    # -- reachability --------------------------------------------------------------------

    def reachability_due(self) -> float:
        """When the next reachability check is due (monotonic seconds)."""
        return self._answered_at + self.settings.reachability_interval

    async def check_reachable(self) -> None:
        """While idle: one DescribeCluster through the pass's admin client, answered within reachability_interval.

        Raises KafkaUnavailable when it is not, as a pass would. The Kafka cluster's id or
        brokers changed since the last pass: a full pass is due (it says the new broker count).
        """
        admin = self._admin
        if admin is None:
            self._answered_at = time.monotonic()
            return
        with reading("the Kafka cluster's id and brokers"):
            found = await self._reach(admin)
        if found != (self._cluster_id, self._brokers):
            self._wake_full()

    async def reach_again(self) -> None:
        """While the brokers give no answer: the KafkaCluster resolved again (a corrected Secret is used), and one
        DescribeCluster, connecting included, answered within reachability_interval; raises what a pass would."""
        with reading("the KafkaCluster, its Secrets and Strimzi objects"):
            cfg = await self._cluster()
        if cfg is None:
            raise ClusterNotReady(f"KafkaCluster {self.name!r} not found or not usable")
        self._tried = cfg.connection
        with reading("the Kafka cluster's id and brokers"):
            await self._reach(self._admin_for(cfg))

    async def _reach(self, admin: QuotaAdminPort) -> tuple[str, list[int]]:
        timeout = self.settings.reachability_interval
        try:
            # The adapter keeps to the timeout; this bound is for an adapter that does not.
            found = await asyncio.wait_for(self._blocking(admin.reachable, timeout), 2 * timeout + 1)
        except KafkaUnavailable:
            self._unanswered = True
            raise
        except TimeoutError:
            self._unanswered = True
            raise KafkaUnavailable(f"the brokers did not answer a DescribeCluster within {timeout:g}s") from None
        self._unanswered = False
        self._answered_at = time.monotonic()
        return found

    def _refuse_duplicate(self, cluster_id: str) -> None:
        """Raise DuplicateCluster when an older KafkaCluster manages the same Kafka cluster.

        Two KafkaClusters on one Kafka cluster keep two ledgers and fight over
        any key both claim (each restores its value on every drift check), and
        Adopt on either removes the other's quotas. The older one (creation
        time, then name) keeps the cluster; the younger changes nothing.
        """
        if self.settings.allow_shared_kafka_clusters or self._cluster_object is None:
            return
        meta = self._cluster_object.get("metadata") or {}
        me = (str(meta.get("creationTimestamp") or ""), self.name)
        for name, (created, other_id) in self._peers.items():
            if name != self.name and other_id == cluster_id and (created, name) < me:
                raise DuplicateCluster(
                    f"KafkaCluster {name!r} already manages Kafka cluster {cluster_id} (created first): this "
                    "KafkaCluster changes nothing; delete one of them, or set KQUOTA_ALLOW_SHARED_KAFKA_CLUSTERS "
                    "(Helm value operator.allowSharedKafkaClusters) if several are meant to share it"
                )

    async def _topic_facts(self, admin: QuotaAdminPort, records: Iterable[ResourceClaim]) -> TopicFacts:
        """The leader layout of every topic a TopicQuota names, and (TopicConfig mode) the KIP-1010 probe."""
        recs = topic_recs(records)
        if not recs:
            return TopicFacts()
        names = sorted({spec.topic for _, spec in recs if spec.topic})
        refused: dict[str, str] = {}
        try:
            leaders = await self._blocking(admin.topic_leaders, names)
        except KafkaNotAuthorized as exc:
            # Per topic: TopicQuotas on topics kquota may describe carry on.
            leaders = exc.leaders
            refused = {t: str(exc.only(t)) for t in exc.resources}
        layouts = {t: TopicLayout.from_partition_leaders(p) for t, p in leaders.items() if p}
        kip1010: dict[str, bool | str] = {}
        found: bool | None = None
        for rec, spec in recs:
            topic = spec.topic
            if spec.enforcement != "TopicConfig" or topic in refused:
                continue
            probe = probe_topic(topic, layouts)
            if found is None and probe is not None:
                try:
                    found = bool(KIP1010_CONFIGS & await self._blocking(admin.topic_config_names, probe))
                except KafkaNotAuthorized as exc:
                    kip1010[rec.ref.uid] = str(exc)
                    continue
            if found is not None:
                kip1010[rec.ref.uid] = found
        return TopicFacts(layouts, refused, kip1010)

    async def _controller_windows(
        self, admin: QuotaAdminPort, brokers: list[int], claimers: Iterable[ResourceClaim]
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
            configs = await self._blocking(admin.broker_configs, broker, [WINDOW_NUM, WINDOW_SIZE])
            windows[broker] = window_from_configs(configs)
        self._windows = (now, windows)
        return windows

    async def _quota_callbacks(self, admin: QuotaAdminPort, brokers: list[int], fresh: bool) -> dict[int, str] | None:
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
                configs[broker] = await self._blocking(admin.broker_configs, broker, [CALLBACK_CONFIG])
            found: dict[int, str] | None = callbacks_from_configs(configs)
        except KafkaNotAuthorized as exc:
            log.warning("cluster %s: cannot read %s from the brokers: %s", self.name, CALLBACK_CONFIG, exc)
            found = None
        if found and (cached is None or cached[2] != found):
            log.warning("cluster %s: %s", self.name, cluster_condition(found, False).message)
        self._callbacks = (now, list(brokers), found)
        return found

    async def _read_metrics(self, cfg: ClusterConfig) -> MetricsReading | None:
        """The brokers' quota metrics, at most every metrics_interval (None: not read this pass)."""
        if cfg.metrics is None:
            self._wait = self.settings.drift_interval
            return None
        # Passes come at least this often while metrics are configured, so
        # Throttled flips show up without waiting for a change or drift check.
        self._wait = min(self.settings.drift_interval, self.settings.metrics_interval)
        now = time.monotonic()
        if now - self._metrics_read_at < self.settings.metrics_interval * 0.9:
            return None
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
            return None
        return await self._blocking(read_quota_metrics, self._metrics_src, m.window_seconds)

    def _approval(self) -> str | None:
        if self._cluster_object is None:
            return None
        annotations = (self._cluster_object.get("metadata") or {}).get("annotations") or {}
        value = annotations.get(APPROVAL_ANNOTATION)
        return str(value) if value is not None else None
