"""Kopf handlers: thin glue from Kubernetes events to the per-cluster reconcilers.

Shape, and why:

* **kquota's own index is the store.** Every quota resource is kept in a
  :class:`~kquota.reconcile.claim_index.ClaimIndex` as a parsed
  :class:`~kquota.domain.claims.ResourceClaim`, keyed by cluster, fed by kquota's
  own list-and-watch of each quota kind (:mod:`~kquota.k8s.informer`), which runs
  from start-up in every replica, the standby included: a failover finds the
  index warm. A reconciler plans only once every kind's first list is in (never
  against a half-read desired state, which would remove keys and put them back),
  but never waits for Kopf's own listing, and no object's event is held until
  all are read (Kopf's indexes did both: the restart's memory peak and most of
  its start time at 10,000 resources). Kopf still watches the quota kinds, for
  their finalizers and deletion handlers.
* **Every change a user makes triggers, nothing else.** The index parses an
  object again when its spec, deletion or user metadata changed and wakes its
  cluster's reconciler, naming the resource so the pass can be narrow; an
  event that changed only status or the operator's own bookkeeping (the echo
  of a status write, Kopf's finalizer) keeps the parsed record, takes the new
  status and wakes nothing. A KafkaCluster whose spec changed (new
  generation) wakes a full pass the same way. There are no per-object
  create/update handlers, because each would cost Kopf an extra annotation
  patch per object, 10,000 patches at 10,000 resources, and the reconciler is
  level-based anyway. For the same reason Kopf keeps no diff base
  (:mod:`~kquota.handlers.diffbase`): nothing reads one.
* **One daemon per KafkaCluster** runs that cluster's reconcile loop; it stops
  when the KafkaCluster is deleted (quotas stay on the brokers, and the ledger
  stays in the operator's namespace, so recreating it picks up where it left).
* **Deletion holds a finalizer** until the resource's keys are gone from the
  brokers, so GitOps tools see a deletion complete only when it really is.
  A resource that vanished while a watch could not resume leaves the index at
  the informer's next list; the ghost sweeper (:mod:`~kquota.reconcile.ghosts`)
  checks the index against the API server's listings once per drift interval as
  well, and the reconcilers leave such a ghost out, so its keys are removed.
* **State lives in Kopf's memo.** The operator's memo carries one
  :class:`OperatorState` (made by :func:`operator_memo`, filled by the startup
  handler); Kopf gives every object a shallow copy of that memo, so every
  handler reaches the same state, and an object's own entries (its last parsed
  record) stay its own. Reconcilers get values (the indexes, the live
  KafkaCluster body, the peers' facts), never callbacks into the handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from kquota import __version__
from kquota.api.manifest import QUOTA_KINDS
from kquota.api.resource import GROUP, VERSION
from kquota.domain.claims import ResourceClaim, claim_from_body
from kquota.domain.guard import APPROVAL_ANNOTATION
from kquota.domain.status import Reason
from kquota.domain.status_format import read_status
from kquota.domain.stored_status import StoredStatus
from kquota.handlers.diffbase import NoDiffBase
from kquota.handlers.scopes import NamespaceScopes, in_scope
from kquota.k8s import published
from kquota.k8s.api import Kube, connect
from kquota.k8s.ledger import LedgerStore
from kquota.kafka.errors import KafkaUnavailable
from kquota.reconcile import sizing
from kquota.reconcile.build import ClusterResolver
from kquota.reconcile.claim_index import ClaimIndex
from kquota.reconcile.engine import ClusterReconciler, ReconcilerStopped
from kquota.reconcile.ghosts import GhostSweeper
from kquota.reconcile.orphans import OrphanReporter, RecordStore
from kquota.reconcile.records import object_ref
from kquota.reconcile.settings import OperatorSettings

log = logging.getLogger(__name__)

FINALIZER = "kquota.io/finalizer"
#: Kopf keeps its handler progress in annotations under this prefix.
ANNOTATION_PREFIX = "kquota.io"
#: How long one of Kopf's per-object workers waits for another event before it exits (and frees the last).
WORKER_IDLE_SECONDS = 0.5
#: How long start-up waits for kquota's index before Kopf starts watching anyway.
STARTUP_SYNC_SECONDS = 120.0
#: Resources per page when Kopf lists a kind (its initial listing, and again after a watch expired).
LIST_CHUNK = 500


@dataclass
class OperatorState:
    """What the handlers share for the operator's lifetime; one per operator, in its Kopf memo."""

    settings: OperatorSettings
    #: Set by the startup handler (which runs before any resource handler).
    kube: Kube | None = None
    #: The running reconciler of each KafkaCluster, by name.
    engines: dict[str, ClusterReconciler] = field(default_factory=dict)
    #: Every quota resource's latest record by uid, for the resources no reconciler covers.
    records: RecordStore = field(default_factory=RecordStore)
    #: Each KafkaCluster that exists, by name: (creationTimestamp, status.clusterId);
    #: a second one for a Kafka cluster is refused.
    cluster_facts: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    orphans: OrphanReporter | None = None
    #: Resources found deleted although Kopf's indexes still hold them (their deletion went unseen), by uid.
    gone: dict[str, ResourceClaim] = field(default_factory=dict)
    ghosts: GhostSweeper | None = None
    #: kquota's index of the quota resources (made by the startup handler).
    claims: ClaimIndex | None = None
    #: The informers feeding it: one task per quota kind and watched namespace.
    informers: NamespaceScopes | None = None
    #: Why this operator reconciles nothing (its memory limit cannot hold the resources), else None.
    refused: str | None = None


