"""kquota's own list-and-watch of one quota kind: each object handed on as it is decoded, in every replica.

Kopf watches the quota kinds too (it holds the finalizers and runs the deletion
handlers), but kquota's index of the resources is fed from here, for three
reasons a restart and a failover make plain:

* **Nothing waits for Kopf.** Kopf holds every object's event until all of its
  indexes are filled, and runs no daemon before: at 10,000 resources the
  reconciler's first pass waited for Kopf's per-object work and the held events
  set the operator's memory peak. Here a list is read in pages and each object
  is handed to the sink as its page is decoded, so memory is bounded by a page.
* **A standby stays warm.** Kopf stops a standby replica's watches (peering)
  and lists everything again when it takes over. This informer runs in every
  replica, so the one taking over already knows every resource.
* **A list after an expired watch is a list.** When the API server answers a
  watch with 410 Gone, the kind is listed again and the sink learns which objects
  the new list lacks: deletions the watch never delivered (Kopf's indexes keep
  such objects; the ghost sweeper was the only way to find them).

The watch resumes from the last resourceVersion (bookmarks keep it fresh),
reconnects with a capped backoff after any failure, and never raises except
when cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from kubernetes.aio.client.exceptions import ApiException

from kquota.api.resource import GROUP, VERSION
from kquota.k8s.api import Kube, api_path

log = logging.getLogger(__name__)

#: Objects per page of a list.
PAGE = 500
#: How long the API server keeps one watch request open (it then ends it cleanly and the watch resumes).
WATCH_SECONDS = 300
#: Backoff after a failure: first, and at most.
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0


class InformerSink(Protocol):
    """Where an informer hands what it reads (kquota's index)."""

    def upsert(self, kind: str, body: Mapping[str, Any]) -> None: ...

    def delete(self, kind: str, body: Mapping[str, Any]) -> None: ...

    def listed(self, kind: str, namespace: str | None, uids: set[str]) -> None:
        """A complete list of ``kind`` in ``namespace`` (None: all) ended: every uid it held."""


class Gone(Exception):
    """The API server no longer has the resourceVersion a watch or a list continued from (410)."""


class Informer:
    """Lists and then watches one quota kind (all namespaces, or one), handing every object to ``sink``.

    ``path`` watches another collection the same way (the namespaces, for a glob of watched namespaces).
    """

    def __init__(
        self,
        kube: Kube,
        kind: str,
        plural: str,
        namespace: str | None,
        sink: InformerSink,
        page: int = PAGE,
        watch_seconds: int = WATCH_SECONDS,
        path: str | None = None,
    ) -> None:
        self.kube, self.kind, self.plural, self.namespace, self.sink = kube, kind, plural, namespace, sink
        self.page, self.watch_seconds = page, watch_seconds
        #: Another collection than a quota kind's (the namespaces a glob matches, handlers/scopes.py).
        self._path = path
        #: Set once the first complete list has been handed to the sink.
        self.synced = asyncio.Event()
        #: Lists made (the first, and one per expired watch or failure).
        self.lists = 0

    @property
    def path(self) -> str:
        if self._path is not None:
            return self._path
        scope = ("namespaces", self.namespace) if self.namespace is not None else ()
        return api_path("apis", GROUP, VERSION, *scope, self.plural)

    def __repr__(self) -> str:
        return f"Informer({self.plural} in {self.namespace or 'all namespaces'})"

    async def run(self) -> None:
        """List and watch until cancelled; failures are logged and retried, never raised."""
        backoff = BACKOFF_FIRST
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._list()
                    self.synced.set()
                version = await self._watch(version)
                backoff = BACKOFF_FIRST
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("%r: the watch's resourceVersion expired; listing again", self)
                version = None
            except Exception as exc:  # noqa: BLE001 - the API server may be restarting: try again
                log.warning("%r failed (%s: %s); retrying in %.0fs", self, type(exc).__name__, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    async def _list(self) -> str:
        """One complete list, a page at a time; its resourceVersion."""
        seen: set[str] = set()
        token = ""
        while True:
            query = [("limit", str(self.page))] + ([("continue", token)] if token else [])
            try:
                reply = await self.kube.request("GET", self.path, query=query)
            except ApiException as exc:
                if exc.status == 410:
                    # The continue token expired (a list slower than the API server keeps it): start over.
                    seen.clear()
                    token = ""
                    continue
                raise
            for item in reply.get("items") or ():
                uid = (item.get("metadata") or {}).get("uid")
                if uid:
                    seen.add(str(uid))
                    self.sink.upsert(self.kind, item)
            meta = reply.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                self.lists += 1
                self.sink.listed(self.kind, self.namespace, seen)
                return str(meta.get("resourceVersion") or "")
            # Let the event loop breathe between pages: the active replica is reconciling meanwhile.
            await asyncio.sleep(0)

    async def _watch(self, version: str) -> str:
        """Watch from ``version`` until the server ends the request; the last resourceVersion seen."""
        query = [
            ("watch", "1"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.watch_seconds)),
        ]
        try:
            async for event in self.kube.stream(self.path, query, read_timeout=self.watch_seconds + 30):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(obj.get("message"))
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED"):
                    self.sink.upsert(self.kind, obj)
                elif kind == "DELETED":
                    self.sink.delete(self.kind, obj)
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(str(exc.reason)) from None
            raise
        return version
