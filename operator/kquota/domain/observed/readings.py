"""The normalized reading: quota buckets per broker over time, topic rates (produced by :mod:`kquota.metrics`)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kquota.domain.entities import QuotaKey


class QuotaResource(enum.StrEnum):
    """Kafka's quota manager types, the ``resource`` label of the quota metrics."""

    PRODUCE = "Produce"
    FETCH = "Fetch"
    REQUEST = "Request"
    CONTROLLER_MUTATION = "ControllerMutation"


#: The quota key each quota manager enforces.
KEY_OF: Final[Mapping[QuotaResource, QuotaKey]] = {
    QuotaResource.PRODUCE: QuotaKey.PRODUCER_BYTE_RATE,
    QuotaResource.FETCH: QuotaKey.CONSUMER_BYTE_RATE,
    QuotaResource.REQUEST: QuotaKey.REQUEST_PERCENTAGE,
    QuotaResource.CONTROLLER_MUTATION: QuotaKey.CONTROLLER_MUTATION_RATE,
}
RESOURCE_OF: Final[Mapping[QuotaKey, QuotaResource]] = {k: r for r, k in KEY_OF.items()}
#: Keys that have broker metrics (connection_creation_rate has none per entity).
MEASURED_KEYS: Final = frozenset(RESOURCE_OF)


@dataclass(frozen=True, slots=True)
class Point:
    """One reading of a quota bucket on one broker.

    ``throttle_ms`` is the broker's throttle-time average (NaN when it holds
    no throttle, None when the series was not in this reading); ``activity``
    the metric the quota limits: byte-rate (Produce, Fetch), request-time in
    percent of a thread (Request) or mutation-rate (ControllerMutation).
    """

    t: float
    throttle_ms: float | None = None
    activity: float | None = None
    tokens: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaSeries:
    """One quota bucket on one broker over time, oldest reading first.

    ``user`` is the decoded principal name and ``client_id`` the unquoted
    client.id; None when the metric has no such tag. Readings before the
    window's start are a baseline for change detection only.
    """

    broker: str
    resource: QuotaResource
    user: str | None
    client_id: str | None
    points: tuple[Point, ...]

    @property
    def bucket(self) -> tuple[str | None, str | None]:
        return (self.user, self.client_id)


@dataclass(frozen=True, slots=True)
class TopicSample:
    """Bytes in (produced) and out (fetched by consumers) per second of one topic on one broker."""

    broker: str
    topic: str
    bytes_in_rate: float | None
    bytes_out_rate: float | None


@dataclass(frozen=True, slots=True)
class MetricsReading:
    """Everything one read of a metrics source returned.

    ``available`` is False when nothing could be read (no broker answered,
    Prometheus failed): conditions are then Unknown, never False.
    """

    source: str
    time: float
    window: float
    available: bool
    series: tuple[QuotaSeries, ...] = ()
    topics: tuple[TopicSample, ...] = ()
    brokers: tuple[str, ...] = ()
    unreachable: tuple[str, ...] = ()
    error: str | None = None

    @property
    def start(self) -> float:
        return self.time - self.window
