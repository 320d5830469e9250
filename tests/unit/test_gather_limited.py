"""``gather_limited``: bounded concurrency, errors returned, and a clean stop when cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings

from kquota.k8s.api import gather_limited


def test_at_most_limit_run_at_once_and_errors_are_returned() -> None:
    running = peak = 0

    async def job(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        if i == 3:
            raise ValueError("three")
        return i

    results = asyncio.run(gather_limited([job(i) for i in range(8)], 2))
    assert peak == 2
    assert results[:3] == [0, 1, 2] and isinstance(results[3], ValueError) and results[4:] == [4, 5, 6, 7]


def test_cancelled_while_waiting_its_turn_leaves_no_coroutine_never_awaited() -> None:
    # The operator stopping mid-pass cancels thousands of queued status writes: each used to log
    # "coroutine ... was never awaited" on the way out.
    started: list[int] = []

    async def write(i: int) -> None:
        started.append(i)
        await asyncio.sleep(10)

    async def run() -> None:
        task = asyncio.ensure_future(gather_limited([write(i) for i in range(5)], 1))
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(run())
        gc.collect()
    assert started == [0]
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]