#: The operator memo's key for the :class:`OperatorState`.
_STATE_KEY = "kquota"


def operator_memo(settings: OperatorSettings) -> kopf.Memo:
    """The memo to start Kopf with (``kopf.operator(memo=...)``): it carries the handlers' state."""
    return kopf.Memo({_STATE_KEY: OperatorState(settings)})


def state(memo: kopf.Memo) -> OperatorState:
    """The operator's state, from the memo of any handler (operator-wide or an object's copy)."""
    found = memo.get(_STATE_KEY)
    if not isinstance(found, OperatorState):
        raise RuntimeError("the operator was started without operator_memo(...)")
    return found


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """Kopf's settings kquota runs with (the startup handler sets them before any resource is handled)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    # No handler reads a diff: Kopf keeps no diff base (no copies per event, no PATCH per change).
    settings.persistence.diffbase_storage = NoDiffBase()
    # Handler log lines are not posted as Kubernetes events: kquota posts its own,
    # meaningful ones (Applied, Conflict, DriftCorrected, ...).
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    # Kopf lists each kind at start and whenever a watch must start over: in one response,
    # 10,000 resources are tens of MB of JSON read whole and decoded at once, a peak the
    # process keeps as RSS (Python returns little of it). In pages, one page at a time.
    settings.watching.chunk_size = LIST_CHUNK
    # Kopf runs one worker per object, which keeps that object's last event (the whole body) while it
    # idles for more: 5 s by default, so a start-up listing of 10,000 resources held all 10,000 bodies
    # at once (the restart's memory peak). A worker that idles briefly lets each go once handled.
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    # The replicas agree through the one ClusterKopfPeering the chart creates, also when the operator
    # watches only some namespaces: kopf.operator(namespaces=...) switches peering to a KopfPeering in
    # every watched namespace, whose CRD and objects do not exist, and a named (mandatory) peering
    # that finds no peering resource pauses the operator for good. Kopf picks the peering resource
    # after the startup handlers ran, so this takes effect.
    settings.peering.clusterwide = True


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure_kopf(settings)
    st = state(memo)
    ours = st.settings
    st.kube = Kube(await connect(ours.kubeconfig))
    st.orphans = OrphanReporter(st.kube, ours, st.records, st.cluster_facts.keys())
    st.orphans.start()
    kube = st.kube
    st.claims = ClaimIndex(
        ours.default_cluster,
        lambda cluster, uid: _wake(st, cluster, uid),
        lambda cluster, uid: _written(st, cluster, uid),
        st.records,
        lambda rec: _vanished(st, rec),
        lambda uid: _listed_again(st, uid),
    )
    st.informers = NamespaceScopes(kube, st.claims, ours.watch_namespaces)
    # Before anything is read in bulk: can this process hold what it is about to read?
    st.refused = sizing.refusal(await st.informers.count(), sizing.cgroup_memory_limit())
    if st.refused is not None:
        log.error("%s", st.refused)
        return
    await st.informers.start()
    # Kopf starts its watches once the startup handlers are done: its own listing of every quota
    # resource (for the finalizers) then follows kquota's instead of overlapping it, so the two never
    # hold their pages at once (the restart's memory peak). Bounded: an API server that does not
    # answer must not keep Kopf from starting (the reconcilers wait for the index themselves).
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(st.claims.synced.wait(), timeout=STARTUP_SYNC_SECONDS)
    st.ghosts = GhostSweeper(
        kube.list_cluster_uids, QUOTA_KINDS.values(), st.records, lambda rec: _found_gone(st, rec), ours.drift_interval
    )
    st.ghosts.start()
    # kquota plan reads the default cluster from here rather than guess it.
    await published.publish_or_warn(
        st.kube,
        ours.namespace,
        published.PublishedSettings(
            ours.default_cluster,
            __version__,
            tuple(ours.protected_users),
            tuple(ours.protected_client_ids),
            (
                ours.deletion_guard,
                ours.deletion_guard_percent,
                ours.deletion_guard_max,
                ours.deletion_guard_min,
            ),
        ),
    )


@kopf.on.cleanup()
async def _cleanup(memo: kopf.Memo, **_: Any) -> None:
    st = state(memo)
    if st.orphans is not None:
        await st.orphans.stop()
    if st.ghosts is not None:
        await st.ghosts.stop()
    if st.informers is not None:
        await st.informers.stop()
    # Out of st.engines first: a deletion waiting on one decides again and must not find it.
    engines = list(st.engines.values())
    st.engines.clear()
    for engine in engines:
        engine.close()
    if st.kube is not None:
        await st.kube.close()


def _wake(st: OperatorState, cluster: str, uid: str) -> None:
    """A resource changed: wake its cluster's reconciler, naming it (a narrow pass)."""
    engine = st.engines.get(cluster)
    if engine is not None:
        engine.trigger(uid)


