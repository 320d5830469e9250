"""Contested keys: another writer undoes kquota's value again and again, so kquota stops fighting and says so.

A key kquota owns that is changed on the brokers is restored on the next
full pass (drift). One restore is drift; the same key restored
``restores`` times within ``window`` seconds is a fight with another writer
(a script, another operator such as Strimzi's User Operator, a second
KafkaCluster with sharing allowed): each side "wins" in turn, clients see the
quota flap, and both report success. From then on the key is *contested*:
kquota leaves it as the other writer set it, the resource says
``Ready=False, reason Contested`` naming the key and a Warning event says so,
and after ``retry`` seconds kquota restores it once more (if the other writer
has stopped, that ends it; if not, it is contested again at once).

Pure: the reconciler passes the clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kquota.domain.entities import Entity, QuotaKey

Key = tuple[Entity, QuotaKey]


@dataclass
class ContestTracker:
    """Restores per key within a window, and the keys currently contested (until when)."""

    restores: int = 3
    window: float = 600.0
    retry: float = 300.0
    _seen: dict[Key, deque[float]] = field(default_factory=dict)
    _until: dict[Key, float] = field(default_factory=dict)

    def restored(self, key: Key, now: float) -> bool:
        """Record a restore of ``key``; True when it makes the key contested."""
        times = self._seen.setdefault(key, deque())
        times.append(now)
        while times and times[0] < now - self.window:
            times.popleft()
        if len(times) >= self.restores:
            self._until[key] = now + self.retry
            times.clear()
            return True
        return False

    def contested(self, key: Key, now: float) -> bool:
        """Whether kquota leaves ``key`` alone now (contested, and its retry time not reached)."""
        until = self._until.get(key)
        if until is None:
            return False
        if now >= until:
            self._expire(key, now)
            return False
        return True

    def _expire(self, key: Key, now: float) -> None:
        # Time to try once more: the next restore plus one more within the window
        # (the other writer still at it) make the key contested again.
        del self._until[key]
        self._seen[key] = deque([now] * max(self.restores - 2, 0))

    def forget(self, owned: Callable[[Key], bool]) -> None:
        """Drop the keys no longer owned (their history means nothing any more).

        Asks ``owned`` about the few keys with a history only, never walks every owned key.
        """
        for store in (self._seen, self._until):
            for key in [k for k in store if not owned(k)]:
                del store[key]

    def active(self, now: float) -> dict[Key, float]:
        """Contested keys and until when; a key past its retry time is no longer contested.

        Also when nothing drifted since: the other writer may have stopped with kquota's value
        in place, and then no restore would ever come to end the contest.
        """
        for key in [k for k, until in self._until.items() if now >= until]:
            self._expire(key, now)
        return dict(self._until)
