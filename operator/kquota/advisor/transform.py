"""The advisor's decisions: pure DataFrame -> DataFrame functions, no I/O and no Spark actions.

Each function takes validated samples (see :mod:`kquota.advisor.schema`) or the
output of another function here and returns a new DataFrame; nothing is
collected, written or cached, so every step is testable on a few inline rows
and runs unchanged on a cluster.

The method (``docs/advisor.md`` explains it with an example):

1. **Entities.** A client sample belongs to the quota *bucket* the broker
   measured: ``user`` only, ``client-id`` only, or the ``(user, client-id)``
   pair (:func:`entity_kind`). :func:`regroup` can merge pairs up to users or
   client-ids first (summing their rates), to recommend at that level.
2. **Per-entity statistics** (:func:`entity_stats`), per resource (produce,
   fetch, request): p50, p95, p99 and max of the per-broker rate over every
   sample, mean, peak-to-mean (max / mean), and throttled share (the fraction
   of samples whose throttle time was above zero). Quotas are per broker, so
   the samples of one entity on all brokers form one distribution.
   Percentiles are nearest-rank (the smallest value with at least p of the
   samples at or below it) computed with Spark's ``percentile_approx`` at
   ``accuracy`` (default 10,000): the rank error is at most 1/accuracy of the
   sample count, and exact when an entity has fewer samples than that.
3. **Outliers** (:func:`flag_outliers`): within each (entity kind, resource)
   population, an entity is an outlier when its p99 is above the Tukey fence
   ``Q3 + k x (Q3 - Q1)`` of the population's p99s (k = 1.5 by default),
   it is among the ``top_k`` largest p99s (KIP-13: fixed quotas for everyone
   but the top outliers), and the population has at least ``min_population``
   entities (quartiles of two numbers say nothing).
4. **Recommendation** (:func:`recommend`): the default quota of a population is
   the ``default_percentile`` (default 1.0, i.e. the largest) of the
   non-outliers' p99s, times (1 + headroom), rounded *up* to a nice quantity
   (:func:`nice_round`). Outliers get an override of their own p99 x (1 +
   headroom), rounded up; so does any other entity whose own need is above the
   default (possible when default_percentile < 1), so no entity is throttled at
   its p99. An entity throttled in more than ``capped_share`` of its samples is
   flagged ``demand_capped``: its observed usage was held down by a quota, so
   the real demand is higher than the data shows.
5. **Capacity** (:func:`capacity_check`): per broker and resource, the sum of
   the effective quotas (override, else the default) of the entities seen on
   that broker, against the broker's capacity; the ratio is the
   oversubscription. The observed peak (largest per-timestamp sum of usage) is
   reported next to it.
6. **Topics** (:func:`topic_view`): per topic, the total rate over brokers per
   time bucket, its p50/p99/max, a suggested budget (p99 x (1 + headroom),
   rounded up) and per broker the KIP-1010 allowance: budget / partitions x
   the leader partitions on that broker, or, where the layout is unknown, the
   budget x the broker's observed share of the topic's bytes.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as sf

from kquota.advisor.params import LEVELS, Level, Params
from kquota.advisor.schema import RESOURCES

__all__ = ["LEVELS", "Level", "Params"]

KIND_USER: Final = "user"
KIND_CLIENT: Final = "client-id"
KIND_PAIR: Final = "user+client-id"

#: Byte-rate resources get binary quantities (Ki, Mi, Gi); request time is a percentage.
BYTE_RESOURCES: Final = frozenset({"produce", "fetch"})
#: Mantissas of "nice" numbers; x 10^k. Multiples of 1/4, so x 1024 (Ki and up) stays a whole number of bytes.
NICE_MANTISSAS: Final = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
_KI: Final = 1024.0


# --- entities ---------------------------------------------------------------------


def entity_kind(user: Column, client_id: Column) -> Column:
    """Which Kafka entity a (user, client_id) label pair is: user, client-id or user+client-id."""

    return (
        sf.when(user.isNotNull() & client_id.isNotNull(), sf.lit(KIND_PAIR))
        .when(user.isNotNull(), sf.lit(KIND_USER))
        .otherwise(sf.lit(KIND_CLIENT))
    )


def regroup(samples: DataFrame, level: Level) -> DataFrame:
    """Re-key client samples at ``level``, summing the rates of the buckets merged into one entity.

    ``user``: every sample with a user becomes that user's (client-id dropped); samples with only a
    client-id are kept as they are (they have no user to merge into). ``client-id`` likewise. Throttle
    times take the largest of the merged buckets, so "was throttled" survives the merge.
    """

    if level == "as-measured":
        return samples
    if level == "user":
        user, client = sf.col("user"), sf.when(sf.col("user").isNull(), sf.col("client_id"))
    else:
        user, client = sf.when(sf.col("client_id").isNull(), sf.col("user")), sf.col("client_id")
    rekeyed = samples.withColumns({"user": user, "client_id": client})
    usage = [c for c, _ in RESOURCES.values()]
    throttle = [t for _, t in RESOURCES.values()]
    return (
        rekeyed.groupBy("timestamp", "broker", "user", "client_id")
        .agg(*[sf.sum(c).alias(c) for c in usage], *[sf.max(t).alias(t) for t in throttle])
        .select(*samples.columns)
    )


def usage_long(samples: DataFrame) -> DataFrame:
    """One row per (sample, resource) with a value: timestamp, broker, kind, user, client_id, resource, value,
    throttle_ms. Missing values (a client that only produces has no fetch rate) are left out."""

    per_resource = sf.array(
        *[
            sf.struct(sf.lit(r).alias("resource"), sf.col(c).alias("value"), sf.col(t).alias("throttle_ms"))
            for r, (c, t) in RESOURCES.items()
        ]
    )
    return (
        samples.select(
            "timestamp",
            "broker",
            entity_kind(sf.col("user"), sf.col("client_id")).alias("kind"),
            "user",
            "client_id",
            sf.explode(per_resource).alias("u"),
        )
        .select("timestamp", "broker", "kind", "user", "client_id", "u.resource", "u.value", "u.throttle_ms")
        .filter(sf.col("value").isNotNull())
    )


ENTITY: Final = ("kind", "user", "client_id")


def entity_stats(usage: DataFrame, accuracy: int = 10_000) -> DataFrame:
    """Per entity and resource: samples, brokers, p50, p95, p99, max, mean, peak_to_mean, throttled_share."""

    throttled = sf.when(sf.col("throttle_ms").isNull(), sf.lit(None)).otherwise(
        (sf.col("throttle_ms") > 0).cast("double")
    )
    stats = usage.groupBy(*ENTITY, "resource").agg(
        sf.count("value").alias("samples"),
        sf.size(sf.collect_set("broker")).alias("brokers"),
        sf.percentile_approx("value", [0.5, 0.95, 0.99], accuracy).alias("_p"),
        sf.max("value").alias("max"),
        sf.avg("value").alias("mean"),
        sf.avg(throttled).alias("throttled_share"),
    )
    return stats.select(
        *ENTITY,
        "resource",
        "samples",
        "brokers",
        sf.col("_p")[0].alias("p50"),
        sf.col("_p")[1].alias("p95"),
        sf.col("_p")[2].alias("p99"),
        "max",
        "mean",
        sf.when(sf.col("mean") > 0, sf.col("max") / sf.col("mean")).alias("peak_to_mean"),
        "throttled_share",
    )


def flag_outliers(
    stats: DataFrame, iqr_k: float = 1.5, top_k: int = 10, min_population: int = 3, accuracy: int = 10_000
) -> DataFrame:
    """Add population, q1, q3, fence, rank (1 = largest p99) and outlier to per-entity stats."""

    population = Window.partitionBy("kind", "resource")
    ranked = population.orderBy(
        sf.col("p99").desc(), sf.col("user").asc_nulls_first(), sf.col("client_id").asc_nulls_first()
    )
    quartiles = sf.percentile_approx("p99", [0.25, 0.75], accuracy).over(population)
    out = stats.withColumns(
        {
            "population": sf.count(sf.lit(1)).over(population),
            "_q": quartiles,
            "rank": sf.row_number().over(ranked),
        }
    )
    out = out.withColumns({"q1": sf.col("_q")[0], "q3": sf.col("_q")[1]}).drop("_q")
    out = out.withColumn("fence", sf.col("q3") + sf.lit(iqr_k) * (sf.col("q3") - sf.col("q1")))
    return out.withColumn(
        "outlier",
        (sf.col("population") >= min_population)
        & (sf.col("p99") > sf.col("fence"))
        & (sf.col("rank") <= top_k)
        & (sf.col("p99") > 0),
    )


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
        sf.percentile_approx("p99", params.default_percentile, params.accuracy).alias("basis"),
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
    overrides = joined.filter(
        (sf.col("p99") > 0) & (sf.col("outlier") | sf.col("_default").isNull() | (sf.col("_need") > sf.col("_default")))
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


def capacity_check(
    usage: DataFrame, recommendations: DataFrame, capacity: dict[str, float], accuracy: int = 10_000
) -> DataFrame:
    """Per (broker, resource): entities, committed (sum of effective quotas), capacity, oversubscription,
    observed peak and p99 of the broker's total usage, peak utilisation, status (ok / oversubscribed / unknown)."""

    present = usage.select("broker", *ENTITY, "resource").distinct()
    committed = (
        effective_quotas(present, recommendations)
        .groupBy("broker", "resource")
        .agg(sf.count(sf.lit(1)).alias("entities"), sf.sum("quota").alias("committed"))
    )
    totals = usage.groupBy("timestamp", "broker", "resource").agg(sf.sum("value").alias("total"))
    observed = totals.groupBy("broker", "resource").agg(
        sf.max("total").alias("observed_peak"), sf.percentile_approx("total", 0.99, accuracy).alias("observed_p99")
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
        .when(sf.col("committed") > sf.col("capacity"), sf.lit("oversubscribed"))
        .otherwise(sf.lit("ok"))
        .alias("status"),
    )


