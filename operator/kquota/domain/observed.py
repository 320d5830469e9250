"""What the brokers report about each quota resource: usage, throttling, and the Throttled/NearLimit conditions.

Pure: the metrics readers in :mod:`kquota.kafka.metrics` turn broker or
Prometheus data into the normalized types below (:class:`QuotaSeries`,
:class:`TopicSample`, :class:`MetricsReading`); this module decides which
resource each series belongs to and what its status says.

Attribution. Kafka tags a client's quota metrics with its quota *bucket*,
not its connection (``DefaultQuotaCallback.quotaMetricTags``): ``{user}`` when
the key comes from ``users/<u>`` or ``users/<default>`` (levels 3, 6),
``{client-id}`` from ``clients/<c>`` or ``clients/<default>`` (7, 8), both for
the pair levels (1, 2, 4, 5) or no quota. The tag set therefore fixes the
level *shape*, and the live quota entries decide which entity of that shape
applies, exactly as the broker's ``quotaLimit`` does; that is done per key,
since each quota manager (produce, fetch, request, controller mutation) has
its own set of configured entities. A default-entity resource such as
``users/<default>`` thus collects one bucket per user it applies to.

Throttling. The broker's ``throttle-time`` is an average over the throttled
requests of the last ``metrics.num.samples x metrics.sample.window.ms``
(2 x 30 s by default), not over the quota window, and it does *not* fall when
throttling stops: it stays at its last value until those samples expire, then
becomes NaN. A positive value alone therefore only says "throttled in the
last minute or so". A reading counts as evidence of a throttle *at that time*
when the value is positive, the bucket is active (its rate is above zero:
an idle client cannot be throttled) and either the value changed since the
previous reading (each new throttle moves the average) or usage is at
:data:`EVIDENCE_SHARE` of the quota or more (request throttles are capped at
the quota window, so a saturated client's average can sit at exactly 1000 ms
and never change). For controller mutations a token bucket in debt
(``tokens < 0``) while mutating is evidence too, with ``-tokens/rate`` as the
throttle time: KRaft brokers forward CreateTopics, CreatePartitions and
DeleteTopics to the controller, whose throttle reaches the client through the
forwarded response and leaves the ControllerMutation throttle-time NaN
(checked on Kafka 4.3.1). ``Throttled`` is True when such evidence lies
within the window. After a client stops, its rate reaches 0 within the quota window
(11 s by default), so Throttled clears at most about ``window + 11 s`` after
the last throttle.

Status values are quantized (:func:`quantize`) so that :func:`equivalent`
and :func:`needs_observed_write` can skip writes that change nothing a
reader would notice, and value-only changes can be rate limited.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.resolver import client_levels
from kquota.domain.status import Condition


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

#: A positive throttle average with usage at this share of the quota or more is a throttle now.
EVIDENCE_SHARE: Final = 0.9
#: Clients listed for a default-entity resource.
DEFAULT_TOP: Final = 5
#: Once NearLimit is True it stays so until usage falls this many percentage points below the threshold.
NEAR_LIMIT_HYSTERESIS: Final = 5.0

#: Condition types the operator adds to quota resources from observed metrics.
THROTTLED: Final = "Throttled"
NEAR_LIMIT: Final = "NearLimit"
OVER_BUDGET: Final = "OverBudget"


# -- normalized metrics (what the readers in kquota.kafka.metrics produce) -------------------------------------


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

    def samples(self) -> list[QuotaSample]:
        """Every series summarized over the window, without quota knowledge (see :func:`summarize`)."""
        return [summarize(s, self.start) for s in self.series]


@dataclass(frozen=True, slots=True)
class QuotaSample:
    """One bucket on one broker summarized over the window.

    Rates are the latest reading in the window (the broker's own rate over its
    quota window, so status agrees with the broker's metric at that moment);
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


def summarize(series: QuotaSeries, start: float, quota: float | None = None) -> QuotaSample:
    """Latest usage and the throttles seen since ``start`` (see the module docstring for the rules)."""
    prev_throttle: float | None = None
    seen_throttle = False
    last_activity: float | None = None
    activity: list[float] = []
    tokens: float | None = None
    throttles: list[float] = []
    for p in series.points:
        if _finite(p.activity):
            assert p.activity is not None
            last_activity = p.activity
        if p.t >= start:
            if _finite(p.activity):
                assert p.activity is not None
                activity.append(p.activity)
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
    # The latest reading, not the window's mean: the broker's sensor is already a rate over its own
    # quota window (11 s by default), and a mean over a window that began quiet understates a client
    # that saturates its quota now (status said 17% while the broker read 4.5 MB/s of a 4 MiB quota).
    mean = activity[-1] if activity else None
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


# -- attribution -------------------------------------------------------------------------------------------------

_PAIR_LEVELS: Final = frozenset({1, 2, 4, 5})
_USER_LEVELS: Final = frozenset({3, 6})
_CLIENT_LEVELS: Final = frozenset({7, 8})


def owner(
    entries: Mapping[Entity, Mapping[QuotaKey, float]], key: QuotaKey, user: str | None, client_id: str | None
) -> Entity | None:
    """The entity whose ``key`` governs a bucket tagged (``user``, ``client_id``); None when none does.

    The tags fix the level shape (module docstring); within it the most
    specific entity that has ``key`` wins, as in the resolver.
    """
    if user is not None and client_id is not None:
        allowed = _PAIR_LEVELS
    elif user is not None:
        allowed = _USER_LEVELS
    elif client_id is not None:
        allowed = _CLIENT_LEVELS
    else:
        return None
    for level, entity in client_levels(user or "", client_id or ""):
        if level in allowed and key in entries.get(entity, {}):
            return entity
    return None


@dataclass(frozen=True, slots=True)
class _Attributed:
    series: QuotaSeries
    sample: QuotaSample


@dataclass(frozen=True)
class Attribution:
    """A reading's series grouped by the (entity, key) that governs them, with the quota each one had.

    Build it once per reading (:func:`attribute`) and look resources up in it:
    that is one resolver walk per series, not per resource.
    """

    reading: MetricsReading
    live: Mapping[Entity, Mapping[QuotaKey, float]]
    by_owner: Mapping[tuple[Entity, QuotaKey], tuple[_Attributed, ...]]
    #: How many series no configured quota governs (unlimited clients).
    unattributed: int = 0

    def samples_for(self, entity: Entity, key: QuotaKey) -> list[QuotaSample]:
        return [a.sample for a in self.by_owner.get((entity, key), ())]


def attribute(reading: MetricsReading, live: Mapping[Entity, Mapping[QuotaKey, float]]) -> Attribution:
    """Attribute every series of ``reading`` to the entity whose quota the broker applies to it.

    ``live`` is the quota configuration on the brokers (entity -> key -> value),
    e.g. the reconciler's describe-all result after its changes.
    """
    groups: dict[tuple[Entity, QuotaKey], list[_Attributed]] = {}
    unattributed = 0
    for s in reading.series:
        key = KEY_OF[s.resource]
        entity = owner(live, key, s.user, s.client_id)
        if entity is None:
            unattributed += 1
            continue
        sample = summarize(s, reading.start, float(live[entity][key]))
        groups.setdefault((entity, key), []).append(_Attributed(s, sample))
    return Attribution(reading, live, {k: tuple(v) for k, v in groups.items()}, unattributed)


# -- per resource ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyFigures:
    """Usage of one quota key: a rate (bytes/s, percent of a thread, mutations/s), throttling, share of quota."""

    rate: float | None = None
    throttle_ms: float = 0.0
    tokens: float | None = None
    share: float | None = None

    @property
    def throttled(self) -> bool:
        return self.throttle_ms > 0


def _combine(figures: Iterable[KeyFigures]) -> KeyFigures:
    """Rates add up (buckets, brokers); throttle time and share take the worst; tokens the lowest."""
    items = list(figures)
    rates = [f.rate for f in items if f.rate is not None]
    tokens = [f.tokens for f in items if f.tokens is not None]
    shares = [f.share for f in items if f.share is not None]
    return KeyFigures(
        rate=sum(rates) if rates else None,
        throttle_ms=max((f.throttle_ms for f in items), default=0.0),
        tokens=min(tokens) if tokens else None,
        share=max(shares) if shares else None,
    )


def _figures(sample: QuotaSample) -> KeyFigures:
    return KeyFigures(sample.activity, sample.throttle_time_ms, sample.tokens, sample.share)


@dataclass(frozen=True, slots=True)
class ClientUsage:
    """One bucket (a user, a client-id or a pair) under a default-entity resource, over all brokers."""

    user: str | None
    client_id: str | None
    figures: Mapping[QuotaKey, KeyFigures]


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Observed:
    """What the brokers report for one resource over the window; render with :meth:`to_status`."""

    source: str
    window_seconds: float
    available: bool
    near_limit_percent: int
    #: The quota each observed key has on the brokers.
    limits: Mapping[QuotaKey, float] = field(default_factory=dict)
    total: Mapping[QuotaKey, KeyFigures] = field(default_factory=dict)
    brokers: Mapping[str, Mapping[QuotaKey, KeyFigures]] = field(default_factory=dict)
    #: For default-entity resources only: the busiest buckets, and how many were active.
    top: tuple[ClientUsage, ...] = ()
    active_clients: int | None = None
    near_limit: bool = False
    unreachable: tuple[str, ...] = ()
    message: str | None = None

    @property
    def throttled(self) -> bool:
        return any(f.throttled for f in self.total.values())

    @property
    def throttled_keys(self) -> list[QuotaKey]:
        return sorted(k for k, f in self.total.items() if f.throttled)

    @property
    def used_share(self) -> float | None:
        shares = [f.share for f in self.total.values() if f.share is not None]
        return max(shares) if shares else None

    def to_status(self) -> dict[str, Any]:
        """``status.observed``: camelCase, JSON-serializable, quantized, in a fixed order.

        No timestamps: equal readings give equal dicts, so the caller can
        compare against what it wrote before.
        """
        out: dict[str, Any] = {
            "source": self.source,
            "windowSeconds": quantize(self.window_seconds),
            "available": self.available,
        }
        if not self.available:
            if self.message:
                out["message"] = self.message
            return out
        out["throttled"] = self.throttled
        out["nearLimit"] = self.near_limit
        share = self.used_share
        if share is not None:
            out["usedPercent"] = quantize(share * 100)
        # Limits are configuration, not measurements: exact.
        out["limits"] = {k.value: _exact(self.limits[k]) for k in sorted(self.limits)}
        out["total"] = _figures_status(self.total)
        out["brokers"] = [{"broker": b, **_figures_status(self.brokers[b])} for b in sorted(self.brokers)]
        if self.active_clients is not None:
            top = []
            for c in self.top:
                item: dict[str, Any] = {}
                if c.user is not None:
                    item["user"] = c.user
                if c.client_id is not None:
                    item["clientId"] = c.client_id
                item.update(_figures_status(c.figures))
                top.append(item)
            out["clients"] = {"active": self.active_clients, "top": top}
        if self.unreachable:
            out["unreachableBrokers"] = sorted(self.unreachable)
        return out

    def conditions(self) -> tuple[Condition, Condition]:
        """Throttled and NearLimit. Messages hold no numbers, so they change only when the story does."""
        window = _fmt_seconds(self.window_seconds)
        # With hysteresis a NearLimit that stays True may sit a little under the threshold.
        threshold = self.near_limit_percent - NEAR_LIMIT_HYSTERESIS
        if not self.available:
            why = self.message or "no metrics could be read"
            return (
                Condition(THROTTLED, "Unknown", "MetricsUnavailable", why),
                Condition(NEAR_LIMIT, "Unknown", "MetricsUnavailable", why),
            )
        partial = " (some brokers did not answer)" if self.unreachable else ""
        keys = self.throttled_keys
        if keys:
            throttled = Condition(
                THROTTLED,
                "True",
                "ThrottleObserved",
                f"the brokers throttled clients of this entity in the last {window}: "
                + ", ".join(k.value for k in keys)
                + partial,
            )
        else:
            throttled = Condition(THROTTLED, "False", "NoThrottle", f"no throttling seen in the last {window}{partial}")
        if self.near_limit:
            near_keys = sorted(k for k, f in self.total.items() if f.share is not None and f.share * 100 >= threshold)
            near = Condition(
                NEAR_LIMIT,
                "True",
                "NearLimit",
                f"usage reached {self.near_limit_percent}% of a quota in the last {window} "
                f"({', '.join(k.value for k in near_keys)})",
            )
        else:
            near = Condition(
                NEAR_LIMIT,
                "False",
                "BelowLimit",
                f"usage stayed below {self.near_limit_percent}% of every quota in the last {window}{partial}",
            )
        return throttled, near


_STATUS_NAMES: Final[Mapping[QuotaKey, tuple[str, str, str | None]]] = {
    # key: (rate field, throttle field, tokens field)
    QuotaKey.PRODUCER_BYTE_RATE: ("produceByteRate", "produceThrottleTimeMs", None),
    QuotaKey.CONSUMER_BYTE_RATE: ("fetchByteRate", "fetchThrottleTimeMs", None),
    QuotaKey.REQUEST_PERCENTAGE: ("requestTimePercent", "requestThrottleTimeMs", None),
    QuotaKey.CONTROLLER_MUTATION_RATE: ("mutationRate", "mutationThrottleTimeMs", "mutationTokens"),
}


def _figures_status(figures: Mapping[QuotaKey, KeyFigures]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    shares = []
    for key in sorted(figures):
        f = figures[key]
        rate_name, throttle_name, tokens_name = _STATUS_NAMES[key]
        out[rate_name] = quantize(f.rate or 0.0)
        out[throttle_name] = quantize(f.throttle_ms)
        if tokens_name is not None and f.tokens is not None:
            out[tokens_name] = quantize(f.tokens)
        if f.share is not None:
            shares.append(f.share)
    if shares:
        out["usedPercent"] = quantize(max(shares) * 100)
    return out


def unavailable(reading: MetricsReading, near_limit_percent: int = 80) -> Observed:
    return Observed(
        source=reading.source,
        window_seconds=reading.window,
        available=False,
        near_limit_percent=near_limit_percent,
        message=reading.error or "no metrics could be read",
    )


def observe(
    attribution: Attribution,
    entity: Entity,
    keys: Iterable[QuotaKey],
    near_limit_percent: int = 80,
    was_near_limit: bool | None = None,
    top: int = DEFAULT_TOP,
) -> Observed | None:
    """The observed state of a resource whose quota is ``keys`` on ``entity``; None if nothing is measurable.

    ``was_near_limit`` is the previous NearLimit (``previous_near_limit``):
    when True the threshold is lowered by :data:`NEAR_LIMIT_HYSTERESIS` so
    usage hovering at the threshold does not flip the condition each pass.
    """
    measured = sorted(k for k in set(keys) & MEASURED_KEYS if not entity.is_ip)
    if not measured:
        return None
    reading = attribution.reading
    if not reading.available:
        return unavailable(reading, near_limit_percent)
    limits: dict[QuotaKey, float] = {}
    per_broker: dict[str, dict[QuotaKey, list[KeyFigures]]] = {}
    per_bucket: dict[tuple[str | None, str | None], dict[QuotaKey, list[KeyFigures]]] = {}
    for key in measured:
        value = attribution.live.get(entity, {}).get(key)
        if value is not None:
            limits[key] = float(value)
        for a in attribution.by_owner.get((entity, key), ()):
            fig = _figures(a.sample)
            per_broker.setdefault(a.series.broker, {}).setdefault(key, []).append(fig)
            per_bucket.setdefault(a.series.bucket, {}).setdefault(key, []).append(fig)
    brokers = {b: {k: _combine(v) for k, v in figs.items()} for b, figs in per_broker.items()}
    # A key without any series (no traffic yet, or sensors expired) reports zero usage.
    total = {k: _combine(figs[k] for figs in brokers.values() if k in figs) for k in measured}
    shares = [f.share for f in total.values() if f.share is not None]
    threshold = near_limit_percent - (NEAR_LIMIT_HYSTERESIS if was_near_limit else 0.0)
    near = bool(shares) and max(shares) * 100 >= threshold
    clients: tuple[ClientUsage, ...] = ()
    active: int | None = None
    if entity.has_default:
        buckets = [
            ClientUsage(user, client, {k: _combine(v) for k, v in figs.items()})
            for (user, client), figs in per_bucket.items()
        ]
        busy = [c for c in buckets if any((f.rate or 0) > 0 or f.throttled for f in c.figures.values())]
        busy.sort(key=_client_rank)
        clients = tuple(busy[: max(0, top)])
        active = len(busy)
    return Observed(
        source=reading.source,
        window_seconds=reading.window,
        available=True,
        near_limit_percent=near_limit_percent,
        limits=limits,
        total=total,
        brokers=brokers,
        top=clients,
        active_clients=active,
        near_limit=near,
        unreachable=tuple(sorted(reading.unreachable)),
    )


def _client_rank(c: ClientUsage) -> tuple[int, float, float, str, str]:
    """Throttled first, then the highest share, then the highest rate; names break ties deterministically."""
    figs = c.figures.values()
    share = max((f.share for f in figs if f.share is not None), default=0.0)
    rate = sum(f.rate or 0.0 for f in figs)
    throttled = any(f.throttled for f in figs)
    return (0 if throttled else 1, -share, -rate, c.user or "", c.client_id or "")


K = TypeVar("K")


def observe_all(
    reading: MetricsReading,
    live: Mapping[Entity, Mapping[QuotaKey, float]],
    resources: Mapping[K, tuple[Entity, Iterable[QuotaKey]]],
    near_limit_percent: int = 80,
    previous_near: Mapping[K, bool | None] | None = None,
    top: int = DEFAULT_TOP,
) -> dict[K, Observed]:
    """:func:`observe` for many resources over one reading (attributing each series once)."""
    att = attribute(reading, live)
    prev = previous_near or {}
    out: dict[K, Observed] = {}
    for ref, (entity, keys) in resources.items():
        obs = observe(att, entity, keys, near_limit_percent, prev.get(ref), top)
        if obs is not None:
            out[ref] = obs
    return out


# -- topics ------------------------------------------------------------------------------------------------------


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


# -- comparison and write policy ---------------------------------------------------------------------------------


def quantize(value: float, digits: int = 2) -> int | float:
    """``value`` to ``digits`` significant digits; whole numbers as int (JSON ``100000``, not ``100000.0``).

    Jitter below the second digit (a byte rate moving from 101 kB/s to
    102 kB/s) is not a change worth a status write.
    """
    if not math.isfinite(value) or value == 0:
        return 0
    exp = math.floor(math.log10(abs(value)))
    rounded = round(value, digits - 1 - exp)
    if float(rounded).is_integer():
        return int(rounded)
    return float(rounded)


def _exact(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def equivalent(a: Observed | Mapping[str, Any] | None, b: Observed | Mapping[str, Any] | None) -> bool:
    """True when two observations (or their ``to_status()`` dicts) would render the same status."""
    sa = a.to_status() if isinstance(a, Observed) else a
    sb = b.to_status() if isinstance(b, Observed) else b
    return sa == sb


def _flags(status: Mapping[str, Any] | None) -> tuple[Any, ...]:
    s = status or {}
    return (s.get("available"), s.get("throttled"), s.get("nearLimit"), s.get("source"))


def needs_observed_write(
    prev: Mapping[str, Any] | None, new: Observed, seconds_since_write: float | None, min_interval: float
) -> bool:
    """Whether to patch ``status.observed`` now.

    A condition flip (throttled, near limit, availability, source) is written
    at once; a change of values only (rates, throttle times) at most every
    ``min_interval`` seconds; no change never. ``prev`` is the
    ``status.observed`` last written (or read back), ``seconds_since_write``
    the age of that write (None: unknown, treated as old).
    """
    new_status = new.to_status()
    if prev is None:
        return True
    if _flags(prev) != _flags(new_status):
        return True
    if dict(prev) == new_status:
        return False
    return seconds_since_write is None or seconds_since_write >= min_interval


def previous_near_limit(prev_status: Mapping[str, Any] | None) -> bool | None:
    """NearLimit as last written in a resource's ``status.observed`` (for the hysteresis in :func:`observe`)."""
    observed = (prev_status or {}).get("observed")
    if not isinstance(observed, Mapping):
        return None
    value = observed.get("nearLimit")
    return value if isinstance(value, bool) else None
