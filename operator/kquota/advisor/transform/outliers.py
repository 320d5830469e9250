"""Outliers among the entities of one (kind, resource) population, by their p99 in log space.

Usage spans orders of magnitude (lognormal), so an entity is an outlier when its
p99 is above median x exp(z x sigma), where sigma = (ln Q3 - ln Q1) / 1.349 and
P(Z > z) = alpha / (active entities): a population without outliers gets one
with probability about ``alpha`` (0.05), whatever its size. It must also be
among the ``top_k`` largest p99s (KIP-13: fixed quotas for everyone but the top
outliers) and the population must have at least ``min_population`` active
entities.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as sf

from kquota.advisor.transform.percentiles import nearest_rank


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
