"""A resource's usage from an attribution: per broker, in total and, for a default entity, its busiest clients."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.observed.attribution import Attribution
from kquota.domain.observed.evidence import QuotaSample
from kquota.domain.observed.readings import MEASURED_KEYS
from kquota.domain.observed.status import NEAR_LIMIT_HYSTERESIS, ClientUsage, KeyFigures, Observed, unavailable

#: Clients listed for a default-entity resource.
DEFAULT_TOP: Final = 5


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