def _written(st: OperatorState, cluster: str, uid: str) -> StoredStatus | None:
    """The status kquota last wrote to ``uid`` (a read-back status is then shared, not copied)."""
    engine = st.engines.get(cluster)
    return engine.written_status(uid) if engine is not None else None


def _found_gone(st: OperatorState, rec: ResourceClaim) -> None:
    """A resource is gone from the API server (the ghost sweeper's word): release its keys.

    The informers see most such deletions (a resource deleted without kquota's
    finalizer): the index dropped the record and there is nothing more to do. One
    the index still holds is a ghost: the
    reconcilers leave it out from now on, and a pass removes its keys, with a
    QuotaRemoved event on the KafkaCluster naming it.
    """
    if st.claims is not None and not st.claims.holds(rec.ref.uid):
        return
    _vanished(st, rec)


def _vanished(st: OperatorState, rec: ResourceClaim) -> None:
    """Left out from now on; its keys are removed by the pass this wakes, as a gone resource's."""
    st.gone[rec.ref.uid] = rec
    _say_and_wake(
        st,
        rec,
        "was deleted while the operator could not see it (gone from the API server, its deletion never reached "
        "the watch): releasing what it set",
    )


def _listed_again(st: OperatorState, uid: str) -> None:
    """The API server lists or watches ``uid``: if it was taken for vanished, it was not, and is reconciled again.

    A uid is never reused, so one that is listed exists. Whatever a pass removed meanwhile as the
    vanished resource's is set again by the pass this wakes (its resource claims it again).
    """
    rec = st.gone.pop(uid, None)
    if rec is not None:
        _say_and_wake(st, rec, "is on the API server again after it was taken for deleted: reconciling it again")


def _say_and_wake(st: OperatorState, rec: ResourceClaim, what: str) -> None:
    log.warning("%s %s/%s %s", rec.ref.kind, rec.ref.namespace, rec.ref.name, what)
    engine = st.engines.get(rec.cluster)
    if engine is not None:
        engine.trigger(rec.ref.uid)


#: How long a deletion handler waits for its keys to leave the brokers before Kopf retries it.
RELEASE_WAIT_SECONDS = 60.0


async def _released(engine: ClusterReconciler, uid: str) -> None:
    """Wait until ``uid``'s keys are off the brokers, through Kafka outages, for RELEASE_WAIT_SECONDS.

    A pass that finds Kafka unavailable fails every waiter at once; waiting
    again (rather than handing back to Kopf, whose retry comes 10 s later)
    lets the finalizer go with the first pass after Kafka is back (a broker
    restart, a rotated password in the Secret). Each wait ends only when a
    pass ends, so this does not spin.
    """
    deadline = asyncio.get_running_loop().time() + RELEASE_WAIT_SECONDS
    while True:
        left = deadline - asyncio.get_running_loop().time()
        try:
            await engine.wait_released(uid, timeout=max(left, 0.001))
            return
        except TimeoutError as exc:
            # (A TimeoutError says nothing itself: the log line used to end in an empty cause.)
            raise kopf.TemporaryError(
                f"quota not yet removed from the brokers after {RELEASE_WAIT_SECONDS:g}s (the resource's and "
                f"KafkaCluster {engine.name!r}'s status say why, e.g. removals held or waiting for changes to "
                "stop); waiting again",
                delay=10,
            ) from exc
        except KafkaUnavailable as exc:
            if asyncio.get_running_loop().time() >= deadline:
                raise kopf.TemporaryError(f"quota not yet removed from the brokers: {exc}", delay=10) from exc


