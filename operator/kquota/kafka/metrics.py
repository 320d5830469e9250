"""Reading the brokers' quota metrics: direct scrapes of their Prometheus endpoints, or a Prometheus server.

Both sources produce the same normalized :class:`~kquota.domain.observed.MetricsReading`
(per quota bucket and broker, a short time series of throttle time, rate and
tokens; per topic and broker, bytes in/out per second), which the pure
:mod:`kquota.domain.observed` turns into each resource's status.

* :class:`ScrapeSource` GETs every broker's metrics endpoint (the Prometheus
  JMX exporter) in parallel. A broker that does not answer is reported, not
  fatal. It keeps the readings of the last window in memory, so it is meant
  to live as long as its KafkaCluster's reconciler: averages and throttle
  detection use every reading it took in the window.
* :class:`PrometheusSource` asks a Prometheus server (HTTP API) for the raw
  samples of the window (``metric[2w]`` range selectors, two queries per
  read), so it sees every scrape Prometheus made. Raw samples rather than
  ``max_over_time``/``avg_over_time``: the broker's throttle-time is an
  average that stays put for up to a minute after throttling stops, so the
  decision needs the sequence of values together with the rate at the same
  scrape (see :mod:`kquota.domain.observed`), which one aggregate cannot give.

NaN: the broker's throttle-time is NaN until a client is first throttled
and again once its samples expire; NaN is kept as NaN in the readings (it
means "no throttle recorded") and never averaged into a rate.

Names and labels follow the exporter rules in harness/jmx-exporter.yaml
(``kafka_server_quota_<attr>{resource,user,clientId}``, the quota rules of
deploy/strimzi/kafka-metrics-kquota.yaml too); :class:`MetricNames` maps the
names of other rules (a KafkaCluster's ``spec.metrics.names``). Label values are as
Kafka puts them in the JMX ObjectName: ``user`` URL-encoded by Kafka's
Sanitizer, ``clientId`` JMX-quoted when it has characters outside
``[A-Za-z0-9_%. -]``; :func:`decode_user` and :func:`decode_client_id` undo that.

Only standard-library HTTP (urllib): no Kafka client is needed here, but this
is the broker-facing side of the operator, so it lives in kquota.kafka.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from kquota.domain.observed import MetricsReading, Point, QuotaResource, QuotaSeries, TopicSample

log = logging.getLogger(__name__)

#: A broker with tens of thousands of clients exports a few MB; anything far beyond is not a metrics page.
MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
#: Parallel scrapes per read.
MAX_PARALLEL_SCRAPES: Final = 16
#: Readings kept per series by ScrapeSource (bounds memory when reads are frequent and the window long).
MAX_POINTS: Final = 256


class MetricsUnavailable(Exception):
    """A metrics endpoint or the Prometheus API could not be read; the message says why."""


# -- Prometheus text format ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of the Prometheus text format."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp_ms: int | None = None


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES: Final = {"\\": "\\", '"': '"', "n": "\n"}


def parse_float(text: str) -> float:
    """A sample value as Prometheus writes it: ``1.5``, ``1.0E5`` (Java), ``NaN``, ``+Inf``, ``-Inf``."""
    # Python's float() also takes "1_000" and surrounding blanks, which Prometheus does not.
    if not text or "_" in text or text != text.strip():
        raise ValueError(f"invalid sample value {text!r}")
    return float(text)


def _parse_labels(line: str, i: int) -> tuple[dict[str, str], int]:
    """Labels from ``line[i]`` (just after ``{``) to the closing ``}``; returns them and the index after it."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        m = _LABEL.match(line, i)
        if m is None:
            raise ValueError(f"label name expected at column {i + 1}")
        name = m.group()
        i = m.end()
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != "=":
            raise ValueError(f"expected = after label {name}")
        i += 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise ValueError(f"expected a quoted value for label {name}")
        i += 1
        buf: list[str] = []
        while True:
            if i >= n:
                raise ValueError(f"unterminated value of label {name}")
            c = line[i]
            if c == "\\" and i + 1 < n:
                nxt = line[i + 1]
                # An unknown escape is kept as written rather than losing the line.
                buf.append(_ESCAPES.get(nxt, "\\" + nxt))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                buf.append(c)
                i += 1
        labels[name] = "".join(buf)
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
            continue
        if i < n and line[i] == "}":
            return labels, i + 1
        raise ValueError(f"expected , or }} after label {name}")


