"""``kquota collect``: usage samples from Prometheus or from the brokers' metrics endpoints, into Parquet.

Two sources, one output (a directory with ``clients/`` and ``topics/`` Parquet
datasets in the advisor's input schema, see :mod:`kquota.advisor.schema`):

* **Prometheus** (:func:`prometheus_rows`): ``/api/v1/query_range`` for the
  quota gauges and ``rate()`` of the per-topic byte counters, in chunks of at
  most 10,000 points per series (Prometheus' limit is 11,000). The broker is
  the series' ``instance`` label (``--broker-label``).
* **Scraping** (:func:`scrape`): GET each broker's ``/metrics`` every
  ``interval`` seconds for ``duration`` seconds. Quota gauges are taken as
  they are; per-topic rates come from the difference of the byte counters
  between two scrapes (the first scrape only sets the baseline; a counter that
  went down, i.e. a broker restart, gives no sample).

Metric names are the defaults of :class:`kquota.metrics.names.MetricNames`
(the JMX exporter rules kquota ships, ``harness/jmx-exporter.yaml``). Pages are
parsed, label values decoded and responses read (with the same size cap) by
:mod:`kquota.metrics`, exactly as the operator does, so a principal reads the
same here as in a resource's status; this module only turns samples into rows.
Parquet is written through Spark (the advisor's dependency anyway).
"""

from __future__ import annotations

import datetime as dt
import math
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kquota.advisor.schema import CLIENT_COLUMNS, TOPIC_COLUMNS, empty_frame_schema
from kquota.metrics.exposition import Sample, parse_text
from kquota.metrics.http import MetricsUnavailable, fetch_text
from kquota.metrics.jmx import decode_client_id, decode_user
from kquota.metrics.names import MetricNames
from kquota.metrics.prometheus import Fetch, PrometheusAPI, PromSeries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAMES: Final = MetricNames()
QUOTA_BYTE_RATE: Final = NAMES.quota_prefix + "byte_rate"
QUOTA_REQUEST_TIME: Final = NAMES.quota_prefix + "request_time"
QUOTA_THROTTLE_TIME: Final = NAMES.quota_prefix + "throttle_time"
TOPIC_BYTES_IN: Final = NAMES.bytes_in_total
TOPIC_BYTES_OUT: Final = NAMES.bytes_out_total

#: (metric, resource label) -> client sample column
CLIENT_SERIES: Final[dict[tuple[str, str], str]] = {
    (QUOTA_BYTE_RATE, "Produce"): "produce_byte_rate",
    (QUOTA_BYTE_RATE, "Fetch"): "fetch_byte_rate",
    (QUOTA_REQUEST_TIME, "Request"): "request_time",
    (QUOTA_THROTTLE_TIME, "Produce"): "produce_throttle_time_ms",
    (QUOTA_THROTTLE_TIME, "Fetch"): "fetch_throttle_time_ms",
    (QUOTA_THROTTLE_TIME, "Request"): "request_throttle_time_ms",
}
CLIENT_FIELDS: Final = tuple(c.name for c in CLIENT_COLUMNS)
TOPIC_FIELDS: Final = tuple(c.name for c in TOPIC_COLUMNS)
MAX_POINTS: Final = 10_000


class CollectError(RuntimeError):
    """The source could not be read; the message names it."""


def parse_page(text: str, names: Iterable[str]) -> list[Sample]:
    """The samples of ``names`` in a metrics page; a malformed line of those metrics is an error (ValueError)."""
    wanted = frozenset(names)
    return [s for s in parse_text(text, tuple(sorted(wanted)), strict=True) if s.name in wanted]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def client_rows(
    samples: Iterable[Sample], broker: str, timestamp: dt.datetime, broker_of: Callable[[Sample], str] | None = None
) -> list[dict[str, Any]]:
    """Client sample rows (one per broker and bucket) from quota gauges of one moment."""
    rows: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}
    for s in samples:
        column = CLIENT_SERIES.get((s.name, s.labels.get(NAMES.resource_label, "")))
        if column is None:
            continue
        # Kafka's JmxReporter drops empty tags; an empty label is a missing one, as in kquota.metrics.series.
        raw_user = s.labels.get(NAMES.user_label)
        raw_client = s.labels.get(NAMES.client_label)
        user = decode_user(raw_user) if raw_user else None
        client = decode_client_id(raw_client) if raw_client else None
        if user is None and client is None:
            continue
        b = broker_of(s) if broker_of else broker
        row = rows.setdefault((b, user, client), dict.fromkeys(CLIENT_FIELDS))
        row.update(timestamp=timestamp, broker=b, user=user, client_id=client)
        # NaN throttle time means "never throttled yet": a missing value, not a number.
        row[column] = _finite(s.value)
    return list(rows.values())


