"""Where one KafkaCluster's blocking calls run: a small thread pool of its own.

kafka-python and the metrics scrapes block, and a full pass's decide is CPU
work run off the event loop. ``asyncio.to_thread`` runs such calls on the
loop's default executor: ``min(32, cores + 4)`` threads (six on two cores)
shared by every KafkaCluster and by aiohttp's name lookups for the API
server. Brokers that drop packets hold a thread for a whole connect timeout,
again on every retry, so a handful of unreachable KafkaClusters took every
thread: a healthy KafkaCluster's first pass waited 30 s and more behind them
(``tests/e2e/test_unreachable_neighbours.py``). Each reconciler runs its
blocking calls here instead, so one cluster's brokers cost only that cluster.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["Blocking"]

P = ParamSpec("P")
T = TypeVar("T")

#: Threads per KafkaCluster: a pass's Kafka call or CPU work, a given-up full pass's read or decide that
#: still runs beside it (its result is dropped, its thread is not stopped), and one more for such work of
#: an earlier full pass still stuck (a read waiting out a connect timeout). Threads are made only when needed.
WORKERS = 3


class Blocking:
    """Runs one KafkaCluster's blocking calls on threads no other KafkaCluster uses."""

    def __init__(self, cluster: str, workers: int = WORKERS) -> None:
        # Thread names carry the cluster: a thread dump says whose call is stuck.
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"kquota-{cluster}")

    async def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on this cluster's threads, in the caller's context (as asyncio.to_thread)."""
        ctx = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: ctx.run(fn, *args, **kwargs))

    def close(self) -> None:
        """No new calls; a call still blocked ends on its own timeout, and nothing waits for it."""
        self._pool.shutdown(wait=False, cancel_futures=True)