def parse_line(line: str) -> Sample:
    """One sample line: ``name{label="value",...} value [timestamp]``; raises ValueError if malformed."""
    m = _NAME.match(line)
    if m is None:
        raise ValueError("metric name expected")
    name = m.group()
    i = m.end()
    labels: dict[str, str] = {}
    j = i
    while j < len(line) and line[j] in " \t":
        j += 1
    if j < len(line) and line[j] == "{":
        labels, i = _parse_labels(line, j + 1)
    rest = line[i:].split()
    if not rest or (i < len(line) and line[i] not in " \t"):
        raise ValueError("value expected after the metric name and labels")
    value = parse_float(rest[0])
    ts: int | None = None
    # OpenMetrics may follow with an exemplar ("# {...} 1.0"); it is not needed here.
    if len(rest) > 1 and not rest[1].startswith("#"):
        stamp = rest[1]
        ts = int(stamp) if re.fullmatch(r"-?[0-9]+", stamp) else int(parse_float(stamp) * 1000)
    return Sample(name, labels, value, ts)


def parse_text(text: str, prefixes: Sequence[str] | None = None, strict: bool = False) -> list[Sample]:
    """Samples in a Prometheus text-format (or OpenMetrics) page.

    ``prefixes`` keeps only metrics whose names start with one of them; other
    lines are skipped before they are parsed (a broker page is mostly JVM
    metrics). Comments (``# HELP``, ``# TYPE``, ``# EOF``) and blank lines are
    skipped. A malformed line is skipped too, unless ``strict``: one odd
    metric must not hide the quota metrics next to it.
    """
    out: list[Sample] = []
    wanted = tuple(prefixes) if prefixes is not None else None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if wanted is not None and not line.startswith(wanted):
            continue
        try:
            out.append(parse_line(line))
        except (ValueError, IndexError) as exc:
            if strict:
                raise ValueError(f"line {number}: {exc}: {line[:200]!r}") from exc
            log.debug("skipping malformed metrics line %d: %s", number, exc)
    return out


def decode_user(raw: str) -> str:
    """A ``user`` label back to the principal name (Kafka's Sanitizer.desanitize).

    ``CN%3Dapp%2COU%3Dx`` -> ``CN=app,OU=x``; ``%3Cdefault%3E`` -> the user
    literally named ``<default>`` (the default entity never appears in tags).
    """
    return urllib.parse.unquote_plus(decode_client_id(raw))


def decode_client_id(raw: str) -> str:
    """A ``clientId`` label back to the client.id: undoes ``ObjectName.quote`` when the value is quoted."""
    if len(raw) < 2 or not (raw.startswith('"') and raw.endswith('"')):
        return raw
    body = raw[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append("\n" if nxt == "n" else nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


# -- names -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricNames:
    """Metric and label names as the exporter writes them (defaults: harness/jmx-exporter.yaml).

    A KafkaCluster's ``spec.metrics.names`` (:class:`kquota.api.kafkacluster.ExporterNames`,
    same defaults) becomes one of these in :func:`kquota.reconcile.build.metric_names`.
    """

    quota_prefix: str = "kafka_server_quota_"
    resource_label: str = "resource"
    user_label: str = "user"
    client_label: str = "clientId"
    topic_label: str = "topic"
    bytes_in_total: str = "kafka_server_brokertopicmetrics_bytesinpersec_total"
    bytes_out_total: str = "kafka_server_brokertopicmetrics_bytesoutpersec_total"
    bytes_in_rate: str = "kafka_server_brokertopicmetrics_bytesinpersec_oneminuterate"
    bytes_out_rate: str = "kafka_server_brokertopicmetrics_bytesoutpersec_oneminuterate"
    #: The Prometheus label naming the scrape target (a broker).
    instance_label: str = "instance"

    @property
    def quota_names(self) -> tuple[str, ...]:
        return tuple(self.quota_prefix + a for a in QUOTA_ATTRS)

    @property
    def topic_names(self) -> tuple[str, ...]:
        return (self.bytes_in_total, self.bytes_out_total, self.bytes_in_rate, self.bytes_out_rate)

    @property
    def prefixes(self) -> tuple[str, ...]:
        return (self.quota_prefix, *self.topic_names)


#: Attributes of the quota metrics (Kafka's names with '-' turned into '_').
QUOTA_ATTRS: Final = ("byte_rate", "throttle_time", "request_time", "tokens", "mutation_rate")
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


# -- direct scrape -----------------------------------------------------------------------------------------------


def _check_url(url: str) -> None:
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise ValueError(f"metrics URL must be http or https, got {url!r}")


def instance_of(url: str) -> str:
    """The broker name of an endpoint: ``host:port``, as Prometheus' ``instance`` label would be."""
    parts = urllib.parse.urlsplit(url)
    if parts.port is not None or not parts.hostname:
        return parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.hostname}:{443 if parts.scheme == 'https' else 80}"


@dataclass(frozen=True, slots=True)
class BrokerScrape:
    """One broker's answer (or failure) to one scrape."""

    url: str
    instance: str
    time: float
    samples: tuple[Sample, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class BrokerSnapshot:
    """What every broker answered to one scrape round."""

    brokers: tuple[BrokerScrape, ...]

    @property
    def answered(self) -> list[BrokerScrape]:
        return [b for b in self.brokers if b.ok]

    @property
    def failed(self) -> list[BrokerScrape]:
        return [b for b in self.brokers if not b.ok]


def fetch_text(url: str, timeout: float) -> str:
    """GET a metrics page; raises MetricsUnavailable with a short reason on any failure."""
    _check_url(url)
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})  # noqa: S310 - checked
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - http(s) only, checked above
            body: bytes = resp.read(MAX_RESPONSE_BYTES + 1)
            charset = resp.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as exc:
        raise MetricsUnavailable(f"HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MetricsUnavailable(str(reason) or type(exc).__name__) from exc
    if len(body) > MAX_RESPONSE_BYTES:
        raise MetricsUnavailable(f"response larger than {MAX_RESPONSE_BYTES} bytes")
    return body.decode(charset, errors="replace")


def scrape_brokers(
    urls: Sequence[str],
    timeout: float = 5.0,
    prefixes: Sequence[str] | None = None,
    clock: Callable[[], float] = time.time,
) -> BrokerSnapshot:
    """Scrape every endpoint in parallel; a broker that fails is reported in the snapshot, not raised."""

    def one(url: str) -> BrokerScrape:
        instance = instance_of(url)
        try:
            text = fetch_text(url, timeout)
        except MetricsUnavailable as exc:
            return BrokerScrape(url, instance, clock(), error=str(exc))
        return BrokerScrape(url, instance, clock(), tuple(parse_text(text, prefixes)))

    if not urls:
        return BrokerSnapshot(())
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_SCRAPES, len(urls)), thread_name_prefix="kquota-scrape") as ex:
        return BrokerSnapshot(tuple(ex.map(one, urls)))


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
            _check_url(url)

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


