"""The two sources of a KafkaCluster's quota metrics: direct scrapes of the brokers, or a Prometheus server.

Both return the same :class:`~kquota.domain.observed.MetricsReading`; the
package docstring (:mod:`kquota.metrics`) says why raw samples, and how NaN is read.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from kquota.domain.observed import MetricsReading
from kquota.metrics.http import MetricsUnavailable, check_url
from kquota.metrics.names import MetricNames
from kquota.metrics.prometheus import PrometheusAPI, duration, promql_string
from kquota.metrics.scrape import BrokerSnapshot, instance_of, scrape_brokers
from kquota.metrics.series import RawSeries, quota_series, topic_samples

#: Readings kept per series by ScrapeSource (bounds memory when reads are frequent and the window long).
MAX_POINTS: Final = 256


class MetricsSource(Protocol):
    """Something that returns a :class:`MetricsReading` for a window (seconds)."""

    kind: str

    @property
    def config(self) -> tuple[Any, ...]: ...

    def read(self, window: float, now: float | None = None) -> MetricsReading: ...


_SeriesKey = tuple[str, str, tuple[tuple[str, str], ...]]


@dataclass
class ScrapeSource:
    """Reads the brokers' metrics endpoints directly and remembers the window's readings.

    Thread-safe; one instance per KafkaCluster, kept across reconcile passes.
    """

    endpoints: Sequence[str]
    timeout: float = 5.0
    names: MetricNames = field(default_factory=MetricNames)
    clock: Callable[[], float] = time.time
    kind: str = "Scrape"
    _history: dict[_SeriesKey, deque[tuple[float, float]]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.endpoints = tuple(self.endpoints)
        for url in self.endpoints:
            check_url(url)

    @property
    def config(self) -> tuple[Any, ...]:
        return (self.kind, tuple(self.endpoints), self.names)

    def read(self, window: float, now: float | None = None) -> MetricsReading:
        snapshot = scrape_brokers(self.endpoints, self.timeout, self.names.prefixes, self.clock)
        now = self.clock() if now is None else now
        start = now - window
        with self._lock:
            raw = self._remember(snapshot, start)
        answered = snapshot.answered
        failed = snapshot.failed
        error = None
        if not answered:
            reasons = sorted({b.error or "" for b in failed})
            error = "no broker metrics endpoint answered: " + "; ".join(reasons) if reasons else "no endpoints"
        return MetricsReading(
            source=self.kind,
            time=now,
            window=window,
            available=bool(answered),
            series=tuple(quota_series(raw, self.names)),
            topics=tuple(topic_samples(raw, self.names, start)),
            brokers=tuple(b.instance for b in answered),
            unreachable=tuple(b.instance for b in failed),
            error=error,
        )

    def _remember(self, snapshot: BrokerSnapshot, start: float) -> list[RawSeries]:
        for scrape in snapshot.answered:
            seen: set[_SeriesKey] = set()
            for s in scrape.samples:
                key = (scrape.instance, s.name, tuple(sorted(s.labels.items())))
                seen.add(key)
                points = self._history.get(key)
                if points is None:
                    points = self._history[key] = deque(maxlen=MAX_POINTS)
                points.append((scrape.time, s.value))
            # A series missing from a good scrape is gone (sensor expired, broker restarted).
            for key in [k for k in self._history if k[0] == scrape.instance and k not in seen]:
                del self._history[key]
        live = {instance_of(u) for u in self.endpoints}
        raw: list[RawSeries] = []
        for key in list(self._history):
            points = self._history[key]
            # Keep one reading before the window as the baseline for change detection.
            while len(points) >= 2 and points[1][0] < start:
                points.popleft()
            if key[0] not in live or not points or points[-1][0] < start:
                del self._history[key]
                continue
            raw.append(RawSeries(key[0], key[1], dict(key[2]), tuple(points)))
        return raw


@dataclass
class PrometheusSource:
    """Reads quota metrics from a Prometheus server that scrapes the brokers.

    ``selector`` adds label matchers (``job="kafka-prod"``) so a Prometheus
    that scrapes several Kafka clusters returns only this one's brokers;
    ``instances`` restricts to these ``instance`` label values and reports
    the ones Prometheus cannot scrape (``up == 0`` or no target) as unreachable.
    """

    url: str
    timeout: float = 10.0
    names: MetricNames = field(default_factory=MetricNames)
    selector: str | None = None
    instances: Sequence[str] | None = None
    clock: Callable[[], float] = time.time
    kind: str = "Prometheus"

    def __post_init__(self) -> None:
        self.api = PrometheusAPI(self.url, self.timeout)
        if self.instances is not None:
            self.instances = tuple(self.instances)

    @property
    def config(self) -> tuple[Any, ...]:
        return (self.kind, self.url, self.selector, self.instances, self.names)

    def _matchers(self, *extra: str) -> str:
        parts = [m for m in extra if m]
        # The selector may end with a comma (PromQL allows one before the brace); the instance
        # matcher may follow it here, so it goes.
        selector = (self.selector or "").strip().strip("{}").strip().rstrip(",").rstrip()
        if selector:
            parts.append(selector)
        if self.instances:
            regex = "|".join(re.escape(i) for i in self.instances)
            parts.append(f"{self.names.instance_label}=~{promql_string(regex)}")
        return "{" + ", ".join(parts) + "}"

    def read(self, window: float, now: float | None = None) -> MetricsReading:
        now = self.clock() if now is None else now
        start = now - window
        # Twice the window: the samples before the window are the baseline for change detection.
        span = duration(2 * window)
        quota_re = "|".join(re.escape(n) for n in self.names.quota_names)
        topic_re = "|".join(re.escape(n) for n in self.names.topic_names)
        topic_label = self.names.topic_label
        try:
            quota = self.api.instant(self._matchers(f"__name__=~{promql_string(quota_re)}") + f"[{span}]", at=now)
            topics = self.api.instant(
                self._matchers(f"__name__=~{promql_string(topic_re)}", f'{topic_label}!=""') + f"[{span}]", at=now
            )
            up = self.api.instant("up" + self._matchers(), at=now) if self.instances else []
        except MetricsUnavailable as exc:
            return MetricsReading(self.kind, now, window, available=False, error=str(exc))
        raw = [
            RawSeries(s.labels.get(self.names.instance_label, ""), s.labels.get("__name__", ""), s.labels, s.points)
            for s in (*quota, *topics)
        ]
        seen = {r.broker for r in raw}
        unreachable: set[str] = set()
        if self.instances:
            up_values = {s.labels.get(self.names.instance_label, ""): s.points[-1][1] for s in up if s.points}
            unreachable = {i for i in self.instances if up_values.get(i) != 1}
            seen |= {i for i, v in up_values.items() if v == 1}
        return MetricsReading(
            source=self.kind,
            time=now,
            window=window,
            available=True,
            series=tuple(quota_series(raw, self.names)),
            topics=tuple(topic_samples(raw, self.names, start)),
            brokers=tuple(sorted(seen - unreachable)),
            unreachable=tuple(sorted(unreachable)),
        )


def read_quota_metrics(source: MetricsSource, window: float, now: float | None = None) -> MetricsReading:
    """One read of ``source`` over the last ``window`` seconds (blocking: run it in a thread from async code)."""
    return source.read(window, now)


def source_for(
    prometheus_url: str | None,
    broker_endpoints: Sequence[str] | None,
    previous: MetricsSource | None = None,
    selector: str | None = None,
    timeout: float | None = None,
    names: MetricNames | None = None,
) -> MetricsSource | None:
    """The source a KafkaCluster's ``spec.metrics`` asks for: Prometheus when set, else the endpoints.

    ``selector`` (spec.metrics.prometheusSelector) applies to Prometheus
    only; ``names`` (spec.metrics.names) to both. Returns ``previous`` when it
    is configured the same (its ``config``, which holds both), so a
    ScrapeSource keeps its history across passes, and a changed name or
    selector gives a new source. None when no metrics are configured.
    """
    source: MetricsSource
    names = names or MetricNames()
    if prometheus_url:
        source = PrometheusSource(prometheus_url, timeout or 10.0, names=names, selector=selector)
    elif broker_endpoints:
        source = ScrapeSource(tuple(broker_endpoints), timeout or 5.0, names=names)
    else:
        return None
    if previous is not None and previous.config == source.config:
        return previous
    return source
