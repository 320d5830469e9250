"""TopicQuota budgets per topic, and the KIP-1010 per-broker allowance of each.

Per topic: the total rate over brokers per time bucket, its p50/p99/max and a
suggested budget (p99 x (1 + headroom), rounded up); per broker the allowance:
budget / partitions x the leader partitions on that broker, or, where the
layout is unknown, the budget x the broker's observed share of the topic's
bytes.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as sf

from kquota.advisor.params import Params
from kquota.advisor.transform.percentiles import sorted_values, value_at
from kquota.advisor.transform.recommend import nice_round


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
