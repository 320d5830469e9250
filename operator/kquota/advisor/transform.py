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
2. **Per-entity statistics** (:func:`entity_stats` over one row per sample and
   resource, :func:`entity_stats_wide` over the samples as they are: the same
   rows, the second is what the pipeline runs), per resource (produce,
   fetch, request): p50, p95, p99 and max of the per-broker rate over every
   sample, mean, peak-to-mean (max / mean), and throttled share (the fraction
   of samples whose throttle time was above zero). Quotas are per broker, so
   the samples of one entity on all brokers form one distribution.
   Percentiles are exact nearest-rank values (the smallest value with at least
   p of the samples at or below it), read from each entity's sorted samples
   (:func:`sorted_values`), so they do not depend on how the data is partitioned.
3. **Outliers** (:func:`flag_outliers`): within each (entity kind, resource)
   population, in log space (usage spans orders of magnitude: lognormal), an
   entity is an outlier when its p99 is above median x exp(z x sigma), where
   sigma = (ln Q3 - ln Q1) / 1.349 and P(Z > z) = alpha / (active entities):
   a population without outliers gets one with probability about ``alpha``
   (0.05), whatever its size. It must also be among the ``top_k`` largest p99s
   (KIP-13: fixed quotas for everyone but the top outliers) and the population
   must have at least ``min_population`` active entities.
4. **Recommendation** (:func:`recommend`): the default quota of a population is
   the ``default_percentile`` (default 1.0, i.e. the largest) of the
   non-outliers' p99s, times (1 + headroom), rounded *up* to a nice quantity
   (:func:`nice_round`). Outliers get an override of their own p99 x (1 +
   headroom), rounded up, when that is above the default (an override equal to
   the default says nothing); so does any other entity whose own need is above
   the default (possible when default_percentile < 1), so no entity is
   throttled at its p99. An entity throttled in more than ``capped_share`` of its samples is
   flagged ``demand_capped``: its observed usage was held down by a quota, so
   the real demand is higher than the data shows.
5. **Capacity** (:func:`capacity_check`): per broker and resource, the sum of
   the effective quotas (override, else the default) of the entities seen on
   that broker, against the broker's capacity (oversubscription), and the p99
   and peak of the broker's per-timestamp total usage. A broker is
   ``over-capacity`` when that p99 is above its capacity (overloaded by real
   traffic), ``oversubscribed`` when only the quotas add up to more.
6. **Topics** (:func:`topic_view`): per topic, the total rate over brokers per
   time bucket, its p50/p99/max, a suggested budget (p99 x (1 + headroom),
   rounded up) and per broker the KIP-1010 allowance: budget / partitions x
   the leader partitions on that broker, or, where the layout is unknown, the
   budget x the broker's observed share of the topic's bytes.
