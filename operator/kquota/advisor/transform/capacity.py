"""Per broker and resource: the recommended quotas and the observed traffic against the broker's capacity.

The sum of the effective quotas (override, else the default) of the entities
seen on a broker, against its capacity (oversubscription), and the p99 and
peak of the broker's per-timestamp total usage.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from kquota.advisor.transform.entities import ENTITY
from kquota.advisor.transform.percentiles import sorted_values, value_at


def effective_quotas(entities: DataFrame, recommendations: DataFrame) -> DataFrame:
    """Add ``quota`` (the override if the entity has one, else its population's default) and ``source``."""

    overrides = recommendations.filter(~sf.col("is_default")).select(
        sf.col("kind").alias("_k"),
        sf.col("user").alias("_u"),
        sf.col("client_id").alias("_c"),
        sf.col("resource").alias("_r"),
        sf.col("quota").alias("_override"),
    )
    defaults = recommendations.filter(sf.col("is_default")).select(
        sf.col("kind").alias("_dk"), sf.col("resource").alias("_dr"), sf.col("quota").alias("_default")
    )
    e = entities.alias("e")
    with_override = e.join(
        overrides,
        (sf.col("kind") == sf.col("_k"))
        & sf.col("user").eqNullSafe(sf.col("_u"))
        & sf.col("client_id").eqNullSafe(sf.col("_c"))
        & (sf.col("resource") == sf.col("_r")),
        "left",
    )
    both = with_override.join(
        defaults, (sf.col("kind") == sf.col("_dk")) & (sf.col("resource") == sf.col("_dr")), "left"
    )
    return both.select(
        *[sf.col(c) for c in entities.columns],
        sf.coalesce("_override", "_default").alias("quota"),
        sf.when(sf.col("_override").isNotNull(), sf.lit("override")).otherwise(sf.lit("default")).alias("source"),
    )


def _capacity_column(capacity: dict[str, float]) -> Column:

    out = sf.lit(None).cast("double")
    for resource, value in sorted(capacity.items()):
        out = sf.when(sf.col("resource") == resource, sf.lit(float(value))).otherwise(out)
    return out


def capacity_check(usage: DataFrame, recommendations: DataFrame, capacity: dict[str, float]) -> DataFrame:
    """Per (broker, resource): entities, committed (sum of effective quotas), capacity, oversubscription,
    observed peak and p99 of the broker's total usage, peak utilisation, status.

    ``status`` is ``over-capacity`` when the broker's own traffic (the p99 of its per-timestamp total)
    is above its capacity: the broker is overloaded today, whatever the quotas. ``oversubscribed`` when
    only the quotas add up to more than the capacity: the clients *could* overload it if they all
    peaked together, which is normal with many clients and worth knowing, not an overload. ``ok`` when
    neither, ``unknown`` without a capacity.
    """

    present = usage.select("broker", *ENTITY, "resource").distinct()
    committed = (
        effective_quotas(present, recommendations)
        .groupBy("broker", "resource")
        .agg(sf.count(sf.lit(1)).alias("entities"), sf.sum("quota").alias("committed"))
    )
    totals = usage.groupBy("timestamp", "broker", "resource").agg(sf.sum("value").alias("total"))
    observed = totals.groupBy("broker", "resource").agg(
        sf.max("total").alias("observed_peak"), value_at(0.99, sorted_values("total")).alias("observed_p99")
    )
    cap = _capacity_column(capacity)
    out = committed.join(observed, ["broker", "resource"], "left").withColumn("capacity", cap)
    return out.select(
        "broker",
        "resource",
        sf.col("entities").cast("long").alias("entities"),
        "committed",
        "capacity",
        (sf.col("committed") / sf.col("capacity")).alias("oversubscription"),
        "observed_peak",
        "observed_p99",
        (sf.col("observed_peak") / sf.col("capacity")).alias("peak_utilisation"),
        sf.when(sf.col("capacity").isNull(), sf.lit("unknown"))
        .when(sf.col("observed_p99") > sf.col("capacity"), sf.lit("over-capacity"))
        .when(sf.col("committed") > sf.col("capacity"), sf.lit("oversubscribed"))
        .otherwise(sf.lit("ok"))
        .alias("status"),
    )
