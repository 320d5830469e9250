"""Which namespaces kquota's informers watch, as Kopf reads KQUOTA_WATCH_NAMESPACES: one informer per kind and scope.

No patterns: one cluster-wide informer per quota kind. Plain names: one per
kind and namespace. Globs (Kopf's syntax: ``*``, ``?``, ``!`` negations, commas,
matched with Kopf's own function so both agree): the namespaces are listed at
start and then watched (as Kopf watches them), informers start for a new match as
soon as it is created and stop for namespaces gone (their objects leave the
index, as deleted). A namespace created with its quota resources in one apply is
seen at once: a periodic rescan left them out of the index for up to its period,
while Kopf, watching the namespace already, added their finalizers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kopf._cogs.structs.references import NamespaceName, match_namespace

from kquota.api.manifest import QUOTA_KINDS
from kquota.k8s.api import Kube, api_path
from kquota.k8s.informer import Informer
from kquota.reconcile.claim_index import ClaimIndex

log = logging.getLogger(__name__)


def is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?!,")


def in_scope(namespace: str | None, patterns: Sequence[str]) -> bool:
    """Whether ``namespace`` is watched (no patterns: every namespace is); Kopf's matching, so both agree."""
    if not patterns:
        return True
    return namespace is not None and any(match_namespace(NamespaceName(namespace), p) for p in patterns)


def kopf_namespaces(patterns: Sequence[str], own: str) -> list[str]:
    """The namespaces given to Kopf: the watched ones, and the operator's own (where its ledger is).

    Kopf watches a cluster-scoped kind once per watched namespace that exists:
    while no namespace matched (a glob before its first namespace, a name not
    created yet) it watched no KafkaCluster at all, and they had no status.
    The operator's own namespace always exists. Kopf then also watches the
    quota kinds there; their handlers serve only namespaces ``patterns``
    matches (:func:`in_scope`), so a resource there outside them gets no finalizer.
    """
    return [*patterns, own] if patterns and own not in patterns else list(patterns)


class NamespaceScopes:
    """The informers of every quota kind over the watched namespaces, started and stopped as namespaces come and go."""

    def __init__(self, kube: Kube, claims: ClaimIndex, patterns: Sequence[str] | None) -> None:
        self.kube, self.claims = kube, claims
        self.patterns = list(patterns or [])
        self._tasks: dict[tuple[str, str | None], asyncio.Task[None]] = {}
        self._informers: dict[tuple[str, str | None], Informer] = {}
        self._namespace_watch: asyncio.Task[None] | None = None

    async def scopes(self) -> list[str | None]:
        """The namespaces to watch now (None: all of them)."""
        if not self.patterns:
            return [None]
        if not any(is_glob(p) for p in self.patterns):
            return list(self.patterns)
        return list(await self._matching())

    async def count(self) -> int:
        """How many quota resources there are in the watched namespaces (one list of one object per kind and scope)."""
        total = 0
        for ns in await self.scopes():
            for kind, plural in QUOTA_KINDS.items():
                probe = Informer(self.kube, kind, plural, ns, self.claims)
                reply = await self.kube.request("GET", probe.path, query=[("limit", "1")])
                meta = reply.get("metadata") or {}
                total += len(reply.get("items") or ()) + int(meta.get("remainingItemCount") or 0)
        return total

    async def start(self) -> None:
        self._ensure(await self.scopes())
        if self.patterns and any(is_glob(p) for p in self.patterns):
            self._namespace_watch = asyncio.create_task(self._watch_namespaces(), name="kquota-namespace-watch")
        if not self._tasks:
            # Nothing to watch (no namespace matches yet): nothing to wait for either.
            self.claims.synced.set()

    async def stop(self) -> None:
        tasks = list(self._tasks.values()) + ([self._namespace_watch] if self._namespace_watch is not None else [])
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    async def _matching(self) -> list[str]:
        names: list[str] = []
        token = ""
        while True:
            query = [("limit", "500")] + ([("continue", token)] if token else [])
            reply = await self.kube.request("GET", api_path("api", "v1", "namespaces"), query=query)
            for item in reply.get("items") or ():
                name = str((item.get("metadata") or {}).get("name") or "")
                if name and self._matches(name):
                    names.append(name)
            token = str((reply.get("metadata") or {}).get("continue") or "")
            if not token:
                return names

    def _matches(self, name: str) -> bool:
        return in_scope(name, self.patterns)

    def _ensure(self, namespaces: Sequence[str | None]) -> None:
        wanted = {(kind, ns) for kind in QUOTA_KINDS for ns in namespaces}
        for key in sorted(set(self._tasks) - wanted, key=str):
            self._tasks.pop(key).cancel()
            self._informers.pop(key, None)
            self.claims.forget_scope(*key)
        for kind, ns in sorted(wanted - set(self._tasks), key=str):
            informer = Informer(self.kube, kind, QUOTA_KINDS[kind], ns, self.claims)
            self.claims.expect(kind, ns)
            self._informers[(kind, ns)] = informer
            self._tasks[(kind, ns)] = asyncio.create_task(informer.run(), name=f"kquota-informer-{kind}-{ns or '*'}")

    async def _watch_namespaces(self) -> None:
        """The namespaces, listed and watched: every change of the set a glob matches starts or stops informers."""
        sink = _NamespaceSink(self)
        await Informer(self.kube, "Namespace", "namespaces", None, sink, path=api_path("api", "v1", "namespaces")).run()

    def _namespaces_changed(self, names: Sequence[str]) -> None:
        self._ensure(sorted(n for n in names if self._matches(n)))


class _NamespaceSink:
    """The namespaces' informer hands its objects here: kept by uid, the matching set re-derived on each change.

    Nothing is derived before the first complete list: its items arrive one at a time, and the set of
    the first few (``default`` before ``team-a``) would stop the informers of every namespace not yet
    read, and their resources would leave the index as deleted (their keys removed from the brokers,
    the resources never reconciled again). A later list (after an expired watch) only adds names
    until it is complete, so only the first one is partial.
    """

    def __init__(self, scopes: NamespaceScopes) -> None:
        self.scopes = scopes
        self.names: dict[str, str] = {}
        self.complete = False

    def upsert(self, kind: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
        if uid and name and self.names.get(uid) != name:
            self.names[uid] = name
            if self.complete:
                self.scopes._namespaces_changed(list(self.names.values()))

    def delete(self, kind: str, body: Mapping[str, Any]) -> None:
        if self.names.pop(str((body.get("metadata") or {}).get("uid") or ""), None) is not None and self.complete:
            self.scopes._namespaces_changed(list(self.names.values()))

    def listed(self, kind: str, namespace: str | None, uids: set[str]) -> None:
        for uid in set(self.names) - uids:
            del self.names[uid]
        self.complete = True
        self.scopes._namespaces_changed(list(self.names.values()))