"""

from __future__ import annotations

from decimal import Decimal
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


def nearest_rank(p: float, n: Column) -> Column:
    """The rank of the p-th percentile among ``n`` sorted values: the smallest r with r / n >= p (at least 1).

    ``p`` enters as an exact decimal, so ``0.07 x 100`` is rank 7, not the rank 8 that binary floating point
    (7.000000000000001) would give.
    """

    return sf.greatest(sf.lit(1), sf.ceil(sf.lit(Decimal(repr(p))) * n).cast("long"))


def sorted_values(value: str) -> Column:
    """Aggregate: the group's non-null ``value``s in ascending order (8 bytes a sample while the group is held).

    Exact percentiles need every value; sorting a primitive array per group is about 3x faster here
    than ``percentile_approx`` and 5x faster than a window's row sort, and its result does not depend on
    the partitioning.
    """

    return sf.sort_array(sf.collect_list(value))


def value_at(p: float, values: Column) -> Column:
    """The nearest-rank p-th percentile of a sorted array (null for an empty one)."""

    return sf.try_element_at(values, nearest_rank(p, sf.size(values)).cast("int"))


def ordered_mean(values: Column) -> Column:
    """The mean of a sorted array, summed in its order: the same bits whatever the partitioning.

    (``avg`` adds partial sums in the order tasks finish, which moves the last bits between runs.)
    """

    total = sf.aggregate(values, sf.lit(0.0), lambda acc, x: acc + x)
    return sf.when(sf.size(values) > 0, total / sf.size(values))


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


def normal_quantile_upper(tail: Column) -> Column:
    """z with P(Z > z) = ``tail`` for a standard normal Z, for 0 < tail <= 0.5 (Abramowitz & Stegun 26.2.23).

    Absolute error below 4.5e-4: a fence moves by less than 0.05% of its width. Spark has no inverse
    normal CDF, and this keeps the fence a column expression (no Python worker, no collect).
    """

    t = sf.sqrt(sf.lit(-2.0) * sf.log(tail))
    numerator = sf.lit(2.515517) + sf.lit(0.802853) * t + sf.lit(0.010328) * t * t
    denominator = sf.lit(1.0) + sf.lit(1.432788) * t + sf.lit(0.189269) * t * t + sf.lit(0.001308) * t * t * t
    return t - numerator / denominator


#: IQR of a standard normal: (Q3 - Q1) / 1.349 estimates sigma without letting the outliers move it.
NORMAL_IQR: Final = 1.3489795003921634


def flag_outliers(stats: DataFrame, alpha: float = 0.05, top_k: int = 10, min_population: int = 3) -> DataFrame:
    """Add population, active, q1, median, q3, fence, rank (1 = largest p99) and outlier to per-entity stats.

    In each (kind, resource) population the active entities' p99s (p99 > 0) are taken in log space,
    where usage that spans orders of magnitude (lognormal) is a bell curve. Its centre is the median
    and its spread sigma = (ln Q3 - ln Q1) / 1.349, both nearest-rank, so the outliers cannot widen the
    fence that is meant to catch them. The fence is median x exp(z x sigma) with
    P(Z > z) = alpha / active: in a population of ``active`` entities with no outliers at all, the
    chance that *any* of them is flagged is about ``alpha`` (a Bonferroni bound), however large the
    population. A Tukey fence in linear units flags 4-9% of every lognormal population instead.

    An outlier is above the fence, among the ``top_k`` largest p99s, and in a population of at least
    ``min_population`` active entities.
    """

    population = Window.partitionBy("kind", "resource")
    ranked_desc = population.orderBy(
        sf.col("p99").desc(), sf.col("user").asc_nulls_first(), sf.col("client_id").asc_nulls_first()
    )
    active = sf.col("p99") > 0
    out = stats.withColumns(
        {
            "population": sf.count(sf.lit(1)).over(population),
            "active": sf.count(sf.when(active, sf.lit(1))).over(population),
            "rank": sf.row_number().over(ranked_desc),
        }
    )
    # Ascending rank among the active entities: the idle ones (p99 = 0) rank after every active one
    # in descending order, so rank_up = active + 1 - rank for them is <= 0 and never matches.
    rank_up = sf.col("active") + sf.lit(1) - sf.col("rank")

    def quantile(p: float) -> Column:
        return sf.max(sf.when(rank_up == nearest_rank(p, sf.col("active")), sf.col("p99"))).over(population)

    out = out.withColumns({"q1": quantile(0.25), "median": quantile(0.5), "q3": quantile(0.75)})
    sigma = (sf.log(sf.col("q3")) - sf.log(sf.col("q1"))) / sf.lit(NORMAL_IQR)
    z = normal_quantile_upper(sf.lit(alpha) / sf.greatest(sf.col("active"), sf.lit(1)))
    out = out.withColumn("fence", sf.when(sf.col("active") > 0, sf.col("median") * sf.exp(z * sigma)))
    return out.withColumn(
        "outlier",
        (sf.col("active") >= min_population) & (sf.col("p99") > sf.col("fence")) & (sf.col("rank") <= top_k) & active,
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
    stats = totals.groupBy("topic").agg(
        sf.count(sf.lit(1)).alias("buckets"),
        sorted_values("in_total").alias("_in_sorted"),
        sf.max("in_total").alias("in_max"),
        sorted_values("out_total").alias("_out_sorted"),
        sf.max("out_total").alias("out_max"),
    )
    stats = stats.withColumns(
        {
            "_in": sf.array(value_at(0.5, sf.col("_in_sorted")), value_at(0.99, sf.col("_in_sorted"))),
            "_out": sf.array(value_at(0.5, sf.col("_out_sorted")), value_at(0.99, sf.col("_out_sorted"))),
        }
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
