"""What the brokers report about each quota resource: usage, throttling, and the Throttled/NearLimit conditions.

Pure: the readers in :mod:`kquota.metrics` turn broker or Prometheus data into
:mod:`~kquota.domain.observed.readings`; the rest of this package decides what
each resource's status says.

* :mod:`~kquota.domain.observed.readings`: the normalized reading (quota buckets per broker, topic rates).
* :mod:`~kquota.domain.observed.evidence`: one bucket over the window: its usage now, throttles seen
  (what counts as a throttle, given how the broker's throttle-time behaves).
* :mod:`~kquota.domain.observed.attribution`: which entity's quota governs each bucket, as the broker decides.
* :mod:`~kquota.domain.observed.usage`: a resource's usage per broker, in total, and its busiest clients.
* :mod:`~kquota.domain.observed.status`: ``status.observed`` and the Throttled/NearLimit conditions.
* :mod:`~kquota.domain.observed.topics`: a TopicQuota's bytes in/out and OverBudget.
* :mod:`~kquota.domain.observed.quantize` and :mod:`~kquota.domain.observed.write`: status values are
  quantized so that :func:`equivalent` and :func:`needs_observed_write` can skip writes that change
  nothing a reader would notice, and value-only changes can be rate limited.

The public names are importable from here.
"""

from __future__ import annotations

from kquota.domain.observed.attribution import Attribution, attribute, owner
from kquota.domain.observed.evidence import EVIDENCE_SHARE, QUOTA_WINDOW_SECONDS, QuotaSample, current_usage, summarize
from kquota.domain.observed.quantize import exact, quantize
from kquota.domain.observed.readings import (
    KEY_OF,
    MEASURED_KEYS,
    RESOURCE_OF,
    MetricsReading,
    Point,
    QuotaResource,
    QuotaSeries,
    TopicSample,
)
from kquota.domain.observed.status import (
    NEAR_LIMIT,
    NEAR_LIMIT_HYSTERESIS,
    THROTTLED,
    ClientUsage,
    KeyFigures,
    Observed,
    unavailable,
)
from kquota.domain.observed.topics import OVER_BUDGET, TopicObserved, observe_topic
from kquota.domain.observed.usage import DEFAULT_TOP, observe
from kquota.domain.observed.write import (
    equivalent,
    needs_observed_write,
    needs_topic_observed_write,
    previous_near_limit,
)

__all__ = [
    "DEFAULT_TOP",
    "EVIDENCE_SHARE",
    "KEY_OF",
    "MEASURED_KEYS",
    "NEAR_LIMIT",
    "NEAR_LIMIT_HYSTERESIS",
    "OVER_BUDGET",
    "QUOTA_WINDOW_SECONDS",
    "RESOURCE_OF",
    "THROTTLED",
    "Attribution",
    "ClientUsage",
    "KeyFigures",
    "MetricsReading",
    "Observed",
    "Point",
    "QuotaResource",
    "QuotaSample",
    "QuotaSeries",
    "TopicObserved",
    "TopicSample",
    "attribute",
    "current_usage",
    "equivalent",
    "exact",
    "needs_observed_write",
    "needs_topic_observed_write",
    "observe",
    "observe_topic",
    "owner",
    "previous_near_limit",
    "quantize",
    "summarize",
    "unavailable",
]
