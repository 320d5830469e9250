"""Outliers among the entities of one (kind, resource) population, by their p99 in log space.

Usage spans orders of magnitude (lognormal), so an entity is an outlier when its
p99 is above median x exp(z x sigma), where sigma = (ln Q3 - ln Q1) / 1.3489795
(the interquartile range of a standard normal) and P(Z > z) = alpha / (active
entities), z exact in double precision: a population without outliers gets one
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


def _horner(coefficients: tuple[float, ...], x: Column) -> Column:
    """The polynomial with ``coefficients`` (highest power first) at ``x``, by Horner's rule."""

    out = sf.lit(coefficients[0])
    for c in coefficients[1:]:
        out = out * x + sf.lit(c)
    return out


# Wichura's algorithm AS241 (PPND16, Applied Statistics 37(3), 1988): rational approximations of the
# standard normal's inverse CDF with a relative error of about 1e-16, i.e. exact in double precision.
# Coefficients highest power first, (numerator, denominator) per region.
_CENTRAL: Final = (
    (
        2509.0809287301226727, 33430.575583588128105, 67265.770927008700853, 45921.953931549871457,
        13731.693765509461125, 1971.5909503065514427, 133.14166789178437745, 3.387132872796366608,
    ),
    (
        5226.495278852854561, 28729.085735721942674, 39307.89580009271061, 21213.794301586595867,
        5394.1960214247511077, 687.1870074920579083, 42.313330701600911252, 1.0,
    ),
)  # fmt: skip
_INTERMEDIATE: Final = (
    (
        7.7454501427834140764e-4, 0.0227238449892691845833, 0.24178072517745061177, 1.27045825245236838258,
        3.64784832476320460504, 5.7694972214606914055, 4.6303378461565452959, 1.42343711074968357734,
    ),
    (
        1.05075007164441684324e-9, 5.475938084995344946e-4, 0.0151986665636164571966, 0.14810397642748007459,
        0.68976733498510000455, 1.6763848301838038494, 2.05319162663775882187, 1.0,
    ),
)  # fmt: skip
_FAR: Final = (
    (
        2.01033439929228813265e-7, 2.71155556874348757815e-5, 0.0012426609473880784386, 0.026532189526576123093,
        0.29656057182850489123, 1.7848265399172913358, 5.4637849111641143699, 6.6579046435011037772,
    ),
    (
        2.04426310338993978564e-15, 1.4215117583164458887e-7, 1.8463183175100546818e-5, 7.868691311456132591e-4,
        0.0148753612908506148525, 0.13692988092273580531, 0.59983220655588793769, 1.0,
    ),
)  # fmt: skip


def normal_quantile_upper(tail: Column) -> Column:
    """z with P(Z > z) = ``tail`` for a standard normal Z, for 0 < tail <= 0.5, exact in double precision.

    Wichura's AS241 (the algorithm of Python's ``statistics.NormalDist.inv_cdf``), taken from the
    tail itself rather than from 1 - tail, so a tail of 1e-9 keeps its digits. Spark has no
    inverse normal CDF, and a column expression keeps the fence free of Python workers and collects.
    """

    q = sf.lit(0.5) - tail
    r_central = sf.lit(0.180625) - q * q
    central = q * _horner(_CENTRAL[0], r_central) / _horner(_CENTRAL[1], r_central)
    r = sf.sqrt(-sf.log(tail))
    near = r - sf.lit(1.6)
    far = r - sf.lit(5.0)
    tail_z = sf.when(r <= 5.0, _horner(_INTERMEDIATE[0], near) / _horner(_INTERMEDIATE[1], near)).otherwise(
        _horner(_FAR[0], far) / _horner(_FAR[1], far)
    )
    return sf.when(q <= 0.425, central).otherwise(tail_z)


#: The interquartile range of a standard normal, 2 x z(0.25) = 1.3489795003921634: (ln Q3 - ln Q1) / it
#: estimates sigma without letting the outliers move it.
NORMAL_IQR: Final = 1.3489795003921634


def flag_outliers(stats: DataFrame, alpha: float = 0.05, top_k: int = 10, min_population: int = 3) -> DataFrame:
    """Add population, active, q1, median, q3, fence, rank (1 = largest p99) and outlier to per-entity stats.

    In each (kind, resource) population the active entities' p99s (p99 > 0) are taken in log space,
    where usage that spans orders of magnitude (lognormal) is a bell curve. Its centre is the median
    and its spread sigma = (ln Q3 - ln Q1) / 1.3489795, both nearest-rank, so the outliers cannot widen the
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
