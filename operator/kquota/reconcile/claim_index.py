"""Every quota resource's parsed claim, by cluster: kquota's index, fed by its own informers (k8s/informer.py).

The reconcilers read it as they read Kopf's indexes before (a mapping from a
cluster's name to its resources' :class:`~kquota.domain.claims.ResourceClaim`),
and it decides what a watch event means, as the Kopf index function did:

* an object whose spec, deletion, creation time or user metadata changed is
  parsed again and wakes its cluster's reconciler, naming it (a narrow pass);
* an event that changed only its status or the operator's own bookkeeping (the
  echo of a status write, Kopf's finalizer) keeps the parsed claim, takes the
  new status (shared with what kquota wrote when it is read back unchanged) and
  wakes nothing;
* a deletion drops the claim and wakes the reconciler, and so does an object
  a new list lacks (a deletion the watch never delivered): its keys are removed.
  One that goes without ever being seen Terminating (no finalizer held it) is
  handed to ``vanished`` as well, so the removal of its keys names it.

``synced`` is set once every informer has handed over its first complete list:
the reconcilers plan only then, never against a half-read desired state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import replace
from typing import Any

from kquota.domain.claims import ResourceClaim, claim_from_body
from kquota.domain.decide import claimed_entities
from kquota.domain.entities import Entity
from kquota.domain.stored_status import StoredStatus

#: Where kquota keeps its own and Kopf's notes on an object (left out of what wakes a pass).
OWN_ANNOTATIONS = "kquota.io/"

Version = tuple[Any, ...]


def version_of(body: Mapping[str, Any]) -> Version:
    """What a change must touch to wake a pass.

    The spec (its generation), deletion and the creation time (the conflict
    rule's age) are what the claim is parsed from. A user's own labels and
    annotations count too, so ``kubectl annotate`` asks for a pass. Left out:
    status, finalizers and the ``kquota.io/`` annotations, which are Kopf's
    progress notes and the advisor's provenance.
    """
    meta = body.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    user_metadata = (
        tuple(sorted((k, v) for k, v in annotations.items() if not k.startswith(OWN_ANNOTATIONS))),
        tuple(sorted((meta.get("labels") or {}).items())),
    )
    # A hash, not the values: kubectl apply keeps the whole object in an annotation.
    return (
        meta.get("generation"),
        bool(meta.get("deletionTimestamp")),
        meta.get("creationTimestamp"),
        hash(user_metadata),
    )


class ClaimIndex(Mapping[str, Iterable[ResourceClaim]]):
    """Claims by cluster name (a reconciler reads ``index.get(cluster, ())``) and by uid.

    ``wake(cluster, uid)`` asks that cluster's reconciler for a pass over the
    resource; ``written(cluster, uid)`` is the status kquota last wrote for it (so
    a read-back status is shared, not copied); ``records`` (uid -> claim) is kept
    in step for the orphan reporter and the ghost sweeper.
    """

    def __init__(
        self,
        default_cluster: str,
        wake: Callable[[str, str], None],
        written: Callable[[str, str], StoredStatus | None],
        records: MutableMapping[str, ResourceClaim] | None = None,
        vanished: Callable[[ResourceClaim], None] | None = None,
        listed_again: Callable[[str], None] | None = None,
    ) -> None:
        self.default_cluster = default_cluster
        self._wake = wake
        self._written = written
        self._vanished = vanished
        #: Told every uid the API server lists or watches: one taken for vanished was not gone after all.
        self._listed_again = listed_again
        self.records: MutableMapping[str, ResourceClaim] = records if records is not None else {}
        self._by_cluster: dict[str, dict[str, ResourceClaim]] = {}
        #: By cluster and entity, the resources whose claimed_entities hold it (what a narrow pass is closed over).
        self._by_entity: dict[str, dict[Entity, dict[str, ResourceClaim]]] = {}
        self._versions: dict[str, Version] = {}
        #: The uids each (kind, namespace) list holds, to tell what a new list lacks.
        self._scopes: dict[str, tuple[str, str | None]] = {}
        self.synced = asyncio.Event()
        self._waiting: set[tuple[str, str | None]] = set()

    # -- the reconcilers' view ---------------------------------------------------------

    def __getitem__(self, cluster: str) -> Iterable[ResourceClaim]:
        found = self._by_cluster.get(cluster)
        if found is None:
            raise KeyError(cluster)
        return found.values()

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_cluster)

    def __len__(self) -> int:
        return len(self._by_cluster)

    def claim(self, uid: str) -> ResourceClaim | None:
        return self.records.get(uid)

    def claim_in(self, cluster: str, uid: str) -> ResourceClaim | None:
        """The resource with ``uid`` if it targets ``cluster`` (None: not one of that cluster's)."""
        return self._by_cluster.get(cluster, {}).get(uid)

    def claimants(self, cluster: str, entity: Entity) -> Iterable[ResourceClaim]:
        """``cluster``'s resources whose :func:`~kquota.domain.decide.claimed_entities` hold ``entity``."""
        return self._by_entity.get(cluster, {}).get(entity, {}).values()

    def holds(self, uid: str) -> bool:
        """Whether the index (not only the records) still has ``uid``."""
        rec = self.records.get(uid)
        return rec is not None and uid in self._by_cluster.get(rec.cluster, {})

    # -- readiness -------------------------------------------------------------------------

    def expect(self, kind: str, namespace: str | None) -> None:
        """An informer of ``kind`` in ``namespace`` will list: ``synced`` waits for it."""
        self._waiting.add((kind, namespace))
        self.synced.clear()

    def forget_scope(self, kind: str, namespace: str | None) -> None:
        """An informer stopped (its namespace no longer watched): its objects leave, as deleted."""
        self.listed(kind, namespace, set())
        self._waiting.discard((kind, namespace))
        if not self._waiting:
            self.synced.set()

    # -- the informers' sink -----------------------------------------------------------------

    def upsert(self, kind: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        self._scopes[uid] = (kind, meta.get("namespace"))
        if self._listed_again is not None:
            self._listed_again(uid)
        version = version_of(body)
        prev = self.records.get(uid)
        if prev is not None and self._versions.get(uid) == version and uid in self._by_cluster.get(prev.cluster, {}):
            # Only status or bookkeeping changed: nothing to plan, so no pass is woken.
            status = StoredStatus.of(body.get("status"), same=self._written(prev.cluster, uid))
            if status is not prev.status:
                self._put(replace(prev, status=status))
            return
        rec = claim_from_body(kind, dict(body), self.default_cluster)
        if prev is not None and prev.cluster != rec.cluster:
            # clusterRef is immutable, but a default cluster resolved anew may differ: leave the old one's view.
            left = self._by_cluster.get(prev.cluster, {}).pop(uid, None)
            if left is not None:
                self._unindex(left)
            self._wake(prev.cluster, uid)
        self._versions[uid] = version
        self._put(rec)
        self._wake(rec.cluster, uid)

    def delete(self, kind: str, body: Mapping[str, Any]) -> None:
        uid = str((body.get("metadata") or {}).get("uid") or "")
        rec = self.records.get(uid)
        if rec is not None and not rec.deleting and self._vanished is not None:
            # Gone without ever being seen Terminating: its finalizer was not there (removed by hand, or
            # never written), so nothing released its keys; its removals name it.
            self._vanished(rec)
        self._drop(uid)

    def listed(self, kind: str, namespace: str | None, uids: set[str]) -> None:
        # Objects of this kind and namespace a complete list lacks were deleted unseen.
        for uid, scope in list(self._scopes.items()):
            if scope[0] == kind and (namespace is None or scope[1] == namespace) and uid not in uids:
                rec = self.records.get(uid)
                if rec is not None and self._vanished is not None:
                    self._vanished(rec)
                self._drop(uid)
        self._waiting.discard((kind, namespace))
        if not self._waiting:
            self.synced.set()

    # -- bookkeeping ------------------------------------------------------------------------

    def _put(self, rec: ResourceClaim) -> None:
        uid = rec.ref.uid
        prev = self._by_cluster.get(rec.cluster, {}).get(uid)
        self._by_cluster.setdefault(rec.cluster, {})[uid] = rec
        self.records[uid] = rec
        if prev is not None and prev.entries is rec.entries and prev.spec is rec.spec:
            # A status-only change (the claim is the same but for its status): the same entities.
            for entity in claimed_entities(rec):
                self._by_entity[rec.cluster][entity][uid] = rec
            return
        if prev is not None:
            self._unindex(prev)
        by_entity = self._by_entity.setdefault(rec.cluster, {})
        for entity in claimed_entities(rec):
            by_entity.setdefault(entity, {})[uid] = rec

    def _unindex(self, rec: ResourceClaim) -> None:
        by_entity = self._by_entity.get(rec.cluster, {})
        for entity in claimed_entities(rec):
            holders = by_entity.get(entity)
            if holders is not None:
                holders.pop(rec.ref.uid, None)
                if not holders:
                    del by_entity[entity]
        if not by_entity:
            self._by_entity.pop(rec.cluster, None)

    def _drop(self, uid: str) -> None:
        rec = self.records.get(uid)
        self._scopes.pop(uid, None)
        self._versions.pop(uid, None)
        if rec is None:
            return
        by_uid = self._by_cluster.get(rec.cluster, {})
        held = by_uid.pop(uid, None)
        if held is not None:
            self._unindex(held)
            if not by_uid:
                self._by_cluster.pop(rec.cluster, None)
            self._wake(rec.cluster, uid)
        del self.records[uid]
