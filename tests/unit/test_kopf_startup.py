"""Kopf's index pre-population wakes waiters only when the toggle set's state flips."""

from __future__ import annotations

import asyncio

import pytest
from kopf._cogs.aiokits import aiotoggles

from kquota.handlers import kopf_startup


class CountingCondition(asyncio.Condition):
    notified = 0

    def notify_all(self) -> None:
        CountingCondition.notified += 1
        super().notify_all()


async def prepopulate(objects: int) -> tuple[int, int]:
    """Kopf's start-up shape: a toggle per object, every object's worker waiting for all."""
    CountingCondition.notified = 0
    indexed = aiotoggles.ToggleSet(all)
    indexed._condition = CountingCondition()
    blocker = await indexed.make_toggle(name="orchestration blocker")
    toggles = [await indexed.make_toggle(name=f"object {i}") for i in range(objects)]
    done = 0

    async def worker(toggle: aiotoggles.Toggle) -> None:
        nonlocal done
        await indexed.drop_toggle(toggle)
        await indexed.wait_for(True)
        done += 1

    tasks = [asyncio.create_task(worker(t)) for t in toggles]
    await asyncio.sleep(0)
    await indexed.drop_toggle(blocker)
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    return done, CountingCondition.notified


def test_waiters_are_woken_once_when_everything_is_indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("make_toggle", "drop_toggle", "drop_toggles"):
        monkeypatch.setattr(aiotoggles.ToggleSet, name, getattr(aiotoggles.ToggleSet, name))
    before = asyncio.run(prepopulate(300))
    assert kopf_startup.install(), "the pinned Kopf version is the one the patch was checked against"
    after = asyncio.run(prepopulate(300))
    # Every worker still gets through: the patch changes how often, not whether.
    assert before[0] == after[0] == 300
    assert before[1] > 300, "unpatched, Kopf notifies on every toggle"
    assert after[1] <= 2, f"patched, only the flip to 'all indexed' notifies (got {after[1]})"


def test_an_unchecked_kopf_version_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    original = aiotoggles.ToggleSet.drop_toggle
    monkeypatch.setattr(kopf_startup, "CHECKED_VERSIONS", frozenset({"0.0.0"}))
    assert not kopf_startup.install()
    assert aiotoggles.ToggleSet.drop_toggle is original


def test_watch_streams_get_connections_of_their_own() -> None:
    """Scoped to many namespaces, watches (3 each) must not fill the pool that status patches need."""
    from kquota.handlers.main import GLOB_NAMESPACES, WATCHES_PER_NAMESPACE, connection_limit
    from kquota.reconcile.settings import OperatorSettings

    base = OperatorSettings.model_construct(api_connections=32)
    assert connection_limit(base) >= 32 + 4, "cluster-wide: four watches beside the requests"
    named = OperatorSettings.model_construct(api_connections=32, watch_namespaces=[f"ns{i}" for i in range(40)])
    # Room for the 40 and for the operator's own namespace, which Kopf watches too (scopes.kopf_namespaces).
    assert connection_limit(named) - connection_limit(base) >= WATCHES_PER_NAMESPACE * 41
    globbed = OperatorSettings.model_construct(api_connections=32, watch_namespaces=["team-*"])
    assert connection_limit(globbed) >= 32 + WATCHES_PER_NAMESPACE * GLOB_NAMESPACES