def _delete(kind: str) -> Any:
    async def delete(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
        st = state(memo)
        rec = claim_from_body(kind, body, st.settings.default_cluster)
        if st.refused is not None:
            # Nothing is reconciled, so nothing can be released: hold the finalizer, with the reason.
            raise kopf.TemporaryError(f"kquota reconciles nothing: {st.refused}", delay=30)
        while True:
            engine = st.engines.get(rec.cluster)
            if engine is None and rec.cluster in kwargs["kafkaclusters_index"]:
                # The KafkaCluster exists but its reconciler does not run: it is starting (just after an
                # operator restart), or the KafkaCluster is being deleted (its daemon stopped, the object
                # not gone yet). Hold the finalizer and decide again in a moment.
                raise kopf.TemporaryError(
                    f"the reconciler of KafkaCluster {rec.cluster!r} is not running (starting, or the "
                    "KafkaCluster is being deleted)",
                    delay=2,
                )
            if engine is None:
                # No reconciler for this cluster (KafkaCluster absent): the ledger keeps
                # what kquota set, and the keys are removed once the cluster is back.
                message = (
                    f"KafkaCluster {rec.cluster!r} does not exist: quotas this resource set stay on the brokers "
                    "(recorded in the ledger) and are removed when that KafkaCluster exists again"
                )
                log.warning("%s %s/%s deleted: %s", kind, rec.ref.namespace, rec.ref.name, message)
                if st.kube is not None:
                    await st.kube.event(object_ref(rec), "Warning", "QuotaKept", message)
                st.records.pop(rec.ref.uid, None)
                return
            try:
                await _released(engine, rec.ref.uid)
            except ReconcilerStopped:
                # Its KafkaCluster was deleted (or the operator is pausing) while this waited: decide again.
                continue
            st.records.pop(rec.ref.uid, None)
            return

    delete.__name__ = f"{kind.lower()}_delete"
    return delete


def _in_scope(namespace: str | None, memo: kopf.Memo, **_: Any) -> bool:
    """Only the watched namespaces: Kopf also watches the operator's own (see ``scopes.kopf_namespaces``)."""
    return in_scope(namespace, state(memo).settings.watch_namespaces)


for _kind, _plural in QUOTA_KINDS.items():
    kopf.on.delete(GROUP, VERSION, _plural, id=f"{_plural}_delete", when=_in_scope)(_delete(_kind))


@kopf.index(GROUP, VERSION, "kafkaclusters", id="kafkaclusters_index")
async def kafkacluster_generation(name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, int]:
    st = state(memo)
    meta = body.get("metadata", {})
    generation = int(meta.get("generation") or 0)
    engine = st.engines.get(name)
    if engine is not None:
        engine.cluster_seen((generation, (meta.get("annotations") or {}).get(APPROVAL_ANNOTATION)))
    st.cluster_facts[name] = (
        str(meta.get("creationTimestamp") or ""),
        # Through the status reader: a clusterId in a format a newer kquota wrote is not known.
        read_status(body.get("status")).current.get("clusterId"),
    )
    if st.orphans is not None:
        st.orphans.cluster_seen(name)
    return {name: generation}


@kopf.on.event(GROUP, VERSION, "kafkaclusters", id="kafkacluster_events")
async def kafkacluster_event(name: str, event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    # A deleted KafkaCluster leaves its resources to the orphan reporter (no finalizer
    # on KafkaClusters: deleting one never waits for kquota).
    if event.get("type") == "DELETED":
        state(memo).cluster_facts.pop(name, None)


@kopf.daemon(GROUP, VERSION, "kafkaclusters", id="reconciler", cancellation_timeout=10)
async def cluster_reconciler(
    name: str, body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, **kwargs: Any
) -> None:
    st = state(memo)
    kube = st.kube
    assert kube is not None, "startup handler did not run"
    # The index and a daemon's body are live: the reconciler reads them as they are on each pass.
    claims = st.claims
    assert claims is not None, "startup handler did not run"
    engine = ClusterReconciler(
        name=name,
        indexes=(claims,),
        cluster_config=ClusterResolver(body, kube, st.settings),
        kube=kube,
        ledger_store=LedgerStore(kube, st.settings.namespace, name),
        settings=st.settings,
        cluster_object=body,
        peers=st.cluster_facts,
        gone=st.gone,
        ready=claims.synced,
    )
    if st.refused is not None:
        # No reconciling at all: the KafkaCluster says why, once, and the daemon waits to be stopped.
        await engine.report_failure(Reason.INSUFFICIENT_MEMORY, st.refused)
        await stopped.wait()
        engine.close()
        return
    st.engines[name] = engine
    task = asyncio.create_task(engine.run(), name=f"reconcile-{name}")
    try:
        await stopped.wait()
    finally:
        # Nothing here awaits before the engine is out of st.engines and closed: Kopf stops a deleted
        # KafkaCluster's daemon by force and may cancel it again while it cleans up, which left the
        # stopped engine in st.engines, and deletions of its resources waited on it for ever (#33).
        if st.engines.get(name) is engine:
            del st.engines[name]
        engine.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