def topic_counters(samples: Iterable[Sample]) -> dict[str, tuple[float | None, float | None]]:
    """topic -> (bytes in counter, bytes out counter) from one scrape."""
    out: dict[str, list[float | None]] = {}
    for s in samples:
        topic = s.labels.get(NAMES.topic_label)
        if not topic or s.name not in (TOPIC_BYTES_IN, TOPIC_BYTES_OUT):
            continue
        entry = out.setdefault(topic, [None, None])
        entry[0 if s.name == TOPIC_BYTES_IN else 1] = s.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def topic_rates(
    broker: str,
    timestamp: dt.datetime,
    seconds: float,
    before: dict[str, tuple[float | None, float | None]],
    after: dict[str, tuple[float | None, float | None]],
) -> list[dict[str, Any]]:
    """Topic sample rows from two counter readings ``seconds`` apart; counter resets give no row."""
    rows = []
    for topic, (in_now, out_now) in sorted(after.items()):
        in_then, out_then = before.get(topic, (None, None))
        if in_now is None or in_then is None or seconds <= 0:
            continue
        d_in = in_now - in_then
        d_out = (out_now - out_then) if out_now is not None and out_then is not None else 0.0
        if d_in < 0 or d_out < 0:
            continue
        row = dict.fromkeys(TOPIC_FIELDS)
        row.update(
            timestamp=timestamp,
            broker=broker,
            topic=topic,
            bytes_in_rate=d_in / seconds,
            bytes_out_rate=d_out / seconds,
        )
        rows.append(row)
    return rows


# --- sources ---------------------------------------------------------------------------


def fetch_page(url: str, timeout: float) -> str:
    """GET a metrics page through :func:`kquota.metrics.http.fetch_text` (size-capped); failures are CollectError."""
    try:
        return fetch_text(url, timeout)
    except MetricsUnavailable as exc:
        raise CollectError(f"{url}: {exc}") from exc


def parse_target(target: str) -> tuple[str, str]:
    """``NAME=URL`` or ``URL`` (the broker is then the URL's host:port)."""
    if "=" in target.split("://", 1)[0]:
        name, url = target.split("=", 1)
        return name, url
    parsed = urllib.parse.urlparse(target)
    return parsed.netloc or target, target


@dataclass
class ScrapeResult:
    clients: list[dict[str, Any]]
    topics: list[dict[str, Any]]
    rounds: int


