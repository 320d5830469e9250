"""Finding quota resources that were deleted while the operator could not see it (#23).

Kopf learns of a deletion only from a watch event. When a watch cannot resume
(410 Gone, after an API server restart or an etcd compaction), Kopf lists the
kind again and watches on, but never drops from its indexes an object that
vanished in the gap (kopf/_cogs/clients/watching.py, ``continuous_watch``: no
informer-style diff). A resource deleted then without kquota's finalizer (Kopf
could not write it before the API server went down, or someone removed it) stays
in the index for ever as a *ghost*, and the operator keeps its keys on the brokers.

Here, once per drift interval, the uids the operator knows are checked against a
fresh, consistent listing of each quota kind (metadata only); a listing that takes
long (50,000 resources: seconds of the event loop's time decoding its pages) spaces
the next one out, so the check costs at most :data:`MOST_TIME_SHARE` of the time
(kquota's own informer, which lists again after a watch expires, is what finds such
objects first; this check is the net under it). The rule
(:class:`GhostRule`) never drops a record for an object that exists: only uids
known *before* a listing was requested are judged by it (an object indexed
before the request existed before it, so a consistent listing holds it while it
exists; a create still on its way is not judged at all), and a uid is a ghost
only when it is missing from two listings requested at least one drift interval
apart. uids are never reused, so a ghost never comes back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Set

from kquota.domain.claims import ResourceClaim

log = logging.getLogger(__name__)

#: The most of the time the check may take: the next listing waits at least the last one's
#: length times (1 / share - 1), and never less than the drift interval.
MOST_TIME_SHARE = 0.02


def pause_after(interval: float, took: float) -> float:
    """Seconds before the next check, after one that took ``took`` seconds."""
    return max(interval, took * (1.0 / MOST_TIME_SHARE - 1.0))


class GhostRule:
    """Which known uids are gone: each missing from two listings requested ``interval`` seconds apart or more."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        #: uid -> when the first listing that missed it was requested.
        self._missing_since: dict[str, float] = {}

    @property
    def suspects(self) -> Set[str]:
        """uids missing from one listing, not yet from a second one late enough."""
        return self._missing_since.keys()

    def listed(self, known: Iterable[str], present: Set[str], requested_at: float) -> list[str]:
        """Judge ``known`` (the uids held before the listing was requested) by a listing's uids.

        Returns the uids now confirmed gone. A uid the listing holds is cleared;
        one no longer known (its deletion was seen meanwhile) is forgotten.
        """
        gone: list[str] = []
        missing: dict[str, float] = {}
        for uid in known:
            if uid in present:
                continue
            since = self._missing_since.get(uid)
            if since is None:
                missing[uid] = requested_at
            elif requested_at - since >= self.interval:
                gone.append(uid)
            else:
                missing[uid] = since
        self._missing_since = missing
        return gone


class GhostSweeper:
    """Lists the quota kinds once per interval and hands each ghost's record to ``on_gone``."""

    def __init__(
        self,
        list_uids: Callable[[str], Awaitable[Set[str]]],
        plurals: Iterable[str],
        records: MutableMapping[str, ResourceClaim],
        on_gone: Callable[[ResourceClaim], None],
        interval: float,
    ) -> None:
        self.list_uids = list_uids
        self.plurals = tuple(plurals)
        self.records = records
        self.on_gone = on_gone
        self.interval = interval
        self.rule = GhostRule(interval)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="kquota-ghosts")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        pause = self.interval
        while True:
            await asyncio.sleep(pause)
            started = time.monotonic()
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                # An API server that cannot list proves nothing: the suspects wait for the next listing.
                log.warning("checking the quota resources against the API server failed", exc_info=True)
            # At 50,000 resources a listing is seconds of decoding on the event loop, beside every
            # change: once per drift interval it was an eighth of the loop's time at a 10 s interval.
            pause = pause_after(self.interval, time.monotonic() - started)

    async def sweep(self) -> list[ResourceClaim]:
        """One check: list every kind, drop the confirmed ghosts from ``records``; returns them."""
        known = list(self.records)
        requested_at = time.monotonic()
        present: set[str] = set()
        for plural in self.plurals:
            present |= await self.list_uids(plural)
        gone: list[ResourceClaim] = []
        for uid in self.rule.listed(known, present, requested_at):
            rec = self.records.pop(uid, None)
            if rec is not None:
                gone.append(rec)
                self.on_gone(rec)
        return gone