def topic_view(topics: DataFrame, params: Params) -> tuple[DataFrame, DataFrame]:
    """(per topic, per topic and broker) budget suggestions for TopicQuota resources.

    Per topic: partitions (if known), p50/p99/max of the total produce and fetch rate over all brokers
    (per ``topic_bucket_seconds`` bucket: each broker's mean in the bucket, summed), and the suggested
    produce and consume budgets. Per (topic, broker): leader partitions, the broker's share of the
    topic's bytes, the KIP-1010 per-broker allowance of each budget and its basis (``leaders`` when the
    partition layout is known, else ``observed-share``).
    """

    data = topics if params.include_internal_topics else topics.filter(~sf.col("topic").startswith("__"))
    bucket = sf.floor(sf.unix_seconds("timestamp") / params.topic_bucket_seconds)
    per_broker = data.groupBy(bucket.alias("bucket"), "broker", "topic").agg(
        sf.avg("bytes_in_rate").alias("in_rate"),
        sf.avg("bytes_out_rate").alias("out_rate"),
        sf.max("partitions").alias("partitions"),
        sf.max("leader_partitions").alias("leader_partitions"),
    )
    totals = per_broker.groupBy("bucket", "topic").agg(
        sf.sum("in_rate").alias("in_total"), sf.sum("out_rate").alias("out_total")
    )
    acc = params.accuracy
    stats = totals.groupBy("topic").agg(
        sf.count(sf.lit(1)).alias("buckets"),
        sf.percentile_approx("in_total", [0.5, 0.99], acc).alias("_in"),
        sf.max("in_total").alias("in_max"),
        sf.percentile_approx("out_total", [0.5, 0.99], acc).alias("_out"),
        sf.max("out_total").alias("out_max"),
    )
    layout = per_broker.groupBy("topic").agg(
        sf.max("partitions").alias("partitions"), sf.countDistinct("broker").alias("brokers")
    )
    factor = sf.lit(1.0 + params.headroom)
    floor = sf.lit(params.min_byte_rate)
    per_topic = stats.join(layout, "topic").select(
        "topic",
        "partitions",
        sf.col("brokers").cast("long").alias("brokers"),
        sf.col("buckets").cast("long").alias("buckets"),
        sf.col("_in")[0].alias("in_p50"),
        sf.col("_in")[1].alias("in_p99"),
        "in_max",
        sf.col("_out")[0].alias("out_p50"),
        sf.col("_out")[1].alias("out_p99"),
        "out_max",
        nice_round(sf.greatest(sf.col("_in")[1] * factor, floor), True).alias("produce_budget"),
        nice_round(sf.greatest(sf.col("_out")[1] * factor, floor), True).alias("consume_budget"),
    )
    broker_sums = per_broker.groupBy("topic", "broker").agg(
        sf.sum("in_rate").alias("_in"),
        sf.sum("out_rate").alias("_out"),
        sf.max("leader_partitions").alias("leader_partitions"),
    )
    topic_w = Window.partitionBy("topic")
    n_brokers = sf.count(sf.lit(1)).over(topic_w)

    def share(col: str) -> Column:
        total = sf.sum(col).over(topic_w)
        return sf.when(total > 0, sf.col(col) / total).otherwise(sf.lit(1.0) / n_brokers)

    shares = broker_sums.withColumns({"in_share": share("_in"), "out_share": share("_out")})
    joined = shares.join(per_topic.select("topic", "partitions", "produce_budget", "consume_budget"), "topic")
    by_leaders = sf.col("partitions").isNotNull() & sf.col("leader_partitions").isNotNull() & (sf.col("partitions") > 0)

    def allowance(budget: str, share_col: str) -> Column:
        return sf.floor(
            sf.when(by_leaders, sf.col(budget) / sf.col("partitions") * sf.col("leader_partitions")).otherwise(
                sf.col(budget) * sf.col(share_col)
            )
        ).cast("long")

    per_topic_broker = joined.select(
        "topic",
        "broker",
        "partitions",
        "leader_partitions",
        "in_share",
        "out_share",
        allowance("produce_budget", "in_share").alias("produce_allowance"),
        allowance("consume_budget", "out_share").alias("consume_allowance"),
        sf.when(by_leaders, sf.lit("leaders")).otherwise(sf.lit("observed-share")).alias("basis"),
    )
    return per_topic, per_topic_broker