def scrape(
    targets: Sequence[str],
    duration: float,
    interval: float,
    timeout: float = 10.0,
    fetch: Callable[[str, float], str] = fetch_page,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    on_round: Callable[[int, int, int], None] | None = None,
) -> ScrapeResult:
    """Scrape every target each ``interval`` seconds for ``duration`` seconds (at least two rounds)."""
    if interval <= 0 or duration <= 0:
        raise ValueError("duration and interval must be positive")
    parsed = [parse_target(t) for t in targets]
    names = [*{m for m, _ in CLIENT_SERIES}, TOPIC_BYTES_IN, TOPIC_BYTES_OUT]
    rounds = max(2, int(duration // interval) + 1)
    clients: list[dict[str, Any]] = []
    topics: list[dict[str, Any]] = []
    previous: dict[str, tuple[float, dict[str, tuple[float | None, float | None]]]] = {}
    start = clock()
    for n in range(rounds):
        target_time = start + n * interval
        delay = target_time - clock()
        if delay > 0:
            sleep(delay)
        moment = clock()
        # One timestamp per round for every broker, so the samples of a round line up across brokers.
        stamp = dt.datetime.fromtimestamp(round(moment, 3), dt.UTC)
        for broker, url in parsed:
            samples = parse_page(fetch(url, timeout), names)
            clients += client_rows(samples, broker, stamp)
            counters = topic_counters(samples)
            if broker in previous:
                then, before = previous[broker]
                topics += topic_rates(broker, stamp, moment - then, before, counters)
            previous[broker] = (moment, counters)
        if on_round:
            on_round(n + 1, rounds, len(clients))
    return ScrapeResult(clients, topics, rounds)


def _query_range(api: PrometheusAPI, query: str, start: float, end: float, step: float) -> list[PromSeries]:
    try:
        return api.range(query, start, end, step)
    except MetricsUnavailable as exc:
        raise CollectError(f"{api.url}: query {query!r}: {exc}") from exc


def chunks(start: float, end: float, step: float, max_points: int = MAX_POINTS) -> Iterator[tuple[float, float]]:
    """Sub-ranges of at most ``max_points`` points per series."""
    span = step * (max_points - 1)
    t = start
    while t <= end:
        yield t, min(end, t + span)
        t += span + step


def prometheus_rows(
    base: str,
    start: dt.datetime,
    end: dt.datetime,
    step: float,
    broker_label: str = "instance",
    rate_window: str = "5m",
    timeout: float = 60.0,
    fetch: Fetch | None = None,
) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(client rows, topic rows) per chunk of the range.

    Read through :class:`kquota.metrics.prometheus.PrometheusAPI` (``fetch`` is its transport, default the
    size-capped :func:`kquota.metrics.http.get`).
    """
    if end <= start:
        raise ValueError("the end of the range must be after its start")
    api = PrometheusAPI(base, timeout, fetch)
    topic_queries = {
        "bytes_in_rate": f'rate({TOPIC_BYTES_IN}{{topic!=""}}[{rate_window}])',
        "bytes_out_rate": f'rate({TOPIC_BYTES_OUT}{{topic!=""}}[{rate_window}])',
    }
    for lo, hi in chunks(start.timestamp(), end.timestamp(), step):
        client_samples: dict[float, list[Sample]] = {}
        for metric in (QUOTA_BYTE_RATE, QUOTA_REQUEST_TIME, QUOTA_THROTTLE_TIME):
            for series in _query_range(api, metric, lo, hi, step):
                labels = series.labels
                for ts, value in series.points:
                    client_samples.setdefault(ts, []).append(Sample(metric, labels, value))
        clients: list[dict[str, Any]] = []
        for ts, samples in sorted(client_samples.items()):
            stamp = dt.datetime.fromtimestamp(ts, dt.UTC)
            clients += client_rows(samples, "", stamp, lambda s: s.labels.get(broker_label, "unknown"))
        topic_map: dict[tuple[float, str, str], dict[str, Any]] = {}
        for column, query in topic_queries.items():
            for series in _query_range(api, query, lo, hi, step):
                labels = series.labels
                for ts, value in series.points:
                    key = (ts, str(labels.get(broker_label, "unknown")), str(labels[NAMES.topic_label]))
                    row = topic_map.setdefault(key, dict.fromkeys(TOPIC_FIELDS))
                    row.update(timestamp=dt.datetime.fromtimestamp(key[0], dt.UTC), broker=key[1], topic=key[2])
                    row[column] = _finite(value)
        topics = [r for r in topic_map.values() if r["bytes_in_rate"] is not None]
        for r in topics:
            if r["bytes_out_rate"] is None:
                r["bytes_out_rate"] = 0.0
        yield clients, topics


# --- output ---------------------------------------------------------------------------


def write_parquet(
    spark: SparkSession, clients: list[dict[str, Any]], topics: list[dict[str, Any]], out: Path, append: bool = False
) -> None:
    """Append (or overwrite) ``out/clients`` and ``out/topics`` in the advisor's input schema."""
    mode = "append" if append else "overwrite"
    client_df = spark.createDataFrame(
        [tuple(r[c] for c in CLIENT_FIELDS) for r in clients], empty_frame_schema(CLIENT_COLUMNS)
    )
    client_df.coalesce(1).write.mode(mode).parquet(str(out / "clients"))
    topic_df = spark.createDataFrame(
        [tuple(r[c] for c in TOPIC_FIELDS) for r in topics], empty_frame_schema(TOPIC_COLUMNS)
    )
    topic_df.coalesce(1).write.mode(mode).parquet(str(out / "topics"))
