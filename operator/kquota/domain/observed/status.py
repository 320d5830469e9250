"""One resource's observation and how it reads in status: ``status.observed`` and the Throttled/NearLimit conditions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kquota.domain.entities import QuotaKey
from kquota.domain.observed.quantize import exact, quantize
from kquota.domain.observed.readings import MetricsReading
from kquota.domain.status import Condition

#: Once NearLimit is True it stays so until usage falls this many percentage points below the threshold.
NEAR_LIMIT_HYSTERESIS: Final = 5.0

#: Condition types the operator adds to quota resources from observed metrics.
THROTTLED: Final = "Throttled"
NEAR_LIMIT: Final = "NearLimit"


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
        out["limits"] = {k.value: exact(self.limits[k]) for k in sorted(self.limits)}
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
    """The observation of a reading that read nothing: conditions Unknown, with the reading's reason."""
    return Observed(
        source=reading.source,
        window_seconds=reading.window,
        available=False,
        near_limit_percent=near_limit_percent,
        message=reading.error or "no metrics could be read",
    )