# -- Prometheus ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromSeries:
    """One series of a Prometheus API result: its labels and ``(epoch seconds, value)`` samples."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


class PrometheusAPI:
    """The part of Prometheus' HTTP API kquota uses (``/api/v1/query``, ``/api/v1/query_range``)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        _check_url(url)
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        full = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(full, headers={"Accept": "application/json"})  # noqa: S310 - checked
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:  # noqa: S310 - http(s) only
                body = resp.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            # Prometheus explains bad queries in a JSON body with a 400/422/503.
            try:
                detail = json.loads(exc.read().decode(errors="replace"))
                raise MetricsUnavailable(f"Prometheus: {detail.get('errorType')}: {detail.get('error')}") from exc
            except (ValueError, AttributeError):
                raise MetricsUnavailable(f"Prometheus: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise MetricsUnavailable(f"Prometheus: {getattr(exc, 'reason', exc)}") from exc
        if len(body) > MAX_RESPONSE_BYTES:
            raise MetricsUnavailable(f"Prometheus: response larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise MetricsUnavailable("Prometheus: response is not JSON") from exc
        if not isinstance(doc, dict) or doc.get("status") != "success":
            err = doc.get("error") if isinstance(doc, dict) else None
            raise MetricsUnavailable(f"Prometheus: {err or 'query failed'}")
        return doc.get("data")

    def instant(self, query: str, at: float | None = None) -> list[PromSeries]:
        """``/api/v1/query``: a vector (one point per series), a matrix for range selectors, or a scalar."""
        params = {"query": query}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return _prom_result(self._get("query", params))

    def range(self, query: str, start: float, end: float, step: float) -> list[PromSeries]:
        """``/api/v1/query_range``: the query evaluated every ``step`` seconds from ``start`` to ``end``."""
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return _prom_result(self._get("query_range", params))


def _prom_point(pair: Any) -> tuple[float, float]:
    # Values are strings ("NaN", "+Inf" included); timestamps are float seconds.
    return (float(pair[0]), parse_float(str(pair[1])))


def _prom_result(data: Any) -> list[PromSeries]:
    if not isinstance(data, dict):
        raise MetricsUnavailable("Prometheus: unexpected response")
    kind = data.get("resultType")
    result: Any = data.get("result")
    try:
        if kind == "vector":
            return [PromSeries(dict(r.get("metric") or {}), (_prom_point(r["value"]),)) for r in result]
        if kind == "matrix":
            return [
                PromSeries(dict(r.get("metric") or {}), tuple(_prom_point(v) for v in r.get("values") or []))
                for r in result
            ]
        if kind == "scalar":
            return [PromSeries({}, (_prom_point(result),))]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetricsUnavailable(f"Prometheus: malformed {kind} result") from exc
    return []


def _promql_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def duration(seconds: float) -> str:
    """A PromQL duration for a range selector (whole seconds, at least 1s)."""
    return f"{max(1, math.ceil(seconds))}s"


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
            parts.append(f"{self.names.instance_label}=~{_promql_string(regex)}")
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
            quota = self.api.instant(self._matchers(f"__name__=~{_promql_string(quota_re)}") + f"[{span}]", at=now)
            topics = self.api.instant(
                self._matchers(f"__name__=~{_promql_string(topic_re)}", f'{topic_label}!=""') + f"[{span}]", at=now
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
