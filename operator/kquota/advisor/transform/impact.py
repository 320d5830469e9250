"""A quota change against usage history: each bucket's traffic under its new limit, and under its old one.

Pure DataFrame functions for ``kquota plan --impact``. The moves (which measured
bucket goes where, with which limits: :mod:`kquota.domain.impact`) arrive as a
small mapping DataFrame; the samples as :func:`~kquota.advisor.transform.entities.usage_long`
rows. Every figure is exact and the same bits whatever the partitioning: counts
of samples, nearest-rank percentiles of sorted arrays, and sums taken in sorted
order (a destination's per-moment total adds its buckets' rates smallest first;
the throttle figure adds the sorted totals' excesses in order).
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from kquota.advisor.transform.percentiles import sorted_values, value_at

#: Columns of the mapping :func:`destination_traffic` and :func:`measured_traffic` join the samples with.
MAPPING_SCHEMA: Final = (
    "resource string, user string, client_id string, destination string, limit_before double, limit_after double"
)
#: Seconds in an hour: the throttle figure is seconds of delay per hour of history on a broker.
HOUR: Final = 3600.0


def _ordered_sum(values: Column) -> Column:
    """The sum of a sorted array, added smallest first: the same bits whatever order the rows came in."""
    return sf.aggregate(values, sf.lit(0.0), lambda acc, x: acc + x)


def _mapped(usage: DataFrame, mapping: DataFrame) -> DataFrame:
    m = sf.broadcast(
        mapping.select(
            sf.col("resource").alias("_r"),
            sf.col("user").alias("_u"),
            sf.col("client_id").alias("_c"),
            "destination",
            "limit_before",
            "limit_after",
        )
    )
    on = (
        (sf.col("resource") == sf.col("_r"))
        & sf.col("user").eqNullSafe(sf.col("_u"))
        & sf.col("client_id").eqNullSafe(sf.col("_c"))
    )
    return usage.join(m, on, "inner")


def destination_traffic(usage: DataFrame, mapping: DataFrame) -> DataFrame:
    """Per destination bucket: its traffic after the change against its new limit.

    The traffic of a destination at one moment on one broker is the sum of the rates of every
    measured bucket moving there (quotas are per broker, so brokers are never added up). Columns:
    destination, limit, samples (moments x brokers), above (samples over the limit), p99, peak, and
    throttle_seconds_per_hour: a client that wants rate R over its limit L is held back 1 - L/R of
    the time (``ClientQuotaManager`` delays each response by (R - L) / L of its measurement window,
    so the client gets L), averaged over the samples and x 3600: seconds per hour on a broker.
    A destination without a limit (unlimited after the change) has above 0 and no throttle.
    """
    totals = (
        _mapped(usage, mapping)
        .groupBy("destination", "timestamp", "broker")
        .agg(_ordered_sum(sorted_values("value")).alias("total"), sf.min("limit_after").alias("limit"))
    )
    per = totals.groupBy("destination").agg(sorted_values("total").alias("_t"), sf.min("limit").alias("limit"))
    t, limit = sf.col("_t"), sf.col("limit")
    n = sf.size(t)
    held = _ordered_sum(sf.transform(t, lambda x: sf.when(x > limit, sf.lit(1.0) - limit / x).otherwise(0.0)))
    return per.select(
        "destination",
        "limit",
        n.cast("long").alias("samples"),
        sf.when(limit.isNull(), sf.lit(0))
        .otherwise(sf.size(sf.filter(t, lambda x: x > limit)))
        .cast("long")
        .alias("above"),
        value_at(0.99, t).alias("p99"),
        sf.try_element_at(t, sf.lit(-1)).alias("peak"),
        sf.when(limit.isNull() | (n == 0), sf.lit(0.0))
        .otherwise(held / n * sf.lit(HOUR))
        .alias("throttle_seconds_per_hour"),
    )


def measured_traffic(usage: DataFrame, mapping: DataFrame) -> DataFrame:
    """Per measured bucket: how it fared under its limit now (for the buckets a change un-throttles).

    Columns: resource, user, client_id, samples, throttled (samples with a throttle time above 0),
    throttle_known (samples with a throttle time at all), at_limit (samples at or over the limit
    now), p99 and peak of its rate.
    """
    mapped = _mapped(usage, mapping)
    limit = sf.col("limit_before")
    return mapped.groupBy("resource", "user", "client_id").agg(
        sf.count(sf.lit(1)).alias("samples"),
        sf.sum(sf.when(sf.col("throttle_ms") > 0, 1).otherwise(0)).cast("long").alias("throttled"),
        sf.count("throttle_ms").alias("throttle_known"),
        sf.sum(sf.when(limit.isNotNull() & (sf.col("value") >= limit), 1).otherwise(0)).cast("long").alias("at_limit"),
        value_at(0.99, sorted_values("value")).alias("p99"),
        sf.max("value").alias("peak"),
    )
