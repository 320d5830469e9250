"""Throttle evidence: one quota bucket's readings summarized over the window (its usage now, throttles seen).

The broker's ``throttle-time`` is an average over the throttled requests of the
last ``metrics.num.samples x metrics.sample.window.ms`` (2 x 30 s by default),
not over the quota window, and it does *not* fall when throttling stops: it
stays at its last value until those samples expire, then becomes NaN. A
positive value alone therefore only says "throttled in the last minute or so".
A reading counts as evidence of a throttle *at that time* when the value is
positive, the bucket is active (its rate is above zero: an idle client cannot
be throttled) and either the value changed since the previous reading (each new
throttle moves the average) or usage is at :data:`EVIDENCE_SHARE` of the quota
or more (request throttles are capped at the quota window, so a saturated
client's average can sit at exactly 1000 ms and never change). For controller
mutations a token bucket in debt (``tokens < 0``) while mutating is evidence
too, with ``-tokens/rate`` as the throttle time: KRaft brokers forward
CreateTopics, CreatePartitions and DeleteTopics to the controller, whose
throttle reaches the client through the forwarded response and leaves the
ControllerMutation throttle-time NaN (checked on Kafka 4.3.1). ``Throttled`` is
True when such evidence lies within the window. After a client stops, its rate
reaches 0 within the quota window (11 s by default), so Throttled clears at
most about ``window + 11 s`` after the last throttle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kquota.domain.observed.readings import QuotaResource, QuotaSeries

#: A positive throttle average with usage at this share of the quota or more is a throttle now.
EVIDENCE_SHARE: Final = 0.9
#: Kafka's client quota window (quota.window.num x quota.window.size.seconds, 11 x 1 s by default): each
#: rate reading is the broker's average over it, and usage is the highest reading of the latest one.
QUOTA_WINDOW_SECONDS: Final = 11.0


@dataclass(frozen=True, slots=True)
class QuotaSample:
    """One bucket on one broker summarized over the window.

    Rates are the bucket's usage now (:func:`current_usage`: the highest of the
    broker's readings over its latest quota window, each the broker's own rate);
    ``throttle_time_ms`` is the highest broker
    throttle-time average among the throttles seen in the window, 0 when
    there were none.
    """

    broker: str
    resource: QuotaResource
    user: str | None
    client_id: str | None
    byte_rate: float | None = None
    throttle_time_ms: float = 0.0
    request_time: float | None = None
    tokens: float | None = None
    mutation_rate: float | None = None
    #: Latest usage over the quota that applies, when the quota was known.
    share: float | None = None

    @property
    def throttled(self) -> bool:
        return self.throttle_time_ms > 0

    @property
    def activity(self) -> float | None:
        if self.resource is QuotaResource.REQUEST:
            return self.request_time
        if self.resource is QuotaResource.CONTROLLER_MUTATION:
            return self.mutation_rate
        return self.byte_rate


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def current_usage(readings: Sequence[tuple[float, float]]) -> float | None:
    """A bucket's usage now, from its readings (time, rate) in the window: the highest of the latest
    :data:`QUOTA_WINDOW_SECONDS`, and at least of the latest two readings.

    Not the window's mean: the broker's rate is already an average over its quota window, and a mean
    over a window that began quiet understates a client that saturates its quota now (status said 17%
    while the broker read 4.5 MB/s of a 4 MiB quota). Not the latest reading alone either: Kafka's Rate
    under-reads, never over-reads (a window with fewer than 10 samples left is padded to 10), and a
    consumer held at its quota makes it under-read by up to ten times for about a second every 11 s: the
    quota lets it take a window's worth at once, then throttles it until that sample expires, and the
    next burst's first fetch alone is then divided by 10 s (97,000 B/s in one status write, 970,000 five
    seconds later, issue #33). Any other reading of the last quota window shows the rate.
    """
    if not readings:
        return None
    latest = readings[-1][0]
    recent = [v for t, v in readings if t >= latest - QUOTA_WINDOW_SECONDS]
    if len(recent) < 2:
        recent = [v for _, v in readings[-2:]]
    return max(recent)


def summarize(series: QuotaSeries, start: float, quota: float | None = None) -> QuotaSample:
    """Latest usage and the throttles seen since ``start`` (see the module docstring for the rules)."""
    prev_throttle: float | None = None
    seen_throttle = False
    last_activity: float | None = None
    activity: list[tuple[float, float]] = []
    tokens: float | None = None
    throttles: list[float] = []
    for p in series.points:
        if _finite(p.activity):
            assert p.activity is not None
            last_activity = p.activity
        if p.t >= start:
            if _finite(p.activity):
                assert p.activity is not None
                activity.append((p.t, p.activity))
            if _finite(p.tokens):
                tokens = p.tokens
            v = p.throttle_ms
            if v is not None and math.isfinite(v) and v > 0:
                # Unknown activity (no rate series) gives the reading the benefit of the doubt.
                active = last_activity is None or last_activity > 0
                # A series seen for the first time counts as a change: it appeared with a throttle.
                changed = not seen_throttle or prev_throttle != v
                saturated = (
                    quota is not None
                    and quota > 0
                    and last_activity is not None
                    and last_activity >= EVIDENCE_SHARE * quota
                )
                if active and (changed or saturated):
                    throttles.append(v)
            if (
                series.resource is QuotaResource.CONTROLLER_MUTATION
                and _finite(p.tokens)
                and p.tokens is not None
                and p.tokens < 0
                and quota is not None
                and quota > 0
                and last_activity is not None
                and last_activity > 0
            ):
                # The controller forwards its throttle through the broker and leaves this sensor NaN (KRaft):
                # a bucket in debt throttles the next mutation for -tokens/rate seconds.
                throttles.append(-p.tokens / quota * 1000)
        if p.throttle_ms is not None:
            prev_throttle = p.throttle_ms
            seen_throttle = True
    mean = current_usage(activity)
    share = mean / quota if mean is not None and quota is not None and quota > 0 else None
    res = series.resource
    return QuotaSample(
        broker=series.broker,
        resource=res,
        user=series.user,
        client_id=series.client_id,
        byte_rate=mean if res in (QuotaResource.PRODUCE, QuotaResource.FETCH) else None,
        throttle_time_ms=max(throttles, default=0.0),
        request_time=mean if res is QuotaResource.REQUEST else None,
        tokens=tokens,
        mutation_rate=mean if res is QuotaResource.CONTROLLER_MUTATION else None,
        share=share,
    )
