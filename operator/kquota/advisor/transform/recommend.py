"""Quotas from the statistics: a default per population, overrides for the entities that need more.

The default quota of a population is the ``default_percentile`` (default 1.0,
the largest) of the non-outliers' p99s, times (1 + headroom), rounded *up* to a
nice quantity (:func:`nice_round`). Outliers get an override of their own p99 x
(1 + headroom), rounded up, when that is above the default (an override equal
to the default says nothing); so does any other entity whose own need is above
the default (possible when default_percentile < 1), so no entity is throttled
at its p99. An entity throttled in more than ``capped_share`` of its samples is
flagged ``demand_capped``: its observed usage was held down by a quota, so the
real demand is higher than the data shows.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from kquota.advisor.params import Params
from kquota.advisor.transform.percentiles import sorted_values, value_at

#: Byte-rate resources get binary quantities (Ki, Mi, Gi); request time is a percentage.
BYTE_RESOURCES: Final = frozenset({"produce", "fetch"})
#: Mantissas of "nice" numbers; x 10^k. Multiples of 1/4, so x 1024 (Ki and up) stays a whole number of bytes.
NICE_MANTISSAS: Final = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def nice_round(x: Column, binary: bool) -> Column:
    """Round a positive number *up* to a nice quantity: mantissa 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 x 10^k.

    ``binary`` (byte rates): in units of Ki, Mi, Gi or Ti, so ``5000000`` becomes ``5Mi`` (5242880), and
    the result is a whole number of bytes. Otherwise (request percentages) in plain decimal units.
    """

    if binary:
        unit = sf.lit(1.0)
        for power in (10, 20, 30, 40):
            unit = sf.when(x >= 2.0**power, sf.lit(2.0**power)).otherwise(unit)
    else:
        unit = sf.lit(1.0)
    v = x / unit
    k = sf.floor(sf.log10(v))
    scale = sf.pow(sf.lit(10.0), k)
    m = v / scale
    nice = sf.lit(NICE_MANTISSAS[-1])
    # Mantissas from the top down, so the smallest one >= m wins. The 1e-9 slack absorbs log10/pow
    # rounding, so 1.25Mi stays 1.25Mi instead of jumping to 1.5Mi.
    for mantissa in reversed(NICE_MANTISSAS[:-1]):
        nice = sf.when(m <= mantissa * (1 + 1e-9), sf.lit(mantissa)).otherwise(nice)
    if binary:
        # Just under the next unit (1000Mi < v < 1024Mi) the next unit itself is nicer and smaller than 1250Mi.
        return sf.ceil(sf.least(nice * scale, sf.lit(1024.0)) * unit).cast("double")
    return sf.round(nice * scale, 6)


def _quota(x: Column, resource: Column, params: Params) -> Column:

    is_bytes = resource.isin(*sorted(BYTE_RESOURCES))
    return sf.when(is_bytes, nice_round(sf.greatest(x, sf.lit(params.min_byte_rate)), True)).otherwise(
        nice_round(sf.greatest(x, sf.lit(params.min_request_percentage)), False)
    )


RECOMMENDATION_COLUMNS: Final = (
    "kind",
    "user",
    "client_id",
    "resource",
    "is_default",
    "quota",
    "basis",
    "population",
    "reason",
    "throttled_share",
    "demand_capped",
)


def recommend(flagged: DataFrame, params: Params) -> DataFrame:
    """Default quotas per (kind, resource) and overrides per entity; columns :data:`RECOMMENDATION_COLUMNS`.

    ``basis`` is the number the quota was derived from before headroom and rounding: the percentile of
    the non-outliers' p99s for a default, the entity's p99 for an override. ``reason`` is ``default``,
    ``outlier`` or ``above-default``.
    """

    factor = sf.lit(1.0 + params.headroom)
    regular = flagged.filter(~sf.col("outlier"))
    defaults = regular.groupBy("kind", "resource").agg(
        value_at(params.default_percentile, sorted_values("p99")).alias("basis"),
        sf.count(sf.lit(1)).alias("population"),
        sf.max("throttled_share").alias("throttled_share"),
    )
    # A population that used none of a resource gets no default: a 1Ki floor would throttle the first
    # client that starts using it, and the data says nothing about what that client needs.
    defaults = defaults.filter(sf.col("basis") > 0).select(
        "kind",
        sf.lit(None).cast("string").alias("user"),
        sf.lit(None).cast("string").alias("client_id"),
        "resource",
        sf.lit(True).alias("is_default"),
        _quota(sf.col("basis") * factor, sf.col("resource"), params).alias("quota"),
        "basis",
        sf.col("population").cast("long").alias("population"),
        sf.lit("default").alias("reason"),
        "throttled_share",
        (sf.coalesce(sf.col("throttled_share"), sf.lit(0.0)) > params.capped_share).alias("demand_capped"),
    )
    needs = flagged.withColumn("_need", _quota(sf.col("p99") * factor, sf.col("resource"), params))
    joined = needs.join(
        defaults.select("kind", "resource", sf.col("quota").alias("_default")), ["kind", "resource"], "left"
    )
    # An override only where it says something the default does not: an outlier whose own need rounds
    # to the default (or below) is served by the default, and a second resource saying so is noise.
    overrides = joined.filter(
        (sf.col("p99") > 0) & (sf.col("_default").isNull() | (sf.col("_need") > sf.col("_default")))
    ).select(
        "kind",
        "user",
        "client_id",
        "resource",
        sf.lit(False).alias("is_default"),
        sf.col("_need").alias("quota"),
        sf.col("p99").alias("basis"),
        sf.lit(None).cast("long").alias("population"),
        sf.when(sf.col("outlier"), sf.lit("outlier"))
        .when(sf.col("_default").isNull(), sf.lit("no-default"))
        .otherwise(sf.lit("above-default"))
        .alias("reason"),
        "throttled_share",
        (sf.coalesce(sf.col("throttled_share"), sf.lit(0.0)) > params.capped_share).alias("demand_capped"),
    )
    return defaults.unionByName(overrides)
