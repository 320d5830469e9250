"""Per-entity statistics of usage: p50, p95, p99, max, mean, peak-to-mean and throttled share per resource.

Per resource (produce, fetch, request), over every sample of the per-broker
rate: quotas are per broker, so the samples of one entity on all brokers form
one distribution. The throttled share is the fraction of samples whose
throttle time was above zero. :func:`entity_stats` works on one row per sample
and resource, :func:`entity_stats_wide` on the samples as they are: the same
rows, and the second is what the pipeline runs.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from kquota.advisor.schema import RESOURCES
from kquota.advisor.transform.entities import ENTITY, entity_kind
from kquota.advisor.transform.percentiles import ordered_mean, sorted_values, value_at


def entity_stats(usage: DataFrame) -> DataFrame:
    """Per entity and resource: samples, brokers, p50, p95, p99, max, mean, peak_to_mean, throttled_share.

    Percentiles are exact nearest-rank values; every figure is the same bits whatever the input's
    partitioning (the throttled share adds zeros and ones, which is exact in any order).
    """

    throttled = sf.when(sf.col("throttle_ms").isNull(), sf.lit(None)).otherwise(
        (sf.col("throttle_ms") > 0).cast("double")
    )
    stats = usage.groupBy(*ENTITY, "resource").agg(
        sorted_values("value").alias("_v"),
        sf.size(sf.collect_set("broker")).alias("brokers"),
        sf.avg(throttled).alias("throttled_share"),
    )
    return _figures(stats)


def _figures(stats: DataFrame) -> DataFrame:
    """The statistics from each (entity, resource)'s sorted values ``_v``, brokers and throttled share."""

    v = sf.col("_v")
    # The mean is one pass over each array: computed once, then peak_to_mean reads the column.
    figures = stats.select(
        *ENTITY,
        "resource",
        sf.size(v).cast("long").alias("samples"),
        "brokers",
        value_at(0.5, v).alias("p50"),
        value_at(0.95, v).alias("p95"),
        value_at(0.99, v).alias("p99"),
        sf.try_element_at(v, sf.lit(-1)).alias("max"),
        ordered_mean(v).alias("mean"),
        "throttled_share",
    )
    return figures.select(
        *ENTITY,
        "resource",
        "samples",
        "brokers",
        "p50",
        "p95",
        "p99",
        "max",
        "mean",
        sf.when(sf.col("mean") > 0, sf.col("max") / sf.col("mean")).alias("peak_to_mean"),
        "throttled_share",
    )


def entity_stats_wide(samples: DataFrame) -> DataFrame:
    """:func:`entity_stats` of ``usage_long(samples)``, the same rows and bits, from the samples as they are.

    One group per entity holding a sorted array per resource, instead of one group per (entity,
    resource) over the exploded rows: the shuffle moves each sample once with its two or three rates
    rather than once per resource with the entity's key and the broker repeated, and nothing is
    exploded or cached first. A resource an entity has no value for gets no row, as in the long form.
    """

    aggs: list[Column] = []
    for r, (c, t) in RESOURCES.items():
        value = sf.col(c)
        # Only samples with a value count, as usage_long drops the others.
        throttled = sf.when(value.isNotNull() & sf.col(t).isNotNull(), (sf.col(t) > 0).cast("double"))
        aggs += [
            sorted_values(c).alias(f"_v_{r}"),
            sf.size(sf.collect_set(sf.when(value.isNotNull(), sf.col("broker")))).alias(f"_b_{r}"),
            sf.avg(throttled).alias(f"_t_{r}"),
        ]
    grouped = samples.select(
        entity_kind(sf.col("user"), sf.col("client_id")).alias("kind"), "user", "client_id", "broker",
        *[sf.col(c) for pair in RESOURCES.values() for c in pair],
    ).groupBy(*ENTITY).agg(*aggs)  # fmt: skip
    per_resource = sf.array(
        *[
            sf.struct(
                sf.lit(r).alias("resource"),
                sf.col(f"_v_{r}").alias("_v"),
                sf.col(f"_b_{r}").alias("brokers"),
                sf.col(f"_t_{r}").alias("throttled_share"),
            )
            for r in RESOURCES
        ]
    )
    long = (
        grouped.select(*ENTITY, sf.explode(per_resource).alias("s"))
        .select(*ENTITY, "s.resource", "s._v", "s.brokers", "s.throttled_share")
        .filter(sf.size("_v") > 0)
    )
    return _figures(long)
