"""A deletion handler waits through a Kafka outage instead of handing back to Kopf's 10 s retry."""

from __future__ import annotations

import asyncio

import kopf
import pytest

from kquota.handlers import operator as handlers
from kquota.kafka.errors import KafkaUnavailable

pytestmark = pytest.mark.unit


class Engine:
    """Fails ``failures`` waits as a pass that found Kafka unavailable does, then releases."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.waits = 0

    async def wait_released(self, uid: str, timeout: float) -> None:
        self.waits += 1
        await asyncio.sleep(0.01)  # a pass
        if self.waits <= self.failures:
            raise KafkaUnavailable("authentication refused")


def test_released_by_the_first_pass_after_the_outage() -> None:
    engine = Engine(failures=3)
    asyncio.run(handlers._released(engine, "u-1"))  # type: ignore[arg-type]
    assert engine.waits == 4


def test_an_outage_longer_than_the_wait_hands_back_to_kopf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "RELEASE_WAIT_SECONDS", 0.1)
    engine = Engine(failures=10**6)
    with pytest.raises(kopf.TemporaryError, match="authentication refused"):
        asyncio.run(handlers._released(engine, "u-1"))  # type: ignore[arg-type]
    assert 2 <= engine.waits < 100
