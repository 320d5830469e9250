"""The advisor's pure transformations on small inline DataFrames whose answers are worked out by hand.

Percentiles are nearest-rank: for n sorted values the p-th is the value at rank ceil(p x n).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from pyspark.sql import functions as sf
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from kquota.advisor.params import Params
from kquota.advisor.transform.capacity import capacity_check
from kquota.advisor.transform.entities import regroup, usage_long
from kquota.advisor.transform.outliers import NORMAL_IQR, flag_outliers, normal_quantile_upper
from kquota.advisor.transform.recommend import nice_round, recommend
from kquota.advisor.transform.stats import entity_stats, entity_stats_wide
from kquota.advisor.transform.topics import topic_view
from tests.spark.helpers import at, clients, series, topics

pytestmark = pytest.mark.spark

KI, MI = 1024, 1024 * 1024

STATS_SCHEMA = (
    "kind string, user string, client_id string, resource string, samples long, brokers int, p50 double, "
    "p95 double, p99 double, max double, mean double, peak_to_mean double, throttled_share double"
)


def stats_of(spark: Any, rows: list[dict[str, Any]]) -> Any:
    return entity_stats(usage_long(clients(spark, rows)))


def test_percentiles_of_one_to_a_hundred_are_the_nearest_rank_values(spark: Any) -> None:
    rows = series("alice", [float(v) for v in range(1, 101)], throttle=[1.0 if v > 90 else 0.0 for v in range(1, 101)])
    expected = spark.createDataFrame(
        [("user", "alice", None, "produce", 100, 1, 50.0, 95.0, 99.0, 100.0, 50.5, 100 / 50.5, 0.1)], STATS_SCHEMA
    )
    actual = stats_of(spark, rows)
    assertSchemaEqual(actual.schema, expected.schema)
    assertDataFrameEqual(actual, expected)


def test_samples_of_one_entity_on_all_brokers_form_one_distribution(spark: Any) -> None:
    # Quotas are per broker: broker 2's samples are more samples of the same per-broker rate.
    rows = series("bob", [10.0, 20.0, 30.0, 40.0], broker="1") + series("bob", [50.0, 60.0, 70.0, 80.0], broker="2")
    # n = 8: p50 rank 4 -> 40, p95 and p99 rank 8 -> 80; mean 45.
    expected = spark.createDataFrame(
        [("user", "bob", None, "produce", 8, 2, 40.0, 80.0, 80.0, 80.0, 45.0, 80 / 45, None)], STATS_SCHEMA
    )
    assertDataFrameEqual(stats_of(spark, rows), expected)


def test_each_resource_and_entity_kind_is_its_own_row_and_missing_values_are_left_out(spark: Any) -> None:
    rows = [
        {"user": "alice", "client_id": "app", "produce_byte_rate": 100.0, "fetch_byte_rate": 300.0},
        {"user": None, "client_id": "batch", "fetch_byte_rate": 0.0},
        {"user": "carol", "request_time": 12.5, "request_throttle_time_ms": 0.0},
    ]
    expected = spark.createDataFrame(
        [
            ("user+client-id", "alice", "app", "produce", 1, 1, 100.0, 100.0, 100.0, 100.0, 100.0, 1.0, None),
            ("user+client-id", "alice", "app", "fetch", 1, 1, 300.0, 300.0, 300.0, 300.0, 300.0, 1.0, None),
            # A mean of 0 has no peak-to-mean ratio.
            ("client-id", None, "batch", "fetch", 1, 1, 0.0, 0.0, 0.0, 0.0, 0.0, None, None),
            ("user", "carol", None, "request", 1, 1, 12.5, 12.5, 12.5, 12.5, 12.5, 1.0, 0.0),
        ],
        STATS_SCHEMA,
    )
    assertDataFrameEqual(stats_of(spark, rows), expected)


def test_percentiles_are_exact_for_thousands_of_samples_whatever_the_partitioning(spark: Any) -> None:
    # 3,000-6,000 samples per entity, where Spark's percentile_approx at accuracy 10,000 was one rank off
    # for a third of the values. The oracle sorts each entity's values with numpy.
    rng = np.random.default_rng(3)
    rows: list[tuple[Any, ...]] = []
    values: dict[str, np.ndarray] = {}
    for e in range(8):
        n = int(rng.integers(3000, 6000))
        v = np.round(np.exp(rng.normal(10.0, 1.0, n)), 3)
        values[f"u{e}"] = np.sort(v)
        rows += [(f"u{e}", str(i % 3), float(x)) for i, x in enumerate(v)]
    usage = spark.createDataFrame(rows, "user string, broker string, value double").select(
        sf.lit("user").alias("kind"),
        "user",
        sf.lit(None).cast("string").alias("client_id"),
        sf.lit("produce").alias("resource"),
        "broker",
        "value",
        sf.lit(None).cast("double").alias("throttle_ms"),
    )
    results = []
    for partitions, shuffle in ((1, "1"), (5, "7")):
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
        try:
            stats = entity_stats(usage.repartition(partitions))
            results.append(sorted(tuple(r) for r in stats.collect()))
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", "4")
    assert results[0] == results[1], "the statistics depend on the partitioning"
    for row in entity_stats(usage).collect():
        v = values[row["user"]]
        for name, p in (("p50", "0.5"), ("p95", "0.95"), ("p99", "0.99")):
            assert row[name] == v[math.ceil(Fraction(p) * len(v)) - 1], (row["user"], name)
        assert (row["samples"], row["max"]) == (len(v), v[-1])


def flagged_of(spark: Any, p99s: dict[str, float], **kwargs: Any) -> Any:
    stats = spark.createDataFrame(
        [("user", u, None, "produce", p, 0.0) for u, p in p99s.items()],
        "kind string, user string, client_id string, resource string, p99 double, throttled_share double",
    )
    return flag_outliers(stats, **kwargs)


def outliers(df: Any) -> Any:
    return df.filter("outlier").select("user")


def upper_quantile(tail: float) -> float:
    """z with P(Z > z) = tail, by bisection on the normal's own tail 0.5 x erfc(z / sqrt 2).

    Independent of the advisor's rational approximation: no coefficients, only math.erfc.
    """
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * math.erfc(mid / math.sqrt(2)) > tail else (lo, mid)
    return (lo + hi) / 2


def exact_fence(p99s: list[float], alpha: float = 0.05) -> float:
    """The fence by its documented definition, with the exact normal quantiles: the oracle for flag_outliers."""
    active = sorted(v for v in p99s if v > 0)
    n = len(active)

    def rank(q: float) -> float:
        return active[max(1, math.ceil(Fraction(str(q)) * n)) - 1]

    # The interquartile range of a standard normal: 2 x z(0.25), not a rounded constant.
    sigma = (math.log(rank(0.75)) - math.log(rank(0.25))) / (2 * upper_quantile(0.25))
    z = upper_quantile(alpha / n)
    return rank(0.5) * math.exp(z * sigma)


#: How close the fence must be to the oracle's: double-precision rounding, nothing more.
EXACT = 1e-12


def test_an_entity_above_the_log_space_fence_is_an_outlier(spark: Any) -> None:
    # Eight active p99s: Q1 = rank 2 = 100, median = rank 4 = 200, Q3 = rank 6 = 400;
    # sigma = ln 4 / 1.349, z = 2.50 (P(Z > z) = 0.05 / 8): fence = 200 x e^2.57 = about 2,600.
    p99s = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 200.0, "e": 200.0, "f": 400.0, "g": 400.0, "bob": 100_000.0}
    flagged = flagged_of(spark, p99s | {"idle": 0.0})
    assertDataFrameEqual(outliers(flagged), spark.createDataFrame([("bob",)], "user string"))
    row = flagged.select("q1", "median", "q3", "fence", "population", "active").distinct().collect()
    assert len(row) == 1
    assert (row[0]["q1"], row[0]["median"], row[0]["q3"]) == (100.0, 200.0, 400.0)
    assert (row[0]["population"], row[0]["active"]) == (9, 8)
    assert row[0]["fence"] == pytest.approx(exact_fence(list(p99s.values())), rel=EXACT)
    assert 2_500 < row[0]["fence"] < 2_700


# Every region of the approximation: central (tail >= 0.075), intermediate, far (tail < ~1.4e-11).
TAILS = [0.5, 0.3, 0.1, 0.075, 0.07, 0.05, 0.01, 1e-3, 1e-4, 2.5e-5, 1e-6, 1e-8, 1e-11, 1e-12, 1e-20, 1e-100]


def test_the_fence_quantile_is_the_normal_distributions_exactly(spark: Any) -> None:
    rows = spark.createDataFrame([(t,) for t in TAILS], "tail double")
    got = {r["tail"]: r["z"] for r in rows.select("tail", normal_quantile_upper(sf.col("tail")).alias("z")).collect()}
    for tail in TAILS:
        assert got[tail] == pytest.approx(upper_quantile(tail), rel=EXACT, abs=EXACT), tail
    assert math.isclose(NORMAL_IQR, 2 * upper_quantile(0.25), rel_tol=EXACT)


def lognormal_p99s(rng: np.random.Generator, n: int, sigma: float = 1.0) -> list[float]:
    return [float(v) for v in 10_000.0 * np.exp(rng.normal(0.0, sigma, n))]


def test_a_lognormal_population_without_outliers_rarely_gets_one(spark: Any) -> None:
    # 20 populations of 2,000 lognormal p99s, no planted outliers. The fence is built so that a
    # population gets any outlier with probability about alpha = 0.05: about 1 of 20. A Tukey fence
    # in linear units flags 4-9% of every such population (80-180 entities each).
    rng = np.random.default_rng(7)
    rows = [
        (f"k{k}", f"u{i}", None, "produce", v, 0.0)
        for k in range(20)
        for i, v in enumerate(lognormal_p99s(rng, 2000, sigma=0.5 + k / 10))
    ]
    stats = spark.createDataFrame(
        rows, "kind string, user string, client_id string, resource string, p99 double, throttled_share double"
    )
    flagged = flag_outliers(stats, top_k=2000)
    counts = flagged.groupBy("kind").agg(sf.sum(sf.col("outlier").cast("int")).alias("n")).collect()
    per_population = {r["kind"]: r["n"] for r in counts}
    assert len(per_population) == 20
    assert sum(1 for n in per_population.values() if n > 0) <= 3, per_population
    assert sum(per_population.values()) <= 5, per_population


def test_planted_heavy_hitters_are_the_outliers_exactly(spark: Any) -> None:
    rng = np.random.default_rng(11)
    regular = {f"u{i}": v for i, v in enumerate(lognormal_p99s(rng, 2000))}
    heavy = {f"heavy{i}": 10_000.0 * 500 * (1 + i / 10) for i in range(10)}
    flagged = flagged_of(spark, regular | heavy)
    assert {r["user"] for r in outliers(flagged).collect()} == set(heavy)
    row = flagged.select("fence").first()
    assert row is not None
    assert row["fence"] == pytest.approx(exact_fence(list((regular | heavy).values())), rel=EXACT)


def test_at_most_top_k_outliers_are_flagged_largest_first(spark: Any) -> None:
    # Nine entities at 10 and three far above: Q1 = median = Q3 = 10, sigma 0, fence 10: all three are
    # above it; top_k=2 keeps the two largest.
    p99s = {f"u{i}": 10.0 for i in range(9)} | {"x1000": 1000.0, "x2000": 2000.0, "x3000": 3000.0}
    flagged = flagged_of(spark, p99s, top_k=2)
    assertDataFrameEqual(outliers(flagged), spark.createDataFrame([("x3000",), ("x2000",)], "user string"))


def test_a_population_smaller_than_the_minimum_has_no_outliers(spark: Any) -> None:
    flagged = flagged_of(spark, {"a": 1.0, "b": 1000.0}, min_population=3)
    assert outliers(flagged).count() == 0


def test_idle_entities_are_never_outliers(spark: Any) -> None:
    flagged = flagged_of(spark, {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0})
    assert outliers(flagged).count() == 0


@pytest.mark.parametrize(
    ("x", "binary", "expected"),
    [
        (1025.0, True, 1280.0),  # just above 1Ki -> 1.25Ki
        (5e6, True, 5.0 * MI),  # 4.77Mi -> 5Mi
        (1.25 * MI, True, 1.25 * MI),  # already nice: unchanged
        (6.0 * MI, True, 6.0 * MI),
        (360.0 * KI, True, 400.0 * KI),  # mantissa 3.6 -> 4
        (1023.0 * MI, True, 1024.0 * MI),  # just under 1Gi: 1Gi, not 1250Mi
        (3.3, False, 4.0),
        (12.0, False, 12.5),
        (0.3, False, 0.3),
    ],
)
def test_nice_round_rounds_up_to_a_nice_quantity(spark: Any, x: float, binary: bool, expected: float) -> None:
    got = spark.range(1).select(nice_round(sf.lit(x), binary).alias("v")).first()
    assert got is not None
    assert got["v"] == pytest.approx(expected, rel=1e-12)
    if binary:
        assert float(got["v"]).is_integer()


RECS_SCHEMA = (
    "kind string, user string, client_id string, resource string, is_default boolean, quota double, basis double, "
    "population long, reason string, throttled_share double, demand_capped boolean"
)


def test_default_covers_the_non_outliers_and_outliers_get_overrides_with_headroom(spark: Any) -> None:
    flagged = flagged_of(spark, {"alice": 100.0 * KI, "carol": 200.0 * KI, "dave": 300.0 * KI, "bob": 5.0 * MI})
    recs = recommend(flagged, Params(headroom=0.2))
    # Default: largest non-outlier p99 300Ki x 1.2 = 360Ki -> 400Ki. Outlier bob: 5Mi x 1.2 = 6Mi exactly.
    expected = spark.createDataFrame(
        [
            ("user", None, None, "produce", True, 400.0 * KI, 300.0 * KI, 3, "default", 0.0, False),
            ("user", "bob", None, "produce", False, 6.0 * MI, 5.0 * MI, None, "outlier", 0.0, False),
        ],
        RECS_SCHEMA,
    )
    assertSchemaEqual(recs.schema, expected.schema)
    assertDataFrameEqual(recs, expected)


def test_a_lower_default_percentile_gives_overrides_to_the_non_outliers_above_it(spark: Any) -> None:
    flagged = flagged_of(spark, {"alice": 100.0 * KI, "carol": 200.0 * KI, "dave": 300.0 * KI, "bob": 5.0 * MI})
    recs = recommend(flagged, Params(headroom=0.2, default_percentile=0.5))
    # p50 of (100, 200, 300)Ki is 200Ki; x 1.2 = 240Ki -> 250Ki. dave needs 360Ki -> 400Ki, above it.
    expected = spark.createDataFrame(
        [
            ("user", None, None, "produce", True, 250.0 * KI, 200.0 * KI, 3, "default", 0.0, False),
            ("user", "dave", None, "produce", False, 400.0 * KI, 300.0 * KI, None, "above-default", 0.0, False),
            ("user", "bob", None, "produce", False, 6.0 * MI, 5.0 * MI, None, "outlier", 0.0, False),
        ],
        RECS_SCHEMA,
    )
    assertDataFrameEqual(recs, expected)


def test_throttled_entities_are_flagged_as_demand_capped_and_the_floor_applies(spark: Any) -> None:
    stats = spark.createDataFrame(
        [
            ("user", "a", None, "produce", 10.0, 0.5),
            ("user", "b", None, "produce", 20.0, 0.0),
            ("user", "c", None, "produce", 30.0, 0.0),
        ],
        "kind string, user string, client_id string, resource string, p99 double, throttled_share double",
    )
    recs = recommend(flag_outliers(stats), Params(min_byte_rate=1024.0))
    # 30 x 1.2 = 36 bytes/s is below the 1Ki floor; one member was throttled half the time.
    expected = spark.createDataFrame(
        [("user", None, None, "produce", True, 1024.0, 30.0, 3, "default", 0.5, True)], RECS_SCHEMA
    )
    assertDataFrameEqual(recs, expected)


def test_a_population_that_used_nothing_gets_no_default(spark: Any) -> None:
    recs = recommend(flagged_of(spark, {"a": 0.0, "b": 0.0, "c": 0.0}), Params())
    assert recs.count() == 0


def test_capacity_sums_effective_quotas_of_the_entities_seen_on_each_broker(spark: Any) -> None:
    rows = (
        series("alice", [1.0 * MI, 2.0 * MI], broker="1")
        + series("bob", [100.0 * KI, 100.0 * KI], broker="1")
        + series("bob", [50.0 * KI], broker="2")
    )
    usage = usage_long(clients(spark, rows))
    recs = spark.createDataFrame(
        [
            ("user", None, None, "produce", True, 256.0 * KI, 0.0, 1, "default", None, False),
            ("user", "alice", None, "produce", False, 3.0 * MI, 0.0, None, "outlier", None, False),
        ],
        RECS_SCHEMA,
    )
    capacity = capacity_check(usage, recs, {"produce": 3.0 * MI})
    # Broker 1: alice 3Mi + bob 256Ki > 3Mi; peak is the largest per-timestamp sum, 2Mi + 100Ki.
    expected = spark.createDataFrame(
        [
            (
                "1",
                "produce",
                2,
                3.25 * MI,
                3.0 * MI,
                3.25 / 3,
                2.0 * MI + 100 * KI,
                2.0 * MI + 100 * KI,
                (2.0 * MI + 100 * KI) / (3.0 * MI),
                "oversubscribed",
            ),
            ("2", "produce", 1, 256.0 * KI, 3.0 * MI, 256.0 / 3072, 50.0 * KI, 50.0 * KI, 50.0 / 3072, "ok"),
        ],
        "broker string, resource string, entities long, committed double, capacity double, oversubscription double, "
        "observed_peak double, observed_p99 double, peak_utilisation double, status string",
    )
    assertDataFrameEqual(capacity, expected)


def test_an_override_that_rounds_to_the_default_is_left_out(spark: Any) -> None:
    # Nine at 10Ki and one at 10.2Ki: sigma 0, so 10.2Ki is above the fence, but its need
    # (12.24Ki -> 12.5Ki) is the default itself (10Ki x 1.2 = 12Ki -> 12.5Ki): no override.
    p99s = {f"u{i}": 10.0 * KI for i in range(9)} | {"edge": 10.2 * KI}
    flagged = flagged_of(spark, p99s)
    assert [r["user"] for r in outliers(flagged).collect()] == ["edge"]
    recs = recommend(flagged, Params(headroom=0.2))
    assert [(r["is_default"], r["quota"]) for r in recs.collect()] == [(True, 12.5 * KI)]


def test_only_the_broker_its_own_traffic_overloads_is_over_capacity(spark: Any) -> None:
    # Three brokers whose quotas all add up to more than the 1Mi capacity; only broker 2's traffic is above it.
    rows: list[dict[str, Any]] = []
    for b in ("0", "1", "2"):
        for i in range(6):
            rows += series(f"c{b}{i}", [100.0 * KI] * 10, broker=b)
    rows += series("heavy", [2.0 * MI] * 10, broker="2")
    usage = usage_long(clients(spark, rows))
    recs = spark.createDataFrame(
        [("user", None, None, "produce", True, 256.0 * KI, 0.0, 1, "default", None, False)], RECS_SCHEMA
    )
    capacity = capacity_check(usage, recs, {"produce": 1.0 * MI})
    status = {r["broker"]: r["status"] for r in capacity.collect()}
    assert status == {"0": "oversubscribed", "1": "oversubscribed", "2": "over-capacity"}


def test_capacity_without_a_configured_capacity_is_unknown(spark: Any) -> None:
    usage = usage_long(clients(spark, series("a", [1.0])))
    recs = spark.createDataFrame(
        [("user", None, None, "produce", True, 1024.0, 1.0, 1, "default", None, False)], RECS_SCHEMA
    )
    row = capacity_check(usage, recs, {}).select("status", "committed").first()
    assert row is not None
    assert (row["status"], row["committed"]) == ("unknown", 1024.0)


def test_regroup_to_users_sums_the_client_ids_of_each_user(spark: Any) -> None:
    rows = [
        {"user": "alice", "client_id": "app1", "produce_byte_rate": 100.0, "produce_throttle_time_ms": 0.0},
        {"user": "alice", "client_id": "app2", "produce_byte_rate": 50.0, "produce_throttle_time_ms": 3.0},
        {"user": None, "client_id": "lonely", "produce_byte_rate": 7.0},
    ]
    regrouped = regroup(clients(spark, rows), "user").select(
        "user", "client_id", "produce_byte_rate", "produce_throttle_time_ms"
    )
    expected = spark.createDataFrame(
        [("alice", None, 150.0, 3.0), (None, "lonely", 7.0, None)],
        "user string, client_id string, produce_byte_rate double, produce_throttle_time_ms double",
    )
    assertDataFrameEqual(regrouped, expected)


def test_topic_budget_is_the_p99_of_the_total_and_kip1010_splits_it_by_leader_partitions(spark: Any) -> None:
    rows = []
    for i in range(3):
        rows.append(
            {
                "timestamp": at(60 * i),
                "broker": "1",
                "topic": "orders",
                "bytes_in_rate": 4.0 * MI,
                "bytes_out_rate": 0.0,
                "partitions": 6,
                "leader_partitions": 4,
            }
        )
        rows.append(
            {
                "timestamp": at(60 * i),
                "broker": "2",
                "topic": "orders",
                "bytes_in_rate": 2.0 * MI,
                "bytes_out_rate": 0.0,
                "partitions": 6,
                "leader_partitions": 2,
            }
        )
        rows.append(
            {
                "timestamp": at(60 * i),
                "broker": "1",
                "topic": "logs",
                "bytes_in_rate": 3.0 * MI,
                "bytes_out_rate": 1.0 * MI,
            }
        )
        rows.append(
            {
                "timestamp": at(60 * i),
                "broker": "2",
                "topic": "logs",
                "bytes_in_rate": 1.0 * MI,
                "bytes_out_rate": 1.0 * MI,
            }
        )
        rows.append(
            {
                "timestamp": at(60 * i),
                "broker": "1",
                "topic": "__consumer_offsets",
                "bytes_in_rate": 1.0,
                "bytes_out_rate": 1.0,
            }
        )
    per_topic, per_broker = topic_view(topics(spark, rows), Params(headroom=0.2, topic_bucket_seconds=60))
    # orders: 6Mi in total x 1.2 = 7.2Mi -> 8Mi; no fetch -> the 1Ki floor. logs: 4Mi x 1.2 -> 5Mi; 2Mi x 1.2 -> 2.5Mi.
    assertDataFrameEqual(
        per_topic.select("topic", "partitions", "in_p99", "out_p99", "produce_budget", "consume_budget"),
        spark.createDataFrame(
            [("orders", 6, 6.0 * MI, 0.0, 8.0 * MI, 1024.0), ("logs", None, 4.0 * MI, 2.0 * MI, 5.0 * MI, 2.5 * MI)],
            "topic string, partitions int, in_p99 double, out_p99 double, produce_budget double, consume_budget double",
        ),
    )
    # orders: 8Mi / 6 partitions x 4 (broker 1) or 2 leaders; logs: by observed share (3/4 and 1/4 of produce).
    assertDataFrameEqual(
        per_broker.select("topic", "broker", "produce_allowance", "consume_allowance", "basis"),
        spark.createDataFrame(
            [
                ("orders", "1", 8 * MI * 4 // 6, 1024 * 4 // 6, "leaders"),
                ("orders", "2", 8 * MI * 2 // 6, 1024 * 2 // 6, "leaders"),
                ("logs", "1", 5 * MI * 3 // 4, int(2.5 * MI) // 2, "observed-share"),
                ("logs", "2", 5 * MI // 4, int(2.5 * MI) // 2, "observed-share"),
            ],
            "topic string, broker string, produce_allowance long, consume_allowance long, basis string",
        ),
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (Params(headroom=-0.1), "headroom"),
        (Params(default_percentile=0), "default percentile"),
        (Params(min_population=1), "min population"),
        (Params(capacity={"bogus": 1.0}), "unknown capacity resource"),
        (Params(capacity={"produce": float("nan")}), "positive number"),
    ],
)
def test_invalid_parameters_are_rejected_with_their_name(params: Params, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        params.check()


def test_the_wide_statistics_are_the_long_forms_rows_bit_for_bit(spark: Any) -> None:
    """entity_stats_wide (what the pipeline runs) gives entity_stats(usage_long(...))'s rows exactly:
    every kind of entity, missing rates and throttle times, whatever the partitioning."""
    rng = np.random.default_rng(11)
    rows: list[dict[str, Any]] = []
    entities = [("a", None), ("b", None), (None, "c1"), ("a", "c2"), (None, "c3")]
    for i in range(3000):
        user, client = entities[int(rng.integers(len(entities)))]
        row: dict[str, Any] = {"timestamp": at(i), "broker": str(int(rng.integers(3))), "user": user,
                               "client_id": client}  # fmt: skip
        for column, throttle in (
            ("produce_byte_rate", "produce_throttle_time_ms"),
            ("fetch_byte_rate", "fetch_throttle_time_ms"),
            ("request_time", "request_throttle_time_ms"),
        ):
            if rng.random() < 0.8 and not (client == "c3" and column == "fetch_byte_rate"):
                row[column] = float(np.round(np.exp(rng.normal(8.0, 1.5)), 4))
            if rng.random() < 0.7:
                row[throttle] = float(rng.choice([0.0, 0.0, 3.5]))
        rows.append(row)
    samples = clients(spark, rows)
    long = sorted(tuple(r) for r in entity_stats(usage_long(samples)).collect())
    assert len(long) == 14  # c3 never fetched: no fetch row for it
    for partitions in (1, 5):
        wide = entity_stats_wide(samples.repartition(partitions))
        assert wide.columns == entity_stats(usage_long(samples)).columns
        assert sorted(tuple(r) for r in wide.collect()) == long
