"""Raw metric series -> the normalized readings of :mod:`kquota.domain.observed` (quota buckets, topic rates)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from kquota.domain.observed import Point, QuotaResource, QuotaSeries, TopicSample
from kquota.metrics.jmx import decode_client_id, decode_user
from kquota.metrics.names import QUOTA_ATTRS, MetricNames

_ACTIVITY: Final = {
    QuotaResource.PRODUCE: "byte_rate",
    QuotaResource.FETCH: "byte_rate",
    QuotaResource.REQUEST: "request_time",
    QuotaResource.CONTROLLER_MUTATION: "mutation_rate",
}
_RESOURCES: Final = {r.value: r for r in QuotaResource}


@dataclass(frozen=True, slots=True)
class RawSeries:
    """Samples of one metric series on one broker, oldest first: ``(epoch seconds, value)``."""

    broker: str
    name: str
    labels: Mapping[str, str]
    points: Sequence[tuple[float, float]]


def quota_series(raw: Iterable[RawSeries], names: MetricNames) -> list[QuotaSeries]:
    """Group raw quota metrics into one :class:`QuotaSeries` per (broker, resource, user, clientId)."""
    buckets: dict[tuple[str, QuotaResource, str | None, str | None], dict[float, dict[str, float]]] = {}
    for rs in raw:
        if not rs.name.startswith(names.quota_prefix):
            continue
        attr = rs.name[len(names.quota_prefix) :]
        resource = _RESOURCES.get(rs.labels.get(names.resource_label, ""))
        if attr not in QUOTA_ATTRS or resource is None:
            continue
        # Kafka's JmxReporter drops empty tags; treat an empty label like a missing one.
        user = rs.labels.get(names.user_label) or None
        client = rs.labels.get(names.client_label) or None
        by_time = buckets.setdefault((rs.broker, resource, user, client), {})
        for t, v in rs.points:
            by_time.setdefault(t, {})[attr] = v
    out: list[QuotaSeries] = []
    for (broker, resource, user, client), by_time in sorted(buckets.items(), key=lambda kv: _bucket_order(kv[0])):
        activity = _ACTIVITY[resource]
        points = tuple(
            Point(t, by_time[t].get("throttle_time"), by_time[t].get(activity), by_time[t].get("tokens"))
            for t in sorted(by_time)
        )
        out.append(
            QuotaSeries(
                broker=broker,
                resource=resource,
                user=decode_user(user) if user is not None else None,
                client_id=decode_client_id(client) if client is not None else None,
                points=points,
            )
        )
    return out


def _bucket_order(key: tuple[str, QuotaResource, str | None, str | None]) -> tuple[str, str, str, str]:
    broker, resource, user, client = key
    return (broker, resource.value, user or "", client or "")


def counter_rate(points: Sequence[tuple[float, float]], start: float) -> float | None:
    """Per-second increase of a counter from the last reading before ``start`` to the newest.

    Handles counter resets (a broker restart) the way Prometheus' rate()
    does: a drop means the counter started again from zero. None with fewer
    than two readings.
    """
    before = [p for p in points if p[0] < start]
    pts = ([before[-1]] if before else []) + [p for p in points if p[0] >= start and math.isfinite(p[1])]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    increase = 0.0
    for (_, a), (_, b) in itertools.pairwise(pts):
        increase += b - a if b >= a else b
    return increase / (pts[-1][0] - pts[0][0])


def topic_samples(raw: Iterable[RawSeries], names: MetricNames, start: float) -> list[TopicSample]:
    """Bytes in/out per second per (broker, topic): counter rate over the window, else the one-minute rate.

    The all-topics series (no ``topic`` label) are skipped.
    """
    rates: dict[tuple[str, str], dict[str, float | None]] = {}
    for rs in raw:
        topic = rs.labels.get(names.topic_label)
        if not topic or rs.name not in names.topic_names:
            continue
        slot = rates.setdefault((rs.broker, topic), {})
        if rs.name in (names.bytes_in_total, names.bytes_out_total):
            slot[rs.name] = counter_rate(rs.points, start)
        else:
            finite = [v for _, v in rs.points if math.isfinite(v)]
            slot[rs.name] = finite[-1] if finite else None
    out = []
    for (broker, topic), slot in sorted(rates.items()):
        bytes_in = slot.get(names.bytes_in_total)
        bytes_out = slot.get(names.bytes_out_total)
        out.append(
            TopicSample(
                broker=broker,
                topic=topic,
                bytes_in_rate=bytes_in if bytes_in is not None else slot.get(names.bytes_in_rate),
                bytes_out_rate=bytes_out if bytes_out is not None else slot.get(names.bytes_out_rate),
            )
        )
    return out
