"""When to write ``status.observed``: condition flips at once, new numbers at a bounded rate, no change never."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kquota.domain.observed.status import Observed
from kquota.domain.status import Condition


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
    return _due(seconds_since_write, min_interval)


def needs_topic_observed_write(
    prev: Mapping[str, Any] | None,
    prev_condition: Mapping[str, Any] | None,
    new_condition: Condition,
    seconds_since_write: float | None,
    min_interval: float,
) -> bool:
    """Whether to patch a TopicQuota's ``status.observed`` now.

    Nothing written yet, or an OverBudget status flip (against the stored
    ``prev_condition``), is written at once; otherwise the topic's rates are
    written at most every ``min_interval`` seconds.
    """
    if prev is None:
        return True
    if prev_condition is None or prev_condition.get("status") != new_condition.status:
        return True
    return _due(seconds_since_write, min_interval)


def _due(seconds_since_write: float | None, min_interval: float) -> bool:
    """The last write is at least ``min_interval`` old (None: unknown, treated as old)."""
    return seconds_since_write is None or seconds_since_write >= min_interval


def previous_near_limit(prev_status: Mapping[str, Any] | None) -> bool | None:
    """NearLimit as last written in a resource's ``status.observed`` (for the hysteresis in :func:`observe`)."""
    observed = (prev_status or {}).get("observed")
    if not isinstance(observed, Mapping):
        return None
    value = observed.get("nearLimit")
    return value if isinstance(value, bool) else None
