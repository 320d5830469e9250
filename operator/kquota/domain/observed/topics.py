"""A TopicQuota's observation: bytes in/out of its topic per broker and in total, and the OverBudget condition."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kquota.domain.entities import QuotaKey
from kquota.domain.observed.quantize import quantize
from kquota.domain.observed.readings import MetricsReading
from kquota.domain.status import Condition

OVER_BUDGET: Final = "OverBudget"


@dataclass(frozen=True)
class TopicObserved:
    """Bytes in/out of one topic per broker and in total, and the share of its budget (whole-topic bytes/s)."""

    topic: str
    source: str
    window_seconds: float
    available: bool
    brokers: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    bytes_in_rate: float = 0.0
    bytes_out_rate: float = 0.0
    budget: Mapping[QuotaKey, float] = field(default_factory=dict)
    near_limit_percent: int = 80

    def shares(self) -> dict[QuotaKey, float]:
        used = {QuotaKey.PRODUCER_BYTE_RATE: self.bytes_in_rate, QuotaKey.CONSUMER_BYTE_RATE: self.bytes_out_rate}
        return {k: used[k] / v for k, v in self.budget.items() if k in used and v > 0}

    @property
    def near_limit(self) -> bool:
        return any(s * 100 >= self.near_limit_percent for s in self.shares().values())

    def condition(self) -> Condition:
        """OverBudget: whether the topic's traffic exceeds its budget (no numbers in the message)."""
        over = [k.value for k, share in sorted(self.shares().items()) if share > 1]
        if over:
            return Condition(
                OVER_BUDGET, "True", "BudgetExceeded", f"the topic's traffic exceeds its budget: {', '.join(over)}"
            )
        return Condition(OVER_BUDGET, "False", "WithinBudget", "the topic's traffic is within its budget")

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "windowSeconds": quantize(self.window_seconds),
            "available": self.available,
        }
        if not self.available:
            return out
        out["bytesInPerSec"] = quantize(self.bytes_in_rate)
        out["bytesOutPerSec"] = quantize(self.bytes_out_rate)
        shares = self.shares()
        if shares:
            out["usedPercent"] = {k.value: quantize(s * 100) for k, s in sorted(shares.items())}
            out["nearLimit"] = self.near_limit
        out["brokers"] = [
            {"broker": b, "bytesInPerSec": quantize(i), "bytesOutPerSec": quantize(o)}
            for b, (i, o) in sorted(self.brokers.items())
        ]
        return out


def observe_topic(
    reading: MetricsReading, topic: str, budget: Mapping[QuotaKey, float] | None = None, near_limit_percent: int = 80
) -> TopicObserved:
    """Per-broker and total bytes in/out of ``topic``; ``budget`` uses producer/consumer_byte_rate keys."""
    brokers: dict[str, tuple[float, float]] = {}
    for s in reading.topics:
        if s.topic != topic:
            continue
        i, o = brokers.get(s.broker, (0.0, 0.0))
        brokers[s.broker] = (i + (s.bytes_in_rate or 0.0), o + (s.bytes_out_rate or 0.0))
    return TopicObserved(
        topic=topic,
        source=reading.source,
        window_seconds=reading.window,
        available=reading.available,
        brokers=brokers,
        bytes_in_rate=sum(i for i, _ in brokers.values()),
        bytes_out_rate=sum(o for _, o in brokers.values()),
        budget=dict(budget or {}),
        near_limit_percent=near_limit_percent,
    )
